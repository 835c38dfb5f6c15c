"""plan sweep: study files and their errors, cases and hashes, the local executor, resuming, and Ray."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.errors import InputError
from planner.studies.study import apply, load_study
from tests.helpers import run_cli

BASE: dict[str, Any] = {
    "schema_version": 1, "name": "qwen-sweep", "model": "qwen3-30b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
    "cluster": {"system": "h200-sxm", "gpus": 4}, "workload": {"input_tokens": 2048, "output_tokens": 256},
    "slo": {"tpot_ms": 50},
    "search": {"pp": [1], "dp_attention": [1], "tp": [1], "max_batch": 16, "time_limit_s": 60},
}
# Two cases that solve in a few seconds and one that cannot meet its TPOT target (a result, not an error).
GRID: dict[str, list[Any]] = {"cluster.system": ["h200-sxm", "b200-sxm"], "slo.tpot_ms": [50, 0.5]}


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _line(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_study_errors_point_at_the_line(tmp_path: Path) -> None:
    good = {"study": "s", "base": BASE, "grid": {"cluster.system": ["h200-sxm"]}}
    cases = [
        ({**good, "grd": {}}, "grd:", "grd", "did you mean 'grid'"),
        ({**good, "grid": {"cluster.system": ["h200-sxm", "b400-sxm"]}}, "- b400-sxm", "grid.cluster.system[1]",
         "b400-sxm"),
        ({**good, "grid": {"cluster..system": ["h200-sxm"]}}, "cluster..system", "grid.cluster..system",
         "dotted scenario path"),
        ({**good, "grid": {"model.name": ["x"]}}, "model.name", "grid.model.name", "not a mapping"),
        ({**good, "grid": {"cluster.gpus": []}}, "cluster.gpus", "grid.cluster.gpus", "at least 1"),
        ({**good, "grid": {"workload.input_tokens": [1024, -5]}}, "- -5", "grid.workload.input_tokens[1]",
         "greater than 0"),
        ({**good, "base": {**BASE, "slo": {"tpot_ms": -1}}}, "tpot_ms: -1", "base.slo.tpot_ms", "greater than 0"),
        ({**good, "base": "missing.yaml"}, "base: missing.yaml", "base", "cannot read the base scenario"),
        ({**good, "grid": {"search.objective": ["tokens_per_gpu"]}}, "search.objective", "grid.search.objective",
         "a study has one"),
    ]
    for data, text, field, message in cases:
        path = _write(tmp_path / "study.yaml", data)
        result = run_cli("sweep", str(path), "--out", str(tmp_path / "out"))
        assert result.code == 2, (field, result.err)
        assert f"{path}:{_line(path, text)}: {field}:" in result.err, (field, result.err)
        assert message in result.err and "Traceback" not in result.err
        assert not (tmp_path / "out").exists()  # nothing run, nothing written


def test_base_file_errors_point_into_the_base(tmp_path: Path) -> None:
    base = _write(tmp_path / "base.yaml", {**BASE, "workload": {"input_tokens": 2048, "output_tokens": 0}})
    study = _write(tmp_path / "study.yaml", {"study": "s", "base": "base.yaml", "grid": {"cluster.gpus": [4]}})
    result = run_cli("sweep", str(study), "--out", str(tmp_path / "out"))
    assert result.code == 2
    assert f"{base}:{_line(base, 'output_tokens')}: workload.output_tokens:" in result.err


def test_cases_paths_and_hashes(tmp_path: Path) -> None:
    on_nodes = {**BASE, "cluster": {"system": "h200-sxm", "nodes": 1}}
    assert apply(on_nodes, {"cluster.gpus": 4})["cluster"] == {"system": "h200-sxm", "gpus": 4}
    assert apply(BASE, {"economics.pue": 1.2})["economics"] == {"pue": 1.2}  # mappings made as needed
    assert BASE["cluster"] == {"system": "h200-sxm", "gpus": 4}  # the base is not changed
    first = load_study(_write(tmp_path / "a.yaml", {"study": "a", "base": BASE, "grid": GRID}))
    assert [c.values for c in first.cases] == [
        {"cluster.system": "h200-sxm", "slo.tpot_ms": 50}, {"cluster.system": "h200-sxm", "slo.tpot_ms": 0.5},
        {"cluster.system": "b200-sxm", "slo.tpot_ms": 50}, {"cluster.system": "b200-sxm", "slo.tpot_ms": 0.5}]
    assert len({c.hash for c in first.cases}) == 4
    # another study, grid reordered and extended: the same scenarios keep their hashes
    grid = {"slo.tpot_ms": [0.5, 50, 40], "cluster.system": ["b200-sxm", "h200-sxm"]}
    second = load_study(_write(tmp_path / "b.yaml", {"study": "b", "base": BASE, "grid": grid}))
    assert {c.hash for c in first.cases} < {c.hash for c in second.cases}
    # an explicit default is the same scenario as an omitted one
    explicit = {**BASE, "search": {**BASE["search"], "objective": "tokens_per_gpu"}}
    third = load_study(_write(tmp_path / "c.yaml", {"study": "c", "base": explicit, "grid": GRID}))
    assert [c.hash for c in third.cases] == [c.hash for c in first.cases]


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    folder = tmp_path_factory.mktemp("sweep")
    study = _write(folder / "study.yaml", {"study": "qwen-grid", "base": BASE,
                                           "grid": {"cluster.system": ["h200-sxm", "b200-sxm"],
                                                    "slo.tpot_ms": [50, 0.5]}})
    out = folder / "local"
    result = run_cli("sweep", str(study), "--out", str(out), "--jobs", "2", "--format", "json")
    assert result.code == 0, result.err
    return study, out, result.err


def test_local_sweep_writes_every_case_and_point(local_sweep: tuple[Path, Path, str]) -> None:
    import pyarrow.parquet as pq

    _, out, err = local_sweep
    assert {p.name for p in out.iterdir()} == {"cases", "results.csv", "results.parquet", "summary.json", "sweep.png"}
    assert "[4/4]" in err and "ETA" in err  # progress, a line per case when stderr is not a terminal
    summary = json.loads((out / "summary.json").read_text())
    assert summary["totals"] == {"cases": 4, "infeasible": 2, "solved": 2}
    assert summary["run"]["cases_solved"] == 4 and summary["run"]["cases_cached"] == 0
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    for case in summary["cases"]:
        mine = [r for r in rows if r["case"] == str(case["case"])]
        assert {r["cluster.system"] for r in mine} == {case["values"]["cluster.system"]}
        if case["status"] == "infeasible":
            assert len(mine) == 1 and mine[0]["point"] == "" and "TPOT" in mine[0]["message"]
            continue
        record = json.loads((out / "cases" / f"{case['hash']}.json").read_text())
        front = record["result"]["front"]
        assert len(mine) == len(front) == case["points"] > 0
        for row, point in zip(mine, front, strict=True):
            assert float(row["usd_per_million_tokens"]) == pytest.approx(point["usd_per_million_tokens"], rel=1e-8)
            assert float(row["stranded_hbm_gb"]) == pytest.approx(point["economics"]["stranded_hbm_gb"], rel=1e-8)
        best = max(front, key=lambda p: p["tokens_per_s_per_gpu"])  # the objective: tokens per GPU
        assert case["best"]["tokens_per_s_per_gpu"] == best["tokens_per_s_per_gpu"]
    table = pq.read_table(out / "results.parquet")
    assert table.num_rows == len(rows)
    assert str(table.schema.field("slo.tpot_ms").type) == "double" and str(table.schema.field("gpus").type) == "int64"
    assert table.column("usd_per_million_tokens").to_pylist() == [
        float(r["usd_per_million_tokens"]) if r["usd_per_million_tokens"] else None for r in rows]


def test_rerun_resumes_without_solving_again(local_sweep: tuple[Path, Path, str], tmp_path: Path) -> None:
    import shutil

    study, out, _ = local_sweep
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    before = (copy / "results.csv").read_bytes()
    result = run_cli("sweep", str(study), "--out", str(copy), "--format", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["run"]["cases_cached"] == 4 and json.loads(result.out)["run"]["cases_solved"] == 0
    assert (copy / "results.csv").read_bytes() == before
    # one case's result lost (an interrupt before it finished): only that case is solved again
    summary = json.loads(result.out)
    lost = next(c for c in summary["cases"] if c["status"] == "solved")
    (copy / "cases" / f"{lost['hash']}.json").unlink()
    result = run_cli("sweep", str(study), "--out", str(copy), "--format", "json", "--jobs", "1")
    assert json.loads(result.out)["run"] == {**json.loads(result.out)["run"], "cases_cached": 3, "cases_solved": 1}
    assert (copy / "results.csv").read_bytes() == before
    table = run_cli("sweep", str(study), "--out", str(copy))  # all cached: the table says why cases have no point
    assert table.code == 0 and table.out.count("TPOT: the SLO asks for 0.5 ms") == 2, table.out


def test_ray_gives_the_local_executors_results(local_sweep: tuple[Path, Path, str], tmp_path: Path) -> None:
    """A local Ray instance of 2 CPUs, one task per case: the same rows, byte for byte."""
    pytest.importorskip("ray")
    study, out, _ = local_sweep
    result = run_cli("sweep", str(study), "--out", str(tmp_path / "ray"), "--ray", "--jobs", "2", "--format", "json")
    assert result.code == 0, result.err
    assert "local Ray instance, 2 CPUs" in result.err
    assert (tmp_path / "ray" / "results.csv").read_bytes() == (out / "results.csv").read_bytes()
    ray_summary, local_summary = json.loads(result.out), json.loads((out / "summary.json").read_text())
    for summary in (ray_summary, local_summary):
        del summary["run"]
        for case in summary["cases"]:
            del case["time_s"]
    assert ray_summary == local_summary


def test_a_calibration_reprices_the_cached_cases_under_new_hashes(local_sweep: tuple[Path, Path, str],
                                                                  tmp_path: Path) -> None:
    """`--calibration` into an output folder of the bundled calibration's cases solves them again (their hashes
    cover the calibration) and the summary names it."""
    import shutil

    import yaml

    from costmodel.calibration import default_calibration, fingerprint

    study, out, _ = local_sweep
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    data = default_calibration().model_dump(mode="json")
    data["fitted_on"] = "test: another calibration"
    calibration = tmp_path / "mine.yaml"
    calibration.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = run_cli("sweep", str(study), "--out", str(copy), "--format", "json", "--jobs", "2",
                     "--calibration", str(calibration))
    assert result.code == 0, result.err
    summary = json.loads(result.out)
    assert summary["run"]["cases_cached"] == 0 and summary["calibration"] == fingerprint(data)
    bundled = json.loads((out / "summary.json").read_text())
    assert {c["hash"] for c in summary["cases"]}.isdisjoint({c["hash"] for c in bundled["cases"]})
    assert [c["best"] for c in summary["cases"]] == [c["best"] for c in bundled["cases"]]  # the same values


def test_bad_executor_options(tmp_path: Path) -> None:
    study = _write(tmp_path / "study.yaml", {"study": "s", "base": BASE, "grid": {"cluster.gpus": [4]}})
    assert run_cli("sweep", str(study), "--out", str(tmp_path / "o"), "--jobs", "0").code == 2
    assert run_cli("sweep", str(study)).code == 2  # --out is required
    file = tmp_path / "file"
    file.write_text("x")
    result = run_cli("sweep", str(study), "--out", str(file))
    assert result.code == 2 and "--out" in result.err
    with pytest.raises(InputError):
        load_study(tmp_path / "absent.yaml")
    result = run_cli("sweep", str(study), "--out", str(tmp_path / "o"), "--ray", "127.0.0.1:9")  # nothing there
    assert result.code == 2 and "--ray: nothing answers at 127.0.0.1:9" in result.err
