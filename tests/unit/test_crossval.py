"""The cross-validation harness on synthetic measurements: folds never see their own rows, errors and
percentiles are computed as documented, and infeasible (nan) predictions are counted."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import pytest

from benchmarks import crossval
from benchmarks.crossval import (
    ErrorRow,
    HeldOutPrediction,
    error_table,
    fit_each,
    format_table,
    in_sample,
    leave_group_out,
    to_markdown,
)
from benchmarks.measurements import Measurement


def _m(row_id: str, model: str, system: str = "h200-sxm", engine: str = "vllm", serving: str = "aggregated",
       ttft: float = 100.0, tpot: float = 10.0) -> Measurement:
    return Measurement(
        id=row_id, model=model, system=system, engine=engine, engine_version="", serving=serving,
        isl=1000, osl=100, concurrency=1, scenario={}, layout={}, ttft_ms=ttft, tpot_ms=tpot, assumptions=(),
    )


ROWS = [
    _m("a1", "A", engine="vllm", tpot=10.0),
    _m("b1", "B", engine="sglang", tpot=20.0),
    _m("a2", "A", engine="trtllm", tpot=30.0),
    _m("c1", "C", system="b200-sxm", tpot=40.0),
]


def _mean_tpot(rows: Sequence[Measurement]) -> float:
    return sum(m.tpot_ms for m in rows) / len(rows)


def _constant(params: float, m: Measurement) -> tuple[float, float]:
    return params, params


def test_held_out_fold_never_sees_its_rows() -> None:
    seen: list[list[str]] = []

    def fit(rows: Sequence[Measurement]) -> float:
        seen.append([m.id for m in rows])
        return _mean_tpot(rows)

    predictions = leave_group_out(ROWS, "model", fit, _constant)
    assert seen == [["b1", "c1"], ["a1", "a2", "c1"], ["a1", "b1", "a2"]]  # folds A, B, C in sorted order
    assert [(p.measurement.id, p.fold_key, p.fold_value) for p in predictions] == [
        ("a1", "model", "A"), ("a2", "model", "A"), ("b1", "model", "B"), ("c1", "model", "C")]
    assert [p.tpot_pred_ms for p in predictions] == [30.0, 30.0, 80.0 / 3.0, 20.0]


def test_folds_fitted_in_forked_processes_give_the_same_predictions() -> None:
    """A closure as the fit (never pickled: the forked processes inherit it) and each fold's own process."""
    offset = 1.5

    def fit(rows: Sequence[Measurement]) -> tuple[float, int]:
        return _mean_tpot(rows) + offset, os.getpid()

    def predict(params: tuple[float, int], m: Measurement) -> tuple[float, float]:
        return params[0], params[0]

    serial = leave_group_out(ROWS, "model", fit, predict)
    forked = leave_group_out(ROWS, "model", fit, predict, jobs=2)
    assert [(p.measurement.id, p.tpot_pred_ms) for p in forked] == [(p.measurement.id, p.tpot_pred_ms) for p in serial]
    assert {pid for _, pid in fit_each(fit, [ROWS[:2], ROWS[2:]], jobs=2)} != {os.getpid()}  # fitted elsewhere


def test_a_fit_may_fit_in_processes_itself_and_its_errors_reach_the_caller() -> None:
    def inner(rows: Sequence[Measurement]) -> float:
        return _mean_tpot(rows)

    def outer(rows: Sequence[Measurement]) -> float:
        return sum(fit_each(inner, [list(rows[:1]), list(rows[1:])], jobs=2))

    trains = [ROWS[:2], ROWS[1:], ROWS[:3], ROWS]
    assert fit_each(outer, trains, jobs=2) == fit_each(outer, trains)
    assert crossval._FORKED is None  # the parent's state is the workers' initializers' alone

    def broken(rows: Sequence[Measurement]) -> float:
        raise ValueError(f"no fit for {len(rows)} rows")

    with pytest.raises(ValueError, match="no fit for 2 rows"):
        fit_each(broken, [ROWS[:2], ROWS[:2]], jobs=2)


def test_in_sample_fits_on_everything() -> None:
    predictions = in_sample(ROWS, _mean_tpot, _constant)
    assert [p.measurement.id for p in predictions] == ["a1", "b1", "a2", "c1"]
    assert {p.tpot_pred_ms for p in predictions} == {25.0}
    assert {(p.fold_key, p.fold_value) for p in predictions} == {("in_sample", "all")}


def test_one_group_cannot_be_held_out() -> None:
    with pytest.raises(ValueError, match="at least two groups"):
        leave_group_out(ROWS, "serving", _mean_tpot, _constant)


def test_perfect_predictor_has_zero_error() -> None:
    predictions = leave_group_out(ROWS, "engine", lambda rows: None, lambda _, m: (m.ttft_ms, m.tpot_ms))
    rows = error_table(predictions, ("engine",))
    assert all(r.median_ape_pct == 0.0 and r.p90_ape_pct == 0.0 and r.n_infeasible == 0 for r in rows)
    assert [(r.metric, r.label, r.n) for r in rows] == [
        ("ttft", "sglang", 1), ("ttft", "trtllm", 1), ("ttft", "vllm", 2), ("ttft", "all", 4),
        ("tpot", "sglang", 1), ("tpot", "trtllm", 1), ("tpot", "vllm", 2), ("tpot", "all", 4),
    ]


def _prediction(m: Measurement, ttft: float, tpot: float) -> HeldOutPrediction:
    return HeldOutPrediction(m, "model", m.model, ttft, tpot)


def test_percentiles_on_a_hand_computed_example() -> None:
    # TPOT measured 10 everywhere; predictions give APEs 10, 20, 40, 80 %.
    ms = [_m(f"r{i}", "A", tpot=10.0) for i in range(4)]
    predictions = [_prediction(m, 100.0, tpot) for m, tpot in zip(ms, [11.0, 8.0, 14.0, 2.0], strict=True)]
    (_, tpot_all) = error_table(predictions, ())
    assert (tpot_all.metric, tpot_all.label, tpot_all.n, tpot_all.n_infeasible) == ("tpot", "all", 4, 0)
    assert tpot_all.median_ape_pct == pytest.approx(30.0)  # (20 + 40) / 2
    # linear: rank 0.9 x 3 = 2.7 -> 40 + 0.7 x (80 - 40) = 68
    assert tpot_all.p90_ape_pct == pytest.approx(68.0)
    assert tpot_all.p90_ape_pct == pytest.approx(float(np.percentile([10, 20, 40, 80], 90)))


def test_nan_predictions_are_counted_not_dropped() -> None:
    ms = [_m("x", "A"), _m("y", "A"), _m("z", "B")]
    predictions = [_prediction(ms[0], math.nan, 12.0), _prediction(ms[1], 150.0, math.inf),
                   _prediction(ms[2], math.nan, math.nan)]
    rows = {(r.metric, r.label): r for r in error_table(predictions, ("model",))}
    assert (rows["ttft", "A"].n, rows["ttft", "A"].n_infeasible, rows["ttft", "A"].median_ape_pct) == (2, 1, 50.0)
    assert (rows["tpot", "A"].n, rows["tpot", "A"].n_infeasible, rows["tpot", "A"].median_ape_pct) == (2, 1, 20.0)
    assert rows["ttft", "B"].n_infeasible == 1 and math.isnan(rows["ttft", "B"].median_ape_pct)
    assert (rows["ttft", "all"].n, rows["ttft", "all"].n_infeasible) == (3, 2)
    assert (rows["tpot", "all"].n, rows["tpot", "all"].n_infeasible) == (3, 2)


def test_grouping_by_two_keys() -> None:
    predictions = in_sample(ROWS, _mean_tpot, _constant)
    labels = [r.label for r in error_table(predictions, ("system", "model")) if r.metric == "tpot"]
    assert labels == ["b200-sxm / C", "h200-sxm / A", "h200-sxm / B", "all"]


def test_tables_are_aligned_and_deterministic() -> None:
    rows = [
        ErrorRow("ttft", ("model",), ("A",), 12, 1, 5.25, 10.0),
        ErrorRow("ttft", ("model",), (), 12, 1, math.nan, 100.0),
    ]
    text = format_table(rows, "held out by model")
    assert text == (
        "held out by model\n"
        "metric  model   n  infeasible  median APE %  p90 APE %\n"
        "ttft    A      12           1           5.2       10.0\n"
        "ttft    all    12           1             -      100.0\n"
    )
    assert format_table(rows, "held out by model") == text
    assert to_markdown(rows) == (
        "| metric | model | n | infeasible | median APE % | p90 APE % |\n"
        "|---|---|---:|---:|---:|---:|\n"
        "| ttft | A | 12 | 1 | 5.2 | 10.0 |\n"
        "| ttft | all | 12 | 1 | - | 100.0 |\n"
    )
