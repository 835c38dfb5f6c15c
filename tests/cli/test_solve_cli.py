"""`plan solve`: formats, output files, exit codes; plan files read back by `plan evaluate`."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import SCENARIOS
from tests.helpers import run_cli
from tests.planner.small_scenarios import small_data


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small_data("gpt-oss-20b-4xb200-sglang")), encoding="utf-8")
    return path


def test_json_front_and_plan_files_round_trip(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("solve", str(scenario), "--format", "json", "--out", str(out), "--solver", "highs",
                     "--model-stats")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert set(data) == {"status", "termination", "scenario", "gpu_accounting", "cluster_gpus", "expected_error",
                         "objective", "economics", "coverage", "front", "expert_banks", "solver", "candidates",
                         "model_statistics"}
    assert data["termination"] == "completed" and data["gpu_accounting"] == "cluster"
    assert data["expected_error"]["basis"] and set(data["expected_error"]["held_out_by"]) <= {
        "campaign", "model", "system", "engine"}
    assert 0.95 <= data["coverage"]["hypervolume_ratio_at_least"] <= 1.0
    assert data["coverage"]["batches"]["scope"] == "every_integer_batch"
    # auto resolution: optimal over the timed batches, within 1% over every untimed one: feasible, gap 1%
    assert data["status"] == "feasible" and data["solver"]["backend"] == "highs"
    assert data["solver"]["gap"] == pytest.approx(0.01 / 1.01) and data["termination"] == "completed"
    assert {"choice", "rate", "cohort", "ttft", "packing"} <= set(data["model_statistics"])
    front = data["front"]
    assert len(front) >= 5
    keys = {"ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_gpu_used", "tokens_per_s_per_cluster_gpu",
            "tokens_per_s_per_user", "gpus", "idle_gpus", "usd_per_million_tokens", "tokens_per_s_per_mw", "economics",
            "serving", "status", "gap", "proof", "binding", "layout", "placement"}
    assert all(set(p) == keys for p in front)
    assert [p["ttft_ms"] for p in front] == sorted(p["ttft_ms"] for p in front)
    files = sorted(f.name for f in out.iterdir())
    assert files == sorted(["front.json", "front.csv", "front.png", "report.html"]
                           + [f"plan-{i}.yaml" for i in range(len(front))])
    assert json.loads((out / "front.json").read_text())["front"] == front
    for index in (0, len(front) - 1):
        evaluated = run_cli("evaluate", str(scenario), "--layout", str(out / f"plan-{index}.yaml"), "--format", "json")
        assert evaluated.code == 0, evaluated.err
        figures = json.loads(evaluated.out)
        for key, solved in (("ttft_ms", "ttft_ms"), ("tpot_ms", "tpot_ms"), ("gpus", "gpus"),
                            ("tokens_per_s_per_gpu", "tokens_per_s_per_gpu_used")):  # evaluate: per GPU used
            assert figures[key] == pytest.approx(front[index][solved], rel=1e-12)
    # the layout inside JSON is accepted as-is
    layout_file = tmp_path / "layout.json"
    layout_file.write_text(json.dumps(front[0]["layout"]), encoding="utf-8")
    assert run_cli("evaluate", str(scenario), "--layout", str(layout_file)).code == 0


def test_csv_and_table(scenario: Path) -> None:
    result = run_cli("solve", str(scenario), "--format", "csv", "--time-limit", "30")
    assert result.code == 0, result.err
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert rows and float(rows[0]["ttft_ms"]) > 0 and rows[0]["status"] in ("optimal", "feasible")
    table = run_cli("solve", str(scenario), "--model-stats")
    assert table.code == 0 and "Pareto front" in table.out and "constraints" in table.out


def test_infeasible_exits_3_naming_the_resource(tmp_path: Path) -> None:
    data = small_data("qwen3-30b-4xh200")
    data.update(model="kimi-k2", cluster={"system": "h100-sxm", "gpus": 8})
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run_cli("solve", str(path))
    assert result.code == 3
    assert result.err.startswith("error: HBM: the weights need") and "Traceback" not in result.err


def test_bad_input_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("schema_version: 1\nname: x\nmodel: qwen3-30b\ncluster: {system: h200-sxm, gpus: 8}\n"
                    "workload: {input_tokens: 10, output_tokens: -1}\n", encoding="utf-8")
    result = run_cli("solve", str(path))
    assert result.code == 2 and "bad.yaml:5" in result.err and "output_tokens" in result.err


def test_sessions_plans_carry_tiers_and_the_midfill_choice(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(small_data("qwen3-30b-8xh100-agent-midfill-pool")), encoding="utf-8")
    out = tmp_path / "out"
    result = run_cli("solve", str(path), "--format", "json", "--out", str(out))
    assert result.code == 0, result.err
    front = json.loads(result.out)["front"]
    assert all({"kv_tiers", "midfill"} <= set(p) for p in front)
    assert {p["midfill"]["pool"] for p in front} == {"shared", "separate"}
    separate = next(i for i, p in enumerate(front) if p["midfill"]["pool"] == "separate")
    roles = [pool["role"] for pool in front[separate]["layout"]["pools"]]
    assert roles == ["prefill", "midfill", "decode"]
    plan = out / f"plan-{separate}.yaml"
    assert "midfill" in yaml.safe_load(plan.read_text(encoding="utf-8"))
    evaluated = run_cli("evaluate", str(path), "--layout", str(plan), "--format", "json")
    assert evaluated.code == 0, evaluated.err
    assert json.loads(evaluated.out)["ttft_ms"] == pytest.approx(front[separate]["ttft_ms"], rel=1e-9)
    printed = run_cli("evaluate", str(path), "--layout", str(plan))
    assert printed.code == 0 and "KV tiers at" in printed.out and "TTFT spent fetching contexts" in printed.out
    table = run_cli("solve", str(path))
    assert table.code == 0 and "midfill separate (first turns are 10% of fills)" in table.out
    assert "hit % HBM/DRAM/SSD/store/recompute" in table.out


def test_points_and_batch_tolerance_options(scenario: Path) -> None:
    result = run_cli("solve", str(scenario), "--format", "json", "--points", "4", "--batch-tolerance", "0.02")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert len(data["front"]) == 4 and data["coverage"]["points_limit"] == 4
    assert data["coverage"]["batches"]["tolerance"] == 0.02
    table = run_cli("solve", str(scenario), "--points", "4")
    assert table.code == 0 and "at most 4 points: --points all refines it" in " ".join(table.out.split())
    for bad in ("1", "many"):
        refused = run_cli("solve", str(scenario), "--points", bad)
        assert refused.code == 2 and "--points" in refused.err and "Traceback" not in refused.err


def test_a_time_limit_that_cuts_the_batch_search_is_said() -> None:
    """At 0.1 s the grid's batches are left untimed (each bounded in the points' gaps): the solve says
    `time_limit` and is not optimal, where it said `completed` with one point at a 96% gap."""
    result = run_cli("solve", str(SCENARIOS / "deepseek-v3-8xh200.yaml"), "--time-limit", "0.1", "--format", "json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["termination"] == "time_limit" and data["solver"]["timed_out"] and data["status"] == "feasible"
