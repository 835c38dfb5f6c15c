"""`solve(scenario)`: candidates, the epsilon-constraint sweep of deployment MILPs, placement.

Build, solve, extract and report are separate steps: the front's figures come from the cost model
(`planner.deployment`), never from solver variables, so `plan evaluate` of a point's layout gives the
same figures.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Literal

from pydantic import ValidationError

from costmodel.calibration import Calibration, default_calibration
from costmodel.resolve import ResolvedScenario
from costmodel.scenario import Search
from planner import diagnose
from planner.batches import BatchCoverage, BatchSearch, InventorySearch, batch_search
from planner.errors import InputError, InputProblem, NoSolutionInTimeError
from planner.experts import ExpertPlacement, bank_name, place_experts, pool_bank
from planner.formulation.model import build_model
from planner.formulation.options import DeploymentOptions, deployment_options
from planner.solvers import LazyBackend, SolveStatus
from planner.sweep import AUTO_POINTS, SweepSettings, composing, sweep
from planner.sweep_result import Coverage, OutsideBound, Resolution, SolvedPoint, SweepResult, Termination
from planner.templates import CandidateSet, generate, merged

GENERATE_SHARE = 0.5  # of the time limit, at most, for timing the grid's batches (their ranges' ends: always)
SWEEP_RESERVE_S = 1.5  # and at least this left after it: options, bounds, the backend's import, the sweep's tables
BATCH_SHARE = 0.6  # of the time limit, at most, for timing batches between the grid's (planner.batches): the
# sweep after it proves most fleet caps by enumeration (64-rack mixed fleet: search 22 s, sweep 14 s; at 0.5 the
# search was cut at 30 s, 9 of its rounds done, gaps up to 67%)
# a batch search cut by its share goes on after the sweep (then run again) where the time left allows at least this
# much of it, and twice the sweep's time after (256 Kimi K2 racks: cut at 36 s of 60, the sweep 1 s: certified)
RESUME_MIN_S = 2.0
BATCH_TOLERANCE = 0.01  # but `exact`: no untimed batch beats the front by more than 1% (a point's gap at most)
EXPERT_TIME_S = 0.5  # CP-SAT deterministic time per expert-parallel degree: the swap search does most of the work
# The limit is the command's: the sweep leaves this share of it (at most OUTPUT_RESERVE_S) for the points' figures,
# placements and binding resources that the output computes after it (about 4 ms a point on 16 racks)
OUTPUT_SHARE, OUTPUT_RESERVE_S = 0.1, 0.5


@dataclass(frozen=True)
class SolveSettings:
    backend: str = "cpsat"
    time_limit_s: float = 60.0
    threads: int = 1
    seed: int = 0
    pair_screening: bool = True  # off: no pair-table bounds; the MILP chooses among what the cheap rules keep
    resolution: Resolution = "auto"  # TTFT step between front points, share of the range (search.front_resolution)
    points: int | None = AUTO_POINTS  # `auto`: the most front points (search.front_points; None: 'all')
    batch_tolerance: float = BATCH_TOLERANCE  # search.batch_tolerance
    on_point: Callable[[SolvedPoint, int], None] | None = None  # progress callback


# `settings_for`'s arguments and the `search` fields they replace
_SEARCH_FIELDS = {"solver": "solver", "time_limit_s": "time_limit_s", "threads": "threads", "seed": "seed",
                  "resolution": "front_resolution", "points": "front_points", "batch_tolerance": "batch_tolerance"}


def settings_for(search: Search, *, solver: str | None = None, time_limit_s: float | None = None,
                 threads: int | None = None, seed: int | None = None, resolution: Resolution | None = None,
                 points: int | Literal["all"] | None = None, batch_tolerance: float | None = None) -> SolveSettings:
    """`plan solve`'s settings: each one given here, else the scenario's `search` (the CLI and the API); a value
    given is checked as the scenario's field is (InputError naming the argument: the API passes them unchecked)."""
    given = {"solver": solver, "time_limit_s": time_limit_s, "threads": threads, "seed": seed,
             "resolution": resolution, "points": points, "batch_tolerance": batch_tolerance}
    chosen = {_SEARCH_FIELDS[name]: value for name, value in given.items() if value is not None}
    if chosen:
        search = _searched(search, chosen)
    return SolveSettings(backend=search.solver, time_limit_s=search.time_limit_s, threads=search.threads or 1,
                         seed=search.seed, resolution=search.front_resolution,
                         points=None if search.front_points == "all" else search.front_points,
                         batch_tolerance=search.batch_tolerance)


def _searched(search: Search, chosen: Mapping[str, object]) -> Search:
    """`search` with the chosen fields replaced, validated as a scenario's (a union's other members' complaints
    dropped, as a file's are); a check of several fields (no location: the resolution against its range) is
    the argument's given alone, else every given one's."""
    from planner.validation import trimmed_errors

    data = {**search.model_dump(), **chosen}
    try:
        return Search.model_validate(data)
    except ValidationError as exc:
        argument = {field: name for name, field in _SEARCH_FIELDS.items()}
        given = ", ".join(argument[field] for field in chosen)
        raise InputError([InputProblem(None, None, argument.get(str(error["loc"][0]), str(error["loc"][0]))
                                       if error["loc"] else given,
                                       str(error["msg"]).removeprefix("Value error, ")
                                       + (f" (got {error['input']!r})" if error["loc"] else ""))
                          for error in trimmed_errors(data, exc)]) from None


@dataclass
class SolveResult:
    resolved: ResolvedScenario
    settings: SolveSettings
    front: list[SolvedPoint]
    sweep: SweepResult
    time_s: float
    candidates: dict[str, int] = field(default_factory=dict)
    experts: dict[str, ExpertPlacement] = field(default_factory=dict)  # by `planner.experts.bank_name`
    options: DeploymentOptions | None = None
    prepare_s: float = 0.0  # candidates and options, before the first MILP
    batches: BatchCoverage = field(default_factory=lambda: BatchCoverage(certified=False))
    fastest_ttft_s: float = 0.0  # no deployment has a lower TTFT (the fastest fill of any layout)
    blocks: list[DeploymentOptions] = field(default_factory=list)  # structure blocks (one per group and pair)
    calibration: Calibration | None = None  # what the front was priced with (None: the bundled calibration)

    @property
    def first_feasible_s(self) -> float | None:
        """Seconds from the start to the first front point."""
        first = self.sweep.first_feasible_s
        return None if first is None else self.prepare_s + first

    @property
    def status(self) -> str:
        """Outcome: optimal only when every point is proven and the solve completed (batch search and sweep; why
        it stopped: `termination`)."""
        proven = all(p.status == SolveStatus.OPTIMAL for p in self.front) and not self.timed_out
        return SolveStatus.OPTIMAL.value if proven else SolveStatus.FEASIBLE.value

    @property
    def termination(self) -> Termination:
        """Why the solve stopped: the sweep's reason, or the time limit where it ended the batch search before the
        sweep (whose front then leaves untimed batches in its points' gaps: `coverage.batches.why_grid`)."""
        if self.sweep.termination == "completed" and self.batches.cut_by_time:
            return "time_limit"
        return self.sweep.termination

    @property
    def timed_out(self) -> bool:
        """Cut short: by the time limit, or by a backend error at some cap (`termination` says which)."""
        return self.termination != "completed"

    @cached_property
    def coverage(self) -> Coverage | None:
        """The front's certified TTFT resolution and what a longer solve could still add."""
        return self.sweep.coverage(self.fastest_ttft_s, self.outside)

    @cached_property
    def outside(self) -> OutsideBound | None:
        """What the batches the batch search left untimed could reach (None: none left)."""
        return outside_bound(self.resolved, self.batches, [b.groups for b in self.blocks])

    @property
    def gap(self) -> float:
        return max((p.gap for p in self.front), default=0.0)

    def model_statistics(self) -> dict[str, dict[str, int]]:
        """Variables and constraints per family of the full MILP at the first TTFT cap, before any
        screening by bounds (the models solved are subsets of it)."""
        if self.options is None:
            return {}
        slo = self.resolved.scenario.slo.ttft_ms
        return build_model(self.options, None if slo is None else slo / 1e3, 0.0).model.statistics()


# CPython's cyclic collector runs every 700 net allocations and rescans older objects every 10 runs: a solve
# builds millions of short-lived tuples (operators, step shapes) while keeping 1e5-1e6 objects alive (timed
# candidates, their step work), and those rescans took 30% of a one-rack solve (2.05 -> 1.52 s CPU, Kimi K2;
# 64 racks 3.95 -> 2.79 s) for no memory back (peak RSS equal within 1%: what a solve frees, reference counts
# free). So the thresholds are raised while solving and restored after. The older generations' thresholds (100,
# 100): a one-rack solve stays well short of a middle-generation collection (0.13-0.19 s each when reached).
SOLVE_GC_THRESHOLDS = (20_000, 100, 100)


@contextmanager
def _rare_collections() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(before, SOLVE_GC_THRESHOLDS, strict=True)))
    try:
        yield
    finally:
        gc.set_threshold(*before)


def solve(resolved: ResolvedScenario, settings: SolveSettings, calibration: Calibration | None = None) -> SolveResult:
    """The Pareto front of TTFT against tokens/s per GPU; raises InfeasibleError (naming the binding
    resource) or NoSolutionInTimeError."""
    with _rare_collections():
        return _solve(resolved, settings, calibration)


def _solve(resolved: ResolvedScenario, settings: SolveSettings, calibration: Calibration | None) -> SolveResult:
    start = time.perf_counter()
    custom = calibration
    calibration = calibration or default_calibration()
    # one group: the grid's batches until the deadline (refine bounds those left); several: the whole grid
    limit = settings.time_limit_s
    generate_by = start + min(GENERATE_SHARE * limit, limit - SWEEP_RESERVE_S) if len(resolved.groups) == 1 else None
    sets = [generate(resolved.view(group), calibration, deadline=generate_by) for group in resolved.groups]
    tolerance = 0.0 if settings.resolution == "exact" else settings.batch_tolerance
    search: BatchSearch | InventorySearch
    if len(sets) == 1:
        search = batch_search(resolved, calibration, sets[0], tolerance, label=resolved.groups[0].name)
    else:
        search = InventorySearch(resolved, calibration, sets, tolerance)
    blocks, batches = _search_blocks(resolved, search, start + BATCH_SHARE * limit)
    candidates = sets[0] if len(sets) == 1 else merged(sets)
    if not any(b.mixed or b.disaggregated for b in blocks):
        raise diagnose.no_candidates(resolved, candidates)
    prepare_s = time.perf_counter() - start
    chosen = LazyBackend(settings.backend)  # its import (CP-SAT: 0.3-0.8 s), if a MILP runs, counts in the limit
    reserve = min(OUTPUT_SHARE * limit, OUTPUT_RESERVE_S)
    result = _sweep(resolved, calibration, blocks, settings, chosen, start + limit - reserve, candidates)
    swept = time.perf_counter() - start - prepare_s
    resume_by = start + limit - reserve - max(2 * swept, SWEEP_RESERVE_S)
    if search.resumable and resume_by - time.perf_counter() >= RESUME_MIN_S:
        first = (blocks, replace(batches), result, prepare_s)
        blocks, batches = _search_blocks(resolved, search, resume_by)  # on from the intervals the cut left open
        candidates = sets[0] if len(sets) == 1 else merged(sets)  # with the batches the resumed searches timed
        prepare_s = time.perf_counter() - start
        result = _sweep(resolved, calibration, blocks, settings, chosen, start + limit - reserve, candidates)
        if result.termination != "completed" and first[2].termination == "completed":  # the first finished
            blocks, batches, result, prepare_s = first
    front = result.front
    if not front:
        if result.out_of_time:
            raise NoSolutionInTimeError(f"no deployment found within the time limit of {settings.time_limit_s:g} s; "
                                        "raise --time-limit")
        raise diagnose.no_deployment(resolved)
    counts = {str(role): len(c) for role, c in candidates.by_role.items()}
    fastest = candidates.fastest_ms.get("ttft", 0.0) / 1e3
    outside = outside_bound(resolved, batches, [b.groups for b in blocks])
    front = [_with_batch_bound(solved, batches, outside) for solved in front]
    solved = SolveResult(resolved, settings, front, result, 0.0, counts, options=blocks[0], prepare_s=prepare_s,
                         fastest_ttft_s=fastest, batches=batches, blocks=blocks, calibration=custom)
    solved.outside = outside  # what the cached property would compute again (seconds on 256 racks)
    solved.experts = _expert_placements(resolved, front, settings)
    solved.time_s = time.perf_counter() - start
    return solved


def _sweep(resolved: ResolvedScenario, calibration: Calibration, blocks: list[DeploymentOptions],
           settings: SolveSettings, backend: LazyBackend, end: float, candidates: CandidateSet) -> SweepResult:
    """The sweep over `blocks` until `end` (`time.perf_counter()`)."""
    left = max(0.1, end - time.perf_counter())
    fastest = candidates.fastest_ms.get("ttft", 0.0) / 1e3
    return sweep(resolved, calibration, blocks,
                 SweepSettings(backend, left, settings.threads, settings.seed, settings.pair_screening,
                               settings.resolution, settings.points, settings.on_point), fastest)


def _search_blocks(resolved: ResolvedScenario, search: BatchSearch | InventorySearch,
                   deadline: float) -> tuple[list[DeploymentOptions], BatchCoverage]:
    """The batch search (on from where a cut left it) until the deadline, then the blocks to sweep: one group's
    options, or every structure block of an inventory built from the refined candidates."""
    if isinstance(search, BatchSearch):
        options, batches = search.run(deadline)
        return [options], batches
    batches = search.run(deadline)
    blocks = structure_blocks(resolved, search.sets, search.calibration)
    for block in blocks:  # each block's unit table, from its search's (a search on the grid only built none)
        if block.label in search.tables and search.tables[block.label].seen:
            search.tables[block.label].leave_on(block, resolved)
    return blocks, batches


def structure_blocks(resolved: ResolvedScenario, sets: list[CandidateSet],
                     calibration: Calibration) -> list[DeploymentOptions]:
    """Every structure block of an inventory: each group on its own, then fills on one group and decode on
    another (every ordered pair)."""
    names = [group.name for group in resolved.groups]
    blocks = [deployment_options(resolved, own, calibration, label=name) for own, name in zip(sets, names, strict=True)]
    for (a, fills), (b, decodes) in itertools.permutations(zip(names, sets, strict=True), 2):
        if fills.by_role.get("prefill") and decodes.by_role.get("decode"):
            blocks.append(deployment_options(resolved, fills, calibration, decode_from=decodes, label=f"{a}>{b}"))
    return blocks


def outside_bound(resolved: ResolvedScenario, batches: BatchCoverage,
                  groups: list[frozenset[str]]) -> OutsideBound | None:
    """`batches.outside` per cluster GPU, composed where the sweep composes the blocks (`groups`: each one's)."""
    every = frozenset(group.name for group in resolved.groups)
    return batches.outside(resolved.gpus, composing(resolved, groups), every)


def _with_batch_bound(solved: SolvedPoint, batches: BatchCoverage, outside: OutsideBound | None) -> SolvedPoint:
    """A point that an untimed batch could still beat (batch intervals left open at the time limit) is
    feasible, its gap measured against the most such a batch could reach at its TTFT (`OutsideBound.at`:
    beside the point's deployments where the sweep composes them, with at most the point's own bound). An
    interval closed within a tolerance could beat the front by that much, whether or not the search ended. Where
    the search kept the grid's batches only (`BatchCoverage.off_grid`: multi-turn sessions, used accounting), the
    batches between are neither timed nor bounded, and beat grid points by up to 27% (session 38): every point is
    feasible, its gap unknown (1)."""
    if batches.off_grid:
        return replace(solved, status=SolveStatus.FEASIBLE, gap=1.0)
    value = solved.point.tokens_per_s_per_gpu
    own = value / (1 - solved.gap) if solved.gap < 1 else value  # the sweep's bound on timed deployments
    # batches closed within the tolerance (beside open ones of other blocks, where composed) reach at most this
    found = own * (1 + batches.tolerance)
    bound = found if outside is None else max(found, outside.at(solved.point.ttft_ms / 1e3, found))
    if bound <= own * (1 + 1e-12):  # nothing beyond the point's own gap
        return solved
    return replace(solved, status=SolveStatus.FEASIBLE, gap=max(solved.gap, (bound - value) / bound))


def _expert_placements(resolved: ResolvedScenario, front: list[SolvedPoint],
                       settings: SolveSettings) -> dict[str, ExpertPlacement]:
    experts = resolved.architecture.num_experts
    if experts is None:
        return {}
    banks = sorted({pool_bank(resolved, pool) for p in front for pool in p.point.layout.pools if pool.moe_ep > 1})
    workload, search = resolved.scenario.workload, resolved.scenario.search
    groups = resolved.architecture.expert_routing[0]
    # CP-SAT with a deterministic time limit: the same banks on every run (the other backends have no
    # deterministic limit)
    return {bank_name(ep, domains): _place(experts, ep, workload.routing_skew, search.redundant_experts, "cpsat",
                                           settings.seed, domains, groups if domains > 1 else 1)
            for ep, domains in banks}


@lru_cache(maxsize=256)
def _place(experts: int, ep: int, skew: float, redundant: int, backend_name: str, seed: int, domains: int,
           groups: int) -> ExpertPlacement:
    return place_experts(experts, ep, skew, redundant, backend_name, EXPERT_TIME_S, seed, domains, groups)

