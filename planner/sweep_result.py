"""What a sweep returns: the solved points, the TTFT intervals they resolve, and what that certifies about
the exact front (`Coverage`). The sweep itself is `planner.sweep`."""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from planner.formulation.linear import LinearModel
from planner.formulation.model import Selection
from planner.packing import best_packing
from planner.pareto import FrontPoint, binned_front, hypervolume, non_dominated
from planner.solvers import SolveReport, SolveStatus

GRID_S = 1e-6  # TTFT grid of the epsilon steps

Resolution = float | Literal["auto", "exact"]
Termination = Literal["completed", "time_limit", "backend_error"]


def resolution_step(resolution: Resolution) -> float:
    """The TTFT step as a share of the range (0: exact, 1 us steps)."""
    if resolution == "exact":
        return 0.0
    if resolution == "auto":
        return 0.0  # no fixed step: windows are bisected by the hypervolume they can hide
    return float(resolution)


@dataclass(frozen=True)
class SolvedPoint:
    point: FrontPoint
    selection: Selection
    status: SolveStatus
    gap: float  # relative, on the ranked tokens/s per GPU
    proof: str = "milp"  # what proves the status: the MILP, or the closed-form enumeration (every block's)


@dataclass(frozen=True)
class Coverage:
    """What the front certifies. Windows are the TTFT ranges between resolved intervals: a deployment with
    TTFT in window (a, b) has at most the throughput of the resolved point at b, so it is within b - a of
    TTFT of a returned point with at least its throughput (`certified_ms`: the widest window), and the
    hypervolume it could add is at most (b - a) x (that throughput - the best below a)."""

    top_ms: float
    low_ms: float
    step_ms: float
    certified_ms: float
    hypervolume_ratio_at_least: float  # of the returned front to the exact one (reference: top, 0)
    uncovered_ms: list[tuple[float, float, float]]  # windows wider than the step: (from, to, throughput bound)


@dataclass(frozen=True)
class Window:
    low_s: float
    high_s: float
    above: float  # throughput of the resolved point at high_s: no point in the window has more
    below: float  # the best throughput at or below low_s (0: none)

    @property
    def loss(self) -> float:
        """Most hypervolume (s x tokens/s per GPU) the window can hide (inf: nothing proven there)."""
        return (self.high_s - self.low_s) * max(0.0, self.above - self.below)


@dataclass(frozen=True)
class OutsideBound:
    """The most tokens/s per GPU deployments outside the sweep's options (batches the batch search left
    untimed, `planner.batches.BatchCoverage`) could reach at each TTFT or less, per structure block (a group's
    own, or fills on one group and decode on another). Where the sweep composes deployments on disjoint groups
    (`composed`, `planner.sweep.composing`), untimed ones in several blocks could run side by side and beside
    timed ones; a block on every group (`every`) runs beside nothing."""

    ttft_s: np.ndarray  # ascending: the TTFTs at which some block's bound grows
    stairs: np.ndarray  # (blocks, TTFTs): each block's most tokens/s per GPU at each TTFT or less
    groups: tuple[frozenset[str], ...] = ()  # each block's groups (composed only)
    composed: bool = False
    every: frozenset[str] = frozenset()  # the inventory's groups

    @staticmethod
    def of(ttft_s: np.ndarray, value: np.ndarray, block: np.ndarray | None = None,
           groups: tuple[frozenset[str], ...] = (), composed: bool = False,
           every: frozenset[str] = frozenset()) -> OutsideBound:
        """From bounds (TTFT from below, tokens/s per GPU from above) and the block each belongs to (index into
        `groups`; none: one block)."""
        owner = np.zeros(ttft_s.size, dtype=np.int64) if block is None else block
        # first, without sorting, each block's bounds that one of its faster bounds beats (they raise no stair:
        # a time limit can leave tens of millions of bounds on 256 racks)
        rising = np.zeros(ttft_s.size, dtype=bool)
        for b in np.unique(owner).tolist():
            mine = np.flatnonzero(owner == b)
            rising[mine[binned_front(ttft_s[mine], value[mine])]] = True
        ttft_s, value, owner = ttft_s[rising], value[rising], owner[rising]
        order = np.argsort(ttft_s, kind="stable")
        times, value, owner = ttft_s[order], value[order], owner[order]
        blocks = max(len(groups), int(owner.max(initial=-1)) + 1, 1)
        if composed and len(groups) != blocks:  # `at` packs the blocks by their groups
            raise ValueError(f"composed bounds of {blocks} blocks need each block's groups ({len(groups)} given)")
        stairs = np.zeros((blocks, order.size))
        for b in range(blocks):
            stairs[b] = np.maximum.accumulate(np.where(owner == b, value, 0.0)) if order.size else 0.0
        # the corners: the last bound at each TTFT where some block's staircase grows (the same `at`, fewer steps
        # for `first_above`)
        last = np.append(times[1:] != times[:-1], True) if order.size else np.zeros(0, dtype=bool)
        times, stairs = times[last], stairs[:, last]
        grows = np.append(True, (stairs[:, 1:] > stairs[:, :-1]).any(axis=0)) if times.size else last[:0]
        return OutsideBound(times[grows], stairs[:, grows], groups, composed, every)

    def at(self, ttft_s: float, found: float) -> float:
        """The most a deployment with TTFT at or below `ttft_s` could reach, where the sweep's options reach
        at most `found`: one block's bound, or (composed) the untimed deployments of disjoint blocks together
        plus at most `found` of timed ones beside them (a block on every group: alone)."""
        count = int(np.searchsorted(self.ttft_s, ttft_s * (1 + 1e-12), "right"))
        if not count:
            return 0.0
        values = self.stairs[:, count - 1]
        if not self.composed:
            return float(values.max())
        beside = [i for i, g in enumerate(self.groups) if g != self.every]
        alone = max((float(values[i]) for i, g in enumerate(self.groups) if g == self.every), default=0.0)
        packed, _ = best_packing([self.groups[i] for i in beside], [float(values[i]) for i in beside])
        return max(found + packed if packed > 0 else 0.0, alone)

    def first_above(self, found: float, low_s: float, high_s: float) -> float:
        """The first TTFT in [low_s, high_s] at which an outside deployment could beat `found` (high_s: none)."""
        if self.at(low_s, found) > found * (1 + 1e-12):
            return low_s
        for ttft_s in self.ttft_s[(self.ttft_s > low_s) & (self.ttft_s <= high_s)].tolist():
            if self.at(ttft_s, found) > found * (1 + 1e-12):
                return float(ttft_s)
        return high_s


@dataclass
class SweepResult:
    points: list[SolvedPoint] = field(default_factory=list)
    reports: list[SolveReport] = field(default_factory=list)
    largest_model: LinearModel | None = None
    termination: Termination = "completed"
    errors: list[str] = field(default_factory=list)
    first_feasible_s: float | None = None
    resolved: list[tuple[float, float]] = field(default_factory=list)  # (point TTFT, cap) in s
    floor_s: float = 0.0  # no deployment has a TTFT at or below this (an infeasible cap)
    top_s: float = 0.0
    step_s: float = 0.0
    _front: list[SolvedPoint] = field(default_factory=list, init=False, repr=False)
    _front_of: int = field(default=-1, init=False, repr=False)  # len(points) when _front was taken

    @property
    def timed_out(self) -> bool:
        """Stopped early or cut short: the time limit, or a backend error at some cap (that cap's window
        stays uncovered; the sweep goes on with the others)."""
        return self.termination != "completed"

    @property
    def out_of_time(self) -> bool:
        return self.termination == "time_limit"

    @property
    def front(self) -> list[SolvedPoint]:
        """The non-dominated points, each once (caps of the coarse pass and the steps can find the same one)."""
        if self._front_of != len(self.points):  # points are only appended: the count names the state
            self._front, self._front_of = self._non_dominated(), len(self.points)
        return list(self._front)

    def _non_dominated(self) -> list[SolvedPoint]:
        kept = {id(p) for p in non_dominated([s.point for s in self.points])}
        front: list[SolvedPoint] = []
        for solved in sorted(self.points, key=lambda s: s.point.sort_key()):
            if id(solved.point) in kept:
                kept.discard(id(solved.point))
                front.append(solved)
        return front

    def windows(self, fastest_s: float, outside: OutsideBound | None = None) -> list[Window]:
        """The TTFT ranges between resolved intervals, above `fastest_s` (no deployment is faster). A resolved
        interval ends where a deployment `outside` the sweep's options could beat its point, and a window's
        bound is at least what those could reach."""
        low = self.low_s(fastest_s, outside)
        spans = sorted((t, c) for t, c in self.resolved if c > low)
        values = sorted((s.point.ttft_ms / 1e3, s.point.tokens_per_s_per_gpu) for s in self.points)
        times = [time_s for time_s, _ in values]
        best = list(itertools.accumulate((v for _, v in values), max))  # best throughput up to each TTFT

        def best_up_to(time_s: float) -> float:
            count = bisect.bisect_right(times, time_s)
            return best[count - 1] if count else 0.0

        def above(time_s: float) -> float:
            found = best_up_to(time_s * (1 + 1e-12))
            return max(found, outside.at(time_s, found)) if outside is not None else found

        result, edge = [], low
        for t, c in spans:
            if t - edge > GRID_S * 1e-3:
                result.append(Window(edge, t, above(t), best_up_to(edge)))
            end = min(c, self.top_s)
            if outside is not None and end > max(edge, t):  # the interval is resolved over the sweep's options:
                found = best_up_to(t * (1 + 1e-12))  # from where an outside deployment could beat its point, not
                start = outside.first_above(found, max(edge, t), end)
                if start < end:
                    result.append(Window(start, end, above(end), found))
            edge = max(edge, c)
        if edge < self.top_s:  # above every proven cap: nothing is known there (time ran out first)
            result.append(Window(edge, self.top_s, math.inf, best_up_to(edge)))
        return result

    def low_s(self, fastest_s: float, outside: OutsideBound | None = None) -> float:
        """Where the windows start: no deployment is faster than `fastest_s`, and none of the sweep's options has
        a TTFT at or below `floor_s` (an infeasible cap), though an untimed batch outside them may."""
        floor = self.floor_s if outside is None or not outside.ttft_s.size else min(self.floor_s, outside.ttft_s[0])
        return max(floor, fastest_s)

    def hypervolume_s(self) -> float:
        """Hypervolume of the front up to TTFT `top_s` (s x tokens/s per GPU)."""
        return hypervolume([s.point for s in self.front], self.top_s * 1e3) / 1e3

    def coverage(self, fastest_s: float, outside: OutsideBound | None = None) -> Coverage | None:
        if not self.points:
            return None
        windows = self.windows(fastest_s, outside)
        volume = self.hypervolume_s()
        loss = sum(w.loss for w in windows)
        ratio = volume / (volume + loss) if volume + loss > 0 and math.isfinite(loss) else (
            1.0 if loss == 0 else 0.0)
        certified = max([self.step_s] + [w.high_s - w.low_s for w in windows])
        # what a longer solve could still add: windows wider than the resolution's own steps (at `auto`, which
        # has no step, only when the sweep was cut short)
        cut_short = self.termination != "completed" or (outside is not None and outside.ttft_s.size > 0)
        wide = [(w.low_s * 1e3, w.high_s * 1e3, w.above) for w in sorted(windows, key=lambda w: w.low_s)
                if (self.step_s > 0 or cut_short) and w.high_s - w.low_s > self.step_s * (1 + 1e-6) + GRID_S]
        return Coverage(self.top_s * 1e3, self.low_s(fastest_s, outside) * 1e3, self.step_s * 1e3, certified * 1e3,
                        ratio, wide)
