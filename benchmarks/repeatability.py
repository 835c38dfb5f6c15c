"""`python -m benchmarks repeatability`: how well the calibration rows repeat themselves.

Rows of the same configuration (model, system, engine, serving mode, layout, precision, lengths and
concurrency; the layout fully known, as `accuracy` uses) measured more than once are compared: each run
against the mean of the others. No model can predict a row closer than its repeats agree, so these figures
are the floor under `accuracy`'s errors, once across engine builds and once within one engine version.
Repeats whose figures are identical (the CSV's copies of one run under other ids) are counted apart.

A second floor, for TTFT: aggregated runs of one engine build alike in everything but their output length.
In the cost model's steady state a request's first token hardly depends on how many tokens follow it (its
TTFTs for such pairs differ only through the round's share of prompt work and its KV reservation: a median
0.06% with the bundled calibration, session 33), so how far the measured TTFTs differ is what the model does
not capture: prompts queueing behind each other more often when outputs are short, and variation no column
of the rows records (a benchmark's run length and warm-up, admission limits). Copies of a run count once.
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

    configurations: int  # measured more than once with figures that differ (copies counted once)
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


def configuration(row: Measurement, by_version: bool, any_output: bool = False) -> str:
    """What makes two rows the same run: everything but the row's id, name, campaign and figures (`any_output`:
    and the output length)."""
    scenario = {k: v for k, v in row.scenario.items() if k != "name"}
    if any_output:
        workload = {k: v for k, v in scenario.get("workload", {}).items() if k != "output_tokens"}
        scenario = scenario | {"workload": workload}
    key = [row.model, row.system, row.engine, row.serving, row.isl, None if any_output else row.osl,
           row.concurrency, scenario, row.layout, row.engine_version if by_version else None]
    return json.dumps(key, sort_keys=True, default=str)


@dataclass(frozen=True)
class OutputPairs:
    """Pairs of aggregated runs of one engine build alike in all but output length: their TTFTs' spread."""

    pairs: list[tuple[int, int]]  # indices into the rows, the shorter output first
    measured: np.ndarray  # per pair: larger TTFT / smaller - 1
    predicted: np.ndarray | None = None  # the same of the cost model's TTFTs, where computed

    def line(self) -> str:
        if not self.pairs:
            return "output-length pairs: none"
        rows = len({i for pair in self.pairs for i in pair})
        text = (f"output-length pairs: {len(self.pairs)} pairs of aggregated runs ({rows} rows) alike but for "
                f"output length, one engine build: TTFT differs by a median {100 * np.median(self.measured):.1f}% "
                f"(p75 {100 * np.percentile(self.measured, 75):.0f}%)")
        if self.predicted is not None:
            text += f"; the cost model's by {100 * np.median(self.predicted):.2f}%"
        return text


def output_pairs(rows: Sequence[Measurement]) -> OutputPairs:
    """Every pair of aggregated rows of one configuration but for output length (`configuration`, by version)."""
    groups: dict[str, list[Measurement]] = defaultdict(list)
    for row in rows:
        if row.serving == "aggregated":
            groups[configuration(row, by_version=True, any_output=True)].append(row)
    index = {id(row): i for i, row in enumerate(rows)}
    kept = [[index[id(run)] for run in distinct_runs(members)] for members in groups.values()]  # copies once
    pairs = [(a, b) for members in kept for a in members for b in members if rows[a].osl < rows[b].osl]
    return OutputPairs(pairs, _spread(np.array([[rows[a].ttft_ms, rows[b].ttft_ms] for a, b in pairs])))


def _spread(pairs: np.ndarray) -> np.ndarray:
    """Per pair of figures: the larger over the smaller, less 1."""
    return pairs.max(axis=1) / pairs.min(axis=1) - 1.0 if pairs.size else np.zeros(0)


def with_predictions(found: OutputPairs, rows: Sequence[Measurement]) -> OutputPairs:
    """`found` with the bundled calibration's TTFT spread of each pair."""
    if not found.pairs:
        return found
    from costmodel.calibration import default_calibration
    from costmodel.fitting import PlannedRows

    used = sorted({i for pair in found.pairs for i in pair})
    where = {row: k for k, row in enumerate(used)}
    ttft = PlannedRows.build([rows[i] for i in used]).predict(default_calibration())[:, 0]
    predicted = _spread(np.array([[ttft[where[a]], ttft[where[b]]] for a, b in found.pairs]))
    return OutputPairs(found.pairs, found.measured, predicted)


def distinct_runs(runs: Sequence[Measurement]) -> list[Measurement]:
    """`runs` less the copies of an earlier one (figures within COPY_RTOL): one run counts once."""
    kept: list[Measurement] = []
    for run in runs:
        if not any(_same_figures(run, other) for other in kept):
            kept.append(run)
    return kept


def _same_figures(a: Measurement, b: Measurement) -> bool:
    return bool(np.allclose([a.ttft_ms, a.tpot_ms], [b.ttft_ms, b.tpot_ms], rtol=COPY_RTOL, atol=0.0))


def repeatability(rows: Sequence[Measurement], by_version: bool) -> Repeatability:
    groups: dict[str, list[Measurement]] = defaultdict(list)
    for row in rows:
        groups[configuration(row, by_version)].append(row)
    ttft: list[float] = []
    tpot: list[float] = []
    configurations = copies = 0
    for measured in groups.values():
        runs = distinct_runs(measured)
        if len(runs) < 2:
            copies += len(measured) > 1
            continue
        figures = np.array([[run.ttft_ms, run.tpot_ms] for run in runs])
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
    print(with_predictions(output_pairs(rows), rows).line())
    return 0
