"""The error `plan solve` and `plan evaluate` quote for their predictions: the accuracy benchmark's held-out
figures, chosen by what the calibration's rows cover of the scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.expected_error import CAMPAIGN, TARGET, committed_text
from costmodel.calibration import default_calibration
from costmodel.evaluate import evaluate
from costmodel.expected_error import FIGURES, bundled_figures, expected_error
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario, resolve
from costmodel.scenario import Scenario
from planner.cli import main

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _resolved(model: str = "deepseek-v3", system: str = "b200-sxm", engine: str = "trtllm") -> ResolvedScenario:
    return resolve(Scenario.model_validate({
        "schema_version": 1, "name": "trust", "model": model, "cluster": {"system": system, "gpus": 8},
        "workload": {"input_tokens": 1000, "output_tokens": 1000}, "engine": engine}))


def _held_out(key: str) -> dict[str, float]:
    figures: dict[str, float] = bundled_figures()["held_out"][key]
    return figures


def test_the_packaged_figures_are_the_committed_benchmark_figures_for_the_bundled_calibration() -> None:
    # Fails after `benchmarks fit --write` or `accuracy --json` until `benchmarks expected-error --write`.
    assert TARGET.read_text("utf-8") == committed_text()


def test_a_scenario_the_rows_know_gets_the_error_held_out_by_campaign() -> None:
    trust = expected_error(_resolved())
    pooled = {r["metric"]: r for r in json.loads(CAMPAIGN.read_text("utf-8"))["held_out"]["campaign"]
              if r["group"] == "all"}
    assert trust.held_out_by == ("campaign",) and trust.new == {}
    assert trust.figures == {"ttft_median_pct": round(pooled["ttft"]["median_ape_pct"], 1),
                             "ttft_p90_pct": round(pooled["ttft"]["p90_ape_pct"], 1),
                             "tpot_median_pct": round(pooled["tpot"]["median_ape_pct"], 1),
                             "tpot_p90_pct": round(pooled["tpot"]["p90_ape_pct"], 1)}


def test_a_model_the_rows_lack_gets_the_error_held_out_by_model() -> None:
    trust = expected_error(_resolved(model="moonshotai/Kimi-K2-Instruct"))
    assert trust.held_out_by == ("model",)
    assert trust.new == {"model": ("moonshotai/Kimi-K2-Instruct",)}
    assert trust.figures == _held_out("model")
    assert "Kimi-K2-Instruct" in trust.basis


def test_several_new_keys_take_the_larger_figure_of_each_and_say_it_is_likely_optimistic() -> None:
    trust = expected_error(_resolved(system="b300-sxm", engine="generic"))
    assert trust.held_out_by == ("system", "engine")
    assert trust.figures == {name: max(_held_out("system")[name], _held_out("engine")[name]) for name in FIGURES}
    assert "likely optimistic" in trust.basis


def test_a_gpu_generation_without_rows_has_no_figure() -> None:
    trust = expected_error(_resolved(system="mi300x", engine="vllm"))
    assert trust.figures is None and "cdna3" in trust.basis
    assert trust.to_dict()["ttft_median_pct"] is None


def test_a_calibration_of_ones_own_has_no_figure_but_the_bundled_one_passed_explicitly_has() -> None:
    bundled = default_calibration()
    assert expected_error(_resolved(), bundled).figures == _held_out("campaign")
    own = bundled.model_copy(update={"nic_efficiency": 0.5})
    trust = expected_error(_resolved(), own)
    assert trust.figures is None and "plan calibrate" in trust.basis


def test_evaluate_carries_the_expected_error_into_its_json(capsys: pytest.CaptureFixture[str]) -> None:
    layout = Layout.model_validate({"schema_version": 1, "serving": "aggregated",
                                    "pools": [{"role": "mixed", "tp": 8, "moe_ep": 8, "batch": 8}]})
    assert evaluate(_resolved(), layout).to_dict()["expected_error"]["held_out_by"] == ["campaign"]
    main(["evaluate", str(SCENARIOS / "deepseek-v3-8xh200.yaml"), "--layout",
          str(SCENARIOS / "deepseek-v3-8xh200.layout.yaml"), "--format", "json"])
    printed: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert printed["expected_error"]["tpot_median_pct"] == _held_out("campaign")["tpot_median_pct"]
