"""Run the `plan` CLI in-process and capture its exit code and output."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from planner.cli import main


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str) -> CliResult:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())
