"""What a front certifies (`SweepResult.coverage`): the TTFT windows between proven caps, their
hypervolume bound, and the range above the last proven cap when the time limit cut the sweep short."""

from __future__ import annotations

import math

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
