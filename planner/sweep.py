"""The Pareto front by epsilon-constraint on TTFT, each step a Dinkelbach loop of deployment MILPs.

Step: maximise tokens/s per GPU subject to TTFT <= eps. The ratio osl X / G is maximised by Dinkelbach's
method: solve max osl X - q G, set q to the exact ratio of the deployment found, repeat until the MILP
proves no deployment beats q (objective <= 0 within tolerance). The deployment is then re-evaluated
with the exact cost model, which gives the point's figures. The next step caps TTFT one grid unit
below the point's TTFT: 1 us, or `resolution` x TTFT if coarser (then the front is a resolution-
approximate Pareto set: a skipped point is within that relative TTFT of a kept one with at least its
throughput). A step that finds the same throughput at a lower TTFT shows the previous point weakly
dominated, and the final filter drops it (this is the lexicographic second solve: it costs no extra
MILP because the next step solves it). Stops when no deployment meets the cap.

Gaps. If the last MILP of a step stopped on time with bound B on max osl X - q G, then no deployment
within the cap beats U = q + B / G_min tokens/s per GPU (G_min: the smallest deployment the model holds);
the point's gap is (U - its tokens/s per GPU) / U.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from costmodel.calibration import Calibration
from costmodel.resolve import ResolvedScenario
from planner.deployment import disaggregated_point
from planner.formulation.linear import LinearModel
from planner.formulation.model import DeploymentModel, InvalidSolution, Selection, build_model
from planner.formulation.options import DeploymentOptions
from planner.formulation.pairs import PAIR_LIMIT, PairTable
from planner.formulation.screening import screen
from planner.pareto import FrontPoint, non_dominated
from planner.placement import domain_bins, fits
from planner.solvers import Backend, SolveOptions, SolveReport, SolveStatus

GRID_S = 1e-6  # TTFT grid of the epsilon steps
RATIO_TOL = 1e-7  # Dinkelbach stops when the MILP cannot beat q by more than this (relative)
MAX_DINKELBACH = 30  # safeguard; convergence is superlinear, typically 2-4 solves
SAMPLE_PAIRS = 1_000_000  # pairs of the small-unit table that seeds incumbents on large instances


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
    largest_model: LinearModel | None = None
    timed_out: bool = False  # stopped early: time limit (or a backend error, listed in `errors`)
    errors: list[str] = field(default_factory=list)
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
    pair_screening: bool = True
    resolution: float = 0.0  # relative TTFT step between front points; 0: every point (1 us grid)
    on_point: Callable[[SolvedPoint, int], None] | None = None  # progress: each point found, and the count


class _Sweeper:
    def __init__(self, resolved: ResolvedScenario, calibration: Calibration, options: DeploymentOptions,
                 settings: SweepSettings) -> None:
        self.resolved, self.calibration, self.options, self.settings = resolved, calibration, options, settings
        self.deadline = time.perf_counter() + settings.time_limit_s
        self.start = time.perf_counter()
        self.result = SweepResult()
        self.first_cap = self._first_cap()
        self.pairs = self._pair_table() if settings.pair_screening else None
        self.sample = self._sample_table() if settings.pair_screening and self.pairs is None else None

    def _sample_table(self) -> PairTable | None:
        """Too many pairs for the table: a table of small units (the fewest instances per pool that keep
        it within SAMPLE_PAIRS) only to find incumbents; the MILP then proves or improves them."""
        everything = screen(self.options, self.first_cap, 0.0, False)
        if not everything.prefill:
            return None
        options_y = len({id(p) for p, _ in everything.prefill})
        options_z = len({id(d) for d, _ in everything.decode})
        most = max(1, math.isqrt(SAMPLE_PAIRS // (options_y * options_z)))
        prefill = [(p, n) for p, n in everything.prefill if n <= most]
        decode = [(d, n) for d, n in everything.decode if n <= most]
        return PairTable(self.options, prefill, decode)

    def _first_cap(self) -> float | None:
        slo = self.resolved.scenario.slo.ttft_ms
        return None if slo is None else slo / 1e3

    def _pair_table(self) -> PairTable | None:
        """Pairs of the configurations servable within the first (largest) TTFT cap."""
        everything = screen(self.options, self.first_cap, 0.0, False)
        if not everything.prefill or len(everything.prefill) * len(everything.decode) > PAIR_LIMIT:
            return None
        return PairTable(self.options, everything.prefill, everything.decode)

    def run(self) -> SweepResult:
        eps, q = self.first_cap, 0.0
        previous: Selection | None = None
        while True:
            solved = self._best_within(eps, q, self._incumbent(eps, previous))
            if solved is None:
                return self.result
            self.result.points.append(solved)
            if self.settings.on_point is not None:
                self.settings.on_point(solved, len(self.result.points))
            if self.result.first_feasible_s is None:
                self.result.first_feasible_s = time.perf_counter() - self.start
            if self.result.timed_out:
                return self.result
            eps = self._next_cap(solved.point.ttft_ms / 1e3)
            q, previous = solved.point.tokens_per_s_per_gpu, solved.selection

    def _next_cap(self, ttft_s: float) -> float:
        """One grid step below the point's TTFT: 1 us, or the front resolution (relative) if coarser."""
        step = max(GRID_S, ttft_s * self.settings.resolution)
        return math.ceil(ttft_s / GRID_S - 1e-6) * GRID_S - step

    def _incumbent(self, eps: float | None, previous: Selection | None) -> SolvedPoint | None:
        """A good deployment within the cap to start Dinkelbach from (and hint): the best aggregated
        one, and the best configuration pair by closed-form figures: of the pair table (or, on large
        instances, of the small-unit table and of every count of the previous point's two candidates)."""
        screened = screen(self.options, eps, 0.0, False)
        found = [SolvedPoint(m.point, Selection(mixed=m), SolveStatus.FEASIBLE, math.inf) for m in screened.mixed]
        tables = [self.pairs] if self.pairs is not None else [self.sample, self._neighbours(previous)]
        for table in tables:
            where = table.best_ratio(eps) if table is not None else None
            if table is None or where is None:
                continue
            (p, count_p), (d, count_d) = table.arrays.prefill[where[0]], table.arrays.decode[where[1]]
            selection = Selection(prefill=p, prefills=count_p, decode=d, decodes=count_d)
            point = self._point(selection, eps)
            if point is not None:
                found.append(SolvedPoint(point, selection, SolveStatus.FEASIBLE, math.inf))
        return max(found, key=lambda s: s.point.tokens_per_s_per_gpu, default=None)

    def _neighbours(self, previous: Selection | None) -> PairTable | None:
        if previous is None or previous.prefill is None or previous.decode is None:
            return None
        p, d = previous.prefill, previous.decode
        return PairTable(self.options, [(p, n) for n in range(1, p.most + 1)], [(d, n) for n in range(1, d.most + 1)])

    def _best_within(self, eps: float | None, q: float, incumbent: SolvedPoint | None) -> SolvedPoint | None:
        """The best deployment with TTFT <= eps (None when there is none or time ran out first).

        Dinkelbach: q starts at the incumbent's exact ratio (or, without one, at the previous point's,
        which is above this step's optimum); once q is the exact ratio of a deployment within the cap,
        the MILP's optimum is >= 0, and a proof that it is ~0 proves q optimal."""
        best = incumbent
        excluded: list[Selection] = []
        q_feasible = incumbent is not None
        if incumbent is not None:
            q = incumbent.point.tokens_per_s_per_gpu
        for _ in range(MAX_DINKELBACH):
            dm = build_model(self.options, eps, q, q_feasible, self.pairs, self.settings.pair_screening)
            for selection in excluded:
                dm.exclude(selection)
            if self.result.largest_model is None or len(dm.model.variables) > len(self.result.largest_model.variables):
                self.result.largest_model = dm.model
            if best is not None:
                dm.hint(best.selection)
            report = self._solve(dm)
            if not report.status.has_solution:
                return self._no_better(best, report)
            try:
                solved = self._exact(dm, report, eps)
            except InvalidSolution as exc:  # stop here with what is proven so far; say so
                self.result.errors.append(f"{self.settings.backend.name}: {exc}")
                self.result.timed_out = True
                return None if best is None else replace(best, status=SolveStatus.FEASIBLE, gap=math.inf)
            if solved is None:
                excluded.append(dm.selection(report.values))
                continue
            if best is None or solved.point.tokens_per_s_per_gpu > best.point.tokens_per_s_per_gpu:
                best = solved
            if q_feasible and (solved.point.tokens_per_s_per_gpu <= q * (1 + RATIO_TOL)
                               or report.status == SolveStatus.FEASIBLE):
                return self._finish(best, report, q, dm)
            q, q_feasible = best.point.tokens_per_s_per_gpu, True
        return best

    def _no_better(self, best: SolvedPoint | None, report: SolveReport) -> SolvedPoint | None:
        """The MILP found nothing: within the cap no deployment (or none beating the incumbent, whose
        configurations the screening keeps) exists, or time ran out, or the backend failed."""
        if report.status == SolveStatus.ERROR:
            self.result.errors.append(f"{self.settings.backend.name}: {report.message}")
        if report.status != SolveStatus.INFEASIBLE:
            self.result.timed_out = True
            return None if best is None else replace(best, status=SolveStatus.FEASIBLE, gap=math.inf)
        return None if best is None else replace(best, status=SolveStatus.OPTIMAL, gap=0.0)

    def _finish(self, best: SolvedPoint, report: SolveReport, q: float, dm: DeploymentModel) -> SolvedPoint:
        """Optimal, or (time limit) feasible with the relative gap (bound - best) / bound, where a
        deployment x beating q has G(x) (ratio - q) <= B (the backend's bound on the objective), so no
        ratio exceeds q + B / G_min (G_min: the smallest deployment left in the model)."""
        if report.status == SolveStatus.OPTIMAL:
            return replace(best, status=SolveStatus.OPTIMAL, gap=0.0)
        self.result.timed_out = True  # the backend stopped on its time limit: all time is spent
        bound = q + max(0.0, report.bound) / dm.fewest_gpus()
        gap = max(0.0, bound - best.point.tokens_per_s_per_gpu) / bound
        return replace(best, status=SolveStatus.FEASIBLE, gap=gap)

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
        """The solution's deployment with exact figures; None if it does not pack or (within solver
        tolerances only) passes the cap, which the caller then excludes."""
        selection = dm.selection(report.values)
        point = self._point(selection, eps)
        return None if point is None else SolvedPoint(point, selection, report.status, 0.0)

    def _point(self, selection: Selection, eps: float | None) -> FrontPoint | None:
        if selection.mixed is not None:
            return selection.mixed.point
        assert selection.decode is not None
        fills = [(o, n) for o, n in ((selection.prefill, selection.prefills), (selection.first, selection.firsts),
                                     (selection.midfill, selection.midfills)) if o is not None]
        instances = [(o.gpus, n) for o, n in fills] + [(selection.decode.gpus, selection.decodes)]
        if not fits(instances, domain_bins(self.resolved)):
            return None
        point = disaggregated_point(self.resolved, self.calibration, [(o.candidate, n) for o, n in fills],
                                    selection.decode.candidate, selection.decodes)
        return None if point is None or (eps is not None and point.ttft_ms / 1e3 > eps) else point


def sweep(resolved: ResolvedScenario, calibration: Calibration, options: DeploymentOptions,
          settings: SweepSettings) -> SweepResult:
    return _Sweeper(resolved, calibration, options, settings).run()
