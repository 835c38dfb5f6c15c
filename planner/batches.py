"""Any integer batch: branch and bound over each layout's batch range (cluster GPU accounting).

Candidates are timed at a grid of batches per parallel layout (`planner.templates`: powers of two per
attention-DP rank, 1, and the largest batch worth running). Between two timed batches lo < hi of one
layout lies an interval of untimed integer batches. For a fixed layout the cost model is monotone in the
batch (step time grows, step time per sequence does not; memory grows; tested along integer batches in
`tests/planner/test_batches.py`), which bounds every batch b of [lo, hi] by its ends:
- a mixed (aggregated) pool: TTFT(b) >= TTFT(lo), tokens/s(b) <= tokens/s(hi);
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

import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from costmodel.calibration import Calibration
from costmodel.resolve import ResolvedScenario
from planner.formulation.options import DecodeOption, DeploymentOptions, deployment_options
from planner.formulation.pairs import pair_figures
from planner.formulation.units import _most_beside, unit_table
from planner.templates import Candidate, CandidateKind, CandidateSet, _planned, _timed, kind_role

TOL = 1e-9  # relative: an interval tied with the front is closed (it cannot beat it)
CHUNK = 2_000_000  # bound evaluations per numpy block


@dataclass(frozen=True)
class Interval:
    kind: CandidateKind
    low: Candidate
    high: Candidate

    @property
    def middle(self) -> int:
        return (self.low.pool.batch + self.high.pool.batch) // 2


@dataclass
class BatchCoverage:
    """After the rounds: intervals still open (a deployment there may beat the front) with their bounds."""

    certified: bool
    rounds: int = 0
    timed: int = 0  # batches timed beyond the grid
    open_ttft: np.ndarray = field(default_factory=lambda: np.zeros(0))  # lower bounds of TTFT, s
    open_value: np.ndarray = field(default_factory=lambda: np.zeros(0))  # upper bounds of tokens/s

    def bound_at(self, ttft_s: float) -> float:
        """Most tokens/s an untimed batch could reach at this TTFT or less (0: none)."""
        within = self.open_value[self.open_ttft <= ttft_s * (1 + 1e-12)]
        return float(within.max()) if within.size else 0.0


@dataclass(frozen=True)
class _Front:
    """The exact front of timed deployments: TTFT (s) ascending, best tokens/s up to each."""

    ttft: np.ndarray
    best: np.ndarray

    def at(self, ttft_s: np.ndarray) -> np.ndarray:
        where = np.searchsorted(self.ttft, ttft_s * (1 + 1e-12), "right") - 1
        return np.where(where >= 0, self.best[np.maximum(where, 0)], 0.0)


def refine(resolved: ResolvedScenario, calibration: Calibration, candidates: CandidateSet,
           deadline: float) -> tuple[DeploymentOptions, BatchCoverage]:
    """Time batches until no interval can beat the front (or the deadline): the options to solve over."""
    options = deployment_options(resolved, candidates, calibration)
    if resolved.scenario.workload.sessions is not None or resolved.scenario.search.gpu_accounting != "cluster":
        return options, BatchCoverage(certified=False)
    intervals = _intervals(candidates)
    coverage = BatchCoverage(certified=True)
    while intervals:
        front = _front(options, resolved)
        alive, ttft_lb, value_ub = _alive(options, intervals, front, resolved)
        intervals = [i for i, keep in zip(intervals, alive, strict=True) if keep]
        if not intervals:
            break
        if time.perf_counter() >= deadline:
            coverage.certified = False
            coverage.open_ttft, coverage.open_value = ttft_lb, value_ub
            break
        intervals = _split(resolved, calibration, candidates, intervals)
        coverage.rounds += 1
        coverage.timed += len(intervals) // 2
        options = deployment_options(resolved, candidates, calibration)
    return options, coverage


def _intervals(candidates: CandidateSet) -> list[Interval]:
    result = []
    for (kind, _), rungs in sorted(candidates.ladders.items(), key=lambda item: (item[0][0], item[0][1])):
        if kind in ("first", "midfill"):
            continue
        result += [Interval(kind, lo, hi) for lo, hi in itertools.pairwise(rungs) if hi.pool.batch - lo.pool.batch > 1]
    return result


def _split(resolved: ResolvedScenario, calibration: Calibration, candidates: CandidateSet,
           intervals: list[Interval]) -> list[Interval]:
    """Time each interval's middle batch; return the halves that still hold untimed batches."""
    pools = [i.low.pool.model_copy(update={"batch": i.middle}) for i in intervals]
    halves = []
    for interval, pool in zip(intervals, pools, strict=True):
        _, turns = kind_role(interval.kind)
        plans = _planned(resolved, [pool], turns, candidates)
        if not plans:  # memory is monotone in the batch: the high end fits, so the middle does
            raise AssertionError(f"batch {pool.batch} does not fit although {interval.high.pool.batch} does")
        middle = Candidate(pool, _timed(plans, resolved, calibration)[0])
        candidates.add(resolved, interval.kind, middle, ladder=True)
        halves += [h for h in (Interval(interval.kind, interval.low, middle), Interval(interval.kind, middle,
                                                                                         interval.high))
                   if h.high.pool.batch - h.low.pool.batch > 1]
    return halves


def _front(options: DeploymentOptions, resolved: ResolvedScenario) -> _Front:
    """Timed deployments' front in tokens/s (cluster accounting: per cluster GPU, a constant factor)."""
    slo = resolved.scenario.slo.ttft_ms
    ttft = [m.point.ttft_ms / 1e3 for m in options.mixed]
    value = [m.point.tokens_per_s for m in options.mixed]
    table = unit_table(options, None if slo is None else slo / 1e3)
    if table is not None:
        ttft += list(table.ttft)
        value += list(options.output_tokens * table.rate)
    order = np.argsort(np.array(ttft, dtype=float), kind="stable")
    times = np.array(ttft, dtype=float)[order]
    best = np.maximum.accumulate(np.array(value, dtype=float)[order]) if order.size else np.zeros(0)
    return _Front(times, best)


def _alive(options: DeploymentOptions, intervals: list[Interval], front: _Front,
           resolved: ResolvedScenario) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which intervals may hold a deployment the front does not beat; with the bounds of those that do."""
    slo = resolved.scenario.slo
    cap = math.inf if slo.ttft_ms is None else slo.ttft_ms / 1e3
    alive = np.zeros(len(intervals), dtype=bool)
    boxes: list[tuple[np.ndarray, np.ndarray]] = []

    def check(index: int, ttft: np.ndarray, value: np.ndarray) -> None:
        unbeaten = front.at(ttft) < value * (1 - TOL)
        if unbeaten.any():
            alive[index] = True
            boxes.append((ttft[unbeaten], value[unbeaten]))

    feasible = [i for i, interval in enumerate(intervals) if not _breaks_tpot(interval, resolved)]
    for i in feasible:
        if intervals[i].kind == "mixed":
            check(i, *_mixed_box(intervals[i], resolved, options, cap))
    open_intervals = [intervals[i] for i in feasible]
    fills = _optimistic_fills(options, open_intervals)
    decode = [i for i in feasible if intervals[i].kind == "decode"]
    for size in sorted({intervals[i].low.gpus for i in decode}):  # each decode interval with every fill
        members = [i for i in decode if intervals[i].low.gpus == size]
        rows = _Decodes.of_intervals(options, [intervals[i] for i in members])
        for row, (ttft, value) in zip(members, _boxes(options, fills, size, rows, cap), strict=True):
            check(row, ttft, value)
    decodes = _optimistic_decodes(options, open_intervals)
    for i in (i for i in feasible if intervals[i].kind == "prefill"):  # each fill interval with every decode
        parts = [box for size, rows in decodes.items() for box in _boxes(options, _one_fill(options, intervals[i]),
                                                                         size, rows, cap)]
        if parts:
            check(i, np.concatenate([t for t, _ in parts]), np.concatenate([v for _, v in parts]))
    return alive, _concatenate([t for t, _ in boxes]), _concatenate([v for _, v in boxes])


def _concatenate(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def _breaks_tpot(interval: Interval, resolved: ResolvedScenario) -> bool:
    """TPOT grows with the batch: an interval whose low end breaks the TPOT SLO holds no feasible batch."""
    tpot = resolved.scenario.slo.tpot_ms
    return tpot is not None and interval.kind != "prefill" and interval.low.timing.tpot_s * 1e3 > tpot


def _mixed_box(interval: Interval, resolved: ResolvedScenario, options: DeploymentOptions,
               cap: float) -> tuple[np.ndarray, np.ndarray]:
    count = _most_instances(interval.low.gpus, options)
    if count < 1 or interval.low.timing.ttft_s > cap * (1 + 1e-12):
        return np.zeros(0), np.zeros(0)
    value = count * interval.high.requests_per_s * options.output_tokens
    return np.array([interval.low.timing.ttft_s]), np.array([value])


def _most_instances(size: int, options: DeploymentOptions) -> int:
    domains = options.domains
    if size > domains.size:
        return domains.full // -(-size // domains.size)
    return domains.full * (domains.size // size) + domains.rest // size


@dataclass(frozen=True)
class _Fills:
    """Prefill options as arrays: the timed ones and the open prefill intervals at their optimistic ends."""

    gpus: np.ndarray
    most: np.ndarray
    capacity: np.ndarray
    fill: np.ndarray


def _optimistic_fills(options: DeploymentOptions, intervals: list[Interval]) -> _Fills:
    timed = list(options.prefill)
    virtual = [i for i in intervals if i.kind == "prefill"]
    return _Fills(gpus=np.array([p.gpus for p in timed] + [i.low.gpus for i in virtual], dtype=np.int64),
                  most=np.array([p.most for p in timed] + [_most_instances(i.low.gpus, options) for i in virtual],
                                dtype=np.int64),
                  capacity=np.array([p.capacity for p in timed] + [i.high.requests_per_s for i in virtual]),
                  fill=np.array([p.fill_s for p in timed] + [i.low.timing.ttft_s for i in virtual]))


def _one_fill(options: DeploymentOptions, interval: Interval) -> _Fills:
    return _Fills(np.array([interval.low.gpus]), np.array([_most_instances(interval.low.gpus, options)]),
                  np.array([interval.high.requests_per_s]), np.array([interval.low.timing.ttft_s]))


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
    def of_intervals(options: DeploymentOptions, intervals: list[Interval]) -> _Decodes:
        osl = float(options.output_tokens - 1)
        size = intervals[0].low.gpus
        return _Decodes(np.array([i.low.pool.batch for i in intervals], dtype=float),
                        osl * np.array([i.high.timing.tpot_s for i in intervals]),
                        np.array([i.high.pool.batch for i in intervals], dtype=float),
                        osl * np.array([i.low.timing.tpot_s for i in intervals]),
                        np.full(len(intervals), _most_instances(size, options)))

    @staticmethod
    def of_options(group: list[DecodeOption]) -> _Decodes:
        slots = np.array([d.slots for d in group], dtype=float)
        away = np.array([d.decoding_s for d in group])
        return _Decodes(slots, away, slots, away, np.array([d.most for d in group]))

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
        result.setdefault(size, []).append(_Decodes.of_intervals(options, [i for i in decode if i.low.gpus == size]))
    return {size: _Decodes.join(parts) for size, parts in result.items()}


def _boxes(options: DeploymentOptions, fills: _Fills, size: int, rows: _Decodes,
           cap: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per decode row, the (TTFT lower bound, tokens/s upper bound) of each (fill option, decode count) at
    P_max."""
    most_d = rows.most
    slots = (rows.slots_ttft, rows.slots_rate)
    away = (rows.away_ttft, rows.away_rate)
    rows_n = len(most_d)
    if fills.gpus.size == 0 or rows_n == 0:
        return [(np.zeros(0), np.zeros(0))] * rows_n
    counts = np.arange(1, int(most_d.max()) + 1)
    most = np.minimum(fills.most[:, None], _most_beside(fills.gpus, size, counts, options.domains))
    capacity = np.where(most >= 1, fills.capacity[:, None] * most, np.nan)[None]
    fallback = min(options.kv_transfer_s.values())  # an unseen size pair: the shortest transfer (optimistic)
    transfer = np.array([options.kv_transfer_s.get((int(g), size), fallback) for g in fills.gpus])[None, :, None]
    fill = fills.fill[None, :, None]
    result = []
    step = max(1, CHUNK // (fills.gpus.size * counts.size))
    for start in range(0, rows_n, step):
        part = slice(start, start + step)
        conc_t = slots[0][part, None, None] * counts[None, None, :]
        conc_r = slots[1][part, None, None] * counts[None, None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            ttft, _ = pair_figures(capacity, fill, transfer, conc_t, away[0][part, None, None],
                                   options.cohort_fraction)
            _, rate = pair_figures(capacity, fill, transfer, conc_r, away[1][part, None, None],
                                   options.cohort_fraction)
        ok = ((most >= 1)[None] & (counts[None, None, :] <= most_d[part, None, None]) & np.isfinite(ttft)
              & (ttft <= cap * (1 + 1e-12)))
        value = options.output_tokens * np.asarray(rate, dtype=float)
        result += [(np.asarray(ttft[k][ok[k]], dtype=float), value[k][ok[k]]) for k in range(ttft.shape[0])]
    return result
