"""A backend-neutral mixed-integer linear model: named variables and constraints grouped in families.

Formulations build one of these; each solver adapter translates it. Continuous variables carry a
`resolution` (the natural-unit value of one integer step) that only the CP-SAT adapter uses, since
CP-SAT works on integers: it models a continuous variable v as resolution x V with V integer.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

Sense = Literal["<=", ">=", "=="]
Expr = dict[int, float]  # variable index -> coefficient


@dataclass(frozen=True)
class Variable:
    name: str
    family: str
    lb: float
    ub: float
    integer: bool
    resolution: float = 1.0  # natural units per integer step (CP-SAT only); 1 for integer variables


@dataclass(frozen=True)
class Constraint:
    name: str
    family: str
    expr: Expr
    sense: Sense
    rhs: float


@dataclass
class LinearModel:
    """maximise objective . x subject to the constraints; `hint` is a starting solution (partial)."""

    variables: list[Variable] = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)
    objective: Expr = field(default_factory=dict)
    objective_constant: float = 0.0
    hint: dict[int, float] = field(default_factory=dict)

    def add_var(self, name: str, family: str, lb: float, ub: float, integer: bool,
                resolution: float = 1.0) -> int:
        if lb > ub:
            raise ValueError(f"variable {name}: lower bound {lb} above upper bound {ub}")
        self.variables.append(Variable(name, family, lb, ub, integer, 1.0 if integer else resolution))
        return len(self.variables) - 1

    def binary(self, name: str, family: str) -> int:
        return self.add_var(name, family, 0.0, 1.0, True)

    def add(self, name: str, family: str, expr: Expr, sense: Sense, rhs: float) -> None:
        terms = {index: coeff for index, coeff in expr.items() if coeff != 0.0}
        self.constraints.append(Constraint(name, family, terms, sense, rhs))

    def statistics(self) -> dict[str, dict[str, int]]:
        """Variables and constraints per family, families in first-use order."""
        variables = Counter(v.family for v in self.variables)
        constraints = Counter(c.family for c in self.constraints)
        families = list(dict.fromkeys([v.family for v in self.variables] + [c.family for c in self.constraints]))
        return {f: {"variables": variables[f], "constraints": constraints[f]} for f in families}

    def violation(self, values: tuple[float, ...] | list[float]) -> float:
        """Largest violation of a row or a bound by `values` (relative to the row's scale)."""
        worst = 0.0
        for row in self.constraints:
            lhs = sum(c * values[i] for i, c in row.expr.items())
            scale = max(1.0, abs(row.rhs), *(abs(c * values[i]) for i, c in row.expr.items()))
            gap = {"<=": lhs - row.rhs, ">=": row.rhs - lhs, "==": abs(lhs - row.rhs)}[row.sense]
            worst = max(worst, gap / scale)
        for var, value in zip(self.variables, values, strict=True):
            worst = max(worst, var.lb - value, value - var.ub)
        return worst

    def value_of(self, expr: Expr, values: list[float]) -> float:
        return sum(coeff * values[index] for index, coeff in expr.items())


def add_expr(*exprs: Expr, scale: float = 1.0) -> Expr:
    """Sum of expressions (times `scale`)."""
    total: Expr = {}
    for expr in exprs:
        for index, coeff in expr.items():
            total[index] = total.get(index, 0.0) + scale * coeff
    return total
