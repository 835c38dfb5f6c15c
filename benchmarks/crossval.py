"""Leave-one-group-out cross-validation of a model that is fitted to measurements and then predicts them.

The project is judged on systems, models and engines that are not in the calibration data, so the honest
error estimate holds a whole group out (every row of one model, say), fits on the rest and predicts the
held-out rows. `in_sample` gives the optimistic fit-on-everything figure for comparison.

A prediction of nan (or +-inf) means "infeasible" (the model says the layout cannot run). Such rows are
counted in `ErrorRow.n_infeasible` and left out of the percentiles, never dropped silently.
Everything is deterministic: groups are visited in sorted order, and there is no randomness.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from typing import Any, Final, TypeVar

import numpy as np

from benchmarks.measurements import Measurement

P = TypeVar("P")
Fit = Callable[[Sequence[Measurement]], P]
Predict = Callable[[P, Measurement], tuple[float, float]]  # (ttft_ms, tpot_ms)

METRICS: Final = ("ttft", "tpot")
IN_SAMPLE: Final = "in_sample"


@dataclass(frozen=True)
class HeldOutPrediction:
    """A prediction for one measurement, made by a model fitted without the fold `fold_key = fold_value`."""

    measurement: Measurement
    fold_key: str
    fold_value: str
    ttft_pred_ms: float
    tpot_pred_ms: float

    def predicted(self, metric: str) -> float:
        return _pick(metric, self.ttft_pred_ms, self.tpot_pred_ms)

    def measured(self, metric: str) -> float:
        return _pick(metric, self.measurement.ttft_ms, self.measurement.tpot_ms)

    def ape(self, metric: str) -> float:
        """Absolute percentage error |pred - meas| / meas x 100; nan when the prediction is infeasible."""
        predicted, measured = self.predicted(metric), self.measured(metric)
        if not math.isfinite(predicted):
            return math.nan
        return abs(predicted - measured) / measured * 100.0


@dataclass(frozen=True)
class ErrorRow:
    """Error statistics of one metric over one group of predictions (`values` empty: all of them)."""

    metric: str
    by: tuple[str, ...]
    values: tuple[str, ...]
    n: int
    n_infeasible: int
    median_ape_pct: float
    p90_ape_pct: float

    @property
    def label(self) -> str:
        return " / ".join(self.values) if self.values else "all"


def _pick(metric: str, ttft: float, tpot: float) -> float:
    if metric == "ttft":
        return ttft
    if metric == "tpot":
        return tpot
    raise KeyError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")


def leave_group_out(
    measurements: Sequence[Measurement], key: str, fit: Fit[P], predict: Predict[P], jobs: int = 1
) -> list[HeldOutPrediction]:
    """For each value g of `key` (sorted): fit on the rows whose group is not g, predict the rows whose
    group is g. Predictions come out fold by fold, in input order within a fold. `jobs` > 1 fits the folds
    in that many forked processes; the fits are independent, so the predictions are the same."""
    values = sorted({m.group(key) for m in measurements})
    if len(values) < 2:
        raise ValueError(f"leave-group-out by {key!r} needs at least two groups, found {values}")
    trains = [[m for m in measurements if m.group(key) != value] for value in values]
    predictions: list[HeldOutPrediction] = []
    for value, params in zip(values, fit_each(fit, trains, jobs), strict=True):
        held_out = [m for m in measurements if m.group(key) == value]
        predictions.extend(_predict_each(params, held_out, predict, key, value))
    return predictions


# What a forked fitting process reads: (fit, training sets), set in each worker by its initializer. Under fork
# the initializer's arguments reach the worker with the parent's memory, so neither the fit (often a closure)
# nor the rows are pickled, and the parent's own value never changes (a fit may call `fit_each` itself).
_FORKED: tuple[Fit[Any], list[list[Measurement]]] | None = None


def fit_each(fit: Fit[P], trains: list[list[Measurement]], jobs: int = 1) -> list[P]:
    """`fit` on each training set, in order; in up to `jobs` forked processes (each result is pickled back),
    where the platform forks safely (not on Windows, which cannot, nor macOS, where system libraries may not
    survive a fork), else in this process."""
    if jobs <= 1 or len(trains) <= 1 or not can_fork():
        return [fit(train) for train in trains]
    with ProcessPoolExecutor(max_workers=min(jobs, len(trains)), mp_context=get_context("fork"),
                             initializer=_set_forked, initargs=(fit, trains)) as pool:
        return list(pool.map(_fit_forked, range(len(trains))))


def can_fork() -> bool:
    return "fork" in get_all_start_methods() and sys.platform != "darwin"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, where the platform says; a cgroup CPU quota is not seen)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _set_forked(fit: Fit[Any], trains: list[list[Measurement]]) -> None:
    global _FORKED
    _FORKED = (fit, trains)


def _fit_forked(index: int) -> Any:
    assert _FORKED is not None  # set by the worker's initializer
    fit, trains = _FORKED
    return fit(trains[index])


def in_sample(measurements: Sequence[Measurement], fit: Fit[P], predict: Predict[P]) -> list[HeldOutPrediction]:
    """Fit on every row and predict every row: the optimistic baseline."""
    return _predict_each(fit(list(measurements)), measurements, predict, IN_SAMPLE, "all")


def _predict_each(
    params: P, rows: Sequence[Measurement], predict: Predict[P], key: str, value: str
) -> list[HeldOutPrediction]:
    out: list[HeldOutPrediction] = []
    for m in rows:
        ttft, tpot = predict(params, m)
        out.append(HeldOutPrediction(m, key, value, float(ttft), float(tpot)))
    return out


def error_table(predictions: Sequence[HeldOutPrediction], by: Sequence[str]) -> list[ErrorRow]:
    """Per metric (ttft, then tpot): one row per combination of the `by` keys (sorted), then an "all" row."""
    keys = tuple(by)
    groups: dict[tuple[str, ...], list[HeldOutPrediction]] = {}
    for p in predictions:
        groups.setdefault(tuple(p.measurement.group(k) for k in keys), []).append(p)
    rows: list[ErrorRow] = []
    for metric in METRICS:
        if keys:
            rows.extend(_error_row(metric, keys, values, groups[values]) for values in sorted(groups))
        rows.append(_error_row(metric, keys, (), predictions))
    return rows


def _error_row(
    metric: str, by: tuple[str, ...], values: tuple[str, ...], predictions: Sequence[HeldOutPrediction]
) -> ErrorRow:
    apes = [p.ape(metric) for p in predictions]
    finite = np.array([a for a in apes if not math.isnan(a)], dtype=float)
    median = float(np.percentile(finite, 50)) if finite.size else math.nan
    p90 = float(np.percentile(finite, 90)) if finite.size else math.nan
    return ErrorRow(metric, by, values, len(apes), len(apes) - finite.size, median, p90)


_HEADERS: Final = ("metric", "n", "infeasible", "median APE %", "p90 APE %")


def _cells(row: ErrorRow) -> list[str]:
    return [row.metric, row.label, str(row.n), str(row.n_infeasible),
            _percent(row.median_ape_pct), _percent(row.p90_ape_pct)]


def _percent(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def _headers(rows: Sequence[ErrorRow]) -> list[str]:
    by = next((r.by for r in rows if r.by), ())
    return [_HEADERS[0], " / ".join(by) or "group", *_HEADERS[1:]]


def format_table(rows: Sequence[ErrorRow], title: str) -> str:
    """Plain-text table, columns aligned (text left, numbers right)."""
    table = [_headers(rows), *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [title]
    for line in table:
        text = [c.ljust(w) for c, w in zip(line[:2], widths[:2], strict=True)]
        numbers = [c.rjust(w) for c, w in zip(line[2:], widths[2:], strict=True)]
        lines.append("  ".join(text + numbers).rstrip())
    return "\n".join(lines) + "\n"


def to_markdown(rows: Sequence[ErrorRow]) -> str:
    """GitHub-flavoured markdown table, numbers right-aligned."""
    headers = _headers(rows)
    lines = ["| " + " | ".join(headers) + " |", "|---|---|" + "---:|" * (len(headers) - 2)]
    lines.extend("| " + " | ".join(_cells(r)) + " |" for r in rows)
    return "\n".join(lines) + "\n"
