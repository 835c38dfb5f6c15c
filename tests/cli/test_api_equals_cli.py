"""The Python API (`from planner import load_scenario, solve, evaluate`) dumps exactly the CLI's JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import planner
from planner import evaluate, load_scenario, solve
from planner.errors import InputError
from tests.conftest import REPO, SCENARIOS
from tests.helpers import run_cli

SCENARIO = SCENARIOS / "deepseek-v3-8xh200.yaml"
TIMING = ("time_s", "first_feasible_s")  # wall-clock figures: the only ones that differ between runs


def _plain(data: Any) -> Any:
    """As the CLI prints it (tuples as lists, ids as strings)."""
    return json.loads(json.dumps(data))


def _untimed(data: dict[str, Any]) -> dict[str, Any]:
    solver = {k: v for k, v in data["solver"].items() if k not in TIMING}
    return {**data, "solver": solver}


@pytest.fixture(scope="module")
def front() -> planner.Front:
    return solve(load_scenario(SCENARIO), time_limit_s=20)


def test_solve_dumps_the_cli_json(front: planner.Front) -> None:
    result = run_cli("solve", str(SCENARIO), "--time-limit", "20", "--format", "json")
    assert result.code == 0, result.err
    cli = json.loads(result.out)
    assert _untimed(_plain(front.to_dict())) == _untimed(cli)
    assert set(cli["solver"]) >= set(TIMING)  # the stripped keys exist (a rename would hide a difference)


def test_front_points_are_typed_views_of_the_json(front: planner.Front) -> None:
    data = front.to_dict()["front"]
    assert len(front.points) == len(data) > 0
    for point, entry in zip(front.points, data, strict=True):
        assert (point.ttft_ms, point.tokens_per_s_per_gpu, point.gpus, point.serving) == (
            entry["ttft_ms"], entry["tokens_per_s_per_gpu"], entry["gpus"], entry["serving"])
        assert point.layout.gpus == entry["gpus"] and point.data is entry
    assert front.expected_error.to_dict() == front.to_dict()["expected_error"]


def test_evaluate_dumps_the_cli_json(front: planner.Front, tmp_path: Path) -> None:
    front.write(tmp_path)
    plan = tmp_path / "plan-0.yaml"
    result = run_cli("evaluate", str(SCENARIO), "--layout", str(plan), "--format", "json")
    assert result.code == 0, result.err
    cli = json.loads(result.out)
    assert _plain(evaluate(SCENARIO, plan).to_dict()) == cli
    assert _plain(evaluate(front.scenario, front.points[0]).to_dict()) == cli
    assert cli["ttft_ms"] == pytest.approx(front.points[0].ttft_ms, rel=1e-12)


def test_evaluate_takes_a_layout_mapping() -> None:
    layout = {"serving": "aggregated", "pools": [{"role": "mixed", "replicas": 1, "tp": 8, "dp_attention": 1,
                                                  "pp": 1, "moe_tp": 1, "moe_ep": 8, "batch": 8}]}
    result = run_cli("evaluate", str(SCENARIO), "--layout", str(SCENARIOS / "deepseek-v3-8xh200.layout.yaml"),
                     "--format", "json")
    assert result.code == 0, result.err
    assert evaluate(SCENARIO, layout).gpus == 8


def test_bad_input_raises_the_clis_error() -> None:
    with pytest.raises(InputError, match="system"):
        load_scenario({"schema_version": 1, "name": "x", "model": "deepseek-v3",
                       "cluster": {"system": "h900", "gpus": 8}, "workload": {"input_tokens": 1, "output_tokens": 1}})


@pytest.mark.parametrize(("settings", "argument"), [
    ({"time_limit_s": -1}, "time_limit_s"), ({"time_limit_s": float("nan")}, "time_limit_s"),
    ({"threads": 0}, "threads"), ({"points": 1}, "points"), ({"batch_tolerance": 5}, "batch_tolerance"),
    ({"seed": -5}, "seed"), ({"solver": "gurobi"}, "solver"), ({"resolution": "fine"}, "resolution"),
    ({"resolution": 0.7}, "resolution"),  # a check of the model's, with no field of its own
])
def test_solve_checks_its_settings_as_the_cli_does(settings: dict[str, Any], argument: str) -> None:
    """Each setting is checked as the scenario's `search` field is, before anything is solved: InputError naming
    the argument (a negative time limit solved one point; an unknown solver raised a bare ValueError)."""
    with pytest.raises(InputError) as caught:
        solve(load_scenario(SCENARIO), **settings)
    assert [p.field for p in caught.value.problems] == [argument]  # once: not also a union member's complaint


def test_evaluate_checks_a_layout_object_as_a_file() -> None:
    """A `Layout` built in code is checked against the scenario as a layout file is (32 GPUs on 8 were priced)."""
    from costmodel.layout import Layout

    layout = Layout.model_validate({"serving": "aggregated",
                                    "pools": [{"role": "mixed", "replicas": 4, "tp": 8, "moe_tp": 8, "batch": 8}]})
    with pytest.raises(InputError, match="the layout holds 32 GPUs but the cluster has 8"):
        evaluate(load_scenario(SCENARIO), layout)


def test_readme_script_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python API example, as written (run from a scratch folder with the scenarios beside)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"### Python API.*?```python\n(.*?)```", readme, re.S)
    assert block is not None
    (tmp_path / "scenarios").symlink_to(SCENARIOS)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)
    assert (tmp_path / "out" / "ds" / "front.json").is_file()
    assert "launch-vllm.sh" in namespace["files"]


def test_calibrate_dumps_the_cli_json_and_writes_its_file(tmp_path: Path) -> None:
    """`calibrate` is `plan calibrate`: the same summary (less the `output` the command wrote), the same file
    byte for byte, and a calibration `solve` and `evaluate` take."""
    measurements = REPO / "examples" / "calibration" / "llama-70b-h200-vllm.measurements.yaml"
    fitted = planner.calibrate(measurements)
    cli_file = tmp_path / "cli.yaml"
    result = run_cli("calibrate", str(measurements), "-o", str(cli_file), "--format", "json")
    assert result.code == 0, result.err
    assert {k: v for k, v in json.loads(result.out).items() if k != "output"} == _plain(fitted.to_dict())
    assert fitted.write(tmp_path / "api.yaml").read_bytes() == cli_file.read_bytes()
    scenario = load_scenario(REPO / "examples" / "calibration" / "llama-70b-h200-vllm.yaml")
    layout = {"serving": "aggregated", "pools": [{"role": "mixed", "tp": 8, "moe_tp": 8, "batch": 16}]}
    assert evaluate(scenario, layout, calibration=fitted.calibration).to_dict() == \
        evaluate(scenario, layout, calibration=tmp_path / "api.yaml").to_dict()
    with pytest.raises(InputError, match="folds 1 holds nothing out"):
        planner.calibrate(measurements, folds=1)
