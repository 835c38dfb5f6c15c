"""What a front certifies (`SweepResult.coverage`): the TTFT windows between proven caps, their
hypervolume bound, and the range above the last proven cap when the time limit cut the sweep short."""

from __future__ import annotations

import math
import random

import pytest

from costmodel.layout import Layout, Pool
from planner.formulation.model import Selection
from planner.pareto import FrontPoint
from planner.solvers import SolveStatus
from planner.sweep_result import SolvedPoint, SweepResult

LAYOUT = Layout(serving="aggregated", pools=[Pool(role="mixed", replicas=1, tp=1, dp_attention=1, pp=1, moe_tp=1,
                                                  moe_ep=1, batch=1)])


def solved(ttft_ms: float, value: float) -> SolvedPoint:
    return SolvedPoint(FrontPoint(ttft_ms, 10.0, value, 1, LAYOUT), Selection(), SolveStatus.OPTIMAL, 0.0)


def test_windows_between_proven_caps_bound_the_hypervolume() -> None:
    result = SweepResult(points=[solved(100.0, 50.0), solved(40.0, 20.0)], top_s=0.2, step_s=0.0,
                         termination="time_limit")
    result.resolved = [(0.1, 0.2), (0.04, 0.06)]  # caps 200 ms and 60 ms solved; 60-100 ms not yet
    result.floor_s = 0.03  # a cap at 30 ms proved empty
    coverage = result.coverage(fastest_s=0.01)
    assert coverage is not None
    (low, high, above), (low2, high2, above2) = coverage.uncovered_ms
    assert (low, high, above) == pytest.approx((30.0, 40.0, 20.0))  # below the 40 ms point: at most 20
    assert (low2, high2, above2) == pytest.approx((60.0, 100.0, 50.0))
    assert coverage.certified_ms == pytest.approx(40.0)
    volume = (100.0 - 40.0) * 20.0 + (200.0 - 100.0) * 50.0  # ms x tokens/s, reference (200 ms, 0)
    loss = (40.0 - 30.0) * 20.0 + (100.0 - 60.0) * (50.0 - 20.0)
    assert coverage.hypervolume_ratio_at_least == pytest.approx(volume / (volume + loss))


def test_a_sweep_cut_short_above_its_proven_caps_certifies_nothing_there() -> None:
    result = SweepResult(points=[solved(150.0, 80.0)], top_s=0.2, step_s=0.0, termination="time_limit")
    result.resolved = []  # the first cap's MILP stopped on time: its point is not proven
    coverage = result.coverage(fastest_s=0.01)
    assert coverage is not None and coverage.hypervolume_ratio_at_least == 0.0
    assert len(coverage.uncovered_ms) == 1
    low, high, above = coverage.uncovered_ms[0]
    assert (low, high) == pytest.approx((10.0, 200.0)) and math.isinf(above)


def _windows_by_scan(result: SweepResult, fastest_s: float) -> list[tuple[float, float, float, float]]:
    """`windows` as first written: every point scanned for each window's bounds (the reference)."""
    low = max(result.floor_s, fastest_s)
    values = [(s.point.ttft_ms / 1e3, s.point.tokens_per_s_per_gpu) for s in result.points]
    found, edge = [], low
    for t, c in sorted((t, c) for t, c in result.resolved if c > low):
        if t - edge > 1e-9:
            above = max((v for time_s, v in values if time_s <= t * (1 + 1e-12)), default=0.0)
            below = max((v for time_s, v in values if time_s <= edge), default=0.0)
            found.append((edge, t, above, below))
        edge = max(edge, c)
    if edge < result.top_s:
        found.append((edge, result.top_s, math.inf, max((v for time_s, v in values if time_s <= edge), default=0.0)))
    return found


@pytest.mark.parametrize("seed", range(30))
def test_windows_equal_a_scan_of_every_point(seed: int) -> None:
    """The bisection over the points' prefix maximum gives the windows a scan of every point gives, ties and
    points on a window's edge included."""
    rng = random.Random(seed)
    ttfts = [rng.choice([10.0, 20.0, 35.0, 50.0]) if rng.random() < 0.3 else rng.uniform(5.0, 200.0)
             for _ in range(rng.randint(1, 25))]
    points = [solved(t, rng.uniform(1.0, 100.0)) for t in ttfts]
    result = SweepResult(points=points, top_s=0.2, step_s=0.0)
    caps = [p.point.ttft_ms / 1e3 + rng.choice([0.0, rng.uniform(0.0, 0.03)]) for p in points if rng.random() < 0.6]
    result.resolved = [(p.point.ttft_ms / 1e3, c) for p, c in zip(points, caps, strict=False)]
    result.floor_s = rng.choice([0.0, 0.004, 0.02])
    got = [(w.low_s, w.high_s, w.above, w.below) for w in result.windows(fastest_s=0.003)]
    assert got == _windows_by_scan(result, 0.003)
    assert result.front == result._non_dominated()  # the kept front is the points' front
    result.points.append(solved(1.0, 1e6))  # a point added: the front is taken anew
    assert result.front == result._non_dominated() and result.front[0].point.ttft_ms == 1.0


def test_untimed_batches_reopen_what_they_could_beat() -> None:
    """A cap proven over the sweep's options resolves its interval only up to where a batch the batch search
    left untimed could beat its point; the windows' bounds include what those batches could reach, and the
    returned front's hypervolume ratio counts it (it was 1.0 beside points whose gaps said 70%)."""
    import numpy as np

    from planner.sweep_result import OutsideBound

    result = SweepResult(points=[solved(40.0, 20.0), solved(100.0, 50.0)], top_s=0.2, step_s=0.0)
    result.resolved = [(0.04, 0.1 - 1e-7), (0.1, 0.2)]  # every cap proven: no window but untimed batches
    alone = result.coverage(fastest_s=0.04)
    assert alone is not None and not alone.uncovered_ms and alone.hypervolume_ratio_at_least == pytest.approx(1.0)
    # untimed batches: up to 30 tokens/s per GPU from 60 ms, up to 45 from 150 ms
    outside = OutsideBound.of(np.array([0.15, 0.06]), np.array([45.0, 30.0]), composed=False)
    coverage = result.coverage(fastest_s=0.04, outside=outside)
    assert coverage is not None
    # 60-100 ms: the 40 ms point (20) could be beaten by 30; from 100 ms the 50 point is beaten by none
    assert [pytest.approx(w, abs=1e-3) for w in coverage.uncovered_ms] == [(60.0, 100.0, 30.0)]
    volume = (100.0 - 40.0) * 20.0 + (200.0 - 100.0) * 50.0
    loss = (100.0 - 60.0) * (30.0 - 20.0)
    assert coverage.hypervolume_ratio_at_least == pytest.approx(volume / (volume + loss))
    # composed: an untimed deployment could run beside the sweep's, adding its figure to the point's
    beside = OutsideBound.of(np.array([0.15]), np.array([5.0]), groups=(frozenset({"b"}),), composed=True,
                             every=frozenset({"a", "b"}))
    coverage = result.coverage(fastest_s=0.04, outside=beside)
    assert coverage is not None
    assert [pytest.approx(w, abs=1e-3) for w in coverage.uncovered_ms] == [(150.0, 200.0, 55.0)]


def test_windows_start_below_the_sweeps_floor_where_an_untimed_batch_could() -> None:
    """An infeasible cap proves that none of the sweep's options is that fast, not an untimed batch: where an
    open bound's TTFT lies below the floor, the windows start there."""
    import numpy as np

    from planner.sweep_result import OutsideBound

    result = SweepResult(points=[solved(100.0, 50.0)], top_s=0.2, step_s=0.0, floor_s=0.08)
    result.resolved = [(0.1, 0.2)]
    assert result.coverage(fastest_s=0.01).low_ms == pytest.approx(80.0)  # type: ignore[union-attr]
    outside = OutsideBound.of(np.array([0.03]), np.array([10.0]))
    coverage = result.coverage(fastest_s=0.01, outside=outside)
    assert coverage is not None and coverage.low_ms == pytest.approx(30.0)
    assert [pytest.approx(w, abs=1e-3) for w in coverage.uncovered_ms] == [(30.0, 100.0, 50.0)]


@pytest.mark.parametrize("seed", range(3))
def test_outside_bounds_cut_before_sorting_give_the_same_stairs(seed: int) -> None:
    """Millions of open bounds (a time limit on 256 racks) are first cut without sorting (`binned_front`):
    each block's bound at any TTFT is still the most of its bounds at or below it (ties and equal TTFTs too)."""
    import numpy as np

    from planner.pareto import BINS, binned_front
    from planner.sweep_result import OutsideBound

    rng = np.random.default_rng(seed)
    n = 3 * BINS
    ttft = np.round(rng.lognormal(0.0, 1.0, n), 3)  # rounded: many equal TTFTs
    value = np.round(rng.uniform(0.0, 100.0, n) * ttft, 1)  # growing with TTFT, as the front does
    block = rng.integers(0, 3, n)
    assert binned_front(ttft, value).sum() < n // 10  # the cut is taken
    groups = (frozenset({"a"}), frozenset({"b"}), frozenset({"a", "b"}))
    bound = OutsideBound.of(ttft, value, block, groups, composed=False)
    for t in [*rng.choice(ttft, 200).tolist(), float(ttft.min()) / 2, float(ttft.max()) * 2]:
        below = ttft <= t * (1 + 1e-12)
        assert bound.at(t, 0.0) == (float(value[below].max()) if below.any() else 0.0)
        count = int(np.searchsorted(bound.ttft_s, t * (1 + 1e-12), "right"))
        for b in range(3):
            mine = below & (block == b)
            assert (bound.stairs[b, count - 1] if count else 0.0) == (float(value[mine].max()) if mine.any() else 0.0)


def test_the_binned_cut_keeps_the_front_and_leaves_what_it_cannot_scale() -> None:
    import numpy as np

    from planner.pareto import BINS, binned_front

    rng = np.random.default_rng(7)
    ttft, value = rng.uniform(0.01, 10.0, 2 * BINS), rng.uniform(0.0, 1.0, 2 * BINS)
    keep = binned_front(ttft, value)
    order = np.lexsort((-value, ttft))
    front = order[value[order] >= np.concatenate(([-np.inf], np.maximum.accumulate(value[order])[:-1]))]
    assert keep[front].all() and keep.sum() < ttft.size // 100
    assert binned_front(np.append(ttft, np.inf), np.append(value, 2.0)).all()  # an infinite TTFT: no log scale
    assert binned_front(ttft[: BINS - 1], value[: BINS - 1]).all()  # too few to bin
    assert binned_front(np.append(ttft, 0.0), np.append(value, 2.0)).all()  # a TTFT of 0: no log scale
    assert binned_front(np.append(ttft, 5e-324), np.append(value, 2.0)).all()  # a ratio past float range
