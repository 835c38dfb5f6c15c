"""`python -m benchmarks repeatability`: how well the calibration rows repeat themselves.

Rows of the same configuration (model, system, engine, serving mode, layout, precision, lengths and
concurrency; the layout fully known, as `accuracy` uses) measured more than once are compared: each run
against the mean of the others. No model can predict a row closer than its repeats agree, so these figures
are the floor under `accuracy`'s errors, once across engine builds and once within one engine version.
Repeats whose figures are identical (the CSV's copies of one run under other ids) are counted apart.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.fit import layout_was_guessed
from benchmarks.measurements import Measurement, default_measurements_path, load_measurements

COPY_RTOL = 1e-6  # repeats this close are one run copied under other ids (the CSV rounds some copies differently)


@dataclass(frozen=True)
class Repeatability:
    """Runs of repeated configurations against the mean of their other runs."""

    configurations: int  # measured more than once with figures that differ
    copies: int  # configurations whose repeats carry identical figures
    ttft_ape: np.ndarray  # per run: |run / mean of the others - 1|
    tpot_ape: np.ndarray

    @property
    def runs(self) -> int:
        """Rows of the configurations whose figures differ."""
        return int(self.ttft_ape.size)

    def line(self, label: str) -> str:
        if not self.runs:
            return f"{label}: no configuration measured twice with differing figures"
        ttft, tpot = (f"median {100 * np.median(ape):.1f}% (p90 {100 * np.percentile(ape, 90):.0f}%)"
                      for ape in (self.ttft_ape, self.tpot_ape))
        return (f"{label}: {self.configurations} configurations measured more than once ({self.runs} rows; "
                f"{self.copies} more repeat identical figures): each run from the others' mean, TTFT {ttft}, "
                f"TPOT {tpot}")


def configuration(row: Measurement, by_version: bool) -> str:
    """What makes two rows the same run: everything but the row's id, name, campaign and figures."""
    scenario = {k: v for k, v in row.scenario.items() if k != "name"}
    key = [row.model, row.system, row.engine, row.serving, row.isl, row.osl, row.concurrency, scenario, row.layout,
           row.engine_version if by_version else None]
    return json.dumps(key, sort_keys=True, default=str)


def repeatability(rows: Sequence[Measurement], by_version: bool) -> Repeatability:
    groups: dict[str, list[Measurement]] = defaultdict(list)
    for row in rows:
        groups[configuration(row, by_version)].append(row)
    ttft: list[float] = []
    tpot: list[float] = []
    configurations = copies = 0
    for runs in groups.values():
        if len(runs) < 2:
            continue
        figures = np.array([[run.ttft_ms, run.tpot_ms] for run in runs])
        if np.allclose(figures, figures[0], rtol=COPY_RTOL, atol=0.0):
            copies += 1
            continue
        configurations += 1
        for i in range(len(runs)):
            others = np.delete(figures, i, axis=0).mean(axis=0)
            ttft.append(abs(figures[i, 0] / others[0] - 1.0))
            tpot.append(abs(figures[i, 1] / others[1] - 1.0))
    return Repeatability(configurations, copies, np.array(ttft), np.array(tpot))


def main(path: Path | None = None) -> int:
    rows = [m for m in load_measurements(path or default_measurements_path()) if not layout_was_guessed(m)]
    print(repeatability(rows, by_version=False).line("across engine builds"))
    print(repeatability(rows, by_version=True).line("within one engine version"))
    return 0
