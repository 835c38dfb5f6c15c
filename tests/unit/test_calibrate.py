"""`plan calibrate`: fitting the cost model to one's own measured runs, and pricing with the result."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from costmodel.calibration import Calibration, default_calibration, fingerprint
from planner import api
from planner.calibrate import (
    CalibrationRun,
    calibrate,
    calibration_text,
    held_out_line,
    load_calibration,
    load_runs,
)
from planner.cli import main
from planner.errors import InputError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "calibration"
MEASUREMENTS = EXAMPLES / "llama-70b-h200-vllm.measurements.yaml"
SCENARIO = EXAMPLES / "llama-70b-h200-vllm.yaml"
LAYOUT = "serving: aggregated\npools: [{role: mixed, tp: 8, moe_tp: 8, batch: 16}]\n"


@pytest.fixture(scope="module")
def fitted() -> tuple[str, CalibrationRun]:
    result = calibrate(MEASUREMENTS)
    return calibration_text(result, MEASUREMENTS), result


def test_plan_validate_checks_a_measurements_file(capsys: pytest.CaptureFixture[str]) -> None:
    main(["validate", str(MEASUREMENTS)])
    assert "valid measurements: 24 runs (vllm on h200-sxm)" in capsys.readouterr().out


def test_the_runs_are_read_with_their_overrides() -> None:
    runs, plans = load_runs(MEASUREMENTS)
    assert len(runs) == len(plans) == 24
    first = runs[0]
    assert (first.engine, first.system, first.name) == ("vllm", "h200-sxm", "tp1-1024x1024-c4")
    assert first.scenario["workload"]["concurrency"] == 4  # the run's override, not the scenario file's 16
    assert first.layout["pools"][0]["batch"] == 4


def test_calibrating_on_the_runs_fits_them_better(fitted: tuple[str, CalibrationRun]) -> None:
    _, result = fitted
    before_ttft, before_tpot = result.before_pct
    after_ttft, after_tpot = result.after_pct
    assert before_ttft > 40.0  # the bundled calibration's first-token latency is another campaign's
    assert after_ttft < before_ttft / 2 and after_tpot <= before_tpot + 0.5


def test_engines_the_runs_leave_out_keep_the_starting_values(fitted: tuple[str, CalibrationRun]) -> None:
    _, result = fitted
    calibration, bundled = result.calibration, default_calibration()
    assert result.engines == ["vllm"]
    for engine in ("trtllm", "sglang", "generic"):
        assert calibration.engines[engine] == bundled.engines[engine]
    assert calibration.engines["vllm"] != bundled.engines["vllm"]
    assert calibration.generations["blackwell"] == bundled.generations["blackwell"]  # no B200 run


def test_the_file_reads_back_exactly_and_the_fit_is_deterministic(fitted: tuple[str, CalibrationRun],
                                                                   tmp_path: Path) -> None:
    text, result = fitted
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    assert load_calibration(path) == result.calibration
    assert calibration_text(calibrate(MEASUREMENTS), MEASUREMENTS) == text


def test_evaluate_and_solve_price_with_the_given_calibration(fitted: tuple[str, CalibrationRun], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    text, result = fitted
    calibration_file, layout = tmp_path / "mine.yaml", tmp_path / "layout.yaml"
    calibration_file.write_text(text, encoding="utf-8")
    layout.write_text(LAYOUT, encoding="utf-8")
    main(["evaluate", str(SCENARIO), "--layout", str(layout), "--calibration", str(calibration_file),
          "--format", "json"])
    printed = json.loads(capsys.readouterr().out)
    mine = api.evaluate(SCENARIO, layout, calibration=result.calibration)
    bundled = api.evaluate(SCENARIO, layout)
    assert printed["ttft_ms"] == pytest.approx(mine.ttft_ms, rel=1e-12)
    assert mine.ttft_ms < 0.8 * bundled.ttft_ms  # measured 109 ms at this layout; bundled 157 ms
    front = api.solve(SCENARIO, calibration=calibration_file, time_limit_s=20)
    assert front.to_dict()["calibration"] == fingerprint(result.calibration)
    assert "calibration" not in api.solve(SCENARIO, time_limit_s=20).to_dict()


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return int(exit_info.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize(("runs", "where", "says"), [
    (f"  - {{scenario: {SCENARIO}, layout: {{}}, ttft_ms: true, tpot_ms: 1}}\n", ":3: measurements.0.ttft_ms",
     "number"),  # no boolean or string taken for a time
    (f"  - {{scenario: {SCENARIO}, layout: {{}}, ttft_ms: '5', tpot_ms: 1}}\n", ":3: measurements.0.ttft_ms",
     "number"),
    (f"  - {{scenario: {SCENARIO}, layout: {{}}, ttft_ms: 1.0e+300, tpot_ms: 1}}\n", ":3: measurements.0.ttft_ms",
     "less than or equal to 86400000"),
    (f"  - scenario: {SCENARIO}\n    layout: {{}}\n    tpot_ms: 9.7\n", ":3: measurements.0:",
     "give the measured ttft_ms and tpot_ms (ms), or a benchmark result file"),
    ("  - {scenario: nowhere.yaml, layout: {}, ttft_ms: 1, tpot_ms: 1}\n", ":3: scenario:",
     "nowhere.yaml does not exist"),
    (f"  - scenario: {SCENARIO}\n    layout: {{}}\n    workload: {{concurrency: -3}}\n    ttft_ms: 1\n"
     "    tpot_ms: 1\n", ":5: workload.concurrency:", "greater than"),  # the override's problem, at the run
])
def test_a_bad_run_names_file_line_and_field(runs: str, where: str, says: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "runs.yaml"
    bad.write_text(f"schema_version: 1\nmeasurements:\n{runs}", encoding="utf-8")
    code, err = _run(["calibrate", str(bad)], capsys)
    assert code == 2 and f"{bad}{where}" in err and says in err and "Traceback" not in err


def test_a_bad_calibration_file_names_line_and_field(fitted: tuple[str, CalibrationRun], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    text, _ = fitted
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("hbm_efficiency: 0.", "hbm_efficiency: 3.", 1), encoding="utf-8")
    code, err = _run(["evaluate", str(SCENARIO), "--layout", str(SCENARIO), "--calibration", str(bad)], capsys)
    line = next(i for i, row in enumerate(bad.read_text().splitlines(), start=1) if "hbm_efficiency: 3." in row)
    assert code == 2 and f"{bad}:{line}:" in err and "hbm_efficiency" in err
    with pytest.raises(InputError):
        load_calibration(bad)


def test_a_scenario_file_error_is_reported_at_its_own_line_even_with_overrides(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO.read_text(encoding="utf-8").replace("engine: vllm", "enigne: vllm"), encoding="utf-8")
    line = next(i for i, row in enumerate(scenario.read_text().splitlines(), start=1) if row.startswith("enigne"))
    runs = tmp_path / "runs.yaml"
    runs.write_text("schema_version: 1\nmeasurements:\n  - {scenario: scenario.yaml, layout: {}, workload: "
                    "{concurrency: 4}, ttft_ms: 1, tpot_ms: 1}\n", encoding="utf-8")
    code, err = _run(["calibrate", str(runs)], capsys)
    assert code == 2 and f"{scenario}:{line}: enigne" in err


@pytest.mark.parametrize(("edit", "field"), [
    (lambda data: data["generations"].pop("hopper"), "generations"),
    (lambda data: data["generations"]["hopper"]["gemm_efficiency"].clear(), "generations.hopper.gemm_efficiency"),
    (lambda data: data["collectives"].pop("p2p"), "collectives"),
    (lambda data: data["engines"].pop("generic"), "engines"),
    (lambda data: data["engines"].update(vlm=data["engines"].pop("vllm")), "engines.vlm"),  # was ignored
    (lambda data: data["collectives"]["p2p"].update(latency_s=float("inf")), "collectives.p2p.latency_s"),
])
def test_an_incomplete_calibration_file_is_exit_2_naming_what_is_missing(
        edit: Any, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = default_calibration().model_dump(mode="json")
    edit(data)
    path = tmp_path / "partial.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    code, err = _run(["evaluate", str(SCENARIO), "--layout", str(SCENARIO), "--calibration", str(path)], capsys)
    assert code == 2 and f"{path}:" in err and f" {field}:" in err and "internal error" not in err


def test_fronts_and_plan_files_record_the_calibration(fitted: tuple[str, CalibrationRun], tmp_path: Path) -> None:
    text, result = fitted
    calibration = tmp_path / "mine.yaml"
    calibration.write_text(text, encoding="utf-8")
    paths = api.solve(SCENARIO, calibration=calibration, time_limit_s=20).write(tmp_path / "out")
    plan_file = next(p for p in paths if p.name == "plan-0.yaml")
    assert yaml.safe_load(plan_file.read_text())["calibration"] == fingerprint(result.calibration)
    assert json.loads((tmp_path / "out" / "front.json").read_text())["calibration"] == fingerprint(result.calibration)


def test_a_studys_json_names_its_calibration(fitted: tuple[str, CalibrationRun]) -> None:
    from planner.studies.study import Case, Study, calibration_field, with_calibration

    _, result = fitted
    case = Case(0, {}, {"model": "x"}, None, "abc")
    study = Study("s", None, {}, (case,), None)
    data = result.calibration.model_dump(mode="json")
    priced = Study("s", None, {}, with_calibration((case,), data), None)
    assert calibration_field(study) == {}
    assert calibration_field(priced) == {"calibration": fingerprint(result.calibration)}
    assert priced.cases[0].hash != case.hash and with_calibration((case,), data)[0].hash == priced.cases[0].hash


def test_the_kv_tier_report_of_a_front_uses_its_calibration(tmp_path: Path) -> None:
    """Multi-turn sessions: each point's KV tiers (turn rate, hit rates) are evaluated with the front's
    calibration, not the bundled one."""
    from planner.scenario import scenario_from_data
    from tests.planner.small_scenarios import small_data

    data = default_calibration().model_dump(mode="json")
    data["fitted_on"], data["engines"]["generic"]["step_overhead_s"] = "slower steps", 0.02
    slower = tmp_path / "slower.yaml"
    slower.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    resolved = scenario_from_data(small_data("qwen3-30b-16xh100-agent-sessions-store"))
    front = api.solve(resolved, calibration=slower, time_limit_s=30)
    point = front.points[0]
    assert point.data["kv_tiers"] == api.evaluate(resolved, point, calibration=slower).to_dict()["kv_tiers"]
    assert point.data["kv_tiers"] != api.evaluate(resolved, point).to_dict()["kv_tiers"]


def test_evaluating_a_plan_file_with_another_calibration_says_so(fitted: tuple[str, CalibrationRun], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    text, _ = fitted
    calibration = tmp_path / "mine.yaml"
    calibration.write_text(text, encoding="utf-8")
    paths = api.solve(SCENARIO, calibration=calibration, time_limit_s=20).write(tmp_path / "out")
    plan_file = str(next(p for p in paths if p.name == "plan-0.yaml"))
    main(["evaluate", str(SCENARIO), "--layout", plan_file, "--format", "json"])
    assert "priced with calibration '24 runs of" in capsys.readouterr().err
    main(["evaluate", str(SCENARIO), "--layout", plan_file, "--format", "json", "--calibration", str(calibration)])
    assert "note:" not in capsys.readouterr().err


def test_few_runs_are_said_to_be_few(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = MEASUREMENTS.read_text(encoding="utf-8").replace("scenario: llama-70b", f"scenario: {EXAMPLES}/llama-70b")
    runs = tmp_path / "runs.yaml"
    head = [line for line in lines.splitlines() if not line.startswith("  - ")]
    body = [line for line in lines.splitlines() if line.startswith("  - ")]
    runs.write_text("\n".join(head + body[:3]) + "\n", encoding="utf-8")
    main(["calibrate", str(runs), "-o", str(tmp_path / "few.yaml")])
    assert "note: fewer than 8 runs" in capsys.readouterr().err
    main(["calibrate", str(MEASUREMENTS), "-o", str(tmp_path / "many.yaml")])
    assert "fewer than" not in capsys.readouterr().err


def test_a_run_no_factor_explains_is_named_in_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs.yaml"
    good = MEASUREMENTS.read_text(encoding="utf-8").replace("scenario: llama-70b", f"scenario: {EXAMPLES}/llama-70b")
    runs.write_text(good + "  - {name: typo, scenario: " + str(SCENARIO) + ", layout: {serving: aggregated, pools: "
                    "[{role: mixed, tp: 8, moe_tp: 8, batch: 16}]}, ttft_ms: 109000, tpot_ms: 9.7}\n", encoding="utf-8")
    main(["calibrate", str(runs), "-o", str(tmp_path / "out.yaml")])
    err = capsys.readouterr().err
    assert "warning: run typo: predicted / measured TTFT" in err
    # the example's own far run (README): batch 64 of 9K-token contexts on one H200, priced as queued
    assert "warning: run tp1-1024x8192-c64:" in err and err.count("warning:") == 2


def test_a_scenario_without_a_workload_takes_it_from_each_run(tmp_path: Path) -> None:
    """A template scenario that leaves the workload to the runs' overrides."""
    data = yaml.safe_load(SCENARIO.read_text(encoding="utf-8"))
    del data["workload"]
    (tmp_path / "template.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    runs = tmp_path / "runs.yaml"
    runs.write_text("schema_version: 1\nmeasurements:\n  - {scenario: template.yaml, layout: {serving: aggregated, "
                    "pools: [{role: mixed, tp: 8, moe_tp: 8, batch: 16}]}, workload: {input_tokens: 1024, "
                    "output_tokens: 1024, concurrency: 16}, ttft_ms: 109, tpot_ms: 9.7}\n", encoding="utf-8")
    (run,), _ = load_runs(runs)
    assert run.scenario["workload"]["concurrency"] == 16


def test_a_calibration_with_an_efficiency_out_of_range_is_exit_2(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = default_calibration().model_dump(mode="json")
    data["generations"]["hopper"]["gemm_efficiency"]["fp8"] = 5.0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    code, err = _run(["evaluate", str(SCENARIO), "--layout", str(SCENARIO), "--calibration", str(path)], capsys)
    assert code == 2 and "generations.hopper.gemm_efficiency.fp8" in err


def test_a_plan_of_the_bundled_calibration_asks_for_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from costmodel.calibration import Calibration
    from planner.calibrate import calibration_mismatch
    from planner.sourcefile import read_document

    paths = api.solve(SCENARIO, time_limit_s=20).write(tmp_path / "out")
    plan = read_document(next(p for p in paths if p.name == "plan-0.yaml"))
    assert calibration_mismatch(plan, None) is None
    assert calibration_mismatch(plan, default_calibration()) is None  # the bundled one, given as a file
    other = Calibration.model_validate(default_calibration().model_dump() | {"fitted_on": "other"})
    assert "run without --calibration" in (calibration_mismatch(plan, other) or "")


def test_the_json_summary_is_for_scripts(fitted: tuple[str, CalibrationRun], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    text, result = fitted
    out = tmp_path / "mine.yaml"
    main(["calibrate", str(MEASUREMENTS), "-o", str(out), "--format", "json"])
    summary = json.loads(capsys.readouterr().out)
    assert out.read_text(encoding="utf-8") == text
    assert summary["runs"] == 24 and summary["engines"] == ["vllm"] and summary["output"] == str(out)
    assert summary["calibration"] == fingerprint(result.calibration)
    assert summary["median_ape_pct"]["after"]["ttft"] == pytest.approx(result.after_pct[0])
    assert [o["run"] for o in summary["outliers"]] == ["tp1-1024x8192-c64"]
    code, err = _run(["calibrate", str(MEASUREMENTS), "--format", "json"], capsys)
    assert code == 2 and "-o FILE" in err


def test_the_fit_is_cross_validated(fitted: tuple[str, CalibrationRun], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Each run is predicted by the fit without its fold (run i in fold i mod 5): worse than in sample, better
    than the bundled calibration on this campaign, and reported in the summary, the file and the JSON."""
    text, result = fitted
    assert result.folds == 5 and result.held_out_pct is not None
    held_ttft, held_tpot = result.held_out_pct
    assert result.after_pct[0] < held_ttft < result.before_pct[0] / 2  # runs unseen are predicted worse
    assert result.after_pct[1] < held_tpot
    assert f"{held_ttft:.1f}% / {held_tpot:.1f}% held out (5-fold cross-validation)" in text
    main(["calibrate", str(MEASUREMENTS), "-o", str(tmp_path / "c.yaml"), "--format", "json"])
    held_out = json.loads(capsys.readouterr().out)["median_ape_pct"]["held_out"]
    assert held_out == {"ttft": pytest.approx(held_ttft), "tpot": pytest.approx(held_tpot), "folds": 5}


def test_no_cross_validation_when_asked_or_too_few_runs(tmp_path: Path) -> None:
    assert calibrate(MEASUREMENTS, folds=0).held_out_pct is None
    entries = yaml.safe_load(MEASUREMENTS.read_text(encoding="utf-8"))
    entries["measurements"] = entries["measurements"][:9]  # fewer than 2 runs a fold
    for entry in entries["measurements"]:
        entry["scenario"] = str(SCENARIO)
    few = tmp_path / "few.yaml"
    few.write_text(yaml.safe_dump(entries), encoding="utf-8")
    result = calibrate(few)
    assert result.folds == 0 and result.held_out_pct is None
    assert "not cross-validated" in held_out_line(result)


def test_each_fold_is_fitted_without_its_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run i is held out of fold i mod K: no fold's fit sees a run it then predicts, and every run is
    predicted once."""
    from costmodel.fitting import PlannedRows

    module = importlib.import_module("planner.calibrate")  # `planner.calibrate` is the API function

    runs, plans = load_runs(MEASUREMENTS)
    planned = PlannedRows.build(runs, plans)
    seen: list[set[str]] = []
    real_fit = module._fit

    def recording_fit(subset: PlannedRows, start: Calibration, label: str) -> Calibration:
        seen.append({run.name for run in subset.rows})
        return real_fit(subset, start, label)

    monkeypatch.setattr(module, "_fit", recording_fit)
    ratios = module.cross_validated(planned, default_calibration(), 4)
    names = [run.name for run in runs]
    assert len(seen) == 4
    for fold, fitted_on in enumerate(seen):
        held = {names[i] for i in range(len(names)) if i % 4 == fold}
        assert not fitted_on & held and fitted_on | held == set(names)
    assert ratios.shape == (24, 2) and bool((ratios > 0).all())
