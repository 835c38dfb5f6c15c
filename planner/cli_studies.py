"""The `plan sweep` and `plan compare` commands (registered on `plan` by `planner.cli`). Thin, as the rest
of the CLI: parse, call `planner.studies`, print, and leave errors to `planner.cli.main`'s exit codes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from costmodel.calibration import Calibration
from planner import economics_report
from planner.calibrate import load_calibration
from planner.errors import PlannerError
from planner.finite import dumps
from planner.out_dir import OutputFolder
from planner.report import console as report_console
from planner.report import echo_text
from planner.studies import compare_report
from planner.studies.compare import compare_dict, comparison_study
from planner.studies.progress import StudyProgress
from planner.studies.runner import CaseResult, Executor, run_cases
from planner.studies.study import Study, with_calibration
from planner.studies.sweep import CACHE, objective_of, run_sweep


def _calibration_file(_: click.Context, __: click.Parameter, path: Path | None) -> Calibration | None:
    return None if path is None else load_calibration(path)


CALIBRATION = click.option(
    "--calibration", "calibration", type=click.Path(path_type=Path), callback=_calibration_file,
    help="Calibration file (`plan calibrate`) to price with instead of the bundled one.",
)


def _executor(ray_address: str | None, jobs: int | None) -> Executor:
    if ray_address is None:
        return Executor("local", jobs) if jobs else Executor("local")
    return Executor("ray", jobs or Executor().jobs, ray_address or None)


def _check_failed(results: list[CaseResult]) -> None:
    failed = [r for r in results if r.status in ("error", "input_error")]
    if failed:
        lines = [f"case {r.case.index} ({r.case.label}): {(r.message or '').splitlines()[0]}" for r in failed[:5]]
        raise PlannerError(f"{len(failed)} case(s) failed (a bug: rerun the case's scenario with plan solve --debug); "
                           "the other cases' results are written\n" + "\n".join(lines))


def _calibrated(study: Study, calibration: Calibration | None) -> Study:
    """The study's cases priced with `calibration`, where one is given (their hashes cover it)."""
    if calibration is None:
        return study
    return replace(study, cases=with_calibration(study.cases, calibration.model_dump(mode="json")))


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [item.strip() for item in text.split(",") if item.strip()]


def _counts(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise click.BadParameter("give whole numbers separated by commas, e.g. 16,32,64", param_hint=option) from None


RAY = click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
                   help="Run on Ray, one task per case: the cluster at ADDRESS (e.g. auto, ray://host:10001; its "
                   "nodes need this moe-planner installed), or a local Ray instance of --jobs CPUs when no address "
                   "is given (write --ray=ADDRESS, or put --ray after STUDY).")
JOBS = click.option("--jobs", type=click.IntRange(1, 1024), help="Cases solved at once (default: the CPUs).")


@click.command("sweep")
@click.argument("study_file", metavar="STUDY", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Write cases/<hash>.json (kept: a rerun resumes), results.csv, results.parquet, summary.json "
              "and sweep.png here.")
@RAY
@JOBS
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="What to print at the end: a table of the cases, or the JSON summary.")
@CALIBRATION
def sweep_command(study_file: Path, out_dir: Path, ray_address: str | None, jobs: int | None, fmt: str,
                  calibration: Calibration | None) -> None:
    """Solve every case of STUDY (a base scenario and a grid of values), resumably, and tabulate the fronts."""
    from planner.studies.study import load_study

    study = _calibrated(load_study(study_file), calibration)
    out = OutputFolder.prepare(out_dir)
    click.get_current_context().call_on_close(out.discard)
    executor = _executor(ray_address, jobs)
    click.echo(f"{study.name}: {len(study.cases)} cases on {executor.describe()}", err=True)
    outcome = run_sweep(study, out, executor)
    for path in outcome.files:
        click.echo(f"wrote {path}", err=True)
    if fmt == "json":
        echo_text(dumps(outcome.summary, indent=2))
    else:
        _print_sweep(outcome.summary)
    _check_failed(outcome.results)


def _print_sweep(summary: dict[str, object]) -> None:
    from rich.table import Table

    cases = summary["cases"]
    assert isinstance(cases, list)
    table = Table(title=f"{summary['study']}: best point per case (by {summary['objective']})")
    for column in ("case", "values", "status", "points", "TTFT ms", "tok/s/GPU", "$/Mtok", "tok/s/MW", "pools"):
        table.add_column(column, justify="left" if column in ("values", "status", "pools") else "right")
    for case in cases:
        values = ", ".join(f"{k}={v}" for k, v in case["values"].items())
        best = case["best"]
        if best is None:
            table.add_row(str(case["case"]), values, case["status"], "0", "", "", "", "", "")
            continue
        table.add_row(str(case["case"]), values, case["status"], str(case["points"]), f"{best['ttft_ms']:.0f}",
                      f"{best['tokens_per_s_per_gpu']:.1f}", economics_report.usd_text(best['usd_per_million_tokens']),
                      f"{best['tokens_per_s_per_mw']:,.0f}", best["pools"])
    out = report_console()
    out.print(table)
    for case in cases:  # why a case has no point (infeasible, no solution in time), as `plan compare` says it
        if case["best"] is None and case.get("message"):
            out.print(f"  case {case['case']}: {str(case['message']).splitlines()[0]}")
    out.print(f"run: {summary['run']}")


@click.command("compare")
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option("--systems", help="Systems to compare, e.g. b200-sxm,b300-sxm,gb200-nvl72.")
@click.option("--gpus", "gpu_counts", help="Cluster sizes in GPUs, e.g. 16,32,64.")
@click.option("--bands", help="TTFT bands as caps in ms, e.g. 250,500,1000 (default: 1/8, 1/4, 1/2 and all of "
              "the TTFT SLO).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write compare.json, compare.csv, compare.png here, and cases/<hash>.json (a rerun resumes).")
@RAY
@JOBS
@CALIBRATION
def compare_command(scenario: Path, systems: str | None, gpu_counts: str | None, bands: str | None, fmt: str,
                    out_dir: Path | None, ray_address: str | None, jobs: int | None,
                    calibration: Calibration | None) -> None:
    """Fronts of SCENARIO (or a study file) on several systems and GPU counts, side by side, with each
    system's best point per TTFT band."""
    study = _calibrated(comparison_study(scenario, _names(systems), _counts(gpu_counts, "--gpus")), calibration)
    caps = None
    if bands is not None:
        try:
            caps = [float(item) for item in bands.split(",") if item.strip()]
        except ValueError:
            raise click.BadParameter("give TTFT caps in ms separated by commas, e.g. 250,500,1000",
                                     param_hint="--bands") from None
        if not caps or any(not 0 < cap < 1e9 for cap in caps):
            raise click.BadParameter("give positive TTFT caps in ms, e.g. 250,500,1000", param_hint="--bands")
    out = OutputFolder.prepare(out_dir) if out_dir is not None else None
    if out is not None:
        click.get_current_context().call_on_close(out.discard)
    executor = _executor(ray_address, jobs)
    unique = len({case.hash for case in study.cases})
    with StudyProgress(unique, study.name) as progress:
        results = run_cases(study.cases, executor, None if out is None else out.folder / CACHE, progress)
    data = compare_dict(study, results, objective_of(study), caps)
    if out is not None:
        out.path("compare.json").write_text(dumps(data, indent=2) + "\n", encoding="utf-8")
        out.path("compare.csv").write_text(compare_report.csv_text(data), encoding="utf-8")
        compare_report.plot(data, out.path("compare.png"))
        for path in out.commit():
            click.echo(f"wrote {path}", err=True)
    if fmt == "json":
        echo_text(dumps(data, indent=2))
    else:
        compare_report.print_tables(data, report_console())
    _check_failed(results)


def register(group: click.Group) -> None:
    group.add_command(sweep_command)
    group.add_command(compare_command)
