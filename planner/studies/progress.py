"""Progress of a study on stderr: a rich progress bar with ETA on a terminal, a line per case otherwise.

The ETA counts only cases solved in this run (cases found in the cache take no time), at the mean time
per case so far divided among the workers.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from planner.studies.runner import CaseResult


class StudyProgress:
    """`with StudyProgress(total, name) as progress: ... progress(result, done, total)`."""

    def __init__(self, total: int, name: str, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.total, self.name = total, name
        self.start = time.perf_counter()
        self.cached = self.computed = 0
        self.bar: Progress | None = None
        self.task: Any = None

    def __enter__(self) -> StudyProgress:
        if self.console.is_terminal:
            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[note]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                TimeRemainingColumn(), console=self.console, transient=False)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.name, total=self.total, note="")
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.__exit__(kind, error, trace)

    def eta_s(self, done: int) -> float | None:
        if not self.computed:
            return None
        elapsed = time.perf_counter() - self.start
        return elapsed / self.computed * (self.total - done)

    def __call__(self, result: CaseResult, done: int, total: int) -> None:
        if result.cached:
            self.cached += 1
            self.start = time.perf_counter()  # the ETA's clock starts after the cached cases
        else:
            self.computed += 1
        note = f"{self.cached} cached, {self.computed} solved"
        if self.bar is not None:
            self.bar.update(self.task, completed=done, note=note)
            return
        if result.cached and done < total:  # a line per cached case would drown the log
            return
        eta = self.eta_s(done)
        eta_text = "" if eta is None or done == total else f", ETA {_duration(eta)}"
        line = (f"[{done}/{total}] case {result.case.index} ({result.case.label}): {result.status}"
                + ("" if result.cached else f" in {result.time_s:.1f} s") + f"; {note}{eta_text}")
        print(line, file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
