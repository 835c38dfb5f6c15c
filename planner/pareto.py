"""Pareto fronts of TTFT (lower is better) against tokens/s per GPU (higher is better), and the
indicators used to compare fronts: hypervolume and the additive epsilon indicator."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from costmodel.layout import Layout

GpuAccounting = Literal["cluster", "used"]
BINS: Final = 1 << 16  # log-spaced TTFT bins of `binned_front`'s sort-free cut


def binned_front(ttft: np.ndarray, value: np.ndarray, tol: float = 0.0) -> np.ndarray:
    """A mask that keeps every entry of the front (TTFT down, value up) of millions of entries, without
    sorting: with TTFT in log-spaced bins, an entry whose value is below the best of every lower bin (all
    faster than it) by more than `tol` (relative) is dropped. Leaves the entries of the front's own bins to
    sort. TTFTs of 0 or below, infinite or NaN, or too far apart for a float ratio, keep all (no log scale)."""
    if ttft.size < BINS:
        return np.ones(ttft.size, dtype=bool)
    low, high = float(ttft.min()), float(ttft.max())
    span = float(np.log(high / low)) if high > low > 0 else math.nan
    if not math.isfinite(span):  # a TTFT of 0 or below, infinite or NaN, or a ratio past float range
        return np.ones(ttft.size, dtype=bool)
    where = np.minimum((np.log(ttft / low) / span * (BINS - 1)).astype(np.int64), BINS - 1)
    best = np.full(BINS, -np.inf)
    np.maximum.at(best, where, value)
    below = np.concatenate(([-np.inf], np.maximum.accumulate(best)[:-1]))
    return np.asarray(value >= below[where] * (1 - tol))


@dataclass(frozen=True)
class FrontPoint:
    """One deployment on (or offered for) the front, with its exact cost-model figures.

    GPU accounting (`search.gpu_accounting`): under `cluster` the ranked throughput divides the
    deployment's tokens/s by every GPU of the stated cluster (the user owns them; idle ones earn nothing),
    under `used` by the GPUs the deployment holds. Both figures are always available."""

    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_gpu_used: float
    gpus: int
    layout: Layout
    cluster_gpus: int = 0  # GPUs of the stated cluster; 0: unknown (taken as `gpus`)
    accounting: GpuAccounting = "used"

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1e3 / self.tpot_ms

    @property
    def tokens_per_s(self) -> float:
        """The deployment's output tokens per second."""
        return self.tokens_per_s_per_gpu_used * self.gpus

    @property
    def tokens_per_s_per_cluster_gpu(self) -> float:
        return self.tokens_per_s / (self.cluster_gpus or self.gpus)

    @property
    def idle_gpus(self) -> int:
        return max(0, self.cluster_gpus - self.gpus)

    @functools.cached_property
    def tokens_per_s_per_gpu(self) -> float:
        """The ranked figure: per cluster GPU under `cluster` accounting, per GPU used under `used`."""
        if self.accounting == "cluster":
            return self.tokens_per_s_per_cluster_gpu
        return self.tokens_per_s_per_gpu_used

    def sort_key(self) -> tuple[float, float, int, str]:
        """Deterministic order: TTFT, then throughput (higher first), then fewer GPUs, then the layout."""
        return (self.ttft_ms, -self.tokens_per_s_per_gpu, self.gpus, self.layout_json)

    @functools.cached_property
    def layout_json(self) -> str:
        """The layout's canonical JSON, kept: sorting fronts asks for it many times."""
        return self.layout.model_dump_json()


def dominates(a: FrontPoint, b: FrontPoint, rel_tol: float = 0.0) -> bool:
    """a is at least as good in both objectives (within rel_tol) and strictly better in one."""
    no_worse = (a.ttft_ms <= b.ttft_ms * (1 + rel_tol)
                and a.tokens_per_s_per_gpu >= b.tokens_per_s_per_gpu * (1 - rel_tol))
    better = a.ttft_ms < b.ttft_ms or a.tokens_per_s_per_gpu > b.tokens_per_s_per_gpu
    return no_worse and better


TIE_REL = 1e-9  # TTFTs this close are float noise of the same figure, not a trade-off


def non_dominated(points: Sequence[FrontPoint]) -> list[FrontPoint]:
    """The non-dominated points in TTFT order; of points equal in both objectives the first in
    `sort_key` order is kept (fewer GPUs, then a fixed layout order). TTFTs within `TIE_REL` count as
    equal, so float noise cannot keep a point that a faster-by-noise one dominates."""
    front: list[FrontPoint] = []
    for point in sorted(points, key=FrontPoint.sort_key):
        if front and point.tokens_per_s_per_gpu <= front[-1].tokens_per_s_per_gpu:
            continue
        while front and point.ttft_ms <= front[-1].ttft_ms * (1 + TIE_REL):
            front.pop()
        front.append(point)
    return front


def hypervolume(front: Sequence[FrontPoint], ttft_ref_ms: float, throughput_ref: float = 0.0) -> float:
    """Area (ms x tokens/s/GPU) dominated by the front and bounded by the reference point.

    Along a non-dominated front sorted by TTFT, throughput increases, so between one point's TTFT and the
    next the dominated height is that point's throughput: a staircase sum.
    """
    points = [p for p in non_dominated(front) if p.ttft_ms < ttft_ref_ms and p.tokens_per_s_per_gpu > throughput_ref]
    area = 0.0
    for index, point in enumerate(points):
        next_ttft = points[index + 1].ttft_ms if index + 1 < len(points) else ttft_ref_ms
        area += (next_ttft - point.ttft_ms) * (point.tokens_per_s_per_gpu - throughput_ref)
    return area


def additive_epsilon(front: Sequence[FrontPoint], reference: Sequence[FrontPoint]) -> float:
    """Smallest e such that every reference point is weakly dominated by some front point shifted by e
    (TTFT - e x TTFT_scale, throughput + e x throughput_scale) on objectives normalised by the reference's
    ranges; 0 when the front covers the reference."""
    if not reference:
        return 0.0
    if not front:
        return float("inf")
    ttft_scale = max(p.ttft_ms for p in reference) or 1.0
    thr_scale = max(p.tokens_per_s_per_gpu for p in reference) or 1.0
    worst = 0.0
    for r in reference:
        needed = min(max((f.ttft_ms - r.ttft_ms) / ttft_scale, (r.tokens_per_s_per_gpu - f.tokens_per_s_per_gpu)
                         / thr_scale) for f in front)
        worst = max(worst, needed)
    return max(0.0, worst)
