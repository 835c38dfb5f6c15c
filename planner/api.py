"""The Python API for provisioning scripts: `from planner import load_scenario, solve, evaluate, calibrate`.

Each returns a typed result whose `to_dict()` is exactly what the matching command prints with
`--format json` (`plan solve`, `plan evaluate`, `plan calibrate` less the `output` it wrote): the same builders
(`planner.plan_output`, `costmodel.evaluate.Prediction.to_dict`, `planner.calibrate.calibration_summary`) and
the same defaults from the scenario's `search` section.
Errors are the CLI's: `InputError` (bad input), `InfeasibleError`, `NoSolutionInTimeError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from costmodel.calibration import Calibration
from costmodel.evaluate import Prediction
from costmodel.evaluate import evaluate as _evaluate
from costmodel.expected_error import ExpectedError
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from planner import plan_output
from planner import scenario as _scenario
from planner.calibrate import DEFAULT_FOLDS, CalibrationRun, calibration_summary, calibration_text, load_calibration
from planner.calibrate import calibrate as _calibrate
from planner.errors import InputError
from planner.solve import SolveResult, settings_for
from planner.solve import solve as _solve
from planner.sourcefile import SourceDocument
from planner.sweep_result import Resolution

__all__ = ["Calibrated", "Front", "FrontPoint", "Prediction", "ResolvedScenario", "calibrate", "evaluate",
           "load_scenario", "solve"]


def load_scenario(source: str | Path | dict[str, Any], base_dir: Path | None = None) -> ResolvedScenario:
    """A scenario file (or the same as a mapping), validated and resolved as `plan solve` reads it."""
    if isinstance(source, dict):
        return _scenario.scenario_from_data(source, base_dir)
    return _scenario.load_scenario(Path(source))


@dataclass(frozen=True)
class FrontPoint:
    """One deployment of the front; `data` is its entry of the JSON (every key, also those added later)."""

    index: int
    serving: str
    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    gpus: int
    status: str
    gap: float | None
    layout: Layout
    data: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Front:
    """The result of `solve`: the points, and the raw solve for `write` and advanced use."""

    scenario: ResolvedScenario
    points: tuple[FrontPoint, ...]
    result: SolveResult = field(repr=False)
    _data: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """`plan solve --format json`, key for key."""
        return self._data

    @property
    def expected_error(self) -> ExpectedError:
        """How far to trust the points' predicted TTFT and TPOT (the JSON's `expected_error`)."""
        return plan_output.front_expected_error(self.result)

    def write(self, folder: str | Path) -> list[Path]:
        """What `plan solve --out DIR` writes: front.json/csv/png and a plan file per point."""
        return plan_output.write_outputs(self.result, Path(folder), self._data)


def solve(scenario: ResolvedScenario | str | Path, *, solver: str | None = None, time_limit_s: float | None = None,
          threads: int | None = None, seed: int | None = None, resolution: Resolution | None = None,
          points: int | Literal["all"] | None = None, batch_tolerance: float | None = None,
          calibration: Calibration | str | Path | None = None) -> Front:
    """The Pareto front, with `plan solve`'s defaults: each setting left out comes from the scenario;
    `calibration`: a calibration file (`plan calibrate`) or object instead of the bundled one."""
    resolved = scenario if isinstance(scenario, ResolvedScenario) else load_scenario(scenario)
    settings = settings_for(resolved.scenario.search, solver=solver, time_limit_s=time_limit_s, threads=threads,
                            seed=seed, resolution=resolution, points=points, batch_tolerance=batch_tolerance)
    result = _solve(resolved, settings, _calibration(calibration))
    data = plan_output.result_dict(result)
    found = tuple(_point(index, entry) for index, entry in enumerate(data["front"]))
    return Front(scenario=resolved, points=found, result=result, _data=data)


def _point(index: int, entry: dict[str, Any]) -> FrontPoint:
    return FrontPoint(index=index, serving=entry["serving"], ttft_ms=entry["ttft_ms"], tpot_ms=entry["tpot_ms"],
                      tokens_per_s_per_gpu=entry["tokens_per_s_per_gpu"],
                      tokens_per_s_per_user=entry["tokens_per_s_per_user"], gpus=entry["gpus"],
                      status=entry["status"], gap=entry["gap"], layout=Layout.model_validate(entry["layout"]),
                      data=entry)


def evaluate(scenario: ResolvedScenario | str | Path, layout: Layout | FrontPoint | str | Path | dict[str, Any], *,
             calibration: Calibration | str | Path | None = None) -> Prediction:
    """One deployment's figures (`plan evaluate`); `to_dict()` is its JSON. A layout may be a layout or plan
    file, a mapping, a `Layout` or a front point; `calibration` as for `solve`."""
    resolved = scenario if isinstance(scenario, ResolvedScenario) else load_scenario(scenario)
    if isinstance(layout, FrontPoint):
        layout = layout.layout
    if isinstance(layout, Layout):  # checked against the scenario as a file's layout is (InputError)
        layout = layout.model_dump(mode="json")
    if isinstance(layout, dict):
        layout = _scenario.layout_from_document(SourceDocument(None, layout, None), resolved)
    else:
        layout = _scenario.load_layout(Path(layout), resolved)
    return _evaluate(resolved, layout, _calibration(calibration))


@dataclass(frozen=True)
class Calibrated:
    """The result of `calibrate`: the fitted calibration (give it to `solve` or `evaluate`), how well it fits."""

    calibration: Calibration
    result: CalibrationRun = field(repr=False)
    source: Path = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """`plan calibrate --format json`'s summary, key for key, less `output` (the file the command wrote)."""
        return calibration_summary(self.result)

    def text(self) -> str:
        """The calibration file `plan calibrate -o FILE` writes, byte for byte."""
        return calibration_text(self.result, self.source)

    def write(self, path: str | Path) -> Path:
        """Write `text()` to `path` (readable by `--calibration` and by `solve(..., calibration=path)`)."""
        target = Path(path)
        target.write_text(self.text(), encoding="utf-8")
        return target


def calibrate(measurements: str | Path, *, start: Calibration | str | Path | None = None,
              folds: int = DEFAULT_FOLDS) -> Calibrated:
    """`plan calibrate`: fit the cost model to the measured runs of a measurements file, starting from `start`
    (a calibration file or object; the bundled one by default), cross-validated over `folds` folds (0: not)."""
    if folds == 1 or folds < 0:
        raise InputError.single(None, None, "folds", f"folds {folds} holds nothing out: give 0 (no "
                                "cross-validation) or at least 2")
    source = Path(measurements)
    result = _calibrate(source, _calibration(start), folds)
    return Calibrated(result.calibration, result, source)


def _calibration(source: Calibration | str | Path | None) -> Calibration | None:
    return source if source is None or isinstance(source, Calibration) else load_calibration(Path(source))
