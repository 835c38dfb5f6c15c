"""CP-SAT's two searches (`planner/solvers/cpsat.py`): what the first finds is kept when the second finds
nothing better in the time left."""

from __future__ import annotations

import math

from planner.formulation.linear import LinearModel
from planner.solvers.base import SolveOptions, SolveReport, SolveStatus
from planner.solvers.cpsat import CpSatBackend, _better


def _report(status: SolveStatus, objective: float = math.nan, bound: float = math.nan) -> SolveReport:
    values = (1.0,) if status.has_solution else ()
    return SolveReport(status, objective, bound, 0.1, values)


def test_the_first_searchs_solution_stands_when_the_second_finds_none() -> None:
    first = _report(SolveStatus.FEASIBLE, 10.0, 12.0)
    kept = _better(first, SolveReport(SolveStatus.NO_SOLUTION, math.nan, math.nan, 0.3))
    assert (kept.status, kept.objective, kept.bound, kept.time_s) == (SolveStatus.FEASIBLE, 10.0, 12.0, 0.3)


def test_the_better_solution_and_the_tighter_bound_are_reported() -> None:
    first, second = _report(SolveStatus.FEASIBLE, 10.0, 11.0), _report(SolveStatus.FEASIBLE, 10.5, 13.0)
    merged = _better(first, second)
    assert (merged.objective, merged.bound) == (10.5, 11.0)
    assert _better(first, _report(SolveStatus.OPTIMAL, 10.8, 10.8)).status == SolveStatus.OPTIMAL


def test_a_knapsack_cut_short_keeps_a_solution() -> None:
    """250 items, 0.06 deterministic seconds: the default search finds solutions in its 0.05, the LP search
    gets 0.01; the result has a solution and a bound at or above it, whichever search ends it."""
    model = LinearModel()
    items = [model.binary(f"x{i}", "item") for i in range(250)]
    model.add("capacity", "capacity", {x: 3.0 + (7 * i) % 11 for i, x in enumerate(items)}, "<=", 400.0)
    model.objective = {x: 5.0 + (13 * i) % 17 + (i % 5) / 7 for i, x in enumerate(items)}
    report = CpSatBackend().solve(model, SolveOptions(time_limit_s=0.06, deterministic=True))
    assert report.status.has_solution and report.bound >= report.objective - 1e-9
