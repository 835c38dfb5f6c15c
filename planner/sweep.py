"""The Pareto front by epsilon-constraint on TTFT, each step a Dinkelbach loop of deployment MILPs.

Step: maximise tokens/s per GPU subject to TTFT <= eps. The ratio osl X / G is maximised by Dinkelbach's
method: solve max osl X - q G, set q to the exact ratio of the deployment found, repeat until the MILP
proves no deployment beats q (objective <= 0 within tolerance). The deployment is then re-evaluated
with the exact cost model, which gives the point's figures. The next step caps TTFT one grid unit
(1 us) below the point's TTFT; a step that finds the same throughput at a lower TTFT shows the previous
point weakly dominated, and the final filter drops it (this is the lexicographic second solve: it costs
no extra MILP because the next step solves it). Stops when no deployment meets the cap.

Gaps. If the last MILP of a step stopped on time with bound B on max osl X - q G, then no deployment
within the cap beats q + B / G_min tokens/s per GPU (G_min: the smallest deployment's GPUs); the point's
gap is B / (G_min q), relative.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from costmodel.calibration import Calibration
from costmodel.resolve import ResolvedScenario
from planner.deployment import disaggregated_point
from planner.formulation.model import DeploymentModel, Selection, build_model
from planner.formulation.options import DeploymentOptions
from planner.pareto import FrontPoint, non_dominated
from planner.placement import domain_bins, fits
from planner.solvers import Backend, SolveOptions, SolveReport, SolveStatus

GRID_S = 1e-6  # TTFT grid of the epsilon steps
RATIO_TOL = 1e-7  # Dinkelbach stops when the MILP cannot beat q by more than this (relative)
MAX_DINKELBACH = 30  # safeguard; convergence is superlinear, typically 2-4 solves


@dataclass(frozen=True)
class SolvedPoint:
    point: FrontPoint
    selection: Selection
    status: SolveStatus
    gap: float  # relative, on tokens/s per GPU


@dataclass
class SweepResult:
    points: list[SolvedPoint] = field(default_factory=list)
    reports: list[SolveReport] = field(default_factory=list)
    first_model: DeploymentModel | None = None
    timed_out: bool = False
    first_feasible_s: float | None = None

    @property
    def front(self) -> list[SolvedPoint]:
        kept = {id(p) for p in non_dominated([s.point for s in self.points])}
        return [s for s in sorted(self.points, key=lambda s: s.point.sort_key()) if id(s.point) in kept]


@dataclass(frozen=True)
class SweepSettings:
    backend: Backend
    time_limit_s: float
    threads: int = 1
    seed: int = 0


class _Sweeper:
    def __init__(self, resolved: ResolvedScenario, calibration: Calibration, options: DeploymentOptions,
                 settings: SweepSettings) -> None:
        self.resolved, self.calibration, self.options, self.settings = resolved, calibration, options, settings
        self.deadline = time.perf_counter() + settings.time_limit_s
        self.start = time.perf_counter()
        self.result = SweepResult()

    def run(self) -> SweepResult:
        slo = self.resolved.scenario.slo.ttft_ms
        eps: float | None = None if slo is None else slo / 1e3
        q = 0.0
        while True:
            solved = self._best_within(eps, q)
            if solved is None:
                return self.result
            self.result.points.append(solved)
            if self.result.first_feasible_s is None:
                self.result.first_feasible_s = time.perf_counter() - self.start
            if self.result.timed_out:
                return self.result
            eps = math.ceil(solved.point.ttft_ms / 1e3 / GRID_S - 1e-6) * GRID_S - GRID_S
            q = solved.point.tokens_per_s_per_gpu

    def _best_within(self, eps: float | None, q: float) -> SolvedPoint | None:
        """The best deployment with TTFT <= eps (None when there is none or time ran out first)."""
        best: SolvedPoint | None = None
        for _ in range(MAX_DINKELBACH):
            dm = build_model(self.options, eps, q)
            if self.result.first_model is None:
                self.result.first_model = dm
            if best is not None:
                _hint(dm, best.selection)
            report = self._solve(dm)
            if not report.status.has_solution:
                if report.status == SolveStatus.NO_SOLUTION:
                    self.result.timed_out = True
                return best
            solved = self._exact(dm, report, eps)
            if solved is None:
                continue  # a packing cut was added; solve again
            improved = best is None or solved.point.tokens_per_s_per_gpu > best.point.tokens_per_s_per_gpu
            if improved:
                best = solved
            assert best is not None
            proven_gap = max(0.0, report.bound) / (self.options.fewest_gpus() * max(q, 1e-12))
            if best.point.tokens_per_s_per_gpu >= q > 0 and proven_gap <= RATIO_TOL or not improved:
                return replace(best, status=report.status, gap=_gap(report, proven_gap))
            if report.status == SolveStatus.FEASIBLE:  # out of time: best so far, with its gap
                self.result.timed_out = True
                return replace(best, status=report.status, gap=math.inf)
            q = best.point.tokens_per_s_per_gpu
        return best

    def _solve(self, dm: DeploymentModel) -> SolveReport:
        left = self.deadline - time.perf_counter()
        if left <= 0:
            report = SolveReport(SolveStatus.NO_SOLUTION, math.nan, math.nan, 0.0)
        else:
            options = SolveOptions(left, self.settings.threads, self.settings.seed)
            report = self.settings.backend.solve(dm.model, options)
        self.result.reports.append(report)
        return report

    def _exact(self, dm: DeploymentModel, report: SolveReport, eps: float | None) -> SolvedPoint | None:
        selection = dm.selection(report.values)
        if selection.mixed is not None:
            return SolvedPoint(selection.mixed.point, selection, report.status, 0.0)
        assert selection.prefill is not None and selection.decode is not None
        instances = [(selection.prefill.gpus, selection.prefills), (selection.decode.gpus, selection.decodes)]
        if not fits(instances, domain_bins(self.resolved)):
            dm.exclude(selection)
            return None
        point = disaggregated_point(self.resolved, self.calibration, selection.prefill.candidate,
                                    selection.decode.candidate, selection.prefills, selection.decodes)
        if eps is not None and point.ttft_ms / 1e3 > eps:
            dm.exclude(selection)  # within the solver's feasibility tolerance only: not below the cap
            return None
        return SolvedPoint(point, selection, report.status, 0.0)


def _gap(report: SolveReport, proven_gap: float) -> float:
    return 0.0 if report.status == SolveStatus.OPTIMAL else proven_gap


def _hint(dm: DeploymentModel, selection: Selection) -> None:
    """Start from the previous deployment where it is still in the model (the solver repairs the rest)."""
    for var, option in dm.mixed:
        dm.model.hint[var] = 1.0 if option is selection.mixed else 0.0
    for entries, chosen, count in ((dm.prefill, selection.prefill, selection.prefills),
                                   (dm.decode, selection.decode, selection.decodes)):
        for counted, option in entries:
            on = option is chosen
            dm.model.hint[counted.chosen] = 1.0 if on else 0.0
            for var, weight in counted.bits:
                dm.model.hint[var] = 1.0 if on and count & weight else 0.0


def sweep(resolved: ResolvedScenario, calibration: Calibration, options: DeploymentOptions,
          settings: SweepSettings) -> SweepResult:
    return _Sweeper(resolved, calibration, options, settings).run()
