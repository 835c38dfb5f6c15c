"""One status vocabulary and one report for every backend.

A backend maps its own result codes to `SolveStatus` in its adapter. A solve stopped by the time limit
with a solution is FEASIBLE with its gap, never OPTIMAL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from planner.formulation.linear import LinearModel


class SolveStatus(StrEnum):
    OPTIMAL = "optimal"  # proven within the backend's default optimality tolerance (relative gap <= 1e-4)
    FEASIBLE = "feasible"  # a solution, optimality not proven (time limit): see the gap
    INFEASIBLE = "infeasible"  # proven: no solution exists
    NO_SOLUTION = "no_solution"  # time limit reached before any solution was found
    ERROR = "error"  # the backend failed; `message` says how

    @property
    def has_solution(self) -> bool:
        return self in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float
    threads: int = 1  # 1 = deterministic
    seed: int = 0
    relative_gap: float = 1e-6  # stop when proven this close to optimal
    deterministic: bool = False  # CP-SAT: the limit is in deterministic time units (reproducible), not seconds


@dataclass(frozen=True)
class SolveReport:
    status: SolveStatus
    objective: float  # of the returned solution (nan without one)
    bound: float  # best proven bound on the optimum (maximisation: an upper bound; nan if unknown)
    time_s: float
    values: tuple[float, ...] = ()
    message: str = ""

    @property
    def gap(self) -> float:
        """Absolute gap between bound and objective (0 when optimal, inf when unknown)."""
        if self.status == SolveStatus.OPTIMAL:
            return 0.0
        if not self.status.has_solution or math.isnan(self.bound):
            return math.inf
        return max(0.0, self.bound - self.objective)


class Backend(Protocol):
    name: str

    def is_available(self) -> bool: ...

    def solve(self, model: LinearModel, options: SolveOptions) -> SolveReport: ...
