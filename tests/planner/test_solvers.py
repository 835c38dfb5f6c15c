"""The backends behind one interface: the same answers and one status vocabulary."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from planner.formulation.linear import LinearModel
from planner.solvers import BACKENDS, SolveOptions, SolveStatus, backend


def knapsack() -> LinearModel:
    """max 5x + 4y + 0.37z, 6x + 4y <= 24, x + 2y <= 6, z + 0.1x <= 2.7 (z continuous): x=4, y=0, z=2.3."""
    model = LinearModel()
    x = model.add_var("x", "items", 0, 10, True)
    y = model.add_var("y", "items", 0, 10, True)
    z = model.add_var("z", "rest", 0, 2.5, False, resolution=1e-6)
    model.add("weight", "items", {x: 6, y: 4}, "<=", 24)
    model.add("volume", "items", {x: 1, y: 2}, "<=", 6)
    model.add("rest", "rest", {z: 1, x: 0.1}, "<=", 2.7)
    model.objective = {x: 5, y: 4, z: 0.37}
    model.hint = {x: 3.0, y: 1.0}
    return model


@pytest.mark.parametrize("name", BACKENDS)
def test_same_optimum_on_every_backend(name: str) -> None:
    report = backend(name).solve(knapsack(), SolveOptions(10.0))
    assert report.status == SolveStatus.OPTIMAL and report.gap == 0.0
    assert report.objective == pytest.approx(20 + 0.37 * 2.3, abs=1e-5)
    assert report.values[:2] == pytest.approx((4.0, 0.0))


@pytest.mark.parametrize("name", BACKENDS)
def test_infeasible_is_reported_as_such(name: str) -> None:
    model = knapsack()
    model.add("impossible", "items", {0: 1}, ">=", 11)
    report = backend(name).solve(model, SolveOptions(10.0))
    assert report.status == SolveStatus.INFEASIBLE and not report.status.has_solution


def test_statistics_count_each_family() -> None:
    assert knapsack().statistics() == {"items": {"variables": 2, "constraints": 2},
                                       "rest": {"variables": 1, "constraints": 1}}


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown solver 'gurobi'"):
        backend("gurobi")



def narrow_window() -> LinearModel:
    """max x with x >= 1 + 5e-7 and x <= 1 + 1e-6 (once a binary is chosen), x on a grid of 2^-19 (1.9e-6) for
    CP-SAT: a window of feasible values narrower than one step, with no grid point in it."""
    model = LinearModel()
    x = model.add_var("x", "rate", 0.0, 2.0, False, resolution=2.0 / 2**20)
    b = model.binary("b", "choice")
    model.add("floor", "rate", {x: 1.0, b: -5e-7}, ">=", 1.0)
    model.add("ceiling", "rate", {x: 1.0, b: -1e-6}, "<=", 1.0)
    model.add("chosen", "choice", {b: 1.0}, "==", 1.0)
    model.objective = {x: 1.0}
    return model


@pytest.mark.parametrize("name", BACKENDS)
def test_a_window_narrower_than_a_grid_step_is_feasible(name: str) -> None:
    """CP-SAT's integer grid must not cut a feasible continuous model to nothing (it did, before it solved a
    relaxation: `planner.solvers.cpsat`); its answer is within a step and its bound holds."""
    report = backend(name).solve(narrow_window(), SolveOptions(10.0))
    assert report.status == SolveStatus.OPTIMAL
    assert report.objective == pytest.approx(1.0 + 1e-6, abs=2.0 / 2**20)
    assert report.bound >= 1.0 + 1e-6 - 1e-7  # a bound on the continuous optimum (LP tolerance 1e-7)


def test_a_failed_cbc_run_leaves_no_files_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PuLP removes CBC's model and solution files only after a run that worked; a failed one must not leave
    them in the system's temporary folder (hundreds of .mps files piled up there before)."""
    failing, ran = tmp_path / "cbc", tmp_path / "ran"
    failing.write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
    failing.chmod(0o755)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setenv("TMPDIR", str(temporary))
    cbc = backend("cbc")
    made = cbc._solver
    monkeypatch.setattr(cbc, "_solver", lambda options, log: _with_path(made(options, log), failing))
    report = cbc.solve(knapsack(), SolveOptions(10.0))
    assert report.status == SolveStatus.ERROR
    if not ran.exists():
        pytest.skip("the stand-in CBC could not run here (a noexec temporary folder?): nothing was written")
    assert not list(temporary.rglob("*")), list(temporary.rglob("*"))


def _with_path(solver: Any, path: Path) -> Any:
    solver.path = str(path)
    solver.tmpDir = tempfile.gettempdir()  # what PuLP picks by itself
    return solver
