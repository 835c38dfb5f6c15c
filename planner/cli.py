"""The `plan` command. Thin: parse arguments, call the library, print, map errors to exit codes.

Exit codes: 0 success; 1 internal error (a bug: rerun with --debug for the traceback); 2 bad input;
3 infeasible scenario; 4 no solution within the time limit; 130 interrupted (SIGINT: nothing written, see
`planner.interrupt`); 141 standard output closed by its reader. JSON output is strict (no NaN or Infinity:
`planner.finite`).
"""

from __future__ import annotations

import errno
import math
import select
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import click
import yaml

from costmodel.calibration import Calibration
from costmodel.errors import ConfigError, CostModelError
from costmodel.evaluate import evaluate
from costmodel.scenario import MAX_SEED, MAX_THREADS
from planner import __version__, evaluation, finite, interrupt, plan_output, report
from planner.calibrate import (
    DEFAULT_FOLDS,
    FEW_RUNS,
    CalibrationRun,
    calibrate,
    calibration_mismatch,
    calibration_summary,
    calibration_text,
    held_out_line,
    load_calibration,
    load_runs,
)
from planner.cli_studies import CALIBRATION
from planner.cli_studies import register as register_studies
from planner.errors import InputError, PlannerError
from planner.out_dir import OutputFolder
from planner.scenario import is_plan_file, layout_from_document, load_layout, load_scenario, plan_scenario
from planner.schemas import json_schema
from planner.solve import settings_for, solve
from planner.solvers import BACKENDS
from planner.sourcefile import read_document
from planner.sweep_result import Resolution, SolvedPoint

FORMAT = click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
    help="table for people, json for scripts.",
)


# errors of where the output goes, not of the planner: exit 2 with what to change, not an internal error's 1
UNWRITABLE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
SIGPIPE_EXIT = 141  # 128 + SIGPIPE: the reader closed standard output (`plan solve x | head -1`), as Unix tools exit


def _stdout_closed() -> bool:
    """Standard output is a pipe whose reader has gone (poll reports an error on its write end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLERR)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll on this platform, or stdout is no file
        return False


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks of errors.")
@click.version_option(__version__, prog_name="moe-planner")
def cli(debug: bool) -> None:
    """Plan Mixture-of-Experts inference deployments: Pareto fronts of TTFT against tokens/s per GPU."""


@cli.command()
@click.argument("file", type=click.Path(path_type=Path))
def validate(file: Path) -> None:
    """Check a scenario, layout, plan, study, measurements or model (config.json, model YAML) FILE; exit 2 with the
    line and field of each problem."""
    document = read_document(file)
    if isinstance(document.data, dict) and "measurements" in document.data:  # `plan calibrate`'s runs
        runs, _ = load_runs(file)
        click.echo(f"{file}: valid measurements: {len(runs)} run{'s' if len(runs) > 1 else ''} "
                   f"({', '.join(sorted({r.engine for r in runs}))} "
                   f"on {', '.join(sorted({r.system for r in runs}))})")
        return
    if isinstance(document.data, dict) and "study" in document.data:  # a study of `plan sweep`
        from planner.studies.study import load_study

        study = load_study(file)
        click.echo(f"{file}: valid study '{study.name}': {len(study.cases)} cases")
        return
    if isinstance(document.data, dict) and _is_model_file(document.data):  # a config.json or `import-hf` YAML
        from costmodel.models import load_model

        if "groups" not in document.data:  # a config.json: its problems at their lines, as `plan import-hf` says them
            report.import_hf_config(file, None)
        try:
            architecture = load_model(str(file.resolve()))
        except ConfigError as exc:  # a model YAML's problem, at its key's line
            raise InputError.single(exc.path or file, exc.line, exc.field or "", str(exc)) from None
        experts = f", {architecture.num_experts} routed experts" if architecture.num_experts else ""
        click.echo(f"{file}: valid model '{architecture.name}': {architecture.num_layers} layers{experts}")
        return
    if isinstance(document.data, dict) and ("pools" in document.data or is_plan_file(document)):
        resolved = plan_scenario(document)  # a plan file is checked against the scenario it carries
        layout = layout_from_document(document, resolved)
        if resolved is not None and is_plan_file(document) and document.data.get("placement"):
            from planner.export.base import check_fits, read_plan  # what the export checks: the fit, the banks

            check_fits(file, resolved, layout)
            read_plan(file, document.data, resolved)
        against = f" for '{resolved.scenario.name}' on {resolved.cluster_text}" if resolved else ""
        click.echo(f"{file}: valid layout ({layout.serving}, {layout.gpus} GPUs){against}")
        return
    resolved = load_scenario(file)
    click.echo(
        f"{file}: valid scenario '{resolved.scenario.name}': {resolved.architecture.name} on "
        f"{resolved.cluster_text}"
    )


_OPTIONS = {"solver": "--solver", "time_limit_s": "--time-limit", "threads": "--threads", "seed": "--seed",
            "resolution": "--resolution", "points": "--points", "batch_tolerance": "--batch-tolerance"}


def _is_model_file(data: dict[str, object]) -> bool:
    """A Hugging Face config.json (its model_type or architectures, no scenario's fields), or a model YAML
    `plan import-hf` wrote (model_type and groups of layers)."""
    if "model" in data or "cluster" in data or "workload" in data:
        return False
    return ("architectures" in data or "model_type" in data) and ("schema_version" not in data or "groups" in data)


@cli.command()
@click.argument("what", type=click.Choice(["models", "systems"]), required=False)
@FORMAT
def catalog(what: str | None, fmt: str) -> None:
    """List the bundled models and systems (or only WHAT)."""
    kinds = [what] if what else ["models", "systems"]
    if fmt == "json":
        _echo_json({kind: report.catalog_rows(kind) for kind in kinds})
        return
    for kind in kinds:
        report.print_catalog(kind)


@cli.group()
def show() -> None:
    """Show one model or system in detail."""


@show.command("model")
@click.argument("name")
@FORMAT
def show_model(name: str, fmt: str) -> None:
    """Parameters, active parameters, KV bytes per token and layer groups of model NAME."""
    summary = report.model_summary(report.find_model(name))
    if fmt == "json":
        _echo_json(summary)
    else:
        report.print_model(summary)


@show.command("system")
@click.argument("name")
@FORMAT
def show_system(name: str, fmt: str) -> None:
    """Every field of system NAME, with units and sources."""
    summary = report.system_summary(name)
    if fmt == "json":
        _echo_json(summary)
    else:
        report.print_system(summary)


@cli.command("evaluate")
@click.argument("scenario", type=click.Path(path_type=Path), required=False)
@click.option("--layout", "layout_path", type=click.Path(path_type=Path), help="Layout YAML to evaluate.")
@click.option("--cases", type=click.Path(path_type=Path), help="JSONL of {scenario, layout} per line.")
@CALIBRATION
@FORMAT
def evaluate_command(scenario: Path | None, layout_path: Path | None, cases: Path | None,
                     calibration: Calibration | None, fmt: str) -> None:
    """Predict TTFT, TPOT, tokens/s per GPU and memory of one layout (or every line of --cases); a plan file
    from `plan solve --out` carries its scenario, so SCENARIO may be left out."""
    if cases is not None:
        if scenario is not None or layout_path is not None:  # each line carries its own: these would be ignored
            raise click.UsageError("--cases evaluates the scenario and layout of each of its lines: give it alone, "
                                   "or SCENARIO and --layout LAYOUT without it")
        for line in evaluation.evaluate_cases(cases, calibration):
            click.echo(finite.dumps(line))
        return
    if layout_path is None:
        raise click.UsageError("give SCENARIO and --layout LAYOUT (a plan file alone), or --cases CASES.jsonl")
    carried = plan_scenario(read_document(layout_path)) if scenario is None else None
    if scenario is None and carried is None:
        raise click.UsageError(f"{layout_path} carries no scenario (a layout file, or a plan file of an older "
                               "`plan solve`): give SCENARIO before --layout")
    resolved = load_scenario(scenario) if scenario is not None else carried
    assert resolved is not None
    prediction = evaluate(resolved, load_layout(layout_path, resolved), calibration)
    mismatch = calibration_mismatch(read_document(layout_path), calibration)
    if mismatch:  # a plan file's figures came from another calibration: say so beside these
        click.echo(f"note: {layout_path}: {mismatch}", err=True)
    finite.finite_or_error(prediction.to_dict())  # no "TTFT nan ms (fits)" in the table either
    if fmt == "json":
        _echo_json(prediction.to_dict())
    else:
        evaluation.print_prediction(prediction)


@cli.command("solve")
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True,
              help="table for people; json or csv for scripts.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write front.json, front.csv, front.png, report.html and plan-<i>.yaml here.")
@click.option("--solver", type=click.Choice(list(BACKENDS)), help="MILP backend (default: the scenario's).")
@click.option("--time-limit", "time_limit", type=click.FloatRange(min=0.1), help="Seconds for the whole solve.")
@click.option("--threads", type=click.IntRange(min=1, max=MAX_THREADS), help="Solver threads (1: deterministic).")
@click.option("--seed", type=click.IntRange(min=0, max=MAX_SEED), help="Solver seed.")
@click.option("--resolution", help="auto (at most 60 points, hypervolume certified within 0.05%), exact (every "
              "non-dominated point), or a TTFT step as a share of the TTFT range, e.g. 0.01.")
@click.option("--points", help="auto resolution: the most front points (default 60), or all (as many as the "
              "0.05% hypervolume certificate takes).")
@click.option("--batch-tolerance", "batch_tolerance", type=click.FloatRange(min=0.0, max=0.2),
              help="Search batches until none untimed could beat the front by more than this share (default 0.01).")
@click.option("--model-stats", is_flag=True, help="Also print variables and constraints per constraint family.")
@CALIBRATION
def solve_command(scenario: Path, fmt: str, out_dir: Path | None, solver: str | None, time_limit: float | None,
                  threads: int | None, seed: int | None, resolution: str | None, points: str | None,
                  batch_tolerance: float | None, model_stats: bool, calibration: Calibration | None) -> None:
    """Pareto front of TTFT against tokens/s per GPU for SCENARIO, every point a deployment that fits."""
    resolved = load_scenario(scenario)
    out = OutputFolder.prepare(out_dir) if out_dir is not None else None  # unwritable: exit 2 before solving
    if out is not None:
        click.get_current_context().call_on_close(out.discard)  # a failed run writes nothing
    try:
        settings = settings_for(resolved.scenario.search, solver=solver, time_limit_s=time_limit, threads=threads,
                                seed=seed, resolution=None if resolution is None else _resolution(resolution),
                                points=None if points is None else _points(points), batch_tolerance=batch_tolerance)
    except InputError as exc:  # named by the options given, not the API's arguments
        raise InputError([replace(p, field=_OPTIONS.get(p.field, p.field)) for p in exc.problems]) from None
    console = report.console()
    if fmt == "table" and console.is_terminal:
        with console.status(f"solving {resolved.scenario.name} with {settings.backend}...") as status:
            def progress(point: SolvedPoint, count: int) -> None:
                status.update(f"solving {resolved.scenario.name} with {settings.backend}: {count} front points, "
                              f"down to TTFT {point.point.ttft_ms:.1f} ms")

            result = solve(resolved, replace(settings, on_point=progress), calibration)
    else:
        result = solve(resolved, settings, calibration)
    data = plan_output.result_dict(result) if out is not None or fmt == "json" else None
    if out is not None:
        for path in plan_output.write_outputs(result, out, data):
            click.echo(f"wrote {path}", err=True)
    if fmt == "json":
        assert data is not None
        if model_stats:
            data["model_statistics"] = result.model_statistics()
        _echo_json(data)
    elif fmt == "csv":
        report.echo_text(plan_output.csv_text(result).removesuffix("\n"))
    else:
        plan_output.print_table(result, console, model_stats)


@cli.command("calibrate")
@click.argument("measurements", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the calibration here instead of stdout.")
@click.option("--from", "start_path", type=click.Path(path_type=Path),
              help="Calibration to start from and keep where the runs say nothing (default: the bundled one).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: the summary on stderr; json: the summary as JSON on stdout (needs -o).")
@click.option("--folds", type=click.IntRange(0, 100), default=DEFAULT_FOLDS, show_default=True,
              help="Cross-validate the fit over this many folds of the runs (0: not; each fold is one more fit).")
def calibrate_command(measurements: Path, output: Path | None, start_path: Path | None, fmt: str,
                      folds: int) -> None:
    """Fit the cost model to your own measured runs (MEASUREMENTS: a YAML list of scenario, layout, and ttft_ms
    and tpot_ms or a benchmark result file); use the result with --calibration."""
    if fmt == "json" and output is None:
        raise click.UsageError("--format json prints the summary: give -o FILE for the calibration")
    if folds == 1:
        raise click.UsageError("--folds 1 holds nothing out: give 0 (no cross-validation) or at least 2")
    start = None if start_path is None else load_calibration(start_path)
    result = calibrate(measurements, start, folds)
    text = calibration_text(result, measurements)
    if fmt == "text":
        _print_calibration_summary(result)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError.single(output, None, "", f"cannot write the calibration: {exc.strerror or exc}") from None
    if fmt == "json":
        _echo_json(calibration_summary(result) | {"output": str(output)})
    else:
        click.echo(f"wrote {output}", err=True)


def _print_calibration_summary(result: CalibrationRun) -> None:
    runs = f"{len(result.runs)} run{'s' if len(result.runs) > 1 else ''}"
    click.echo(f"{runs}; refitted engines: {', '.join(result.engines) or 'none'}; GPU generations: "
               f"{', '.join(result.generations) or 'none (too few runs: starting values)'}", err=True)
    if len(result.runs) < FEW_RUNS:
        click.echo(f"note: fewer than {FEW_RUNS} runs: on the calibration campaigns 4 runs predicted the others no "
                   "better than none (`python -m benchmarks own-calibration`); measure more, spanning batches and "
                   "lengths", err=True)
    click.echo(f"median error over the runs, TTFT / TPOT: {result.before_pct[0]:.1f}% / {result.before_pct[1]:.1f}% "
               f"before, {result.after_pct[0]:.1f}% / {result.after_pct[1]:.1f}% after", err=True)
    click.echo(held_out_line(result), err=True)
    for run in result.runs:
        if run.failed:
            click.echo(f"note: run {run.name}: {run.failed} request{'s' if run.failed > 1 else ''} failed; its means "
                       "are the completed ones'", err=True)
        for note in run.notes:
            click.echo(f"note: run {run.name}: {note}", err=True)
    for name, ttft, tpot in result.outliers:
        ratios = ("no prediction (the model cannot price it)" if not (math.isfinite(ttft) and math.isfinite(tpot))
                  else f"predicted / measured TTFT {ttft:.3g}x, TPOT {tpot:.3g}x after the fit")
        click.echo(f"warning: run {name}: {ratios}: no setting of the factors explains it; check its layout, "
                   "lengths and units", err=True)


@cli.command("import-hf")
@click.argument("config", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write here instead of stdout.")
@click.option("--name", help="Model name to record (default: the config file's stem).")
def import_hf(config: Path, output: Path | None, name: str | None) -> None:
    """Normalise a Hugging Face CONFIG.json into a model YAML that a scenario can reference."""
    text = yaml.safe_dump(report.import_hf_config(config, name), sort_keys=False)
    if output is None:
        click.echo(text, nl=False)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:  # a read-only folder, a path under a file: the user's to fix
            raise InputError.single(output, None, "--output", f"cannot write there ({exc.strerror or exc}); give "
                                    "a writable path") from None
        click.echo(f"wrote {output}", err=True)


@cli.command()
@click.argument("what", type=click.Choice(["scenario", "layout", "measurements"]), default="scenario")
def schema(what: str) -> None:
    """Print the JSON Schema of a scenario (default), layout or measurements (`plan calibrate`) file."""
    _echo_json(json_schema(what))


@cli.command("export")
@click.argument("plan_file", metavar="PLAN", type=click.Path(path_type=Path))
@click.option("--engine", required=True, type=click.Choice(["trtllm", "sglang", "vllm", "dynamo"]),
              help="Serving engine, at the versions Dynamo 1.6.1 pins: tensorrt-llm 1.3.0rc29, sglang 0.5.21, "
              "vllm 0.31.0 (README: From a plan to running engines).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write the launch script and config files here (default: print the files).")
@click.option("--scenario", type=click.Path(path_type=Path), help="Scenario file (default: the one in PLAN).")
@click.option("--backend", type=click.Choice(["trtllm", "sglang", "vllm"]),
              help="Dynamo's worker engine (default: the scenario's engine, else trtllm; vllm on AMD GPUs).")
@CALIBRATION
def export_command(plan_file: Path, engine: str, out_dir: Path | None, scenario: Path | None,
                   backend: str | None, calibration: Calibration | None) -> None:
    """Launch commands and configs of ENGINE for a plan-<i>.yaml from `plan solve --out`."""
    from planner.export import export_plan, load_plan

    if backend is not None and engine != "dynamo":
        raise click.UsageError("--backend applies to --engine dynamo only")
    plan = load_plan(plan_file, scenario)
    mismatch = calibration_mismatch(read_document(plan_file), calibration)
    if mismatch and plan.serving != "composite":  # nothing is priced again: the files are the plan's
        click.echo(f"note: {plan_file}: {mismatch}", err=True)
    exported = export_plan(plan, engine, backend, calibration)
    if out_dir is None:  # whole, or exit 141 (`report.echo_text`)
        report.echo_text("".join(f"# ===== {name}\n{text}" for name, text in exported.files.items()).removesuffix("\n"))
        return
    for path in exported.write(out_dir):
        click.echo(f"wrote {path}", err=True)


register_studies(cli)  # plan sweep, plan compare


def _resolution(text: str) -> Resolution:
    if text in ("auto", "exact"):
        return "exact" if text == "exact" else "auto"
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 0.5:
        raise click.BadParameter("give auto, exact or a number in [0, 0.5)", param_hint="--resolution")
    return value


def _points(text: str) -> int | Literal["all"]:
    if text == "all":
        return "all"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 2 <= value <= 100_000:
        raise click.BadParameter("give all or a whole number from 2 to 100000", param_hint="--points")
    return value


def _echo_json(data: Any) -> None:
    report.echo_text(finite.dumps(data, indent=2))


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn expected failures into messages and exit codes."""
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None:  # the `plan` process itself (not a test calling main in-process)
        interrupt.install()
    debug = "--debug" in args
    if debug:  # accepted anywhere on the line (`plan solve x.yaml --debug`): it is the group's option
        args = ["--debug", *(arg for arg in args if arg != "--debug")]
    code = _run(args, debug)
    interrupt.yield_to_stop()  # a signal's cleanup under way decides the exit code, not this thread
    if code:
        sys.exit(code)


def _run(args: list[str], debug: bool) -> int:
    """Run the CLI; the exit code, having said what went wrong."""
    try:
        cli.main(args=args, prog_name="plan", standalone_mode=False)
    except SystemExit as exc:  # click's answer to a write on a closed pipe (help and usage too): exit 1, a bug's code
        if exc.code == 1 and _stdout_closed():
            return SIGPIPE_EXIT
        raise
    except (click.exceptions.Abort, KeyboardInterrupt):  # without the watcher (in-process calls)
        click.echo(f"interrupted (exit {interrupt.EXIT_CODE})", err=True)
        return interrupt.EXIT_CODE
    except click.ClickException as exc:
        interrupt.yield_to_stop()
        exc.show()
        return exc.exit_code
    except (PlannerError, CostModelError) as exc:
        interrupt.yield_to_stop()  # e.g. the staging folder a signal's cleanup removed: not this error's to report
        if debug:
            traceback.print_exc()
        code = exc.exit_code if isinstance(exc, PlannerError) else InputError.exit_code
        for line in str(exc).splitlines():
            click.echo(f"error: {line}", err=True)
        return code
    except OSError as exc:
        interrupt.yield_to_stop()
        if exc.errno not in UNWRITABLE:
            return _internal_error(exc, debug)
        if debug:
            traceback.print_exc()
        where = exc.filename or "the output"
        click.echo(f"error: cannot write {where}: {exc.strerror} (errno {errno.errorcode[exc.errno]}): write it "
                   "elsewhere (a disk with room, --out to a writable folder)", err=True)
        return InputError.exit_code
    except Exception as exc:
        interrupt.yield_to_stop()
        return _internal_error(exc, debug)
    return 0


def _internal_error(exc: Exception, debug: bool) -> int:
    """A bug: say so, keep the traceback for --debug."""
    if debug:
        raise exc
    click.echo(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", err=True)
    return 1
