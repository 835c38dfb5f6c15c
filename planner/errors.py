"""Expected failures of the planner, each with the exit code the CLI maps it to.

A real bug still raises whatever it raises; these carry a message written for the user.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path


class PlannerError(Exception):
    """Base of expected failures. `exit_code` is what `plan` exits with."""

    exit_code = 1


@dataclass(frozen=True)
class InputProblem:
    """One thing wrong with an input file: where, which field, and what to change."""

    path: Path | None
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        if self.path is None and self.line is None and self.field.startswith("--"):  # a command-line option
            return f"{self.field}: {self.message}"
        where = str(self.path) if self.path is not None else "<input>"
        if self.line is not None:
            where += f":{self.line}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class InputError(PlannerError):
    """A scenario, layout or model file that cannot be used as written (exit code 2)."""

    exit_code = 2

    def __init__(self, problems: list[InputProblem]) -> None:
        if not problems:
            raise ValueError("InputError needs at least one problem")
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

    @classmethod
    def single(cls, path: Path | None, line: int | None, field: str, message: str) -> InputError:
        return cls([InputProblem(path, line, field, message)])

    def under(self, key: str, path: Path | None = None) -> InputError:
        """The same problems named from a document that holds this one under `key` (a plan file's `layout`
        or `scenario`), and in `path` where given."""
        return InputError([replace(p, path=path or p.path, field=f"{key}.{p.field}" if p.field else key)
                           for p in self.problems])


class InfeasibleError(PlannerError):
    """No deployment satisfies the scenario; the message names the binding resource (exit code 3)."""

    exit_code = 3


class NoSolutionInTimeError(PlannerError):
    """The solver found no feasible plan within its time limit (exit code 4)."""

    exit_code = 4
