"""Calibrate the cost model on one's own measurements (`plan calibrate`), and read a calibration file back.

The bundled calibration is fitted to public benchmark campaigns whose unrecorded settings (benchmark client,
warm-up, arrival pattern, engine flags) move TTFT by up to 0.5-0.6 in log from one campaign to the next
(README, "Calibrating on your own measurements"). Runs measured on one's own engine build, client and
cluster pin those down: the same least-squares fit (`costmodel.fitting`) starts from the bundled
calibration (or `--from` another), is pulled towards it, and refits only what the runs exercise: an
engine's factors once it has `MIN_ENGINE_ROWS` runs (every engine of the runs when none has that many), a GPU
generation's once it has `MIN_GENERATION_ROWS`, the collectives and NIC, and the grouped-GEMM share when the
runs have routed experts; every other engine and generation keeps its starting values.

A measurements file lists runs, each a scenario and the layout that ran (a layout file, or a
`plan-<i>.yaml` written by `plan solve --out`; paths relative to the measurements file, or the documents
inline), with the measured mean TTFT and TPOT; `workload` overrides the scenario's workload for that run
(say, its concurrency):

    schema_version: 1
    measurements:
      - {scenario: scenario.yaml, layout: plan-3.yaml, ttft_ms: 412, tpot_ms: 23.1}
      - {scenario: scenario.yaml, layout: plan-3.yaml, workload: {concurrency: 32}, ttft_ms: 260, tpot_ms: 17.9}
      - {scenario: scenario.yaml, layout: plan-3.yaml, result: vllm-c64.json}   # a benchmark client's result file

A run's `result` file (`planner.bench_results`) gives its mean TTFT and TPOT, its mean lengths and its load;
its `workload` fields win over the file's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator
from pydantic.config import JsonDict

from costmodel.calibration import Calibration, default_calibration, fingerprint, generation_of
from costmodel.evaluate import LayoutPlan, plan_layout
from costmodel.hardware import load_system, system_names
from costmodel.precision import Dtype
from costmodel.resolve import ResolvedScenario
from planner.bench_results import LOADS, MAX_TIME_MS, ResultError, RunFromResult, read_result
from planner.errors import InputError, InputProblem
from planner.scenario import layout_from_document, load_scenario_document, scenario_from_data
from planner.sourcefile import SourceDocument, read_document
from planner.validation import validate_document

if TYPE_CHECKING:
    from costmodel.fitting import PlannedRows  # imports scipy: only when fitting

# Fewer runs than this are said to be few: calibrated on the first 4 runs of a campaign, the others were predicted
# no better than with the bundled calibration (TTFT 23.9% against 22.3%), on 8 they were (21.2%, TPOT 9.7% ->
# 7.0%): `python -m benchmarks own-calibration`, 12 campaigns.
FEW_RUNS = 8

# A result file's mean length more than this share off the entry's scenario's is noted (the file's are used): the
# scenario may describe another run than the file measured; within it, the means of a benchmark's drawn lengths
# (a random range ratio, early EOS) sit near the target it was given.
LENGTH_NOTE_SHARE = 0.1

# A run the fitted model still misses by more than this factor, in TTFT or TPOT, is named in a warning: a
# misread layout, other lengths or other units are likelier than physics no factor can reach.
OUTLIER_RATIO = 3.0

# Folds of the cross-validation `plan calibrate` reports by default (`--folds`): the runs' error after the fit is
# in sample, and a refit of 10-17 factors on a few dozen runs can move some of them on noise (README,
# "Calibrating on your own measurements"); the held-out error says what to expect of runs not measured. Run i
# is held out in fold i mod K, so that each fold spans the file's batches and lengths.
DEFAULT_FOLDS = 5
# Fewest runs per fold for a cross-validation to say anything (fewer: skipped, and said so).
MIN_RUNS_PER_FOLD = 2

# A measured mean time: positive, and under a day (a larger figure is a unit mistake, not a run).
Milliseconds = Annotated[float, Field(gt=0, le=MAX_TIME_MS, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # no `ttft_ms: true` or `'5'` taken for a number


class ResultRef(_Strict):
    """One run of a result file holding several (appended runs, one JSON object per line)."""

    file: str = Field(description="The result file, relative to the measurements file.")
    run: int = Field(ge=1, description="Which run: 1 for the file's first line.")


def _result_form(raw: object) -> str:
    """A mapping names one run of a file; anything else is the file (so that errors name the form written)."""
    return "result-run" if isinstance(raw, dict | ResultRef) else "result-file"


# The measured times come from the entry or from its result file, once: in the JSON Schema too
_TIMES_ONCE: JsonDict = {"oneOf": [
    {"required": ["result"], "not": {"anyOf": [{"required": ["ttft_ms"]}, {"required": ["tpot_ms"]}]}},
    {"required": ["ttft_ms", "tpot_ms"], "not": {"required": ["result"]}},
]}


class RunSpec(_Strict):
    """One measured run, as the measurements file gives it."""

    model_config = ConfigDict(**_Strict.model_config, json_schema_extra=_TIMES_ONCE)

    name: str | None = Field(None, description="A label for reports (default: its position in the file).")
    scenario: str | dict[str, Any] = Field(description="Scenario file, relative to the measurements file, or the "
                                           "scenario itself.")
    layout: str | dict[str, Any] = Field(description="Layout file, or a plan-<i>.yaml from `plan solve --out`, "
                                         "relative to the measurements file; or the layout itself.")
    workload: dict[str, Any] = Field(default_factory=dict,
                                     description="Workload fields of this run that differ from the scenario's "
                                     "(and from what its result file says).")
    result: Annotated[Annotated[str, Tag("result-file")] | Annotated[ResultRef, Tag("result-run")],
                      Discriminator(_result_form)] | None = Field(
        None, description="A serving-benchmark result file, relative to the measurements file (vLLM `vllm bench "
        "serve --save-result`, TensorRT-LLM's benchmark_serving, SGLang `bench_serving --output-file`, genai-perf's "
        "or AIPerf's profile export JSON): the run's "
        "mean TTFT and TPOT, mean lengths and concurrency (or request rate) come from it "
        "(`planner.bench_results`); `{file, run}` picks one run of a file of several. Instead of ttft_ms and "
        "tpot_ms.")
    ttft_ms: Milliseconds | None = Field(None, description="Measured mean time to first token, ms.")
    tpot_ms: Milliseconds | None = Field(None, description="Measured mean time per output token after the first, ms.")

    @model_validator(mode="after")
    def _measured_once(self) -> RunSpec:
        times = (self.ttft_ms is not None, self.tpot_ms is not None)
        if self.result is not None and any(times):
            raise ValueError("give the measured times once: ttft_ms and tpot_ms, or a result file (`result`)")
        if self.result is None and not all(times):
            raise ValueError("give the measured ttft_ms and tpot_ms (ms), or a benchmark result file (`result`)")
        return self


class MeasurementsFile(_Strict):
    schema_version: Literal[1]
    measurements: list[RunSpec] = Field(min_length=1)


@dataclass(frozen=True)
class Run:
    """A run ready for the fit (a `costmodel.fitting.MeasuredRun`)."""

    name: str
    engine: str
    system: str
    model: str
    scenario: dict[str, Any]
    layout: dict[str, Any]
    ttft_ms: float
    tpot_ms: float
    failed: int = 0  # requests of the run that failed (its result file's `failed`): not in the means
    notes: tuple[str, ...] = ()  # what the run's result file changed of its scenario (`_length_notes`)


@dataclass(frozen=True)
class CalibrationRun:
    """What `plan calibrate` fitted and how well: median absolute percentage errors of the runs, with the
    starting calibration and the fitted one."""

    calibration: Calibration
    runs: list[Run]
    engines: list[str]  # engines whose factors were refitted
    generations: list[str]  # GPU generations whose factors were refitted
    grouped: bool  # the runs have routed experts: the grouped-GEMM share was refitted
    outliers: list[tuple[str, float, float]]  # (run, predicted / measured TTFT, TPOT) beyond OUTLIER_RATIO
    before_pct: tuple[float, float]  # (TTFT, TPOT) median APE with the starting calibration
    after_pct: tuple[float, float]
    folds: int = 0  # folds of the cross-validation (0: none)
    folds_asked: int = 0  # folds asked for (`--folds`): skipped with fewer than MIN_RUNS_PER_FOLD runs a fold
    held_out_pct: tuple[float, float] | None = None  # (TTFT, TPOT) median APE of each run fitted without its fold


def load_runs(path: Path) -> tuple[list[Run], list[LayoutPlan]]:
    """The runs of a measurements file, each planned; InputError naming file, line and field otherwise."""
    document = read_document(path)
    spec = validate_document(MeasurementsFile, document, "measurements file")
    runs, plans = [], []
    for index, run in enumerate(spec.measurements):
        entry = document.sub("measurements").item(index)
        measured, plan = _planned(path.parent, run, entry, index)
        runs.append(measured)
        plans.append(plan)
    return runs, plans


def _planned(base: Path, run: RunSpec, entry: SourceDocument, index: int) -> tuple[Run, LayoutPlan]:
    measured_run = _result(base, run, entry)
    workload = run.workload if measured_run is None else \
        {**_without_replaced(measured_run.workload, run.workload), **run.workload}  # the entry's fields win
    try:
        resolved = _run_scenario(base, run, workload, entry)
    except InputError as exc:
        if measured_run is None:
            raise
        raise InputError([_from_file(entry, run, measured_run, p) for p in exc.problems]) from None
    if len(resolved.groups) != 1:
        raise InputError.single(entry.path, entry.line_of(("scenario",)), "scenario",
                                "a measured run is one layout on one system; give a scenario with a single "
                                "`cluster: {system, gpus}`")
    layout = layout_from_document(_document(base, run.layout, entry, "layout"), resolved)
    ttft, tpot = (run.ttft_ms, run.tpot_ms) if measured_run is None else (measured_run.ttft_ms, measured_run.tpot_ms)
    assert ttft is not None and tpot is not None  # RunSpec: times or a result file
    measured = Run(run.name or _default_name(run, index), resolved.scenario.engine, resolved.system.name,
                   resolved.architecture.name, resolved.scenario.model_dump(mode="json"),
                   layout.model_dump(mode="json"), ttft, tpot, measured_run.failed if measured_run else 0,
                   _length_notes(base, run, entry, measured_run))
    return measured, plan_layout(resolved, layout)


def _length_notes(base: Path, run: RunSpec, entry: SourceDocument,
                  measured_run: RunFromResult | None) -> tuple[str, ...]:
    """Each mean length the result file gave that differs from the scenario's by more than LENGTH_NOTE_SHARE (the
    entry's own workload fields replace the file's and are not compared)."""
    if measured_run is None:
        return ()
    data = _document(base, run.scenario, entry, "scenario").data
    written = (data.get("workload") if isinstance(data, dict) else None) or {}
    notes = []
    for field in ("input_tokens", "output_tokens"):
        mine, theirs = written.get(field), measured_run.workload.get(field)
        if (field in run.workload or not isinstance(mine, int | float) or isinstance(mine, bool) or theirs is None
                or abs(theirs - mine) <= LENGTH_NOTE_SHARE * mine):
            continue
        notes.append(f"{measured_run.source} measured a mean {field} of {theirs:g} where the scenario says {mine:g}: "
                     "the file's is used; check that the entry pairs this result with its scenario")
    return tuple(notes)


def _result(base: Path, run: RunSpec, entry: SourceDocument) -> RunFromResult | None:
    """The run read from its result file, if it names one; InputError at the entry's `result` otherwise (also
    where the file cannot say the load and the entry's workload does not)."""
    if run.result is None:
        return None
    name, number = (run.result, None) if isinstance(run.result, str) else (run.result.file, run.result.run)
    try:
        measured_run = read_result(base / name, number)
    except ResultError as exc:
        raise InputError.single(entry.path, entry.line_of(("result",)), "result", str(exc)) from None
    if measured_run.load_problem is not None and not LOADS & run.workload.keys():
        raise InputError.single(entry.path, entry.line_of(("result",)), "result",
                                f"{measured_run.source}: {measured_run.load_problem}; give the load that ran under "
                                "the entry's workload (concurrency or arrival_rate_per_s), or measure with "
                                "--max-concurrency (closed loop) or --request-rate (open loop) alone")
    return measured_run


def _from_file(entry: SourceDocument, run: RunSpec, measured_run: RunFromResult,
               problem: InputProblem) -> InputProblem:
    """A problem of the run's workload that its result file gave (not the entry's own fields), at the entry's
    `result`, naming the file: the entry has no such line to point at."""
    parts = problem.field.split(".")
    from_file = (problem.path == entry.path and parts[0] == "workload"
                 and (parts[1:2] or ["*"])[0] not in run.workload and not (len(parts) == 1 and run.workload))
    if not from_file:
        return problem
    return InputProblem(entry.path, entry.line_of(("result",)), "result",
                        f"{measured_run.source} gives {_workload_text(measured_run.workload)}: {problem.message}")


def _workload_text(workload: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
                     for key, value in workload.items())


def _default_name(run: RunSpec, index: int) -> str:
    """A run's label: its result file (and run), else its position in the measurements file."""
    if isinstance(run.result, str):
        return run.result
    if run.result is not None:
        return f"{run.result.file}#{run.result.run}"
    return f"measurements[{index}]"


def _run_scenario(base: Path, run: RunSpec, workload: dict[str, Any], entry: SourceDocument) -> ResolvedScenario:
    """The run's scenario (a file's, paths in it relative to that file, or the entry's own) with the run's
    workload (its result file's, then its overrides, which may fill in a workload the scenario leaves out).
    Where that scenario fails, the scenario as written decides who is to blame: its own problems at its own
    lines, else the run's workload."""
    source = _document(base, run.scenario, entry, "scenario")
    folder = (base / run.scenario).parent if isinstance(run.scenario, str) else base
    if not workload:
        return load_scenario_document(source, folder)
    data = dict(source.data) if isinstance(source.data, dict) else {}
    data["workload"] = {**_without_replaced(data.get("workload") or {}, workload), **workload}
    try:
        return scenario_from_data(data, folder)
    except InputError as overridden:
        written = [p for p in _problems(lambda: load_scenario_document(source, folder))
                   if p.field != "workload" and not p.field.startswith("workload.")]
        if written:  # a problem of the file itself (a missing workload is the overrides' to fill)
            raise InputError(written) from None
        raise InputError([_at_entry(entry, problem) for problem in overridden.problems]) from None


# Workload fields that say one thing two ways: a run giving one replaces the scenario's other.
_ALTERNATIVES = ({"concurrency", "arrival_rate_per_s"}, {"input_tokens", "input_lengths"},
                 {"output_tokens", "output_lengths"})


def _without_replaced(scenario: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The scenario's workload less what the run's replaces (its closed loop replaces an open one, its mean
    input length a length distribution, and the other way round)."""
    dropped = {key for group in _ALTERNATIVES if group & run.keys() for key in group}
    return {key: value for key, value in scenario.items() if key not in dropped}


def _problems(load: Callable[[], ResolvedScenario]) -> list[InputProblem]:
    try:
        load()
    except InputError as exc:
        return exc.problems
    return []


def _at_entry(entry: SourceDocument, problem: InputProblem) -> InputProblem:
    """A problem of the scenario as overridden (no file of its own), at the run's override that causes it."""
    loc = tuple(problem.field.split(".")) if problem.field else ("workload",)
    return InputProblem(entry.path, entry.line_of(loc), problem.field or "workload", problem.message)


def _document(base: Path, value: str | dict[str, Any], entry: SourceDocument, field: str) -> SourceDocument:
    """A file named relative to the measurements file, or the document written inline in the entry."""
    if not isinstance(value, str):
        return entry.sub(field)
    path = base / value
    if not path.is_file():
        raise InputError.single(entry.path, entry.line_of((field,)), field,
                                f"{path} does not exist or is not a file; give a path relative to the measurements "
                                "file")
    return read_document(path)


def calibrate(path: Path, start: Calibration | None = None, folds: int = DEFAULT_FOLDS) -> CalibrationRun:
    """Fit the cost model to the runs of measurements file `path`, from `start` (the bundled calibration), and
    cross-validate the fit over `folds` folds (0: not; skipped with fewer than MIN_RUNS_PER_FOLD runs a fold)."""
    from costmodel.fitting import PlannedRows, fitted_engines, fitted_generations  # scipy: only when fitting

    start = start or default_calibration()
    runs, plans = load_runs(path)
    planned = PlannedRows.build(runs, plans)
    calibration = _fit(planned, start, f"{len(runs)} runs of {path.name}, from {start.fitted_on}")
    grouped = bool(np.any(planned.table.op_group_rows > 0))
    before, after = (planned.predict(c) / planned.measured() for c in (start, calibration))  # predicted / measured
    outliers = [(run.name, float(ttft), float(tpot)) for run, (ttft, tpot) in zip(runs, after, strict=True)
                if not (1 / OUTLIER_RATIO <= ttft <= OUTLIER_RATIO and 1 / OUTLIER_RATIO <= tpot <= OUTLIER_RATIO)]
    done = folds if folds > 1 and len(runs) >= folds * MIN_RUNS_PER_FOLD else 0
    held_out = _median_ape(cross_validated(planned, start, done)) if done else None
    return CalibrationRun(calibration, runs, fitted_engines(runs), fitted_generations(runs), grouped, outliers,
                          _median_ape(before), _median_ape(after), folds=done, folds_asked=folds,
                          held_out_pct=held_out)


def _fit(planned: PlannedRows, start: Calibration, label: str) -> Calibration:
    from costmodel.fitting import fit

    return fit(planned, prior=start, absent="prior", label=label)


def cross_validated(planned: PlannedRows, start: Calibration, folds: int) -> np.ndarray:
    """Predicted / measured of every run by the calibration fitted, as `calibrate` fits, on the other folds
    (run i in fold i mod `folds`)."""
    fold_of = np.arange(len(planned.rows)) % folds
    ratios = np.empty((len(planned.rows), 2))
    for fold in range(folds):
        held, kept = np.flatnonzero(fold_of == fold), np.flatnonzero(fold_of != fold)
        calibration = _fit(planned.subset(kept.tolist()), start, f"fold {fold}")
        ratios[held] = (planned.predict(calibration) / planned.measured())[held]
    return ratios


def calibration_mismatch(layout_document: SourceDocument, calibration: Calibration | None) -> str | None:
    """What to say when a plan file's figures were priced with another calibration than `calibration` (None:
    the bundled one); None when they agree or the document is no plan file."""
    data = layout_document.data
    if not isinstance(data, dict) or "layout" not in data or "figures" not in data:
        return None
    bundled = fingerprint(default_calibration())  # given or recorded, the bundled calibration is no calibration
    given = None if calibration is None else fingerprint(calibration)
    given, recorded = (None if value == bundled else value for value in (given, data.get("calibration")))
    if recorded == given:
        return None
    if not isinstance(recorded, dict):
        return "its figures were priced with the bundled calibration; run without --calibration to price it alike"
    return (f"its figures were priced with calibration '{recorded.get('fitted_on')}' (sha256 "
            f"{recorded.get('sha256')}); give that with --calibration to price it alike")


def _median_ape(ratios: np.ndarray) -> tuple[float, float]:
    """(TTFT, TPOT) median absolute percentage error of rows of predicted / measured ratios."""
    ttft, tpot = (float(np.median(column)) * 100.0 for column in np.abs(ratios - 1.0).T)
    return ttft, tpot


def calibration_summary(result: CalibrationRun) -> dict[str, Any]:
    """`plan calibrate --format json`: what was refitted, the runs' median errors before and after, the runs
    the fitted model still misses by more than `OUTLIER_RATIO` (ratios null where it cannot price them)."""
    def ratio(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return {
        "runs": len(result.runs), "engines": result.engines, "generations": result.generations,
        "grouped_gemm": result.grouped, "calibration": fingerprint(result.calibration),
        "median_ape_pct": {"before": {"ttft": result.before_pct[0], "tpot": result.before_pct[1]},
                           "after": {"ttft": result.after_pct[0], "tpot": result.after_pct[1]},
                           "held_out": None if result.held_out_pct is None else
                           {"ttft": result.held_out_pct[0], "tpot": result.held_out_pct[1], "folds": result.folds}},
        "outliers": [{"run": name, "ttft_ratio": ratio(ttft), "tpot_ratio": ratio(tpot)}
                     for name, ttft, tpot in result.outliers],
        "failed_requests": [{"run": run.name, "failed": run.failed} for run in result.runs if run.failed],
        "notes": [{"run": run.name, "note": note} for run in result.runs for note in run.notes],
    }


def calibration_text(result: CalibrationRun, source: Path) -> str:
    """The calibration file `plan calibrate` writes: readable by `--calibration`, every value at full precision."""
    systems = sorted({r.system for r in result.runs})
    header = [
        f"# Calibration fitted by `plan calibrate` to {len(result.runs)} runs of {source.name} "
        f"({', '.join(systems)}; engines {', '.join(sorted({r.engine for r in result.runs}))}).",
        f"# Refitted: engines {', '.join(result.engines) or 'none'}; GPU generations "
        f"{', '.join(result.generations) or 'none (too few runs: starting values)'}; collectives and the NIC"
        + ("; the grouped-GEMM share." if result.grouped else "."),
        "# Everything else keeps the starting calibration's values. Median APE over the runs, TTFT / TPOT: "
        f"{result.before_pct[0]:.1f}% / {result.before_pct[1]:.1f}% before, "
        f"{result.after_pct[0]:.1f}% / {result.after_pct[1]:.1f}% after" + _held_out_text(result) + ".",
    ]
    body = yaml.safe_dump(result.calibration.model_dump(mode="json"), sort_keys=False, width=120)
    return "\n".join(header) + "\n" + body


def _held_out_text(result: CalibrationRun) -> str:
    if result.held_out_pct is None:
        return ""
    return (f", {result.held_out_pct[0]:.1f}% / {result.held_out_pct[1]:.1f}% held out ({result.folds}-fold "
            "cross-validation)")


def held_out_line(result: CalibrationRun) -> str:
    """What `plan calibrate` says of the fit's error on runs it did not see."""
    if result.held_out_pct is None:
        why = ("--folds 0" if result.folds_asked < 2 else f"{len(result.runs)} runs, fewer than the "
               f"{MIN_RUNS_PER_FOLD * result.folds_asked} that {result.folds_asked} folds of {MIN_RUNS_PER_FOLD} need")
        return f"held out: not cross-validated ({why}): the error after the fit is over the runs it was fitted to"
    return (f"held out ({result.folds}-fold cross-validation, each run predicted by a fit without its fold), "
            f"TTFT / TPOT: {result.held_out_pct[0]:.1f}% / {result.held_out_pct[1]:.1f}%: what to expect of "
            "runs not measured")


def load_calibration(path: Path) -> Calibration:
    """A calibration file (`plan calibrate`'s, or the bundled default.yaml's format)."""
    document = read_document(path)
    calibration = validate_document(Calibration, document, "calibration")
    if "generic" not in calibration.engines:
        raise InputError.single(path, document.line_of(("engines",)), "engines",
                                "needs a `generic` entry (the factors of engines it has none for)")
    for kind in ("allreduce", "alltoall", "p2p"):
        if kind not in calibration.collectives:
            raise InputError.single(path, document.line_of(("collectives",)), "collectives",
                                    f"needs an entry for {kind} (efficiency, latency_s)")
    for generation in sorted({generation_of(load_system(name)) for name in system_names()}):
        factors = calibration.generations.get(generation)
        if factors is None or Dtype.BF16 not in factors.gemm_efficiency:
            where = ("generations",) if factors is None else ("generations", generation, "gemm_efficiency")
            raise InputError.single(path, document.line_of(where), ".".join(where),
                                    f"needs the factors of GPU generation {generation}, with a bf16 GEMM "
                                    "efficiency (every calibration `plan calibrate` writes has them)")
    return calibration
