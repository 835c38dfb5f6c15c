"""`python -m benchmarks accuracy`: cost-model error on held-out models, systems, engines and serving modes.

For each grouping key (model, system, engine, serving) every group is held out in turn: the calibration
is refitted on the other groups (`benchmarks.fit`) and the held-out rows are predicted. The tables give
the median and 90th-percentile absolute percentage error of TTFT and TPOT per held-out group; the
in-sample fit is shown for comparison. Disaggregated rows whose worker counts are not in the data are
predicted with the full calibration and reported apart, their worker counts bounded
(`benchmarks.worker_counts`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.crossval import HeldOutPrediction, error_table, format_table, in_sample, leave_group_out, to_markdown
from benchmarks.fit import layout_was_guessed
from benchmarks.measurements import Measurement, default_measurements_path, load_measurements
from benchmarks.worker_counts import bounded
from costmodel.calibration import Calibration
from costmodel.expected_error import decode_batch_per_rank
from costmodel.fitting import PlannedRows, fit
from costmodel.layout import Layout

KEYS = ("model", "system", "engine", "serving")  # the default groupings (issue 13's targets); also: campaign


@dataclass
class FastModel:
    """Adapts the vectorised fit/predict to the cross-validation harness's per-row interface."""

    planned: PlannedRows
    index: dict[str, int]
    # The calibration last predicted with and its predictions. The cache holds the calibration itself: keyed
    # by id() alone, a fold's calibration freed after its fold could hand its id, and its predictions, to the
    # next fold's (it did: the serving fold's figures changed from one run to the next).
    _cache: tuple[Calibration, np.ndarray] | None = field(default=None, init=False, repr=False)

    @staticmethod
    def build(rows: Sequence[Measurement]) -> FastModel:
        planned = PlannedRows.build(rows)
        return FastModel(planned, {m.id: i for i, m in enumerate(rows)})

    def fit(self, rows: Sequence[Measurement]) -> Calibration:
        return fit(self.planned.subset([self.index[m.id] for m in rows]))

    def predict(self, calibration: Calibration, row: Measurement) -> tuple[float, float]:
        if self._cache is None or self._cache[0] is not calibration:
            self._cache = (calibration, self.planned.predict(calibration))  # one calibration at a time
        ttft, tpot = self._cache[1][self.index[row.id]]
        return float(ttft), float(tpot)


def run(path: Path | None = None, keys: Sequence[str] = KEYS, jobs: int = 1) -> dict[str, Any]:
    """The report's figures; `jobs`: processes the folds' fits share (the figures do not depend on it)."""
    rows = load_measurements(path or default_measurements_path())
    known = [m for m in rows if not layout_was_guessed(m)]
    guessed = [m for m in rows if layout_was_guessed(m)]
    model = FastModel.build(known)
    report: dict[str, Any] = {"rows": len(known), "guessed_rows": len(guessed),
                              "largest_batch_per_rank": largest_batch_per_rank(known), "held_out": {}, "tables": {}}
    for key in keys:
        predictions = leave_group_out(known, key, model.fit, model.predict, jobs)
        table = error_table(predictions, (key,))
        report["held_out"][key] = _rows_json(table)
        # the same fold's rows pooled by engine: what `expected_error` quotes for a scenario of that engine
        report.setdefault("held_out_by_engine", {})[key] = _rows_json(error_table(predictions, ("engine",)))
        report["tables"][key] = format_table(table, f"held out by {key}")
        report.setdefault("markdown", {})[key] = to_markdown(table)
    calibration = model.fit(known)  # one fit on every row: the in-sample figures and the guessed rows'
    fitted = in_sample(known, lambda _: calibration, model.predict)
    report["tables"]["in_sample"] = format_table(error_table(fitted, ("serving",)), "in sample (fit on all rows)")
    report["in_sample"] = _rows_json(error_table(fitted, ("serving",)))
    report["tables"]["guessed"] = _guessed_table(guessed, calibration)
    return report


def largest_batch_per_rank(rows: Sequence[Measurement]) -> dict[str, int]:
    """The most sequences one attention-DP rank of a decoding pool (mixed or decode) held in `rows`, by engine and
    over all (`all`): how far the rows measured the per-sequence step costs (`costmodel.expected_error.batch_note`)."""
    by_engine: dict[str, int] = {}
    for row in rows:
        per_rank = decode_batch_per_rank(Layout.model_validate(row.layout))
        by_engine[row.engine] = max(by_engine.get(row.engine, 0), per_rank)
    return {**dict(sorted(by_engine.items())), "all": max(by_engine.values(), default=0)}


def _guessed_table(guessed: Sequence[Measurement], calibration: Calibration) -> str:
    guessed = [bounded(m, calibration) for m in guessed]
    planned = FastModel.build(guessed)
    predictions = [HeldOutPrediction(m, "guessed_layout", "all", *planned.predict(calibration, m)) for m in guessed]
    return format_table(error_table(predictions, ("serving",)),
                        "disaggregated rows without worker counts (bounded counts), full calibration")


def _rows_json(rows: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"metric": r.metric, "group": r.label, "n": r.n, "median_ape_pct": r.median_ape_pct,
             "p90_ape_pct": r.p90_ape_pct, "infeasible": r.n_infeasible} for r in rows]


def main(json_out: Path | None = None, markdown: bool = False, keys: Sequence[str] = KEYS, jobs: int = 1) -> int:
    report = run(keys=keys, jobs=jobs)
    for table in report["tables"].values():
        print(table, end="\n\n")
    if markdown:
        for key, text in report["markdown"].items():
            print(f"#### held out by {key}\n\n{text}\n")
    if json_out is not None:
        data = {k: v for k, v in report.items() if k not in ("tables", "markdown")}
        json_out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0
