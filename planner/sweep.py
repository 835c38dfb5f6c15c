"""The Pareto front by epsilon-constraint on TTFT: at each cap, the best deployment by one MILP (cluster
accounting) or a Dinkelbach loop of MILPs (used accounting).

A step solves: maximise the ranked throughput subject to TTFT <= eps. Under `cluster` accounting that is
the deployment's tokens/s (the cluster's GPU count is a constant): one MILP. Under `used` accounting it is
the ratio osl X / G, maximised by Dinkelbach's method: solve max osl X - q G, set q to the exact ratio of
the deployment found, repeat until the MILP proves no deployment beats q. Either way the deployment is
re-evaluated with the exact cost model, which gives the point's figures.

A solved cap c with best point (t, v) resolves the TTFT interval [t, c]: every deployment with TTFT in it
has throughput <= v, so (t, v) covers it. The sweep resolves the range from the top (the TTFT SLO, else
the best-throughput point's TTFT) down in steps: after a point at t the next cap is t - step, step being
`resolution` x the top (or 1 us, `exact`). Every exact front point then lies within `step` of TTFT of a
returned point with at least its throughput: the front's certified resolution.

Anytime order: after the first point, caps at 7/8, 6/8, ... 1/8 of the top are solved first (a coarse
front over the whole range), then each point's next step, breadth-first. A cap inside a resolved interval
needs no solve. Stopped by the time limit, the uncovered TTFT ranges are reported: a deployment in a gap
(a, b) has at most the throughput of the resolved point at b, so the returned front is within b - a of TTFT
of the exact one there (`SweepResult.coverage`).

Gaps. If a step's last MILP stopped on time with bound B, no deployment within the cap beats
B / G_cluster (cluster) or q + B / G_min (used; G_min: the smallest deployment the model holds) per GPU;
the point's gap is (U - its figure) / U.
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from costmodel.calibration import Calibration
from costmodel.resolve import ResolvedScenario
from planner.deployment import composed_point, disaggregated_point, with_instances
from planner.formulation.fill import best_fill, placeable
from planner.formulation.model import DeploymentModel, InvalidSolution, Selection, build_model
from planner.formulation.options import DeploymentOptions, MixedOption
from planner.formulation.pairs import PAIR_LIMIT, PairColumns, PairTable
from planner.formulation.screening import pair_columns, screen, screen_cluster
from planner.formulation.units import UnitTable, first_cap, selection_of, unit_table
from planner.packing import best_packing
from planner.pareto import FrontPoint
from planner.solvers import Backend, LazyBackend, SolveOptions, SolveReport, SolveStatus
from planner.sweep_result import GRID_S, Resolution, SolvedPoint, SweepResult, resolution_step

RATIO_TOL = 1e-7  # Dinkelbach stops when the MILP cannot beat q by more than this (relative)
MAX_DINKELBACH = 30  # safeguard; convergence is superlinear, typically 2-4 solves
SAMPLE_PAIRS = 1_000_000  # pairs of the small-unit table that seeds incumbents on large instances
AUTO_POINTS = 60  # `auto` resolution: at most 60 points by default (`search.front_points`) ...
AUTO_HV_TOL = 5e-4  # ... or the front certified within 0.05% of the exact front's hypervolume
# `auto` also pins the front's fast end: its fastest point within 1% of TTFT of the fastest deployment (or a floor
# proven there), where the hypervolume alone would leave it (a few ms of TTFT hide little hypervolume, but the
# fastest deployment is the one a latency-bound user launches: qwen3-30b on MI355X, front from 57.1 ms against
# 53.0 ms exact). Each bisection halves the window: about log2(window / 1%) MILPs, 4 there.
AUTO_FASTEST_TOL = 0.01
COARSE_CAPS = 8  # anytime: caps at 7/8 ... 1/8 of the range before the fine steps

@dataclass(frozen=True)
class SweepSettings:
    backend: Backend
    time_limit_s: float
    threads: int = 1
    seed: int = 0
    pair_screening: bool = True
    resolution: Resolution = "auto"
    points: int | None = AUTO_POINTS  # `auto`: the most points (None: as many as the certificate needs)
    on_point: Callable[[SolvedPoint, int], None] | None = None  # progress: each point found, and the count


@dataclass
class _Block:
    """One structure block's options (`planner.formulation.options.deployment_options`: every structure on
    one inventory group, or fills on one group and decode on another) and its closed-form tables."""

    options: DeploymentOptions
    units: UnitTable | None = None
    pairs: PairTable | None = None
    sample: PairTable | None = None


class _Sweeper:
    """The sweep over caps. Each cap's step takes the best of every block: the blocks' deployments are
    disjoint and together the scenario's, so the best of the blocks' optima is the optimum, and a block
    that only has to beat the best so far screens against it."""

    def __init__(self, resolved: ResolvedScenario, calibration: Calibration, blocks: list[DeploymentOptions],
                 settings: SweepSettings, fastest_s: float = 0.0) -> None:
        self.resolved, self.calibration, self.settings = resolved, calibration, settings
        self.options_fastest_s = fastest_s
        self._proven_empty = False  # the last cap's MILP proved that nothing is within it
        self._proof = "milp"  # what proved the last block's step: "milp" or "enumeration"
        self.deadline = time.perf_counter() + settings.time_limit_s
        self.start = time.perf_counter()
        self.result = SweepResult()
        self.first_cap = first_cap(resolved)
        self.cluster = resolved.scenario.search.gpu_accounting == "cluster"
        # several groups under cluster accounting: deployments on disjoint groups run side by side (under
        # `used` accounting a composite's ratio never beats its best part's, which is within the cap too)
        self.compose = composing(resolved, [options.groups for options in blocks])
        self.blocks: list[_Block] = []
        self._mixed_tables: dict[int, _BestWithin] = {}  # per block's options (`_best_mixed`)
        self._points: dict[tuple[object, ...], FrontPoint | None] = {}  # exact figures by selection (`_point`)
        self._per_size: dict[int, dict[int, _BestWithin]] = {}  # per block's options and size (`_mixed_fill`)
        self._columns: dict[int, PairColumns | None] = {}  # per block's options (`_best_within`'s screens)
        for options in blocks:
            self._use(_Block(options))
            if self.cluster and settings.pair_screening:
                self.units = unit_table(options, self.first_cap)
            elif settings.pair_screening:
                self.pairs = self._pair_table()
                self.sample = self._sample_table() if self.pairs is None else None
            self.blocks.append(_Block(options, self.units, self.pairs, self.sample))
        self._use(self.blocks[0])

    def _use(self, block: _Block) -> None:
        """Make `block` the one the per-block steps work on."""
        self.options, self.units, self.pairs, self.sample = block.options, block.units, block.pairs, block.sample

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

    def _pair_table(self) -> PairTable | None:
        """Pairs of the configurations servable within the first (largest) TTFT cap."""
        everything = screen(self.options, self.first_cap, 0.0, False)
        if not everything.prefill or len(everything.prefill) * len(everything.decode) > PAIR_LIMIT:
            return None
        return PairTable(self.options, everything.prefill, everything.decode)

    def run(self) -> SweepResult:
        self.result.top_s = self.first_cap or 0.0
        first = self._solve_cap(self.first_cap, None)
        if first is None:
            return self.result
        top = self.first_cap if self.first_cap is not None else first.point.ttft_ms / 1e3
        self.result.top_s = top
        if self.settings.resolution != "auto":
            self.result.step_s = max(GRID_S, resolution_step(self.settings.resolution) * top)
        limit = self.settings.points if self.settings.resolution == "auto" else None
        parts = COARSE_CAPS if limit is None else min(COARSE_CAPS, limit)  # `auto`'s points: the coarse pass's too
        coarse = [top * j / parts for j in range(parts - 1, 0, -1)]
        queue = deque(cap for cap in coarse if cap < first.point.ttft_ms / 1e3)
        if self.settings.resolution != "auto":
            queue.append(self._next_cap(first))
        previous = first.selection
        while queue:
            cap = queue.popleft()
            if self._covered(cap):
                continue
            if self._out_of_time():
                self._stopped_by_time()
                break
            solved = self._solve_cap(cap, previous)
            if solved is not None:
                previous = solved.selection
                if self.settings.resolution != "auto":
                    queue.append(self._next_cap(solved))
        if self.settings.resolution == "auto":
            self._refine(previous)
        return self.result

    def _refine(self, previous: Selection) -> None:
        """`auto` resolution: bisect the window that can hide the most hypervolume until the front is
        certified within AUTO_HV_TOL of the exact one's hypervolume, or holds `points` points (no limit:
        None). A cap is tried once: one that proves nothing (a MILP stopped unproven) leaves its window."""
        fastest, limit, tried = self.options_fastest_s, self.settings.points, set[float]()
        previous = self._sharpen_fastest(previous, tried)
        for _ in itertools.count() if limit is None else range(4 * limit):  # a limit's caps: 4 a point at most
            if limit is not None and len(self.result.front) >= limit:
                return
            windows = [w for w in self.result.windows(fastest) if w.high_s - w.low_s > 2 * GRID_S]
            loss = sum(w.loss for w in windows)
            if not windows or loss <= AUTO_HV_TOL * self.result.hypervolume_s():
                return
            caps = {w: max(math.floor((w.low_s + w.high_s) / 2 / GRID_S) * GRID_S, w.low_s + GRID_S) for w in windows}
            open_windows = [w for w in windows if caps[w] not in tried]
            if not open_windows:
                return
            if self._out_of_time():
                self._stopped_by_time()
                return
            widest = max(open_windows, key=lambda w: w.loss)
            tried.add(caps[widest])
            solved = self._solve_cap(caps[widest], previous)
            if solved is not None:
                previous = solved.selection

    def _sharpen_fastest(self, previous: Selection, tried: set[float]) -> Selection:
        """`auto` resolution: bisect the window below the fastest point until it is within AUTO_FASTEST_TOL of
        that point's TTFT (a faster point found, or a floor proven), the points limit is reached, or a cap
        proves nothing (tried once, as `_refine`'s)."""
        limit, first = self.settings.points, True
        while limit is None or len(self.result.front) < limit:
            windows = self.result.windows(self.options_fastest_s)
            bottom = max(self.result.floor_s, self.options_fastest_s)
            if not windows or windows[0].low_s > bottom or not math.isfinite(windows[0].above):
                return previous  # the fast end resolved, or nothing proven above it yet
            low, high = windows[0].low_s, windows[0].high_s
            if high - low <= max(2 * GRID_S, AUTO_FASTEST_TOL * high):
                return previous
            # first the cap just within the tolerance of the window's low end: a point there ends the
            # sharpening at once, an empty cap raises the floor; then bisection (each step a point, so the
            # points limit would often stop halving first)
            near = max(math.floor(low * (1 + AUTO_FASTEST_TOL) / GRID_S) * GRID_S, low + GRID_S)
            cap = near if first and near < high else max(math.floor((low + high) / 2 / GRID_S) * GRID_S,
                                                         low + GRID_S)
            first = False
            if cap in tried:
                return previous
            if self._out_of_time():
                self._stopped_by_time()
                return previous
            tried.add(cap)
            solved = self._solve_cap(cap, previous)
            if solved is not None:
                previous = solved.selection
        return previous

    def _next_cap(self, solved: SolvedPoint) -> float:
        """One step below the point's TTFT (on the 1 us grid)."""
        ttft_s = solved.point.ttft_ms / 1e3
        return math.ceil(ttft_s / GRID_S - 1e-6) * GRID_S - self.result.step_s

    def _covered(self, cap: float) -> bool:
        """No new point can come from this cap: it is at or below the floor, or inside a resolved interval."""
        if cap <= self.result.floor_s:
            return True
        return any(t <= cap * (1 + 1e-12) and cap <= c for t, c in self.result.resolved)

    def _solve_cap(self, eps: float | None, previous: Selection | None) -> SolvedPoint | None:
        """The best deployment within the cap, recorded (None when none exists or time ran out)."""
        if self.compose:
            return self._solve_composite(eps, previous)
        incumbent = None
        for block in self.blocks:
            self._use(block)
            found = self._incumbent(eps, previous)
            if found is not None and (incumbent is None or found.point.tokens_per_s_per_gpu >
                                      incumbent.point.tokens_per_s_per_gpu):
                incumbent = found
        solved, bounds, empty, proofs = incumbent, [], True, set()
        for block in self.blocks:
            self._use(block)
            self._proven_empty, self._proof = False, "milp"
            step = self._cluster_best(eps, solved) if self.cluster else self._best_within(eps, 0.0, solved)
            empty &= self._proven_empty
            proofs.add(self._proof)
            bounds.append(_bound(step, self._proven_empty))
            solved = solved if step is None else step
        self._use(self.blocks[0])
        if solved is None:
            self._nothing_within(eps, empty)
            return None
        if len(self.blocks) > 1:
            solved = _joint_status(solved, bounds)
        return self._record(solved, eps, proofs)

    def _solve_composite(self, eps: float | None, previous: Selection | None) -> SolvedPoint | None:
        """Cluster accounting on several groups: each block's own best within the cap, then the blocks on
        disjoint groups whose deployments, side by side, serve the most (`best_packing`; one block is one
        such set). Optimal when every block's step is proven; else the gap to the best packing of the
        blocks' bounds."""
        steps: list[SolvedPoint | None] = []
        bounds: list[float] = []  # per block: the most tokens/s per cluster GPU within the cap
        empty, proofs = True, set()
        for block in self.blocks:
            self._use(block)
            own = self._incumbent(eps, previous)
            self._proven_empty, self._proof = False, "milp"
            step = self._cluster_best(eps, own)
            empty &= self._proven_empty
            proofs.add(self._proof)
            mix = self._mixed_fill(eps) if len(block.options.groups) == 1 else None
            if mix is not None and (step is None or mix.point.tokens_per_s > step.point.tokens_per_s * (1 + 1e-12)):
                # the block's optimum: the better of its structures' (as proven as they are) and the exact mix
                unproven = replace(mix, status=SolveStatus.FEASIBLE, gap=1.0)  # time ran out before any proof
                step = unproven if step is None else replace(mix, status=step.status, gap=step.gap)
            steps.append(step)
            bounds.append(_bound(step, self._proven_empty))
        self._use(self.blocks[0])
        groups = [block.options.groups for block in self.blocks]
        _, chosen = best_packing(groups, [0.0 if s is None else s.point.tokens_per_s_per_gpu for s in steps])
        parts = [step for step in (steps[i] for i in chosen) if step is not None]
        if not parts:
            self._nothing_within(eps, empty)
            return None
        point = composed_point(self.resolved, [part.point for part in parts])
        status = SolveStatus.OPTIMAL if all(p.status == SolveStatus.OPTIMAL for p in parts) else SolveStatus.FEASIBLE
        solved = SolvedPoint(point, parts[0].selection, status, 0.0)
        bound, _ = best_packing(groups, bounds)
        return self._record(_joint_status(solved, [bound]), eps, proofs)

    def _mixed_fill(self, eps: float | None) -> SolvedPoint | None:
        """The block's group filled with aggregated instances of several sizes, each size's best within the
        cap (`planner.formulation.fill.best_fill`, exact), as a composite of mixed pools; None when it is
        one size only (the block's own structures hold that), when the sizes do not divide each other
        (`fill.placeable`: the placer may not reproduce the packing), or when a shared KV store limits the
        instances."""
        if self.options.store is not None or not self.options.mixed:
            return None
        per_size = self._per_size.get(id(self.options))
        if per_size is None:
            mixed = self.options.mixed
            per_size = self._per_size[id(self.options)] = {
                size: _BestWithin.of([m for m in mixed if m.candidate.gpus == size], _instance_tokens)
                for size in sorted({m.candidate.gpus for m in mixed})}
        best = {size: found for size, table in per_size.items() if (found := table.within(eps)) is not None}
        fill = best_fill({size: _instance_tokens(m) for size, m in best.items()}, self.options.domains)
        used = [(size, count) for size, count in fill.counts.items() if count]
        if len(used) < 2 or not placeable(used, self.options.domains):
            return None
        parts = [with_instances(best[size].point, count) for size, count in sorted(used, reverse=True)]
        return SolvedPoint(composed_point(self.resolved, parts), Selection(mixed=best[max(best)]),
                           SolveStatus.OPTIMAL, 0.0, proof="enumeration")

    def _nothing_within(self, eps: float | None, empty: bool) -> None:
        """No point at this cap; where every block proved nothing is within it, nothing is below it either."""
        if empty and eps is not None:
            self.result.floor_s = max(self.result.floor_s, eps)

    def _record(self, solved: SolvedPoint, eps: float | None, proofs: set[str]) -> SolvedPoint:
        """A cap's point: kept with what proved it (enumeration only where every block's step was, else a MILP
        took part), its interval resolved when proven, reported."""
        solved = replace(solved, proof="enumeration" if proofs == {"enumeration"} else "milp")
        self.result.points.append(solved)
        if solved.status == SolveStatus.OPTIMAL:  # proven: nothing within the cap beats it
            self.result.resolved.append((solved.point.ttft_ms / 1e3, math.inf if eps is None else eps))
        if self.settings.on_point is not None:
            self.settings.on_point(solved, len(self.result.points))
        if self.result.first_feasible_s is None:
            self.result.first_feasible_s = time.perf_counter() - self.start
        return solved

    def _incumbent(self, eps: float | None, previous: Selection | None) -> SolvedPoint | None:
        """A good deployment within the cap to start from (and hint): the best aggregated one, and the best
        disaggregated one by closed-form figures (cluster: the unit table's best within the cap; used: the
        pair table's, or the small-unit table's and every count of the previous point's two candidates)."""
        mixed = self._best_mixed(eps)
        found = [] if mixed is None else [SolvedPoint(mixed.point, Selection(mixed=mixed), SolveStatus.FEASIBLE,
                                                      math.inf)]
        for selection in self._closed_form_picks(eps, previous):
            point = self._point(selection, eps)
            if point is not None:
                found.append(SolvedPoint(point, selection, SolveStatus.FEASIBLE, math.inf))
        return max(found, key=lambda s: s.point.tokens_per_s_per_gpu, default=None)

    def _best_mixed(self, eps: float | None) -> MixedOption | None:
        """The aggregated option with the most tokens/s per GPU within the cap (the first in the options'
        order among equals; the table built once per block)."""
        table = self._mixed_tables.get(id(self.options))
        if table is None:
            table = self._mixed_tables[id(self.options)] = _BestWithin.of(
                self.options.mixed, lambda m: m.point.tokens_per_s_per_gpu)
        return table.within(eps)

    def _closed_form_picks(self, eps: float | None, previous: Selection | None) -> list[Selection]:
        if self.cluster:
            entry = None if self.units is None else self.units.best_within(eps)
            if entry is None or self.units is None:
                return []
            p, count_p, d, count_d = selection_of(self.units, self.options, entry)
            return [Selection(prefill=p, prefills=count_p, decode=d, decodes=count_d)]
        picks = []
        tables = [self.pairs] if self.pairs is not None else [self.sample, self._neighbours(previous)]
        for table in tables:
            where = table.best_ratio(eps) if table is not None else None
            if table is None or where is None:
                continue
            (p, count_p), (d, count_d) = table.arrays.prefill[where[0]], table.arrays.decode[where[1]]
            picks.append(Selection(prefill=p, prefills=count_p, decode=d, decodes=count_d))
        return picks

    def _neighbours(self, previous: Selection | None) -> PairTable | None:
        if previous is None or previous.prefill is None or previous.decode is None:
            return None
        p, d = previous.prefill, previous.decode
        if not any(o is p for o in self.options.prefill) or not any(o is d for o in self.options.decode):
            return None  # the previous point is another block's: its options do not pack by this block's rows
        return PairTable(self.options, [(p, n) for n in range(1, p.most + 1)], [(d, n) for n in range(1, d.most + 1)])

    def _cluster_best(self, eps: float | None, incumbent: SolvedPoint | None) -> SolvedPoint | None:
        """Cluster accounting: the block's best within the cap by enumeration where it covers the block
        (`_enumerate`); else one MILP maximising the deployment's tokens/s over the configurations that may
        beat the incumbent (`screen_cluster`), a solution that does not pack cut off and the MILP solved again."""
        if self._enumerated():
            proven, best = self._enumerate(eps, incumbent)
            if proven:
                return best
            # the table's best entry does not hold exactly (it does not pack, or rounding puts it past the
            # cap): the MILP decides, and only the MILP proves this cap
        target = 0.0 if incumbent is None else incumbent.point.tokens_per_s
        if self.settings.pair_screening:
            screened = screen_cluster(self.options, self.units, eps, target)
        else:  # the MILP alone: only the TTFT and size rules
            screened = screen(self.options, eps, 0.0, False)
        dm = build_model(self.options, eps, 0.0, screened=screened)
        self._note_size(dm)
        if incumbent is not None:
            dm.hint(incumbent.selection)
        best = incumbent
        while True:
            report = self._solve(dm)
            if not report.status.has_solution:
                return self._no_better(best, report)
            try:
                solved = self._exact(dm, report, eps)
            except InvalidSolution as exc:
                return self._backend_error(best, str(exc))
            if solved is None:
                dm.exclude(dm.selection(report.values))
                continue
            if best is None or solved.point.tokens_per_s > best.point.tokens_per_s:
                best = solved
            if report.status == SolveStatus.OPTIMAL:
                return replace(best, status=SolveStatus.OPTIMAL, gap=0.0)
            self.result.termination = "time_limit"
            bound = max(report.bound, best.point.tokens_per_s) / self.resolved.gpus
            return replace(best, status=SolveStatus.FEASIBLE,
                           gap=max(0.0, bound - best.point.tokens_per_s_per_gpu) / bound)

    def _out_of_time(self) -> bool:
        """No more caps: past the deadline where enumeration proves every block (no MILP is there to notice
        it), else once a MILP has stopped on the time limit."""
        if self._all_enumerated():
            return time.perf_counter() >= self.deadline
        return self.result.out_of_time

    def _stopped_by_time(self) -> None:
        """Caps were left unsolved at the deadline (a backend error already recorded stays the reason)."""
        if self.result.termination == "completed":
            self.result.termination = "time_limit"

    def _all_enumerated(self) -> bool:
        enumerated = []
        for block in self.blocks:
            self._use(block)
            enumerated.append(self._enumerated())
        self._use(self.blocks[0])
        return all(enumerated)

    def _enumerated(self) -> bool:
        """Cluster accounting without a separate-midfill structure: the unit table and the aggregated
        options enumerate every deployment (the table's prefill counts dominate the others), so the best of
        them within a cap is the optimum: the proof, with no MILP (`_enumerate`)."""
        return self.cluster and self.options.split is None and (self.units is not None or not self.options.prefill)

    def _enumerate(self, eps: float | None, incumbent: SolvedPoint | None) -> tuple[bool, SolvedPoint | None]:
        """The block's optimum within the cap by enumeration (`_enumerated`): its best aggregated option and
        its unit table's best entry within the cap, the entry's deployment evaluated exactly. (True, the
        better of it and the incumbent; None: nothing within the cap, in this block or before), or (False,
        None) when the entry's deployment does not pack or its exact TTFT passes the cap (rounding): the MILP
        then decides, excluding what does not hold."""
        found = [] if incumbent is None else [incumbent]  # the incumbent first: it stays among equals
        mixed = self._best_mixed(eps)
        if mixed is not None:
            found.append(SolvedPoint(mixed.point, Selection(mixed=mixed), SolveStatus.OPTIMAL, 0.0,
                                     proof="enumeration"))
        for selection in self._closed_form_picks(eps, None):
            point = self._point(selection, eps)
            if point is None:
                return False, None
            found.append(SolvedPoint(point, selection, SolveStatus.OPTIMAL, 0.0, proof="enumeration"))
        best = max(found, key=lambda s: s.point.tokens_per_s, default=None)  # the first among equals
        self._proven_empty, self._proof = best is None, "enumeration"
        return True, None if best is None else replace(best, status=SolveStatus.OPTIMAL, gap=0.0, proof="enumeration")

    def _note_size(self, dm: DeploymentModel) -> None:
        if self.result.largest_model is None or len(dm.model.variables) > len(self.result.largest_model.variables):
            self.result.largest_model = dm.model

    def _best_within(self, eps: float | None, q: float, incumbent: SolvedPoint | None) -> SolvedPoint | None:
        """Used accounting: the best deployment with TTFT <= eps (None when there is none or time ran out
        first), by Dinkelbach: q starts at the incumbent's exact ratio; once q is the exact ratio of a
        deployment within the cap, the MILP's optimum is >= 0, and a proof that it is ~0 proves q optimal."""
        best = incumbent
        excluded: list[Selection] = []
        q_feasible = incumbent is not None
        if incumbent is not None:
            q = incumbent.point.tokens_per_s_per_gpu
        report: SolveReport | None = None
        dm: DeploymentModel | None = None
        for _ in range(MAX_DINKELBACH):
            screened = screen(self.options, eps, q, q_feasible, self.pairs, self.settings.pair_screening,
                              self._pair_columns())
            dm = build_model(self.options, eps, q, q_feasible, screened=screened)
            for selection in excluded:
                dm.exclude(selection)
            self._note_size(dm)
            if best is not None:
                dm.hint(best.selection)
            report = self._solve(dm)
            if not report.status.has_solution:
                return self._no_better(best, report)
            try:
                solved = self._exact(dm, report, eps)
            except InvalidSolution as exc:  # stop here with what is proven so far; say so
                return self._backend_error(best, str(exc))
            if solved is None:
                excluded.append(dm.selection(report.values))
                continue
            if best is None or solved.point.tokens_per_s_per_gpu > best.point.tokens_per_s_per_gpu:
                best = solved
            if q_feasible and (solved.point.tokens_per_s_per_gpu <= q * (1 + RATIO_TOL)
                               or report.status == SolveStatus.FEASIBLE):
                return self._finish(best, report, q, dm)
            q, q_feasible = best.point.tokens_per_s_per_gpu, True
        if best is None or report is None or dm is None:
            return best
        # iterations ran out without a proof: the last MILP's bound still caps what could beat q
        unproven = replace(report, status=SolveStatus.FEASIBLE)
        return self._finish(best, unproven, q, dm)

    def _pair_columns(self) -> PairColumns | None:
        """The block's pair figures kept across its screens (`screening.pair_columns`), where the screens
        build tables of their own (no table of the first cap's pairs)."""
        if self.pairs is not None or not self.settings.pair_screening:
            return None
        if id(self.options) not in self._columns:
            self._columns[id(self.options)] = pair_columns(self.options)
        return self._columns[id(self.options)]

    def _no_better(self, best: SolvedPoint | None, report: SolveReport) -> SolvedPoint | None:
        """The MILP found nothing: within the cap no deployment (or none beating the incumbent, whose
        configurations the screening keeps) exists, or time ran out, or the backend failed."""
        self._proven_empty = report.status == SolveStatus.INFEASIBLE
        if report.status == SolveStatus.ERROR:
            return self._backend_error(best, report.message)
        if report.status != SolveStatus.INFEASIBLE:
            self.result.termination = "time_limit"
            return None if best is None else replace(best, status=SolveStatus.FEASIBLE, gap=self._unknown_gap(best))
        return None if best is None else replace(best, status=SolveStatus.OPTIMAL, gap=0.0)

    def _backend_error(self, best: SolvedPoint | None, message: str) -> SolvedPoint | None:
        self.result.errors.append(f"{self.settings.backend.name}: {message}")
        if self.result.termination == "completed":
            self.result.termination = "backend_error"
        return None if best is None else replace(best, status=SolveStatus.FEASIBLE, gap=self._unknown_gap(best))

    @staticmethod
    def _unknown_gap(best: SolvedPoint) -> float:
        """The MILP stopped (time limit, backend error) with no bound: nothing is proven about what beats
        this point, a gap of 1 (100%), stated as a number rather than left out."""
        return 1.0

    def _finish(self, best: SolvedPoint, report: SolveReport, q: float, dm: DeploymentModel) -> SolvedPoint:
        """Optimal, or (time limit) feasible with the relative gap (bound - best) / bound, where a
        deployment x beating q has G(x) (ratio - q) <= B (the backend's bound on the objective), so no
        ratio exceeds q + B / G_min (G_min: the smallest deployment left in the model)."""
        if report.status == SolveStatus.OPTIMAL:
            return replace(best, status=SolveStatus.OPTIMAL, gap=0.0)
        self.result.termination = "time_limit"
        bound = q + max(0.0, report.bound) / dm.fewest_gpus()
        gap = max(0.0, bound - best.point.tokens_per_s_per_gpu) / bound
        return replace(best, status=SolveStatus.FEASIBLE, gap=gap)

    def _solve(self, dm: DeploymentModel) -> SolveReport:
        left = self.deadline - time.perf_counter()
        if left > 0 and isinstance(self.settings.backend, LazyBackend):
            self.settings.backend.load()  # the package's import counts before the MILP's own limit is set
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
        # each cap's incumbent and its enumeration proof evaluate the same deployment: once per block
        key = (id(self.options), *((id(o), n) for o, n in fills), id(selection.decode), selection.decodes)
        if key not in self._points:
            fit = self.options.fits([(o.gpus, n) for o, n in fills], (selection.decode.gpus, selection.decodes))
            self._points[key] = None if not fit else disaggregated_point(
                self.resolved, self.calibration, [(o.candidate, n) for o, n in fills], selection.decode.candidate,
                selection.decodes)
        point = self._points[key]
        return None if point is None or (eps is not None and point.ttft_ms / 1e3 > eps) else point


def _bound(step: SolvedPoint | None, proven_empty: bool) -> float:
    """The most tokens/s per GPU a block's step leaves possible within the cap: its figure over (1 - gap);
    0 where it proved nothing is within the cap, inf where nothing is proven (time limit, backend error)."""
    if step is None:
        return 0.0 if proven_empty else math.inf
    return step.point.tokens_per_s_per_gpu / (1.0 - step.gap) if step.gap < 1.0 else math.inf


def _joint_status(best: SolvedPoint, bounds: list[float]) -> SolvedPoint:
    """The best of the blocks, optimal when every block proved nothing beats it, else feasible with the
    gap to the largest bound any block left."""
    value = best.point.tokens_per_s_per_gpu
    bound = max(bounds, default=value)
    if bound <= value * (1 + 1e-12):
        return best if best.status == SolveStatus.OPTIMAL else replace(best, status=SolveStatus.OPTIMAL, gap=0.0)
    gap = 1.0 if not math.isfinite(bound) else (bound - value) / bound
    return replace(best, status=SolveStatus.FEASIBLE, gap=max(best.gap if best.gap < math.inf else 0.0, gap))


def _instance_tokens(option: MixedOption) -> float:
    """Tokens/s of one instance of an aggregated option (its per-GPU figures do not depend on the count)."""
    return option.point.tokens_per_s_per_gpu_used * option.candidate.gpus


@dataclass(frozen=True)
class _BestWithin:
    """Aggregated options by TTFT with, up to each, the one of most value (the first in the given order among
    equals): the best within any cap by one bisection."""

    times: list[float]  # s, ascending
    best: list[MixedOption]

    @classmethod
    def of(cls, options: Sequence[MixedOption], value: Callable[[MixedOption], float]) -> _BestWithin:
        values = [value(m) for m in options]
        order = sorted(range(len(options)), key=lambda i: options[i].point.ttft_ms)
        best: list[int] = []
        for i in order:
            if not best or values[i] > values[best[-1]] or (values[i] == values[best[-1]] and i < best[-1]):
                best.append(i)
            else:
                best.append(best[-1])
        return cls([options[i].point.ttft_ms / 1e3 for i in order], [options[i] for i in best])

    def within(self, eps: float | None) -> MixedOption | None:
        count = len(self.times) if eps is None else bisect.bisect_right(self.times, eps)
        return self.best[count - 1] if count else None


def composing(resolved: ResolvedScenario, groups: list[frozenset[str]]) -> bool:
    """Whether the sweep composes deployments side by side: cluster accounting, `search.composite`, two or
    more groups, and no shared KV store (its capacity and bandwidth are the whole cluster's, and each
    block's deployments may use all of it: the parts' sum is not bounded, so composites are left out)."""
    scenario = resolved.scenario
    return (scenario.search.gpu_accounting == "cluster" and scenario.search.composite
            and scenario.cluster.kv_store is None and len(set().union(*groups)) > 1)


def sweep(resolved: ResolvedScenario, calibration: Calibration, options: DeploymentOptions | list[DeploymentOptions],
          settings: SweepSettings, fastest_s: float = 0.0) -> SweepResult:
    """The front (`fastest_s`: no deployment has a lower TTFT, where the coverage starts) over one block of
    options or several (an inventory of several groups)."""
    blocks = options if isinstance(options, list) else [options]
    return _Sweeper(resolved, calibration, blocks, settings, fastest_s).run()
