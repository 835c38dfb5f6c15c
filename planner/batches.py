"""Any integer batch: branch and bound over each layout's batch range (cluster GPU accounting).

Candidates are timed at a grid of batches per parallel layout (`planner.templates`: powers of two per
attention-DP rank, 1, and the largest batch worth running). Between two timed batches lo < hi of one
layout lies an interval of untimed integer batches. For a fixed layout the cost model is monotone in the
batch (step time grows, step time per sequence does not; memory grows; tested along integer batches in
`tests/planner/test_batches.py`), which bounds every batch b of [lo, hi] by its ends:
- a mixed (aggregated) pool: TTFT(b) >= TTFT(lo), tokens/s(b) <= tokens/s(hi); where prompts outpace decode
  at hi, the rate may fall with the batch, and tokens/s(b) <= osl x sequences(hi) / round(lo) instead
  (`_mixed_rate_bound`; the round and the sequences in service grow with the batch);
- a prefill pool: fill latency(b) >= fill(lo), capacity(b) <= capacity(hi): the optimistic prefill option
  (fill(lo), capacity(hi)) is at least as good in TTFT and rate in every deployment;
- a decode pool: D b sequences in [D lo, D hi], decoding time Z(b) in [Z(lo), Z(hi)]; the closed loop's
  TTFT grows with concurrency and falls with Z, its rate grows with concurrency and falls with Z
  (`pairs.pair_figures`), so (D lo, Z(hi)) bounds TTFT from below and (D hi, Z(lo)) the rate from above.
An interval is closed when each deployment it could hold, at its optimistic bounds, is beaten by a timed
deployment (exact, the unit table's front and the aggregated points) at no more TTFT. Otherwise its
middle batch is timed and the two halves are checked in the next round. Closed intervals stay closed (the
front only improves and the halves' bounds are tighter), so the rounds end with every interval closed:
the candidates then hold the front over every integer batch, or, at the time limit, the open intervals'
bounds say how much a point could still gain (`BatchCoverage`).

Multi-turn sessions (KV tiers sized per batch) and `used` accounting keep the grid; their fronts are
certified over the grid's batches only (stated in the output).
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from costmodel.calibration import Calibration
from costmodel.resolve import ResolvedScenario
from planner.formulation.options import DecodeOption, DeploymentOptions, deployment_options
from planner.formulation.pairs import pair_figures, prefill_wait
from planner.formulation.units import (
    TableEntries,
    UnitTable,
    first_cap,
    join_tables,
    most_beside,
    undominated_fills,
    unit_table,
)
from planner.placement import Domains, max_replicas
from planner.sweep_result import OutsideBound
from planner.templates import Candidate, CandidateKind, CandidateSet, kind_role, layout_key, planned, timed_plans

TOL = 1e-9  # relative: an interval tied with the front is closed (it cannot beat it)
COUNT_RUN = 1.25  # `_boxes`: decode counts bounded in runs lo ... hi <= COUNT_RUN x lo before count by count
SPLITS = 8192  # `_this_round`: open intervals split per round, at most (64 racks split up to 2,300 a round)
BUCKETS = 16  # `_alive`'s cheap bounds: runs of fill options (decode rows) per size, each bounded by one
PIECES = 4  # a decode interval's bound is taken over this many sub-ranges of its sequences (no timing needed)
CHUNK = 2_000_000  # bound evaluations per numpy block
SLACK = 1e-12  # relative: rounding of a bound scaled from a timed batch (kept on the safe side)
SCREEN_SLACK = 1e-9  # relative: a pair's rate over its fill capacity by rounding (a few ulps at most)
# An inventory's searches run one after another (`InventorySearch`), each until the deadline less this share of the
# time left for each search after it, at most LATER_KEPT for all of them: a search that ends within that does what
# it would uncut, so a solve whose searches all end gives the same candidates and figures whatever the clock; one
# cut by it leaves the later searches their first rounds (an even share cut the 64-rack mixed fleet's GB200 search
# at 9 s of the 36 s it had, ten attention-DP degrees, where it needs 11), and goes on in what they leave.
LATER_SHARE, LATER_KEPT = 0.1, 0.5


@dataclass(frozen=True)
class Interval:
    """The untimed batches strictly between two timed ones of a layout (`only`: just that one of them)."""

    kind: CandidateKind
    low: Candidate
    high: Candidate
    only: int = 0

    @property
    def middle(self) -> int:
        return (self.low.pool.batch + self.high.pool.batch) // 2

    @property
    def fill_bound(self) -> float:
        """A fill pool's fill latency over the interval, from below: fill(lo), and, for one batch n, n over
        capacity(hi) (a fill of n requests lasts at least n / capacity(n), and capacity grows with n)."""
        fill = self.low.timing.ttft_s
        return max(fill, self.only / self.high.requests_per_s) if self.only else fill


@dataclass
class BatchCoverage:
    """After the rounds: intervals still open (a deployment there may beat the front) with their bounds."""

    certified: bool
    tolerance: float = 0.0  # an untimed batch beats no front point by more than this (relative)
    rounds: int = 0
    timed: int = 0  # batches timed beyond the grid
    open_ttft: np.ndarray = field(default_factory=lambda: np.zeros(0))  # lower bounds of TTFT, s
    open_value: np.ndarray = field(default_factory=lambda: np.zeros(0))  # upper bounds of tokens/s
    untimed: int = 0  # grid batches candidate generation left untimed at its deadline (bounded as open)
    cut_by_time: bool = False  # the time limit ended the batch search (its open intervals are in the gaps)
    unsearched: str = ""  # a block whose timed batches deploy nothing: its untimed ones bounded, not searched
    # the grid's batches only (`_grid_only`), those between neither timed nor bounded: no point is proven over them
    off_grid: bool = False
    # per open bound: the structure block it belongs to (index into `blocks`, each block's groups; no blocks:
    # one block, a single group's search)
    open_block: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    blocks: tuple[frozenset[str], ...] = ()

    def outside(self, cluster_gpus: int, composed: bool, every: frozenset[str]) -> OutsideBound | None:
        """What the open intervals could reach, per cluster GPU (None: none open)."""
        if not self.open_ttft.size:
            return None
        block = self.open_block if self.open_block.size else np.zeros(self.open_ttft.size, dtype=np.int64)
        return OutsideBound.of(self.open_ttft, self.open_value / cluster_gpus, block, self.blocks, composed, every)


@dataclass(frozen=True)
class _Front:
    """The exact front of timed deployments: TTFT (s) ascending, best tokens/s up to each."""

    ttft: np.ndarray
    best: np.ndarray

    def at(self, ttft_s: np.ndarray) -> np.ndarray:
        if self.ttft.size == 0:  # nothing timed deploys: every bound is unbeaten
            return np.zeros(np.shape(ttft_s))
        where = np.searchsorted(self.ttft, ttft_s * (1 + 1e-12), "right") - 1
        return np.where(where >= 0, self.best[np.maximum(where, 0)], 0.0)

    def reach(self, value: np.ndarray) -> np.ndarray:
        """Where the front first reaches each `value` (> 0): the TTFT of its first corner with at least that
        value (inf: none). The staircase grows with TTFT, so `at(t) < value` exactly when
        t x (1 + 1e-12) < reach(value), as `at` scales t: one comparison per entry instead of a search."""
        return np.append(self.ttft, np.inf)[np.searchsorted(self.best, value, "left")]


class _Packing:
    """Most fill instances beside each count of decode instances (`most_beside`), per pair of instance sizes,
    kept across the batch search's rounds (its domains do not change)."""

    def __init__(self) -> None:
        self.known: dict[tuple[object, ...], np.ndarray] = {}

    def most_beside(self, size_p: np.ndarray, size_d: int, counts: np.ndarray, domains: Domains) -> np.ndarray:
        """`most_beside(size_p, size_d, counts, domains)` for counts 1, 2, ... n."""
        sizes, which = np.unique(np.asarray(size_p, dtype=np.int64), return_inverse=True)
        rows = []
        for size in sizes.tolist():
            key = (size, size_d, counts.size, domains)
            row = self.known.get(key)
            if row is None:
                row = self.known[key] = most_beside(np.array([size]), size_d, counts, domains)[0]
            rows.append(row)
        return np.stack(rows)[np.reshape(which, -1)]


def refine(resolved: ResolvedScenario, calibration: Calibration, candidates: CandidateSet,
           deadline: float, tolerance: float = 0.0, label: str = "",
           tables: TableParts | None = None) -> tuple[DeploymentOptions, BatchCoverage]:
    """Time batches until no interval can beat the front by more than `tolerance` (relative, in tokens/s
    at equal TTFT), or the deadline: the options to solve over, which carry their unit table (`label`: the
    group's name, for messages; `tables`: where the rounds' tables go instead, for options built later: an
    inventory's, whose other searches add candidates to the group's)."""
    return batch_search(resolved, calibration, candidates, tolerance, label, tables).run(deadline)


def batch_search(resolved: ResolvedScenario, calibration: Calibration, candidates: CandidateSet,
                 tolerance: float = 0.0, label: str = "", tables: TableParts | None = None) -> BatchSearch:
    """`refine`'s search, before its first round (`BatchSearch.run`)."""
    options = deployment_options(resolved, candidates, calibration)
    search = BatchSearch(resolved, calibration, candidates, label, options, _intervals(candidates),
                         BatchCoverage(certified=True, tolerance=tolerance),
                         TableParts() if tables is None else tables, leave_table=tables is None)
    if _grid_only(resolved):
        # the grid's batches only: those generation's deadline left untimed are out of the front, so the time limit
        # cut it (`SolveResult.termination`); no unit table left (`used` accounting has none)
        search.finish(BatchCoverage(certified=False, untimed=candidates.untimed, cut_by_time=bool(candidates.untimed),
                                    off_grid=True))
    elif candidates.untimed:  # generation's deadline left grid batches untimed: bound each (cheaply), time no more
        # every bound is kept, none screened by the front (which would need the unit table: 0.4 s on 16 racks):
        # a bound the timed front beats adds nothing to a proven point's gap
        ttft_lb, value_ub = _unscreened(options, _untimed_grid(candidates), resolved)
        search.finish(BatchCoverage(certified=False, open_ttft=ttft_lb, open_value=value_ub,
                                    untimed=candidates.untimed, cut_by_time=True))
    return search


@dataclass
class BatchSearch:
    """One block's batch search, resumable: a search its deadline cut keeps the intervals it left open, and
    `run` with a later deadline goes on from them (the solve hands it the time its sweep did not take; an
    inventory's searches hand each other what they leave). A group's own block searches its candidates'
    intervals; a cross-group block (`decodes`: fills on `candidates`' group, decode on another) the fill
    intervals of one and the decode intervals of the other (`cross_search`)."""

    resolved: ResolvedScenario
    calibration: Calibration
    candidates: CandidateSet
    label: str
    options: DeploymentOptions
    intervals: list[Interval]  # open: to bound and split
    coverage: BatchCoverage
    tables: TableParts
    leave_table: bool  # leave the options their unit table (not where `tables` is an inventory's)
    packing: _Packing | None = field(default_factory=lambda: _Packing())
    front: _Front | None = None
    decodes: CandidateSet | None = None  # a cross-group block's decode candidates

    @property
    def resumable(self) -> bool:
        """Cut by its deadline with intervals left to search."""
        return self.coverage.cut_by_time and bool(self.intervals)

    def finish(self, coverage: BatchCoverage) -> None:
        """End the search without rounds, with `coverage`."""
        self.coverage, self.intervals, self.leave_table = coverage, [], False

    def run(self, deadline: float) -> tuple[DeploymentOptions, BatchCoverage]:
        """Rounds until every interval is closed or the deadline: the options and the coverage (a cut search's
        open intervals' bounds in it, kept to be searched on by the next `run`)."""
        if self.resumable:  # what the last cut left open is searched on, with what other searches timed since
            self.coverage.certified, self.coverage.cut_by_time = True, False
            self.coverage.open_ttft, self.coverage.open_value = np.zeros(0), np.zeros(0)
            self.intervals = _current(self.intervals, self._set_of)
            self.options = self._options()
        while self.intervals:
            if self.decodes is not None and not self.options.disaggregated:  # no timed fill and decode pair
                intervals, self.intervals = self.intervals, []
                _unsearched(self.coverage, self.options, intervals, self.resolved, self.label)
                return self.options, self.coverage
            late = time.perf_counter() >= deadline
            if self.front is None or not late:  # past it: the last front bounds the rest (sound)
                self.front = _front(self.options, self.resolved, self.front, self.tables)
            if self.front.ttft.size == 0 and self.decodes is None:
                # no timed deployment at all: the smallest batches (timed) deploy nothing (a cross-group block's
                # rounds go on, every interval open against the empty front, as they always have)
                intervals, self.intervals = self.intervals, []
                _unsearched(self.coverage, self.options, intervals, self.resolved, self.label or "the cluster")
                return self.options, self.coverage
            left: list[Interval] = []
            split = _round(self.coverage, self.options, self.intervals, self.front, self.resolved, deadline, late,
                           self.packing, left)
            if split is None:
                self.intervals = left  # none where every interval closed
                break
            now, later = split
            self.intervals = self._time_middles(now) + later
            self.options = self._options()
        if self.leave_table:
            self.tables.leave_on(self.options, self.resolved)
        return self.options, self.coverage

    def _set_of(self, kind: CandidateKind) -> CandidateSet:
        """The candidates an interval of `kind` belongs to."""
        return self.decodes if self.decodes is not None and kind == "decode" else self.candidates

    def _options(self) -> DeploymentOptions:
        return _block_options(self.resolved, self.calibration, self.candidates, self.decodes, self.label)

    def _time_middles(self, intervals: list[Interval]) -> list[Interval]:
        """Time the intervals' middle batches into their candidates: the halves left to search."""
        if self.decodes is None:
            return _split(self.resolved, self.calibration, self.candidates, intervals)
        return (_split(self.resolved, self.calibration, self.candidates, [i for i in intervals if i.kind != "decode"])
                + _split(self.resolved, self.calibration, self.decodes, [i for i in intervals if i.kind == "decode"]))


def _block_options(resolved: ResolvedScenario, calibration: Calibration, candidates: CandidateSet,
                   decodes: CandidateSet | None, label: str) -> DeploymentOptions:
    """A search's options: a group's own (`decodes` None), or a cross-group block's (fills from `candidates`)."""
    if decodes is None:
        return deployment_options(resolved, candidates, calibration)
    return deployment_options(resolved, candidates, calibration, decode_from=decodes, label=label)


def _current(intervals: list[Interval], set_of: Callable[[CandidateKind], CandidateSet]) -> list[Interval]:
    """Intervals cut at the batches timed inside them since (by an inventory's other searches, whose blocks
    share the layouts): each batch is then timed once, and the narrower intervals' bounds are tighter."""
    result = []
    for interval in intervals:
        if interval.only:  # one untimed grid batch: nothing inside to time
            result.append(interval)
            continue
        rungs = set_of(interval.kind).ladders[(interval.kind, layout_key(interval.low.pool))]
        inside = [r for r in rungs if interval.low.pool.batch <= r.pool.batch <= interval.high.pool.batch]
        result += [Interval(interval.kind, lo, hi) for lo, hi in itertools.pairwise(inside)
                   if hi.pool.batch - lo.pool.batch > 1]
    return result


def _round(coverage: BatchCoverage, options: DeploymentOptions, intervals: list[Interval], front: _Front,
           resolved: ResolvedScenario, deadline: float, late: bool, packing: _Packing | None = None,
           left: list[Interval] | None = None) -> tuple[list[Interval], list[Interval]] | None:
    """One round: the intervals the front does not close, as (those to split now, those left for the next
    round); none where every interval is closed or the deadline has passed (`late`: the open intervals' bounds
    then go to `coverage`, under the cheap bounds, whose cost the time limit can afford, and the intervals to
    `left`; the full bounds are taken until the deadline, each check's intervals past it keeping their cheap
    bounds)."""
    alive, ttft_lb, value_ub = _alive(options, intervals, front, resolved, coverage.tolerance,
                                      full_until=-math.inf if late else deadline, packing=packing)
    intervals = [i for i, keep in zip(intervals, alive, strict=True) if keep]
    if not intervals:
        return None
    if late or time.perf_counter() >= deadline:
        coverage.certified, coverage.cut_by_time = False, True
        coverage.open_ttft, coverage.open_value = ttft_lb, value_ub
        if left is not None:
            left += intervals
        return None
    coverage.rounds += 1
    now, later = _this_round(intervals)
    coverage.timed += len(now)  # one middle batch each
    return now, later


def _unscreened(options: DeploymentOptions, intervals: list[Interval],
                resolved: ResolvedScenario) -> tuple[np.ndarray, np.ndarray]:
    """The cheap bounds of intervals, each kept (against an empty front: nothing closes them but the SLOs)."""
    _, ttft_lb, value_ub = _alive(options, intervals, _Front(np.zeros(0), np.zeros(0)), resolved, 0.0,
                                  full_until=-math.inf)
    return ttft_lb, value_ub


def _unsearched(coverage: BatchCoverage, options: DeploymentOptions, intervals: list[Interval],
                resolved: ResolvedScenario, label: str) -> BatchCoverage:
    """A block none of whose timed batches deploys (its smallest batches are timed): its untimed batches are
    bounded, not searched (what they could reach goes in the points' gaps); certified where no bound is left."""
    ttft_lb, value_ub = _unscreened(options, intervals, resolved)
    if ttft_lb.size:
        coverage.certified, coverage.unsearched = False, label
        coverage.open_ttft, coverage.open_value = ttft_lb, value_ub
    return coverage


def _this_round(intervals: list[Interval]) -> tuple[list[Interval], list[Interval]]:
    """The open intervals to split now, and those left for the next round: at most SPLITS a round, those of
    the layouts with the most tokens/s per GPU first (a round's timing and the front's next update, whose unit
    table grows with the batches timed, then stay short: a round of 6,000 took 80 s on 64 racks under the
    cheap bounds alone). Deferring is a last resort: at 2,048 a round, 64 Kimi K2 racks deferred the intervals
    that held the front and were cut at 60 s, where they are certified in 24 s splitting every one."""
    if len(intervals) <= SPLITS:
        return intervals, []
    ranked = sorted(intervals, key=lambda i: (-i.high.requests_per_s / i.high.gpus, i.kind, i.low.pool.batch))
    return ranked[:SPLITS], ranked[SPLITS:]


def cross_search(resolved: ResolvedScenario, calibration: Calibration, fills: CandidateSet, decodes: CandidateSet,
                 label: str, tolerance: float = 0.0, tables: TableParts | None = None) -> BatchSearch:
    """The batch search of a cross-group block (fills on one group, decode on another, `label` "fills>decode")
    over the batches its groups' own searches left untimed: the open fill and decode intervals are bounded
    against the block's timed front and split (their middles timed into their groups' candidates) until each
    is closed, or the deadline, whose open intervals' bounds go to the points' gaps (`tables`: where the
    rounds' unit tables go, for the block's options built later)."""
    options = _block_options(resolved, calibration, fills, decodes, label)
    intervals = ([i for i in _intervals(fills) if i.kind == "prefill"]
                 + [i for i in _intervals(decodes) if i.kind == "decode"])
    search = BatchSearch(resolved, calibration, fills, label, options, intervals,
                         BatchCoverage(certified=True, tolerance=tolerance),
                         TableParts() if tables is None else tables, leave_table=False, packing=None, decodes=decodes)
    if _grid_only(resolved):  # as `batch_search`: the grid's batches only
        search.finish(BatchCoverage(certified=False, off_grid=True))
    return search


def refine_inventory(resolved: ResolvedScenario, calibration: Calibration, sets: list[CandidateSet],
                     deadline: float, tolerance: float = 0.0,
                     tables: dict[str, TableParts] | None = None) -> BatchCoverage:
    """An inventory's batch searches (`InventorySearch`) until they end or the deadline."""
    return InventorySearch(resolved, calibration, sets, tolerance, {} if tables is None else tables).run(deadline)


@dataclass
class InventorySearch:
    """Several groups (`sets` in the order of `resolved.groups`): each group's own structures searched over
    every integer batch (`batch_search`), then each cross-group pair's (`cross_search`), one after another,
    each until the deadline less what the later ones keep (`_share_end`; the groups first: their searches also
    time what the pairs pair); then the searches cut by their share go on in what the others left, until each
    ends or the deadline; a later `run` goes on from there (the solve hands it the time its sweep did not
    take). Searches that all end within their shares time what uncut ones would, whatever the clock; a search
    cut and resumed may time other batches than an uncut one (the front is certified all the same, within the
    batch tolerance). The front is certified over every integer batch when every search ends;
    else each cut search's open intervals, tagged with their block's groups, are in the points' gaps.
    `tables`: each search's unit tables, by its block's label (`DeploymentOptions.label`), for the blocks'
    options."""

    resolved: ResolvedScenario
    calibration: Calibration
    sets: list[CandidateSet]
    tolerance: float = 0.0
    tables: dict[str, TableParts] = field(default_factory=dict)
    searches: list[tuple[BatchSearch, frozenset[str]]] = field(default_factory=list)  # with their blocks' groups

    @property
    def resumable(self) -> bool:
        return any(search.resumable for search, _ in self.searches)

    def run(self, deadline: float) -> BatchCoverage:
        """The searches until each ends or the deadline (the first run starts them): their coverage."""
        if not self.searches:
            self._start(deadline)
        while time.perf_counter() < deadline and self.resumable:
            cut = [search for search, _ in self.searches if search.resumable]
            for index, search in enumerate(cut):
                search.run(_share_end(deadline, len(cut) - index))
        coverages = [(search.coverage, groups) for search, groups in self.searches]
        return BatchCoverage(  # the tolerance only where a search closed intervals with it (not on the grid only)
            certified=all(c.certified for c, _ in coverages), tolerance=max(c.tolerance for c, _ in coverages),
            rounds=max(c.rounds for c, _ in coverages), timed=sum(c.timed for c, _ in coverages),
            cut_by_time=any(c.cut_by_time for c, _ in coverages),
            unsearched=", ".join(c.unsearched for c, _ in coverages if c.unsearched),
            off_grid=any(c.off_grid for c, _ in coverages),
            open_ttft=np.concatenate([c.open_ttft for c, _ in coverages]),
            open_value=np.concatenate([c.open_value for c, _ in coverages]),
            open_block=np.concatenate([np.full(c.open_ttft.size, i, dtype=np.int64)
                                       for i, (c, _) in enumerate(coverages)]),
            blocks=tuple(groups for _, groups in coverages))

    def _start(self, deadline: float) -> None:
        names = [group.name for group in self.resolved.groups]
        pairs = [(a, fills, b, decodes) for (a, fills), (b, decodes)
                 in itertools.permutations(zip(names, self.sets, strict=True), 2)
                 if fills.by_role.get("prefill") and decodes.by_role.get("decode")]
        total = len(self.sets) + len(pairs)
        for own, name in zip(self.sets, names, strict=True):
            search = batch_search(self.resolved, self.calibration, own, self.tolerance, name,
                                  self.tables.setdefault(name, TableParts()))
            search.run(_share_end(deadline, total - len(self.searches)))
            self.searches.append((search, frozenset({name})))
        for a, fills, b, decodes in pairs:  # built after the groups' searches: the intervals those left untimed
            search = cross_search(self.resolved, self.calibration, fills, decodes, f"{a}>{b}", self.tolerance,
                                  self.tables.setdefault(f"{a}>{b}", TableParts()))
            search.run(_share_end(deadline, total - len(self.searches)))
            self.searches.append((search, frozenset({a, b})))


def _share_end(deadline: float, searches: int) -> float:
    """When the next of `searches` searches left should end: the time to the deadline less LATER_SHARE of it
    for each search after it (at most LATER_KEPT for all of them)."""
    now = time.perf_counter()
    return now + max(0.0, (deadline - now) * (1.0 - min(LATER_KEPT, LATER_SHARE * (searches - 1))))


def _grid_only(resolved: ResolvedScenario) -> bool:
    """Multi-turn sessions (KV tiers sized per batch) and `used` accounting keep the grid's batches."""
    return resolved.scenario.workload.sessions is not None or resolved.scenario.search.gpu_accounting != "cluster"


def _intervals(candidates: CandidateSet) -> list[Interval]:
    result = []
    for (kind, _), rungs in sorted(candidates.ladders.items(), key=lambda item: (item[0][0], item[0][1])):
        if kind in ("first", "midfill"):
            continue
        result += [Interval(kind, lo, hi) for lo, hi in itertools.pairwise(rungs) if hi.pool.batch - lo.pool.batch > 1]
    return result


def _untimed_grid(candidates: CandidateSet) -> list[Interval]:
    """Each grid batch candidate generation left untimed, bounded by the timed batches of its layout
    around it (none above: a fill pool's batch beyond the top of its range, which the top dominates)."""
    result = []
    for (kind, key), batches in sorted(candidates.untimed_batches.items()):
        rungs = candidates.ladders.get((kind, key), [])
        timed = [c.pool.batch for c in rungs]  # in batch order
        for batch in batches:
            above = bisect.bisect_right(timed, batch)
            if 0 < above < len(timed):
                result.append(Interval(kind, rungs[above - 1], rungs[above], batch))
    return result


def _split(resolved: ResolvedScenario, calibration: Calibration, candidates: CandidateSet,
           intervals: list[Interval]) -> list[Interval]:
    """Time each interval's middle batch; return the halves that still hold untimed batches."""
    plans = []
    for interval in intervals:
        pool = interval.low.pool.model_copy(update={"batch": interval.middle})
        planned_pool = planned(resolved, [pool], kind_role(interval.kind)[1], candidates)
        if not planned_pool:  # memory is monotone in the batch: the high end fits, so the middle does
            raise AssertionError(f"batch {pool.batch} does not fit although {interval.high.pool.batch} does")
        plans += planned_pool
    halves = []
    for interval, timing in zip(intervals, timed_plans(plans, resolved, calibration), strict=True):  # priced at once
        middle = Candidate(timing.plan.pool, timing)
        candidates.add(resolved, interval.kind, middle, ladder=True)
        halves += [h for h in (Interval(interval.kind, interval.low, middle), Interval(interval.kind, middle,
                                                                                         interval.high))
                   if h.high.pool.batch - h.low.pool.batch > 1]
    return halves


def _front(options: DeploymentOptions, resolved: ResolvedScenario, known: _Front | None = None,
           tables: TableParts | None = None) -> _Front:
    """Timed deployments' front in tokens/s (cluster accounting: per cluster GPU, a constant factor). Given
    the front `known` of the deployments of the candidates `tables.in_front`, only the deployments with a newer
    candidate are added to it: the front of the union is the same staircase. Their unit tables go to `tables`
    (the sweep's table is joined from them: `TableParts.leave_on`)."""
    tables = TableParts() if tables is None else tables
    if known is None and tables.in_front:
        raise ValueError("a first front needs tables none of whose candidates is in a front")
    mixed = [m for m in options.mixed if id(m.candidate) not in tables.in_front]
    ttft = [np.array([m.point.ttft_ms / 1e3 for m in mixed], dtype=float)]
    value = [np.array([m.point.tokens_per_s for m in mixed], dtype=float)]
    for table in tables.for_front(options, resolved):
        ttft.append(np.asarray(table.ttft, dtype=float))
        value.append(options.output_tokens * np.asarray(table.rate, dtype=float))
    if known is not None:
        ttft.append(known.ttft)
        value.append(known.best)
    times, values = np.concatenate(ttft), np.concatenate(value)
    order = np.argsort(times, kind="stable")
    best = np.maximum.accumulate(values[order]) if order.size else np.zeros(0)
    corners = np.concatenate(([True], best[1:] > best[:-1])) if best.size else np.zeros(0, dtype=bool)
    return _Front(times[order][corners], best[corners])  # the staircase's corners: the same `at`


@dataclass
class TableParts:
    """The unit tables a block's batch search built round by round, their options named by candidate, and the
    candidates they cover (`seen`, ids): the block's table, for any options built from more candidates,
    is theirs joined with those of the pairs a newer candidate makes (`leave_on`). The candidates in the search's
    front (`in_front`) lag `seen` where `leave_on` took candidates no front has (a search cut after a round's
    split): their tables wait in `pending` for the front of a resumed search."""

    seen: set[int] = field(default_factory=set)
    entries: list[TableEntries] = field(default_factory=list)
    in_front: set[int] = field(default_factory=set)
    pending: list[UnitTable] = field(default_factory=list)

    def add(self, options: DeploymentOptions, resolved: ResolvedScenario) -> list[UnitTable]:
        """The tables of `options`' deployments with a candidate not seen, kept; `options`' candidates seen."""
        found = list(_new_tables(options, resolved, self.seen))
        self.entries += [TableEntries.of(table, part) for table, part in found]
        self.seen = _candidate_ids(options)
        return [table for table, _ in found]

    def for_front(self, options: DeploymentOptions, resolved: ResolvedScenario) -> list[UnitTable]:
        """The tables of `options`' deployments not yet in the front (those `leave_on` built included); from
        now on every candidate of `options` is in it."""
        tables, self.pending = self.pending + self.add(options, resolved), []
        self.in_front = set(self.seen)
        return tables

    def leave_on(self, options: DeploymentOptions, resolved: ResolvedScenario) -> None:
        """Leave on `options` their unit table (`join_tables`): the sweep then need not build it again (on 64
        Kimi K2 racks 4 s of a 21 s solve). Candidates the last front did not take (a search past its
        deadline; an inventory group's candidates timed by a cross-group search) add their pairs' tables."""
        self.pending += self.add(options, resolved)
        join_tables(options, self.entries, first_cap(resolved))


def _new_tables(options: DeploymentOptions, resolved: ResolvedScenario,
                seen: set[int]) -> Iterator[tuple[UnitTable, DeploymentOptions]]:
    """The unit tables (within the TTFT SLO) of the deployments with a candidate not in `seen`, each with the
    options it indexes: the new fills with every decode option, the earlier fills with the new decode options."""
    new_prefill = tuple(p for p in options.prefill if id(p.candidate) not in seen)
    new_decode = tuple(d for d in options.decode if id(d.candidate) not in seen)
    old_prefill = tuple(p for p in options.prefill if id(p.candidate) in seen)
    for part in (replace(options, prefill=new_prefill), replace(options, prefill=old_prefill, decode=new_decode)):
        table = unit_table(part, first_cap(resolved))
        if table is not None:
            yield table, part


def _candidate_ids(options: DeploymentOptions) -> set[int]:
    return ({id(o.candidate) for o in options.mixed} | {id(o.candidate) for o in options.prefill}
            | {id(o.candidate) for o in options.decode})


def _alive(options: DeploymentOptions, intervals: list[Interval], front: _Front,
           resolved: ResolvedScenario, tolerance: float, full_until: float = math.inf,
           packing: _Packing | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which intervals may hold a deployment the front does not beat; with the bounds of those that do.

    Each check is sound, and each next one tighter and dearer, run only on what the last left open: decode
    intervals whole against one fill per size at least as good as each (`_best_per_size`), their PIECES pieces
    against the fill options in BUCKETS runs per size, each run stood for by one option at least as good
    as its members (`_bucketed`: the cheap bounds), then the pieces still open against every fill option (the
    full bounds); fill intervals likewise against the decode rows. The full bounds are taken until
    `full_until` (`time.perf_counter()`; past it, what they have not reached keeps its cheap bounds: the time
    limit can afford those). `packing`: the instance counts beside each other, kept from earlier rounds."""
    packing = packing or _Packing()
    slo = resolved.scenario.slo
    cap = math.inf if slo.ttft_ms is None else slo.ttft_ms / 1e3
    alive = np.zeros(len(intervals), dtype=bool)
    boxes: list[tuple[np.ndarray, np.ndarray]] = []
    feasible = [i for i, interval in enumerate(intervals) if not _breaks_tpot(interval, resolved)]
    points = [(i, *point) for i in feasible if intervals[i].kind == "mixed"
              for point in _mixed_box(intervals[i], options, cap)]
    if points:  # each mixed interval's one bound, all looked up on the front at once
        index, ttft, value = (np.array(column) for column in zip(*points, strict=True))
        unbeaten = front.at(ttft) < value * (1 - TOL) / (1 + tolerance)
        alive[index[unbeaten]] = True
        boxes.append((ttft[unbeaten], value[unbeaten]))
    # a fill interval whose optimistic option a timed fill option dominates is closed: each of its batches,
    # with any decode batch, does no better than that timed option at the same counts
    dominated = _dominated_fills(options, [intervals[i] for i in feasible])
    feasible = [i for i, out in zip(feasible, dominated, strict=True) if not out]
    check = _Check(options, front, cap, (1 - TOL) / (1 + tolerance), packing)
    every = _pareto(_optimistic_fills(options, [intervals[i] for i in feasible]))
    decode = [i for i in feasible if intervals[i].kind == "decode"]
    for size in sorted({intervals[i].low.gpus for i in decode}):  # each decode interval with every fill
        open_decode, found = check.decode([i for i in decode if intervals[i].low.gpus == size], intervals, every,
                                          size, full_until)
        alive[open_decode] = True
        boxes.append(found)
    prefill = [i for i in feasible if intervals[i].kind == "prefill"]
    if prefill:  # each fill interval with every decode option and open decode interval
        decodes = _optimistic_decodes(options, [intervals[i] for i in feasible])
        open_prefill, found_boxes = check.prefill(prefill, intervals, decodes, full_until)
        alive[open_prefill] = True
        boxes += found_boxes
    return alive, _concatenate([t for t, _ in boxes]), _concatenate([v for _, v in boxes])


@dataclass(frozen=True)
class _Check:
    """The bounds of one round (`_alive`): what the front does not beat, checked in stages."""

    options: DeploymentOptions
    front: _Front
    cap: float
    factor: float
    packing: _Packing

    def boxes(self, fills: _Fills, size: int, rows: _Decodes,
              rows_only: bool = False) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        return _boxes(self.options, fills, size, rows, self.cap, self.front, self.factor, self.packing, rows_only)

    def decode(self, members: list[int], intervals: list[Interval], every: _Fills, size: int,
               full_until: float) -> tuple[list[int], tuple[np.ndarray, np.ndarray]]:
        """The decode intervals of one instance size (`members`, indices into `intervals`) still open, and
        their bounds."""
        # whole, against one fill per size at least as good as each (cheapest, loosest)
        owners, rows = _Decodes.of_intervals(self.options, [intervals[i] for i in members], 1)
        per_row, _, _ = self.boxes(_best_per_size(every), size, rows, rows_only=True)
        members = [members[i] for i in np.unique(np.asarray(owners, dtype=int)[per_row])]
        if not members:
            return [], (np.zeros(0), np.zeros(0))
        # in pieces, against runs of fills (the cheap bounds), then what they leave open against every fill
        # (the full bounds; at once where each run is one fill)
        owners, rows = _Decodes.of_intervals(self.options, [intervals[i] for i in members])
        owner, runs = np.asarray(owners, dtype=int), _bucketed(every, BUCKETS)
        full, found = time.perf_counter() < full_until, (np.zeros(0), np.zeros(0))
        if not full or runs.gpus.size < every.gpus.size:
            per_row, _, found = self.boxes(runs, size, rows, rows_only=True)
            owner, rows = owner[per_row], rows.take(per_row)
        if full and owner.size:
            per_row, _, found = self.boxes(every, size, rows, rows_only=True)
            owner = owner[per_row]
        return [members[i] for i in np.unique(owner)], found

    def prefill(self, members: list[int], intervals: list[Interval], decodes: dict[int, _Decodes],
                full_until: float) -> tuple[list[int], list[tuple[np.ndarray, np.ndarray]]]:
        """The fill intervals (`members`) still open against every decode row (`decodes`, per instance
        size), and their bounds."""
        virtual = _optimistic_fills(replace(self.options, prefill=()), [intervals[i] for i in members])
        # against one decode row per size at least as good as each (cheapest), then runs of rows (the cheap bounds)
        first = np.zeros(len(members), dtype=bool)
        for size, rows in decodes.items():
            first |= self.boxes(virtual, size, rows.best())[1]
        cheap: dict[int, tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]] = {}
        for size, rows in decodes.items() if first.any() else ():
            _, per_fill, found = self.boxes(virtual.take(first), size, rows.bucketed(BUCKETS))
            cheap[size] = per_fill, found
        members = [m for m, keep in zip(members, first.tolist(), strict=True) if keep]
        virtual = virtual.take(first)
        open_fill = np.zeros(len(members), dtype=bool)
        found_boxes = []
        for size, (per_fill, found) in cheap.items():
            left = np.flatnonzero(per_fill)
            if time.perf_counter() < full_until and left.size:  # the full bounds on what the cheap ones left open
                fills, rows = virtual.take(left), decodes[size]
                # the rows against the best of those fills first (sound as above): only the rows it leaves open
                # meet each fill interval
                unbeaten, _, _ = self.boxes(_best_per_size(fills), size, rows, rows_only=True)
                _, full_fill, found = self.boxes(fills, size, rows.take(unbeaten))
                left = left[full_fill]
            open_fill[left] = True
            found_boxes.append(found)
        return [m for m, keep in zip(members, open_fill.tolist(), strict=True) if keep], found_boxes


def _concatenate(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def _breaks_tpot(interval: Interval, resolved: ResolvedScenario) -> bool:
    """TPOT grows with the batch: an interval whose low end breaks the TPOT SLO holds no feasible batch."""
    tpot = resolved.scenario.slo.tpot_ms
    return tpot is not None and interval.kind != "prefill" and interval.low.timing.tpot_s * 1e3 > tpot


def _mixed_box(interval: Interval, options: DeploymentOptions, cap: float) -> list[tuple[float, float]]:
    """A mixed interval's bound (TTFT from below, tokens/s from above), if it has one within the cap."""
    count = _most_instances(interval.low.gpus, options)
    if count < 1 or interval.low.timing.ttft_s > cap * (1 + 1e-12):
        return []
    return [(interval.low.timing.ttft_s, count * _mixed_rate_bound(interval) * options.output_tokens)]


def _mixed_rate_bound(interval: Interval) -> float:
    """Requests per second of one instance at any batch of a mixed interval, from above. Where prompts do not
    outpace decode at its high end, the rate grows with the batch: the high end's. Where they do, it may fall
    (`PoolTiming.prompts_outpace_decode`: by 1e-4 to 5e-4 per sequence, after a rise at the first batches), so
    only the round's growth is assumed: each batch serves at most the high end's sequences in at least the low
    end's round (both monotone: `tests/planner/test_batches.py`). That is looser by up to the interval's
    ratio, and the rounds split such intervals until their ends are close enough for the front to close them."""
    low, high = interval.low.timing, interval.high.timing
    if not high.prompts_outpace_decode:
        return high.requests_per_s
    return max(high.requests_per_s, high.plan.in_service / low.cycle_s)


def _most_instances(size: int, options: DeploymentOptions) -> int:
    return max_replicas(size, options.domains)


@dataclass(frozen=True)
class _Fills:
    """Prefill options as arrays: the timed ones and the open prefill intervals at their optimistic ends."""

    gpus: np.ndarray
    most: np.ndarray
    capacity: np.ndarray
    fill: np.ndarray

    def take(self, rows: np.ndarray) -> _Fills:
        """The options selected by a boolean mask or by indices."""
        return _Fills(self.gpus[rows], self.most[rows], self.capacity[rows], self.fill[rows])


def _optimistic_fills(options: DeploymentOptions, intervals: list[Interval]) -> _Fills:
    timed = list(options.prefill)
    virtual = [i for i in intervals if i.kind == "prefill"]
    return _Fills(gpus=np.array([p.gpus for p in timed] + [i.low.gpus for i in virtual], dtype=np.int64),
                  most=np.array([p.most for p in timed] + [_most_instances(i.low.gpus, options) for i in virtual],
                                dtype=np.int64),
                  capacity=np.array([p.capacity for p in timed] + [i.high.requests_per_s for i in virtual]),
                  fill=np.array([p.fill_s for p in timed] + [i.fill_bound for i in virtual]))


def _dominated_fills(options: DeploymentOptions, intervals: list[Interval]) -> np.ndarray:
    """Which fill intervals have an optimistic option (fill(lo), capacity(hi), the most instances of its
    size) that a timed fill option of the same size dominates: no longer fill, no less capacity, no fewer
    instances (the KV transfer and the instances beside a decode pool depend on the size only)."""
    result = np.zeros(len(intervals), dtype=bool)
    by_size: dict[int, list[tuple[float, float, int]]] = {}
    for p in options.prefill:
        by_size.setdefault(p.gpus, []).append((p.fill_s, p.capacity, p.most))
    for index, interval in enumerate(intervals):
        if interval.kind != "prefill":
            continue
        fill, capacity = interval.fill_bound, interval.high.requests_per_s
        most = _most_instances(interval.low.gpus, options)
        result[index] = any(f <= fill and c >= capacity and m >= most for f, c, m in by_size.get(interval.low.gpus, ()))
    return result


def _pareto(fills: _Fills) -> _Fills:
    """The fill options no other of the same size dominates (no longer fill, no less capacity, no fewer
    instances; of equal ones the first): pairing decode rows with these bounds every pairing."""
    order = np.lexsort((-fills.most, -fills.capacity, fills.fill, fills.gpus))
    kept: list[int] = []
    for i in order.tolist():
        if not any(fills.gpus[k] == fills.gpus[i] and fills.fill[k] <= fills.fill[i]
                   and fills.capacity[k] >= fills.capacity[i] and fills.most[k] >= fills.most[i] for k in kept):
            kept.append(i)
    pick = np.array(sorted(kept), dtype=np.int64)
    return _Fills(fills.gpus[pick], fills.most[pick], fills.capacity[pick], fills.fill[pick])


def _best_per_size(fills: _Fills) -> _Fills:
    """One fill option per instance size that is at least as good as each of that size: the most
    instances, the largest capacity and the shortest fill among them (P_max and the KV transfer depend on
    the size only). Pairing decode intervals with these instead of every fill keeps the bound sound and
    its cost independent of the number of fill layouts."""
    sizes = np.unique(fills.gpus)
    pick = [fills.gpus == size for size in sizes]
    return _Fills(sizes, np.array([fills.most[m].max() for m in pick]),
                  np.array([fills.capacity[m].max() for m in pick]), np.array([fills.fill[m].min() for m in pick]))


def _bucketed(fills: _Fills, buckets: int) -> _Fills:
    """Per instance size, the fill options in fill-latency order cut into up to `buckets` runs, each run
    stood for by one option at least as good as each of its members (as `_best_per_size`, run by run):
    a sound bound, tighter than one option per size where fill latency and capacity trade off."""
    if not fills.gpus.size:
        return fills
    parts = []
    for size in np.unique(fills.gpus).tolist():
        members = np.flatnonzero(fills.gpus == size)
        members = members[np.argsort(fills.fill[members], kind="stable")]
        for run in np.array_split(members, min(buckets, members.size)):
            parts.append((size, fills.most[run].max(), fills.capacity[run].max(), fills.fill[run].min()))
    gpus, most, capacity, fill = (np.array(column) for column in zip(*parts, strict=True))
    return _Fills(gpus.astype(np.int64), most.astype(np.int64), capacity.astype(float), fill.astype(float))


@dataclass(frozen=True)
class _Decodes:
    """Decode rows of one instance size: sequences and decoding time for the TTFT bound (fewest sequences,
    longest decoding) and for the rate bound (most sequences, shortest decoding), and most instances. A
    timed option has one value of each."""

    slots_ttft: np.ndarray
    away_ttft: np.ndarray
    slots_rate: np.ndarray
    away_rate: np.ndarray
    most: np.ndarray

    @staticmethod
    def of_intervals(options: DeploymentOptions, intervals: list[Interval],
                     pieces: int = 0) -> tuple[list[int], _Decodes]:
        """Rows for decode intervals, each cut into up to PIECES sub-ranges of sequences per instance (the
        decoding time bounded by the interval's ends); with the interval each row belongs to."""
        osl = float(options.output_tokens - 1)
        size = intervals[0].low.gpus
        lo = np.array([i.low.pool.batch for i in intervals], dtype=float)
        hi = np.array([i.high.pool.batch for i in intervals], dtype=float)
        only = np.array([i.only for i in intervals], dtype=float)
        z_lo = osl * np.array([i.low.timing.tpot_s for i in intervals])
        z_hi = osl * np.array([i.high.timing.tpot_s for i in intervals])
        # geometric edges lo ... hi (rounded; repeated ones dropped), or one piece [n, n] for a single batch n
        steps = np.arange((pieces or PIECES) + 1) / (pieces or PIECES)
        edges = np.rint(lo[:, None] * (hi / lo)[:, None] ** steps[None, :])
        edges[:, 0], edges[:, -1] = lo, hi
        edges = np.where(only[:, None] > 0, only[:, None], edges)
        a, b = edges[:, :-1], edges[:, 1:]
        keep = (b > a) | ((only[:, None] > 0) & (np.arange(a.shape[1]) == 0)[None, :])
        owner = np.broadcast_to(np.arange(len(intervals))[:, None], a.shape)[keep]
        a, b = a[keep], b[keep]
        # Z(n) = osl TPOT(n) grows with n and Z(n) / n does not (requests/s per instance n / TPOT never falls):
        # over the piece [a, b], Z(n) <= min(Z(hi), Z(lo) b / lo) (the TTFT bound's decoding time, with D a
        # sequences). The rate at D n sequences and Z(n) >= max(Z(lo), Z(hi) n / hi) grows with n (each of the
        # three waits of `pair_figures` gives C / (A + z C) with A > 0), so at D b sequences and
        # max(Z(lo), Z(hi) b / hi) it bounds the piece's rate from above.
        slow = np.minimum(z_hi[owner], z_lo[owner] * b / lo[owner] * (1 + SLACK))
        fast = np.maximum(z_lo[owner], z_hi[owner] * b / hi[owner] * (1 - SLACK))
        most = max_replicas(size, options.decode_room)  # on another group's domains in a cross-group block
        return owner.tolist(), _Decodes(a, slow, b, fast, np.full(owner.size, most))

    @staticmethod
    def of_options(group: list[DecodeOption]) -> _Decodes:
        slots = np.array([d.slots for d in group], dtype=float)
        away = np.array([d.decoding_s for d in group])
        return _Decodes(slots, away, slots, away, np.array([d.most for d in group]))

    def take(self, rows: np.ndarray) -> _Decodes:
        """The rows selected by a boolean mask or by indices."""
        return _Decodes(self.slots_ttft[rows], self.away_ttft[rows], self.slots_rate[rows], self.away_rate[rows],
                        self.most[rows])

    def best(self) -> _Decodes:
        """One row at least as good as each: fewest sequences and longest decoding for the TTFT bound, most
        sequences and shortest decoding for the rate bound, most instances."""
        return _Decodes(self.slots_ttft.min(keepdims=True), self.away_ttft.max(keepdims=True),
                        self.slots_rate.max(keepdims=True), self.away_rate.min(keepdims=True),
                        self.most.max(keepdims=True))

    def bucketed(self, buckets: int) -> _Decodes:
        """The rows in order of sequences cut into up to `buckets` runs, each stood for by its `best` row: a
        sound bound, tighter than one row where sequences and decoding time trade off."""
        order = np.argsort(self.slots_rate, kind="stable")
        runs = [self.take(run).best() for run in np.array_split(order, min(buckets, order.size))]
        return _Decodes.join(runs)

    @staticmethod
    def join(parts: list[_Decodes]) -> _Decodes:
        return _Decodes(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                          ("slots_ttft", "away_ttft", "slots_rate", "away_rate", "most")))


def _optimistic_decodes(options: DeploymentOptions, intervals: list[Interval]) -> dict[int, _Decodes]:
    """Per instance size: the timed decode options and the open decode intervals at their bounds."""
    result: dict[int, list[_Decodes]] = {}
    for size in sorted({d.gpus for d in options.decode}):
        result.setdefault(size, []).append(_Decodes.of_options([d for d in options.decode if d.gpus == size]))
    decode = [i for i in intervals if i.kind == "decode"]
    for size in sorted({i.low.gpus for i in decode}):
        result.setdefault(size, []).append(_Decodes.of_intervals(options, [i for i in decode if i.low.gpus == size])[1])
    return {size: _Decodes.join(parts) for size, parts in result.items()}


def _boxes(options: DeploymentOptions, fills: _Fills, size: int, rows: _Decodes, cap: float, front: _Front,
           factor: float, packing: _Packing | None = None,
           rows_only: bool = False) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Every (fill option, decode row, decode count) at P_max, bounded: TTFT from below, tokens/s from above.
    Returns which decode rows and which fill options have a bound the front does not beat (its best within
    the TTFT bound below value x `factor`), and those bounds. `rows_only`: the caller reads which rows, not
    which fills, so at each count the fills another dominates are left out (`undominated_fills`: no
    slower bare fill and at least its capacity, so its bounds are at least as good at every row: the rows
    and the bounds' reach are the same).

    Screens skip work without changing the answer. Each (fill option, run of counts) is first screened for
    all rows at once: a pair's wait at the prefill pool is at least the fill and its rate at most the fill
    instances' capacity (`prefill_wait`), so a fill plus transfer past the cap, or a front at that TTFT
    beating the run's most capacity's tokens/s, closes every row of it. Then each (row, run) is bounded at
    once, its TTFT bound computed only where the front does not beat its rate bound at the column's least
    TTFT, and the front searched only where it does not beat the capacity's tokens/s at that TTFT bound; the
    runs left open are bounded count by count (`_ExactCounts`). `SCREEN_SLACK` keeps the capacity and the
    runs' rates on the safe side of rounding."""
    most_d = rows.most
    per_row = np.zeros(len(most_d), dtype=bool)
    per_fill = np.zeros(fills.gpus.size, dtype=bool)
    found_t: list[np.ndarray] = []
    found_v: list[np.ndarray] = []
    if fills.gpus.size == 0 or len(most_d) == 0 or int(most_d.max()) < 1:  # none fits (e.g. failed GPUs)
        return per_row, per_fill, (np.zeros(0), np.zeros(0))
    counts = np.arange(1, int(most_d.max()) + 1)
    if options.shared_domains:
        beside = (packing or _Packing()).most_beside(fills.gpus, size, counts, options.domains)
        most = np.minimum(fills.most[:, None], beside)
    else:  # the decode pool on another group: the fills' room does not depend on it
        most = np.broadcast_to(fills.most[:, None], (fills.gpus.size, counts.size))
    capacity = np.where(most >= 1, fills.capacity[:, None] * most, np.nan)
    # an unseen size pair: the shortest transfer; none timed (no prefill or no decode option yet): none (both
    # optimistic)
    fallback = min(options.kv_transfer_s.values(), default=0.0)
    transfer = np.array([options.kv_transfer_s.get((int(g), size), fallback) for g in fills.gpus])
    within = cap * (1 + 1e-12)
    soonest = fills.fill + transfer  # no pair of the fill option has a shorter TTFT
    if rows_only:
        room = np.nan_to_num(capacity)
        capacity = np.where(undominated_fills(soonest, room, room, most >= 1), capacity, np.nan)
    # decode counts in runs lo ... hi (`_count_runs`): each run bounded at once, as a decode interval's piece is
    # (its fewest sequences and most fill capacity for TTFT, its most sequences and that capacity for the rate:
    # TTFT grows with the sequences and falls with the capacity, the rate grows with both; the run's fill
    # capacity is the most of its counts'); the runs the front does not beat are then bounded count by count
    lo, hi = _count_runs(counts.size)
    run_capacity = np.fmax.reduceat(capacity, lo - 1, axis=1)  # NaN: no fill instance beside any of its counts
    ceiling = options.output_tokens * run_capacity * (1 + SCREEN_SLACK) * factor  # nor more tokens/s (x factor)
    live_f, live_k = np.nonzero(np.isfinite(run_capacity) & (soonest <= within)[:, None]
                                & (front.at(soonest)[:, None] < ceiling))
    if live_f.size == 0:
        return per_row, per_fill, (np.zeros(0), np.zeros(0))
    cap_l, fill_l, transfer_l = run_capacity[live_f, live_k], fills.fill[live_f], transfer[live_f]
    lo_l, hi_l, reach_l = lo[live_k], hi[live_k], front.reach(ceiling[live_f, live_k])
    floor_l = front.at(soonest)[live_f]  # the front at no more TTFT than any entry of the column has
    exact = _ExactCounts(options, fills, transfer, capacity, rows, within, front, factor)
    step = max(1, CHUNK // live_f.size)
    for start in range(0, len(most_d), step):
        part = slice(start, start + step)
        top = np.minimum(hi_l, most_d[part, None])  # a run's most decode instances on the row
        with np.errstate(divide="ignore", invalid="ignore"):
            _, value = pair_figures(cap_l, fill_l, transfer_l, rows.slots_rate[part, None] * top,
                                    rows.away_rate[part, None], options.cohort_fraction)
        # the rate, x (1 + SCREEN_SLACK): exactly it never falls with the sequences, but where capacity binds
        # the computed rate wobbles around it by an ulp or two, so a run's count may compute a little above
        # its top's (the counts are then computed afresh: the slack changes no bound returned)
        value *= options.output_tokens * (1 + SCREEN_SLACK)
        # the rate bound first: a run past its row's count, or whose tokens/s the front beats at its column's
        # least TTFT, is closed whatever its TTFT, so the TTFT bound is computed only for the rest
        r, entry = np.nonzero((lo_l <= most_d[part, None]) & (value * factor > floor_l))
        row = start + r
        with np.errstate(divide="ignore", invalid="ignore"):
            ttft = prefill_wait(cap_l[entry], fill_l[entry], transfer_l[entry] + rows.away_ttft[row],
                                rows.slots_ttft[row] * lo_l[entry], options.cohort_fraction)
            ttft += transfer_l[entry]
        # the front looked up only where the TTFT bound is within the cap and the front does not beat the
        # capacity's tokens/s there (`_Front.reach`)
        ok = np.isfinite(ttft) & (ttft <= within) & (ttft * (1 + 1e-12) < reach_l[entry])
        row, entry, bound_t, bound_v = row[ok], entry[ok], ttft[ok], value[r[ok], entry[ok]]
        unbeaten = front.at(bound_t) < bound_v * factor
        row, entry = row[unbeaten], entry[unbeaten]
        for row_e, fill_e, bound_t, bound_v in exact.of_runs(row, live_f[entry], lo_l[entry],
                                                             np.minimum(hi_l[entry], most_d[row])):
            per_row[row_e] = True
            per_fill[fill_e] = True
            found_t.append(bound_t)
            found_v.append(bound_v)
    return per_row, per_fill, (_concatenate(found_t), _concatenate(found_v))


def _count_runs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode counts 1 ... n in runs lo ... hi, each hi at most COUNT_RUN x lo (one count each below
    1 / (COUNT_RUN - 1)): a run's rate bound is then at most COUNT_RUN times its counts' (`_boxes`)."""
    lo: list[int] = []
    count = 1
    while count <= n:
        lo.append(count)
        count = max(count + 1, math.floor(count * COUNT_RUN) + 1)
    starts = np.array(lo, dtype=np.int64)
    return starts, np.append(starts[1:] - 1, n)


@dataclass(frozen=True)
class _ExactCounts:
    """`_boxes`' bounds count by count, for the (row, fill option, run) the run's bound leaves open."""

    options: DeploymentOptions
    fills: _Fills
    transfer: np.ndarray
    capacity: np.ndarray  # fill options x counts (NaN: no fill instance beside that many decode ones)
    rows: _Decodes
    within: float
    front: _Front
    factor: float

    def of_runs(self, row: np.ndarray, fill: np.ndarray, lo: np.ndarray,
                top: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """(row, fill, TTFT bound, tokens/s bound) of each count lo ... top of each run the front does
        not beat, in the order of (row, fill, count), CHUNK entries at most at a time."""
        width = top - lo + 1
        ends = np.cumsum(width)
        start = 0
        while start < row.size:
            stop = max(start + 1, int(np.searchsorted(ends, ends[start] - width[start] + CHUNK, "right")))
            yield self._counts(row[start:stop], fill[start:stop], lo[start:stop], width[start:stop])
            start = stop

    def _counts(self, row: np.ndarray, fill: np.ndarray, lo: np.ndarray,
                width: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        run = np.repeat(np.arange(row.size), width)
        count = lo[run] + np.arange(run.size) - np.repeat(np.cumsum(width) - width, width)
        row, fill = row[run], fill[run]
        cap, transfer, rows, options = self.capacity[fill, count - 1], self.transfer[fill], self.rows, self.options
        with np.errstate(divide="ignore", invalid="ignore"):
            _, value = pair_figures(cap, self.fills.fill[fill], transfer, rows.slots_rate[row] * count,
                                    rows.away_rate[row], options.cohort_fraction)
            value *= options.output_tokens
            ttft = prefill_wait(cap, self.fills.fill[fill], transfer + rows.away_ttft[row],
                                rows.slots_ttft[row] * count, options.cohort_fraction)
            ttft += transfer
        keep = np.isfinite(ttft) & (ttft <= self.within)
        keep[keep] = self.front.at(ttft[keep]) < value[keep] * self.factor
        return row[keep], fill[keep], ttft[keep], value[keep]
