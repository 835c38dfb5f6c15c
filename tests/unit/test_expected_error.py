"""The error `plan solve` and `plan evaluate` quote for their predictions: the accuracy benchmark's held-out
figures, chosen by what the calibration's rows cover of the scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.expected_error import CAMPAIGN, TARGET, committed_text
from costmodel.calibration import default_calibration
from costmodel.evaluate import evaluate
from costmodel.expected_error import FIGURES, bundled_figures, expected_error
from costmodel.layout import Layout
from costmodel.models import load_model
from costmodel.resolve import ResolvedScenario, resolve
from costmodel.scenario import Scenario
from planner.cli import main

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _resolved(model: str = "deepseek-v3", system: str = "b200-sxm", engine: str = "trtllm",
              cluster: dict[str, Any] | None = None) -> ResolvedScenario:
    return resolve(Scenario.model_validate({
        "schema_version": 1, "name": "trust", "model": model, "cluster": cluster or {"system": system, "gpus": 8},
        "workload": {"input_tokens": 1000, "output_tokens": 1000}, "engine": engine}))


def _layout(serving: str, *pools: dict[str, Any]) -> Layout:
    return Layout.model_validate({"schema_version": 1, "serving": serving, "pools": list(pools)})


MIXED = {"inventory": [{"name": "hopper", "system": "h200-sxm", "nodes": 2},
                       {"name": "other", "system": "gb200-nvl72", "gpus": 16}]}


def _held_out(key: str, rows: str = "all") -> dict[str, float]:
    """A fold's packaged figures over all its rows or one engine's."""
    figures: dict[str, float] = bundled_figures()["held_out"][key][rows]
    return figures


def test_the_packaged_figures_are_the_committed_benchmark_figures_for_the_bundled_calibration() -> None:
    # Fails after `benchmarks fit --write` or `accuracy --json` until `benchmarks expected-error --write`.
    assert TARGET.read_text("utf-8") == committed_text()


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_a_scenario_the_rows_know_gets_the_error_held_out_by_campaign_over_its_engines_rows(engine: str) -> None:
    trust = expected_error(_resolved(engine=engine))
    pooled = {r["metric"]: r for r in json.loads(CAMPAIGN.read_text("utf-8"))["held_out_by_engine"]["campaign"]
              if r["group"] == engine}
    assert trust.held_out_by == ("campaign",) and trust.new == {} and f"{engine}'s rows" in trust.basis
    assert trust.figures == {"ttft_median_pct": round(pooled["ttft"]["median_ape_pct"], 1),
                             "ttft_p90_pct": round(pooled["ttft"]["p90_ape_pct"], 1),
                             "tpot_median_pct": round(pooled["tpot"]["median_ape_pct"], 1),
                             "tpot_p90_pct": round(pooled["tpot"]["p90_ape_pct"], 1)}


def test_a_model_the_rows_lack_gets_the_error_held_out_by_model() -> None:
    trust = expected_error(_resolved(model="moonshotai/Kimi-K2-Instruct"))
    assert trust.held_out_by == ("model",)
    assert trust.new == {"model": ("moonshotai/Kimi-K2-Instruct",)}
    assert trust.figures == _held_out("model", "trtllm")
    assert "Kimi-K2-Instruct" in trust.basis


def test_several_new_keys_take_the_larger_figure_of_each_and_say_it_is_likely_optimistic() -> None:
    trust = expected_error(_resolved(system="b300-sxm", engine="generic"))
    assert trust.held_out_by == ("system", "engine")
    assert trust.figures == {name: max(_held_out("system")[name], _held_out("engine")[name]) for name in FIGURES}
    assert "likely optimistic for these new together" in trust.basis
    assert "default engine" in trust.basis  # generic is what a scenario without `engine:` gets


def test_a_deployment_is_judged_on_the_systems_its_pools_run_on() -> None:
    amd = {"inventory": [MIXED["inventory"][0], {"name": "other", "system": "mi300x", "nodes": 1}]}
    on_hopper = _layout("aggregated", {"role": "mixed", "group": "hopper", "tp": 8, "moe_ep": 8, "batch": 8})
    trust = evaluate(_resolved(engine="sglang", cluster=amd), on_hopper).expected_error
    assert trust is not None and trust.held_out_by == ("campaign",)  # the idle MI300X node does not count
    assert trust.figures == _held_out("campaign", "sglang")
    assert expected_error(_resolved(engine="sglang", cluster=amd)).figures is None  # the whole cluster's: cdna3


def test_pools_on_two_systems_in_one_deployment_count_as_a_new_system() -> None:
    split = _layout("disaggregated", {"role": "prefill", "group": "hopper", "tp": 8, "moe_ep": 8, "batch": 1},
                    {"role": "decode", "group": "other", "tp": 8, "moe_ep": 8, "batch": 8})
    trust = evaluate(_resolved(engine="sglang", cluster=MIXED), split).expected_error
    assert trust is not None and trust.held_out_by == ("system",)
    assert trust.new == {"system": ("gb200-nvl72 + h200-sxm in one deployment",)}
    assert trust.figures == _held_out("system", "sglang")


def test_a_system_with_overrides_is_new() -> None:
    cluster = {"system": "h200-sxm", "gpus": 8, "overrides": {"hbm_bandwidth_bytes_per_s": 5.0e12}}
    trust = expected_error(_resolved(cluster=cluster))
    assert trust.new == {"system": ("h200-sxm (overridden)",)} and trust.figures == _held_out("system", "trtllm")


def test_a_model_file_equal_to_a_catalog_model_of_the_rows_is_that_model(tmp_path: Path) -> None:
    catalog = load_model("deepseek-ai/DeepSeek-V3")
    copy = tmp_path / "my-deepseek.json"
    copy.write_text(catalog.model_copy(update={"name": "my-deepseek"}).model_dump_json(), encoding="utf-8")
    known = expected_error(_resolved(model=str(copy)))
    assert known.held_out_by == ("campaign",)
    smaller = catalog.model_copy(update={"name": "smaller", "vocab_size": catalog.vocab_size // 2})
    copy.write_text(smaller.model_dump_json(), encoding="utf-8")
    assert expected_error(_resolved(model=str(copy))).held_out_by == ("model",)


@pytest.mark.parametrize(("engine", "system", "slower"), [
    ("vllm", "b200-sxm", "4x"),  # bf16 activations: 2.25 PFLOP/s against fp4's 9
    ("sglang", "b200-sxm", "2x"),  # MXFP8: 4.5
    ("sglang", "b300-sxm", "3.11x"),  # fp4 14 PFLOP/s
    ("generic", "gb200-nvl72", "4x"),  # the slowest of the engines': bf16
    ("generic", "b300-sxm", "6.22x"),
])
def test_mxfp4_experts_on_fp4_tensor_cores_say_the_engines_run_them_slower_than_priced(
        engine: str, system: str, slower: str) -> None:
    basis = expected_error(_resolved(model="openai/gpt-oss-120b", system=system, engine=engine)).basis
    assert ". Also: the routed experts are MXFP4" in basis and f"the fp4 rate is up to {slower} theirs" in basis


def test_the_mxfp4_note_is_only_where_the_fp4_rate_is_priced_and_not_run() -> None:
    assert "assumed" in expected_error(_resolved(model="openai/gpt-oss-120b", engine="trtllm")).basis
    hopper = expected_error(_resolved(model="openai/gpt-oss-120b", system="h200-sxm", engine="vllm"))
    assert "MXFP4" not in hopper.basis  # no fp4 tensor cores: priced as the weight-only kernel it runs
    amd = expected_error(_resolved(model="openai/gpt-oss-120b", system="mi355x", engine="vllm"))
    assert amd.figures is None and "MXFP4" not in amd.basis  # CDNA4 pairs MXFP4 with MXFP4 (assumption)
    nvfp4 = _resolved(model="deepseek-v3", engine="vllm").scenario.model_dump(mode="json") | {
        "precision": {"experts": "fp4"}}
    requantised = resolve(Scenario.model_validate(nvfp4))
    assert requantised.experts == "fp4" and not requantised.microscaled_experts  # NVFP4: W4A4, as priced
    assert "MXFP4" not in expected_error(_resolved(model="moonshotai/Kimi-K2.5", engine="sglang")).basis  # int4
    assert _resolved(model="moonshotai/Kimi-K3").microscaled_experts  # compressed-tensors MXFP4


def test_the_mxfp4_note_follows_every_basis_and_any_system_of_the_deployment() -> None:
    own = default_calibration().model_copy(update={"nic_efficiency": 0.5})
    mixed = {"inventory": [{"name": "hopper", "system": "h200-sxm", "nodes": 1},
                           {"name": "blackwell", "system": "b200-sxm", "nodes": 1}]}
    resolved = _resolved(model="openai/gpt-oss-120b", engine="sglang", cluster=mixed)
    for trust in (expected_error(resolved, own), expected_error(resolved)):
        assert trust.basis.endswith("may be optimistic") and ". Also: the routed experts are MXFP4" in trust.basis
    hopper_only = [group.system for group in resolved.groups if group.name == "hopper"]
    assert "MXFP4" not in expected_error(resolved, systems=hopper_only).basis


def test_a_gpu_generation_without_rows_has_no_figure() -> None:
    trust = expected_error(_resolved(system="mi300x", engine="vllm"))
    assert trust.figures is None and "cdna3" in trust.basis
    assert trust.to_dict()["ttft_median_pct"] is None


def test_a_calibration_of_ones_own_has_no_figure_but_the_bundled_one_passed_explicitly_has() -> None:
    bundled = default_calibration()
    assert expected_error(_resolved(), bundled).figures == _held_out("campaign", "trtllm")
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
    assert yaml.safe_load((SCENARIOS / "deepseek-v3-8xh200.yaml").read_text("utf-8"))["engine"] == "sglang"
    assert printed["expected_error"]["tpot_median_pct"] == _held_out("campaign", "sglang")["tpot_median_pct"]


def test_decoding_more_sequences_per_rank_than_the_rows_did_is_said() -> None:
    """The rows decode at most `largest_batch_per_rank` sequences per attention rank (512); a deployment beyond that
    extrapolates their per-sequence step cost, and its basis says so (by its busiest decoding pool, at the batch
    it runs: a mixed pool asked for more than fits runs the largest that fits)."""
    measured = bundled_figures()["largest_batch_per_rank"]["trtllm"]
    assert measured == 512
    one_b200 = _resolved("qwen3-30b", cluster={"system": "b200-sxm", "gpus": 2})

    def basis(*pools: dict[str, Any]) -> str:
        serving = "disaggregated" if len(pools) > 1 else "aggregated"
        return evaluate(one_b200, _layout(serving, *pools)).to_dict()["expected_error"]["basis"]

    mixed = {"role": "mixed", "tp": 1, "batch": measured}
    assert "sequences per attention rank" not in basis(mixed)
    assert f"this deployment decodes up to {measured + 1} sequences per attention rank, beyond the 512" in \
        basis({**mixed, "batch": measured + 1})
    oversized = evaluate(one_b200, _layout("aggregated", {**mixed, "batch": 100_000}))
    runs = oversized.pools[0]["max_batch"]
    assert measured < runs < 100_000 and f"up to {runs} sequences" in oversized.to_dict()["expected_error"]["basis"]
    # a prefill pool's batch is not a decode batch; the decode pool's is
    prefill, decode = {"role": "prefill", "tp": 1, "batch": 600}, {"role": "decode", "tp": 1, "batch": 8}
    assert "sequences per attention rank" not in basis(prefill, decode)
    assert "up to 540 sequences" in basis({**prefill, "batch": 8}, {**decode, "batch": 540})
    # a calibration of one's own: the bundled rows' batches say nothing of it
    own = default_calibration().model_copy(update={"nic_latency_s": 1e-5})
    assert "sequences per attention rank" not in expected_error(one_b200, own, decode_batches=[4096]).basis


def test_a_front_says_how_many_of_its_points_decode_beyond_the_rows_batches() -> None:
    from planner.api import solve
    front = solve(_resolved("qwen3-30b", cluster={"system": "b200-sxm", "gpus": 1}))
    points = front.to_dict()["front"]
    beyond = [point for point in points
              if point["layout"]["pools"][0]["batch"] > bundled_figures()["largest_batch_per_rank"]["trtllm"]]
    assert beyond  # the throughput end of one B200 decodes more than 512 sequences
    assert f"{len(beyond)} of the {len(points)} deployments decode up to" in front.expected_error.basis
