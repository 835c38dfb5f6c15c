"""HiGHS and CBC through PuLP (3.x, which bundles CBC).

PuLP reports "Optimal" for a CBC run stopped by its time limit with an integer solution; its
`sol_status` tells the two apart (LpSolutionIntegerFeasible), and we call that FEASIBLE. CBC's proven
bound is read from its log; HiGHS's from its info record (mip_dual_bound).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pulp

from planner import interrupt
from planner.formulation.linear import LinearModel
from planner.solvers.base import SolveOptions, SolveReport, SolveStatus

VIOLATION_TOL = 1e-5  # relative: a returned solution breaking a row by more is an error, not a plan
_SENSES = {"<=": pulp.LpConstraintLE, ">=": pulp.LpConstraintGE, "==": pulp.LpConstraintEQ}


def to_pulp(model: LinearModel) -> tuple[pulp.LpProblem, list[pulp.LpVariable]]:
    problem = pulp.LpProblem("moe_planner", pulp.LpMaximize)
    variables = [problem.add_variable(f"v{i}", lowBound=v.lb, upBound=v.ub,
                                      cat=pulp.LpInteger if v.integer else pulp.LpContinuous)
                 for i, v in enumerate(model.variables)]
    problem += pulp.lpSum(c * variables[i] for i, c in model.objective.items()) + model.objective_constant
    for index, row in enumerate(model.constraints):
        expr = pulp.lpSum(c * variables[i] for i, c in row.expr.items())
        problem += pulp.LpConstraint(expr, _SENSES[row.sense], f"c{index}", row.rhs)
    for index, value in model.hint.items():
        variables[index].setInitialValue(value)
    return problem, variables


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner to the process's stdout on first use, whatever its options: keep it out of
    the JSON a script reads from ours."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _status(problem: pulp.LpProblem) -> SolveStatus:
    if problem.status == pulp.LpStatusInfeasible:
        return SolveStatus.INFEASIBLE
    if problem.sol_status == pulp.LpSolutionOptimal:
        return SolveStatus.OPTIMAL
    if problem.sol_status == pulp.LpSolutionIntegerFeasible:
        return SolveStatus.FEASIBLE
    if problem.status == pulp.LpStatusNotSolved:
        return SolveStatus.NO_SOLUTION
    return SolveStatus.ERROR


BROKEN = "returned a solution that breaks the model's rows"


class _PulpBackend:
    name = ""

    def is_available(self) -> bool:
        return bool(self._solver(SolveOptions(1.0), None).available())

    def _solver(self, options: SolveOptions, log: Path | None) -> Any:
        raise NotImplementedError

    def _bound(self, problem: pulp.LpProblem, log: Path | None) -> float:
        raise NotImplementedError

    def _careful(self, options: SolveOptions, log: Path | None) -> Any:
        """A second try after an answer that breaks a row (None: no other setting to try)."""
        return None

    def solve(self, model: LinearModel, options: SolveOptions) -> SolveReport:
        report = self._solve(model, options, careful=False)
        if report.status == SolveStatus.ERROR and BROKEN in report.message:
            left = replace(options, time_limit_s=max(0.01, options.time_limit_s - report.time_s))
            retried = self._solve(model, left, careful=True)
            if retried.status != SolveStatus.ERROR or BROKEN not in retried.message:
                return retried
        return report

    def _solve(self, model: LinearModel, options: SolveOptions, careful: bool) -> SolveReport:
        start = time.perf_counter()
        problem, variables = to_pulp(model)
        with (tempfile.TemporaryDirectory() as folder,
              interrupt.scoped_cleanup(lambda: interrupt.remove_folder(Path(folder)))):
            log = Path(folder) / "solver.log"
            solver = self._careful(options, log) if careful else self._solver(options, log)
            if solver is None:
                return SolveReport(SolveStatus.ERROR, math.nan, math.nan, 0.0, message=BROKEN)
            if hasattr(solver, "tmpDir"):
                # PuLP's command-line solvers write the model and solution files to the system's temporary
                # folder and remove them only after a run that worked; here they go with this folder in any case
                solver.tmpDir = folder
            try:
                with _quiet_stdout():
                    problem.solve(solver)
            except pulp.PulpSolverError as exc:
                return SolveReport(SolveStatus.ERROR, math.nan, math.nan, time.perf_counter() - start,
                                   message=str(exc))
            status = _status(problem)
            if not status.has_solution:
                return SolveReport(status, math.nan, math.nan, time.perf_counter() - start)
            values = tuple(float(v.varValue or 0.0) for v in variables)
            if model.violation(values) > VIOLATION_TOL:  # seen once with CBC: "optimal" all-zero values
                return SolveReport(SolveStatus.ERROR, math.nan, math.nan, time.perf_counter() - start,
                                   message=f"{self.name} {BROKEN}")
            objective = model.value_of(model.objective, list(values)) + model.objective_constant
            bound = objective if status == SolveStatus.OPTIMAL else self._bound(problem, log)
        return SolveReport(status, objective, bound, time.perf_counter() - start, values)


class HighsBackend(_PulpBackend):
    name = "highs"

    def _solver(self, options: SolveOptions, log: Path | None) -> Any:
        return pulp.HiGHS(msg=False, timeLimit=options.time_limit_s, threads=options.threads,
                          gapRel=options.relative_gap, random_seed=options.seed,
                          presolve="off")  # HiGHS presolve takes seconds on these models for nothing

    def _bound(self, problem: pulp.LpProblem, log: Path | None) -> float:
        # PuLP hands HiGHS the negated objective of a maximisation: its dual bound is minus our bound.
        info = problem.solverModel.getInfo()
        return -float(info.mip_dual_bound) if math.isfinite(info.mip_dual_bound) else math.nan


class CbcBackend(_PulpBackend):
    name = "cbc"

    def _solver(self, options: SolveOptions, log: Path | None) -> Any:
        with warnings.catch_warnings():  # PuLP 3.x warns that 4.x drops the bundled CBC: we pin 3.x for it
            warnings.simplefilter("ignore", DeprecationWarning)
            # `-threads 1` makes CBC 2.10 start a worker thread that can sit idle for 10 s before the search
            # ends (its log: "Thread 0 used 0 times, waiting to start 10.0"): one thread is CBC's default.
            threads = options.threads if options.threads > 1 else None
            return pulp.PULP_CBC_CMD(msg=False, timeLimit=options.time_limit_s, threads=threads,
                                     gapRel=options.relative_gap, logPath=str(log) if log else None,
                                     options=[f"randomCbcSeed {options.seed + 1}"])

    def _careful(self, options: SolveOptions, log: Path | None) -> Any:
        """CBC 2.10's wrong answers come from its preprocessing: the second try runs without it."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return pulp.PULP_CBC_CMD(msg=False, timeLimit=options.time_limit_s, gapRel=options.relative_gap,
                                     logPath=str(log) if log else None,
                                     options=[f"randomCbcSeed {options.seed + 1}", "preprocess off", "presolve off"])

    def _bound(self, problem: pulp.LpProblem, log: Path | None) -> float:
        # CBC minimises -objective: its "Lower bound" line is minus our upper bound.
        text = log.read_text(errors="replace") if log and log.exists() else ""
        found = re.findall(r"^Lower bound:\s+(-?[\d.eE+-]+)", text, flags=re.M)
        return -float(found[-1]) if found else math.nan
