"""plan compare: fronts side by side, each system's best point per TTFT band, outputs and errors."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.studies.compare import Front, band_caps, compare_dict, comparison_study, fronts
from planner.studies.runner import CaseResult, Executor, read_record, run_cases
from tests.helpers import run_cli
from tests.studies.test_sweep import BASE

SCENARIO: dict[str, Any] = {**BASE, "slo": {"ttft_ms": 2000, "tpot_ms": 50}}


def _best(points: list[dict[str, Any]], cap: float, key: str, higher: bool) -> dict[str, Any] | None:
    within = [p for p in points if p["ttft_ms"] <= cap]
    if not within:
        return None
    return max(within, key=lambda p: p[key]) if higher else min(within, key=lambda p: p[key])


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("compare")
    scenario = folder / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO, sort_keys=False), encoding="utf-8")
    out = folder / "out"
    result = run_cli("compare", str(scenario), "--systems", "h200-sxm,b200-sxm", "--gpus", "4", "--out", str(out),
                     "--format", "json", "--jobs", "2")
    assert result.code == 0, result.err
    return scenario, out, json.loads(result.out)


def test_fronts_side_by_side_and_best_per_band(compared: tuple[Path, Path, dict[str, Any]]) -> None:
    _, out, data = compared
    assert [(f["system"], f["gpus"], f["status"]) for f in data["fronts"]] == [("h200-sxm", 4, "solved"),
                                                                                ("b200-sxm", 4, "solved")]
    assert data["objective"] == "tokens_per_gpu"
    assert [band["ttft_ms_at_most"] for band in data["bands"]] == [250, 500, 1000, 2000]  # shares of the SLO
    fronts = {f["system"]: f["front"] for f in data["fronts"]}
    for band in data["bands"]:
        for entry in band["systems"]:
            expected = _best(fronts[entry["system"]], band["ttft_ms_at_most"], "tokens_per_s_per_gpu", True)
            if expected is None:
                assert entry["point"] is None
                continue
            assert entry["ttft_ms"] <= band["ttft_ms_at_most"]
            assert entry["tokens_per_s_per_gpu"] == expected["tokens_per_s_per_gpu"]
            assert entry["usd_per_million_tokens"] == expected["usd_per_million_tokens"]
            assert fronts[entry["system"]][entry["point"]]["ttft_ms"] == entry["ttft_ms"]
    # every point carries its economics, priced at its own system's GPU-hour
    for front in data["fronts"]:
        price = front["economics"]["usd_per_gpu_hour"]
        for point in front["front"]:
            assert point["usd_per_million_tokens"] == pytest.approx(price / (point["tokens_per_s_per_gpu"] * 3.6e-3))
    # each case says how far to trust its figures: qwen3-30b is not in the calibration's rows, nor the engine
    assert all(f["expected_error"]["held_out_by"] == ["model", "engine"] for f in data["fronts"])
    assert {p.name for p in out.iterdir()} == {"cases", "compare.json", "compare.csv", "compare.png"}
    rows = list(csv.DictReader(io.StringIO((out / "compare.csv").read_text())))
    assert len(rows) == sum(len(f["front"]) for f in data["fronts"])
    header = (out / "compare.csv").read_text().splitlines()[0].split(",")
    assert len(header) == len(set(header))  # read by column name: no column twice
    assert {(r["system"], int(r["cluster_gpus"]), int(r["gpus"])) for r in rows} == {
        (f["system"], f["gpus"], p["gpus"]) for f in data["fronts"] for p in f["front"]}
    assert json.loads((out / "compare.json").read_text()) == data


def test_the_objective_usd_per_million_tokens_ranks_by_price(compared: tuple[Path, Path, dict[str, Any]]) -> None:
    scenario, out, data = compared
    study = comparison_study(scenario, ["h200-sxm", "b200-sxm"], [4])
    results = run_cases(study.cases, Executor("local", 1), out / "cases")  # all cached: nothing solved
    assert all(r.cached for r in results)
    by_price = compare_dict(study, results, "usd_per_million_tokens", [300.0, 2000.0])
    assert by_price["fronts"] == data["fronts"]
    fronts = {f["system"]: f["front"] for f in data["fronts"]}
    for band in by_price["bands"]:
        for entry in band["systems"]:
            expected = _best(fronts[entry["system"]], band["ttft_ms_at_most"], "usd_per_million_tokens", False)
            assert (entry["point"] is None) == (expected is None)
            if expected is not None:
                assert entry["usd_per_million_tokens"] == expected["usd_per_million_tokens"]


def test_rerun_resumes_and_table(compared: tuple[Path, Path, dict[str, Any]]) -> None:
    scenario, out, _ = compared
    result = run_cli("compare", str(scenario), "--systems", "h200-sxm,b200-sxm", "--gpus", "4", "--out", str(out),
                     "--bands", "300,2000")
    assert result.code == 0, result.err
    assert "2 cached, 0 solved" in result.err
    assert "Best point per TTFT band and system" in result.out and "300 ms" in result.out
    assert "$/Mtok" in result.out and "tok/s/MW" in result.out


def test_a_study_file_compares_its_grid(tmp_path: Path, compared: tuple[Path, Path, dict[str, Any]]) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"study": "two", "base": SCENARIO,
                                     "grid": {"cluster.system": ["b200-sxm"], "cluster.gpus": [4]}}))
    found = comparison_study(study, None, None)
    records = [json.loads(p.read_text()) for p in (compared[1] / "cases").iterdir()]
    assert [c.hash for c in found.cases] == [r["hash"] for r in records
                                             if r["scenario"]["cluster"]["system"] == "b200-sxm"]
    wider = comparison_study(study, ["h200-sxm", "b200-sxm"], None)  # --systems replaces the grid's systems
    assert [c.values for c in wider.cases] == [{"cluster.system": "h200-sxm", "cluster.gpus": 4},
                                               {"cluster.system": "b200-sxm", "cluster.gpus": 4}]


def test_each_band_entry_names_the_compared_size(compared: tuple[Path, Path, dict[str, Any]]) -> None:
    """`cluster_gpus` is the compared cluster's size; `gpus` (a point's column) what the point uses."""
    _, _, data = compared
    sizes = {f["system"]: f["gpus"] for f in data["fronts"]}
    for band in data["bands"]:
        for entry in band["systems"] + band["fronts"]:
            if entry["point"] is not None:
                assert entry["cluster_gpus"] == sizes[entry["system"]] >= entry["gpus"]


def test_the_widest_band_holds_the_slowest_point(tmp_path: Path) -> None:
    """Without a TTFT SLO the top cap is the slowest point's TTFT rounded up, never below it (rounded to the
    nearest us, 196.13313 ms fell outside a 196.133 ms cap)."""
    study = comparison_study(_write_scenario(tmp_path, {**SCENARIO, "slo": {"tpot_ms": 50}}), ["h200-sxm"], [4])
    case = study.cases[0]
    result = CaseResult(case, "solved", None, 0.0, {"cluster_gpus": 4, "front": [{"ttft_ms": 196.13313}]})
    caps = band_caps(study, fronts([result]), None)
    assert caps[-1] >= 196.13313 and caps[-1] == pytest.approx(196.134)


def test_a_grid_over_other_paths_labels_each_front(tmp_path: Path) -> None:
    """A study varying the workload beside the systems: each front carries its case's other grid values (JSON
    `grid`, the table's label), so that two workloads on one system are told apart."""
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump({"study": "lengths", "base": SCENARIO, "grid": {
        "cluster.system": ["h200-sxm"], "workload.input_tokens": [1024, 4096]}}))
    study = comparison_study(study_file, None, None)
    found = fronts([CaseResult(case, "infeasible", "x", 0.0, None) for case in study.cases])
    assert [(f.system, f.grid) for f in found] == [("h200-sxm", {"workload.input_tokens": 1024}),
                                                    ("h200-sxm", {"workload.input_tokens": 4096})]
    assert isinstance(found[0], Front) and found[0].gpus == 4


def test_an_inventory_front_is_named_by_its_systems(tmp_path: Path) -> None:
    """An inventory's front: its groups' systems joined by "+", its GPUs their sum, also for a case without a
    front (which looked its system up as 'None': exit 2, "unknown system")."""
    base = {**SCENARIO, "cluster": {"inventory": [{"name": "a", "system": "h100-sxm", "gpus": 4},
                                                  {"name": "b", "system": "h200-sxm", "nodes": 1}]}}
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump({"study": "inv", "base": base, "grid": {"workload.input_tokens": [1024]}}))
    study = comparison_study(study_file, None, None)
    (front,) = fronts([CaseResult(study.cases[0], "infeasible", "x", 0.0, None)])
    assert (front.system, front.gpus) == ("h100-sxm+h200-sxm", 12)


def test_an_edited_case_record_is_solved_again(tmp_path: Path, compared: tuple[Path, Path, dict[str, Any]]) -> None:
    """A cached case whose record was changed by hand (a point's economics removed) is not trusted: its
    checksum fails and the case is solved again, where it had stopped the command with a KeyError."""
    import shutil

    scenario, out, _ = compared
    cache = tmp_path / "cases"
    shutil.copytree(out / "cases", cache)
    study = comparison_study(scenario, ["h200-sxm"], [4])
    key = study.cases[0].hash
    record = json.loads((cache / f"{key}.json").read_text())
    assert read_record(cache, key) == record
    del record["result"]["front"][0]["economics"]
    (cache / f"{key}.json").write_text(json.dumps(record))
    assert read_record(cache, key) is None
    assert not run_cases(study.cases, Executor("local", 1), cache)[0].cached


def test_a_study_compared_on_other_systems_is_the_study(tmp_path: Path) -> None:
    """--systems / --gpus on a study file: the base's relative paths from the base's folder (as `plan sweep`
    reads it), the base's problems at the study's `base`, and a bad option value at the option."""
    (tmp_path / "sub").mkdir()
    base = {**SCENARIO, "model": "qwen3.json"}
    (tmp_path / "sub" / "base.yaml").write_text(yaml.safe_dump(base))
    catalog = Path(__file__).resolve().parents[2] / "costmodel" / "data" / "models"
    (tmp_path / "sub" / "qwen3.json").write_text((catalog / "Qwen--Qwen3-30B-A3B.config.json").read_text())
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump({"study": "s", "base": "sub/base.yaml", "grid": {"cluster.gpus": [4]}}))
    assert [c.values for c in comparison_study(study_file, ["b200-sxm"], None).cases] == [
        {"cluster.gpus": 4, "cluster.system": "b200-sxm"}]
    result = run_cli("compare", str(study_file), "--systems", "h200-sxm,b400-sxm")
    assert result.code == 2 and "error: --systems: b400-sxm" in result.err, result.err
    (tmp_path / "sub" / "base.yaml").write_text("- 1\n")
    result = run_cli("compare", str(study_file), "--systems", "h200-sxm")
    assert result.code == 2 and "a scenario must be a YAML mapping" in result.err and "Traceback" not in result.err
    study_file.write_text(yaml.safe_dump({"study": "s", "base": "missing.yaml", "grid": {"cluster.gpus": [4]}}))
    result = run_cli("compare", str(study_file), "--systems", "h200-sxm")
    line = next(n for n, text in enumerate(study_file.read_text().splitlines(), 1) if text.startswith("base:"))
    assert result.code == 2 and f"{study_file}:{line}: base: cannot read the base scenario" in result.err, result.err


def _write_scenario(folder: Path, data: dict[str, Any]) -> Path:
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_bad_options_are_exit_2(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    result = run_cli("compare", str(scenario), "--systems", "h200-sxm,b400-sxm", "--gpus", "4")
    assert result.code == 2 and "error: --systems: b400-sxm" in result.err, result.err  # no "<input>:"
    assert run_cli("compare", str(scenario), "--systems", "h200-sxm").code == 2  # --gpus needed
    result = run_cli("compare", str(scenario), "--systems", "h200-sxm", "--gpus", "4,x")
    assert result.code == 2 and "--gpus" in result.err
    result = run_cli("compare", str(scenario), "--systems", "h200-sxm", "--gpus", "4", "--bands", "0")
    assert result.code == 2 and "--bands" in result.err
    result = run_cli("compare", str(scenario), "--systems", "h200-sxm", "--gpus", "100000")
    assert result.code == 2 and "--gpus" in result.err and "Traceback" not in result.err


def test_a_calibration_prices_every_case_and_keys_its_cache(tmp_path: Path,
                                                            compared: tuple[Path, Path, dict[str, Any]]) -> None:
    """`--calibration`: every case solved with it (its JSON names it), under hashes of its own, so that the
    bundled calibration's cached results are not taken for its."""
    from costmodel.calibration import default_calibration, fingerprint
    from planner.studies.study import with_calibration

    scenario, _, bundled = compared
    slower = default_calibration().model_dump(mode="json")  # a copy: the bundled calibration is cached
    slower["fitted_on"] = "test: slower steps"
    slower["engines"]["generic"]["step_overhead_s"] = 0.005
    calibration = tmp_path / "slower.yaml"
    calibration.write_text(yaml.safe_dump(slower, sort_keys=False), encoding="utf-8")
    result = run_cli("compare", str(scenario), "--systems", "h200-sxm,b200-sxm", "--gpus", "4", "--format", "json",
                     "--jobs", "1", "--calibration", str(calibration))
    assert result.code == 0, result.err
    mine = json.loads(result.out)
    assert mine["calibration"] == fingerprint(slower) and "calibration" not in bundled
    assert {f["case_hash"] for f in mine["fronts"]}.isdisjoint({f["case_hash"] for f in bundled["fronts"]})
    for ours, theirs in zip(mine["fronts"], bundled["fronts"], strict=True):
        fastest = [min(p["tpot_ms"] for p in front["front"]) for front in (ours, theirs)]
        assert fastest[0] > fastest[1] + 4.0  # 5 ms more per step
    study = comparison_study(scenario, ["h200-sxm"], [4])
    assert with_calibration(study.cases, None) == study.cases
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nfitted_on: x\n", encoding="utf-8")
    result = run_cli("compare", str(scenario), "--systems", "h200-sxm", "--gpus", "4", "--calibration", str(bad))
    assert result.code == 2 and f"{bad}" in result.err and "Traceback" not in result.err
