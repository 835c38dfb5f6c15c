"""`plan sweep STUDY.yaml --out DIR`: every case of a study solved, resumably, and its tables written.

DIR holds `cases/<hash>.json` (one finished case each, kept between runs: a rerun solves only what is
missing) and, when every case has run, `results.csv`, `results.parquet`, `summary.json` and `sweep.png`,
moved in together (`planner.out_dir`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.finite import dumps
from planner.out_dir import OutputFolder
from planner.studies import tables
from planner.studies.progress import StudyProgress
from planner.studies.runner import CaseResult, Executor, run_cases
from planner.studies.study import Study

CACHE = "cases"


@dataclass(frozen=True)
class SweepOutcome:
    results: list[CaseResult]
    files: list[Path]
    summary: dict[str, Any]

    @property
    def failed(self) -> list[CaseResult]:
        return [r for r in self.results if r.status in ("error", "input_error")]


def objective_of(study: Study) -> str:
    return str(study.cases[0].scenario["search"]["objective"])


def run_sweep(study: Study, out: OutputFolder, executor: Executor, show_progress: bool = True) -> SweepOutcome:
    start = time.perf_counter()
    cache = out.folder / CACHE
    unique = len({case.hash for case in study.cases})
    if show_progress:
        with StudyProgress(unique, study.name) as progress:
            results = run_cases(study.cases, executor, cache, progress)
    else:
        results = run_cases(study.cases, executor, cache)
    objective = objective_of(study)
    cached = len({r.case.hash for r in results if r.cached})
    run = {"executor": executor.describe(), "cases_cached": cached, "cases_solved": unique - cached,
           "time_s": round(time.perf_counter() - start, 3)}
    summary = tables.summary(study, results, objective, run)
    table = tables.rows(results)
    out.path("results.csv").write_text(tables.csv_text(study, table), encoding="utf-8")
    tables.write_parquet(study, table, out.path("results.parquet"))
    out.path("summary.json").write_text(dumps(summary, indent=2) + "\n", encoding="utf-8")
    tables.plot(study, results, objective, out.path("sweep.png"))
    return SweepOutcome(results, out.commit(), summary)
