"""`python -m benchmarks own-calibration`: what calibrating on one's own runs (`plan calibrate`) buys.

Each campaign of the calibration rows (one engine build on one system in one serving mode: what one team
measures on its own cluster) with at least `MIN_CAMPAIGN_ROWS` rows is split in two by row id (alternate
rows). The shipped calibration is refitted without the campaign (as a user's own campaign is not in the
bundled data), then calibrated as `plan calibrate` does on the first half (`costmodel.fitting.fit`, starting
from and pulled towards the shipped one, engines and generations absent from the half keeping its values),
and both predict the second half: median APE of TTFT and TPOT per campaign and over all of them. How many
runs it takes: the campaigns with at least `CURVE_RUNS[-1]` rows to calibrate on are calibrated again on the
first 4, 8 and 16 of them (by row id), each predicting the same checked half. Whether `plan calibrate`'s
held-out figure can be trusted: its 5-fold cross-validation on the half calibrated on
(`planner.calibrate.cross_validated`) against the error measured on the checked half, per campaign.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.fit import layout_was_guessed
from benchmarks.measurements import Measurement, default_measurements_path, load_measurements
from costmodel.fitting import PlannedRows, fit
from planner.calibrate import DEFAULT_FOLDS, MIN_RUNS_PER_FOLD, cross_validated

MIN_CAMPAIGN_ROWS = 10  # five runs to calibrate on and five to check
CURVE_RUNS = (4, 8, 16)  # runs calibrated on, for the error against the number of runs


def campaigns(rows: Sequence[Measurement]) -> dict[tuple[str, str, str, str], list[int]]:
    """Row indices of each campaign with enough rows, by (engine, version, system, serving), sorted by row id."""
    found: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    for index, m in enumerate(rows):
        found[(m.engine, m.engine_version, m.system, m.serving)].append(index)
    return {key: sorted(idx, key=lambda i: rows[i].id) for key, idx in sorted(found.items())
            if len(idx) >= MIN_CAMPAIGN_ROWS}


def _ape(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.asarray(np.abs(predicted / measured - 1.0) * 100.0)


def _medians(prefix: str, errors: np.ndarray) -> dict[str, float]:
    return {f"{prefix}_ttft_pct": float(np.median(errors[:, 0])), f"{prefix}_tpot_pct": float(np.median(errors[:, 1]))}


def main(json_out: Path | None = None) -> int:
    rows = [m for m in load_measurements(default_measurements_path()) if not layout_was_guessed(m)]
    planned = PlannedRows.build(rows)
    measured = planned.measured()
    shipped_errors, own_errors, table = [], [], []
    curve: dict[str, list[np.ndarray]] = {}
    for key, indices in campaigns(rows).items():
        calibrate_on, check = indices[0::2], indices[1::2]
        campaign = set(indices)
        shipped = fit(planned.subset([i for i in range(len(rows)) if i not in campaign]))
        own = fit(planned.subset(calibrate_on), prior=shipped, absent="prior")
        before = _ape(planned.predict(shipped)[check], measured[check])
        after = _ape(planned.predict(own)[check], measured[check])
        shipped_errors.append(before)
        own_errors.append(after)
        if len(calibrate_on) >= CURVE_RUNS[-1]:
            curve.setdefault("0", []).append(before)
            for runs in CURVE_RUNS:
                fewer = fit(planned.subset(calibrate_on[:runs]), prior=shipped, absent="prior")
                curve.setdefault(str(runs), []).append(_ape(planned.predict(fewer)[check], measured[check]))
            curve.setdefault("half", []).append(after)
        entry = {"engine": key[0], "version": key[1] or "(none)", "system": key[2], "serving": key[3],
                 "calibrated_on": len(calibrate_on), "checked": len(check),
                 **_medians("shipped", before), **_medians("own", after)}
        if len(calibrate_on) >= DEFAULT_FOLDS * MIN_RUNS_PER_FOLD:  # as `plan calibrate` cross-validates
            ratios = cross_validated(planned.subset(calibrate_on), shipped, DEFAULT_FOLDS)
            entry |= _medians("cv", np.abs(ratios - 1.0) * 100.0)
        table.append(entry)
        print(f"{key[0]:7} {entry['version']:26} {key[2]:12} {key[3]:14} {len(calibrate_on):3} / {len(check):3}  "
              f"TTFT {entry['shipped_ttft_pct']:5.1f} -> {entry['own_ttft_pct']:5.1f}  "
              f"TPOT {entry['shipped_tpot_pct']:5.1f} -> {entry['own_tpot_pct']:5.1f}", flush=True)
    before_all, after_all = np.vstack(shipped_errors), np.vstack(own_errors)
    summary = {"rows_checked": len(before_all), "campaigns": len(table),
               **_medians("shipped", before_all), **_medians("own", after_all)}
    print(f"all {summary['campaigns']} campaigns, {summary['rows_checked']} rows checked: TTFT "
          f"{summary['shipped_ttft_pct']:.1f}% -> {summary['own_ttft_pct']:.1f}%, TPOT "
          f"{summary['shipped_tpot_pct']:.1f}% -> {summary['own_tpot_pct']:.1f}% (median APE, shipped -> own)")
    by_runs = {size: {"campaigns": len(errors), **_medians("own", np.vstack(errors))} for size, errors in curve.items()}
    for size, figures in by_runs.items():
        print(f"calibrated on {size:>4} runs ({figures['campaigns']} campaigns with >= {CURVE_RUNS[-1]} to calibrate "
              f"on): TTFT {figures['own_ttft_pct']:.1f}%, TPOT {figures['own_tpot_pct']:.1f}%")
    trust = _cross_validation_check(table)
    if trust["campaigns"]:
        print(f"held-out estimate ({DEFAULT_FOLDS}-fold, on the half calibrated on) against the checked half, over "
              f"{trust['campaigns']} campaigns: median |estimate - checked| TTFT "
              f"{trust['median_abs_gap_ttft_pts']:.1f} points, TPOT {trust['median_abs_gap_tpot_pts']:.1f}; checked "
              f"within 5 points of it or better in {trust['ttft_within_5_pts']} (TTFT) and "
              f"{trust['tpot_within_5_pts']} (TPOT)")
    if json_out is not None:
        json_out.write_text(json.dumps({"summary": summary, "by_runs": by_runs, "cross_validation": trust,
                                        "campaigns": table}, indent=2) + "\n", encoding="utf-8")
    return 0


def _cross_validation_check(table: Sequence[dict[str, Any]]) -> dict[str, float]:
    """How far `plan calibrate`'s held-out estimate is from the error on runs it never saw: per campaign the gap
    in points, and how many campaigns' checked error is at most 5 points above the estimate (none: no figures)."""
    checked = [entry for entry in table if "cv_ttft_pct" in entry]
    figures: dict[str, float] = {"campaigns": len(checked)}
    for metric in ("ttft", "tpot") if checked else ():
        estimate = np.array([float(e[f"cv_{metric}_pct"]) for e in checked])
        actual = np.array([float(e[f"own_{metric}_pct"]) for e in checked])
        figures[f"median_abs_gap_{metric}_pts"] = float(np.median(np.abs(actual - estimate)))
        figures[f"{metric}_within_5_pts"] = int(np.sum(actual <= estimate + 5.0))
    return figures
