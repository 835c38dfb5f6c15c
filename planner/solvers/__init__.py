"""Solver backends behind one interface (`Backend`), with one status vocabulary (`SolveStatus`).

Backend libraries are imported only by their adapter modules (a layering test enforces it)."""

from __future__ import annotations

from planner.formulation.linear import LinearModel
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


class LazyBackend:
    """The backend `name`, its package imported at its first solve (CP-SAT: 0.3-0.8 s): a sweep whose caps
    the closed-form enumeration proves never needs it."""

    def __init__(self, name: str) -> None:
        if name not in BACKENDS:
            raise ValueError(f"unknown solver '{name}': choose one of {', '.join(BACKENDS)}")
        self.name = name
        self._backend: Backend | None = None

    def load(self) -> Backend:
        """The backend, its package imported now if not yet."""
        if self._backend is None:
            self._backend = backend(self.name)
        return self._backend

    def is_available(self) -> bool:
        return self.load().is_available()

    def solve(self, model: LinearModel, options: SolveOptions) -> SolveReport:
        return self.load().solve(model, options)


__all__ = ["BACKENDS", "Backend", "LazyBackend", "SolveOptions", "SolveReport", "SolveStatus", "backend"]
