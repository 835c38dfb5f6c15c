"""Solver backends behind one interface (`Backend`), with one status vocabulary (`SolveStatus`).

Backend libraries are imported only by their adapter modules (a layering test enforces it)."""

from __future__ import annotations

from planner.solvers.base import Backend, SolveOptions, SolveReport, SolveStatus

BACKENDS = ("cpsat", "highs", "cbc")


def backend(name: str) -> Backend:
    """The adapter for `name` (cpsat, highs or cbc)."""
    if name == "cpsat":
        from planner.solvers.cpsat import CpSatBackend

        return CpSatBackend()
    if name in ("highs", "cbc"):
        from planner.solvers.pulp_backends import CbcBackend, HighsBackend

        return HighsBackend() if name == "highs" else CbcBackend()
    raise ValueError(f"unknown solver '{name}': choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "SolveOptions", "SolveReport", "SolveStatus", "backend"]
