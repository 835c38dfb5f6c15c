"""OR-Tools CP-SAT adapter.

CP-SAT solves over integers: a continuous variable v of resolution r becomes r x V with V integer, and
each constraint's coefficients (per integer step) are scaled by one power of two so that the smallest is
about 2^24 (as far as the row's activity allows), then rounded. The objective is scaled the same way.

The grid restricts the continuous model: where two rows leave a window of feasible values narrower than
one step (a TTFT cap just above a deployment's TTFT), no grid point lies in it, and CP-SAT would call a
feasible cap infeasible and its bound would not hold. So each inequality row is relaxed by half a step of
each continuous variable in it (in scaled units, half the sum of their scaled coefficients): rounding every
continuous variable to its nearest grid point moves the row by no more (continuous variables' bounds lie on
their grids; equality rows join copies of one quantity at one resolution with coefficients +-1, and rounding
the quantity and its copies alike keeps them). The slack also covers the coefficients' rounding, exactly: each
coefficient's rounding error times its variable's largest value. CP-SAT therefore
solves a relaxation: its infeasibility and bounds hold for the continuous model. A solution may pass a row by
about 1e-6 of the row's range, which the planner's exact re-evaluation of every selected deployment catches,
and a deployment within that of the best one's objective can stand in for it (`RATE_STEPS`).
"""

from __future__ import annotations

import dataclasses
import math
import time

from ortools.sat.python import cp_model

from planner.formulation.linear import Constraint, Expr, LinearModel, Variable
from planner.solvers.base import SolveOptions, SolveReport, SolveStatus

# The smallest coefficient of a row becomes at least 2^24 when activity allows: above the 2^20 steps of a rate's
# domain, so that the coefficients' rounding stays below the relaxation's half step. 2^30 made CP-SAT's search
# erratic on these models (a sessions scenario's sweep of 85 MILPs 2.0-7.2 s over seeds; 1.5-1.8 s at 2^24).
PRECISION_BITS = 24
ACTIVITY_BITS = 60  # |coefficient| x |domain| summed over a row stays below 2^60 (CP-SAT needs < 2^63)
# Deterministic seconds of CP-SAT's default search before the LP search takes over (`CpSatBackend.solve`): the
# sessions benchmark's models take under 0.01 of it; one two-group model it stalls on (walking a rate's 2^20
# grid values one branch at a time, 930,000 branches and 10 conflicts) spends about 0.08 per wall second here.
DEFAULT_SEARCH_BUDGET = 0.05
MIN_SECOND_SEARCH_S = 0.01  # time left below which the first search's outcome stands


def _better(first: SolveReport, second: SolveReport) -> SolveReport:
    """The two searches' outcome: the second's when it proved or found better, else the first's solution;
    either's bound holds, so the tighter one is reported."""
    if second.status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE) or not first.status.has_solution:
        return second
    best = second if second.status.has_solution and second.objective >= first.objective else first
    bounds = [r.bound for r in (first, second) if r.status.has_solution and not math.isnan(r.bound)]
    bound = max(min(bounds), best.objective) if bounds else best.bound
    return dataclasses.replace(best, status=SolveStatus.FEASIBLE, bound=bound, time_s=second.time_s)


def _scale(steps: Expr, domains: list[float], rhs: float = 0.0) -> float:
    """A power of two that makes the row's per-step coefficients integers to about 2^-24 of the smallest,
    unless that would overflow: then as large as the activity bound allows."""
    coeffs = [*steps.values(), rhs]
    if all(float(c).is_integer() for c in coeffs):
        return 1.0  # integer rows stay exact
    smallest = min(abs(c) for c in steps.values() if c) if any(steps.values()) else 1.0
    activity = sum(abs(c) * d for c, d in zip(steps.values(), domains, strict=True)) + abs(rhs)
    exponent = min(PRECISION_BITS - math.floor(math.log2(smallest)), ACTIVITY_BITS - math.ceil(math.log2(activity)))
    return float(2.0**exponent)


def _steps(var: Variable) -> float:
    """Largest |integer value| of a variable in CP-SAT's units."""
    return max(abs(var.lb), abs(var.ub), 1.0) / var.resolution


class CpSatBackend:
    name = "cpsat"

    def is_available(self) -> bool:
        return True

    def solve(self, model: LinearModel, options: SolveOptions) -> SolveReport:
        start = time.perf_counter()
        cp = cp_model.CpModel()
        ints = [self._variable(cp, v.lb, v.ub, v.resolution, v.name) for v in model.variables]
        for row in model.constraints:
            self._constraint(cp, model, ints, row)
        steps = {i: c * model.variables[i].resolution for i, c in model.objective.items()}
        factor = _scale(steps, [_steps(model.variables[i]) for i in steps])
        cp.maximize(sum(round(c * factor) * ints[i] for i, c in steps.items()))
        # A partial hint (the incumbent's pool choices without its rates) can hold CP-SAT's single-worker search
        # in the hinted subtree for the whole limit: a 14-variable deployment model it solves in 10 ms without
        # one ran 60 s without finding the hinted optimum. A complete hint is checked and kept, so only those.
        hint = model.hint if len(model.hint) == len(model.variables) else {}
        for index, value in sorted(hint.items()):
            var = model.variables[index]
            cp.add_hint(ints[index], min(max(round(value / var.resolution), math.ceil(var.lb / var.resolution)),
                                         math.floor(var.ub / var.resolution)))
        # Two searches, each fast where the other can stall on these small MILPs (continuous rates on a fine
        # grid): CP-SAT's default search proves most of them in milliseconds but ran some two-group models
        # (HiGHS: 0.02 s) for the whole limit; branching on the LP relaxation with its full linearisation
        # proves those in 0.03-0.2 s but took 2-3 s on models of the sessions benchmark that the default
        # search proves in 0.01 s. So the default search first, for a deterministic budget (the same switch
        # on any machine), then the LP search for the rest of the limit, hinted with what the first found.
        first = min(options.time_limit_s, DEFAULT_SEARCH_BUDGET)
        solver = self._solver(options, first, deterministic=True, lp_search=False)
        if not options.deterministic:  # and never past the wall-clock limit
            solver.parameters.max_time_in_seconds = max(options.time_limit_s, 0.01)
        code = solver.solve(cp)
        report = self._report(model, solver, code, ints, factor, time.perf_counter() - start)
        left = options.time_limit_s - (first if options.deterministic else time.perf_counter() - start)
        if code in (cp_model.OPTIMAL, cp_model.INFEASIBLE) or left < MIN_SECOND_SEARCH_S:
            return report
        if code == cp_model.FEASIBLE:
            found = [int(solver.value(x)) for x in ints]
            cp.clear_hints()  # type: ignore[no-untyped-call]
            for x, value in zip(ints, found, strict=True):
                cp.add_hint(x, value)
        solver = self._solver(options, left, deterministic=options.deterministic, lp_search=True)
        code = solver.solve(cp)
        second = self._report(model, solver, code, ints, factor, time.perf_counter() - start)
        return _better(report, second)

    @staticmethod
    def _solver(options: SolveOptions, limit_s: float, deterministic: bool, lp_search: bool) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        if deterministic:  # reproducible: the same work whatever the machine's load
            solver.parameters.max_deterministic_time = max(limit_s, 0.01)
        else:
            solver.parameters.max_time_in_seconds = max(limit_s, 0.01)
        solver.parameters.num_workers = options.threads
        solver.parameters.interleave_search = options.threads > 1  # deterministic with several workers
        solver.parameters.random_seed = options.seed
        if lp_search:
            solver.parameters.search_branching = cp_model.LP_SEARCH
            solver.parameters.linearization_level = 2
        solver.parameters.relative_gap_limit = options.relative_gap
        # Ctrl-C belongs to the CLI (planner.interrupt: exit 130, nothing written); CP-SAT's own handler took it
        # for a time limit (a truncated front, exit 0) or left the process hung or aborted.
        solver.parameters.catch_sigint_signal = False
        return solver

    @staticmethod
    def _variable(cp: cp_model.CpModel, lb: float, ub: float, resolution: float, name: str) -> cp_model.IntVar:
        low, high = math.ceil(lb / resolution - 1e-9), math.floor(ub / resolution + 1e-9)
        return cp.new_int_var(low, high, name)

    @staticmethod
    def _constraint(cp: cp_model.CpModel, model: LinearModel, ints: list[cp_model.IntVar], row: Constraint) -> None:
        steps: Expr = {i: c * model.variables[i].resolution for i, c in row.expr.items()}
        factor = _scale(steps, [_steps(model.variables[i]) for i in steps], row.rhs)
        scaled = {i: round(c * factor) for i, c in steps.items()}
        expr = sum(c * ints[i] for i, c in scaled.items())
        rhs = row.rhs * factor
        slack = sum(abs(c) for i, c in scaled.items() if not model.variables[i].integer) / 2.0
        slack += sum(abs(c * factor - scaled[i]) * _steps(model.variables[i]) for i, c in steps.items())
        if row.sense == "<=":
            cp.add(expr <= math.floor(rhs + slack + 1e-6)).with_name(row.name)
        elif row.sense == ">=":
            cp.add(expr >= math.ceil(rhs - slack - 1e-6)).with_name(row.name)
        else:
            cp.add(expr == round(rhs)).with_name(row.name)

    @staticmethod
    def _report(model: LinearModel, solver: cp_model.CpSolver, code: object, ints: list[cp_model.IntVar],
                factor: float, elapsed: float) -> SolveReport:
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            values = tuple(solver.value(x) * v.resolution for x, v in zip(ints, model.variables, strict=True))
            objective = model.value_of(model.objective, list(values)) + model.objective_constant
            bound = solver.best_objective_bound / factor + model.objective_constant
            status = SolveStatus.OPTIMAL if code == cp_model.OPTIMAL else SolveStatus.FEASIBLE
            return SolveReport(status, objective, max(bound, objective), elapsed, values)
        if code == cp_model.INFEASIBLE:
            return SolveReport(SolveStatus.INFEASIBLE, math.nan, math.nan, elapsed)
        if code == cp_model.UNKNOWN:
            return SolveReport(SolveStatus.NO_SOLUTION, math.nan, math.nan, elapsed)
        return SolveReport(SolveStatus.ERROR, math.nan, math.nan, elapsed,
                           message=f"CP-SAT returned {solver.status_name(code)}")
