"""The ceiling reference: a fold's calibration with the held-out rows' engines taking their own values of some
factors, the folds as the accuracy benchmark's, the factor names checked before any fitting."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pytest

from benchmarks.__main__ import main as benchmarks_main
from benchmarks.ceiling import TTFT_FIELDS, check_fields, held_out_predictions, with_own_factors
from benchmarks.measurements import Measurement
from costmodel.calibration import Calibration, default_calibration


def _full() -> tuple[Calibration, Calibration]:
    fold = default_calibration()
    trtllm = fold.engine("trtllm").model_copy(update={"prefill_layer_latency_s": 7e-4, "cohort_fraction": 0.9,
                                                      "dp_wait_steps": 12.0, "step_overhead_s": 3e-3})
    return fold, fold.model_copy(update={"engines": fold.engines | {"trtllm": trtllm}})


def test_the_held_out_engine_takes_the_named_factors_and_keeps_the_rest() -> None:
    fold, full = _full()
    ceiling = with_own_factors(fold, full, ["trtllm"], TTFT_FIELDS)
    engine = ceiling.engine("trtllm")
    assert engine.prefill_layer_latency_s == 7e-4
    assert engine.cohort_fraction == 0.9
    assert engine.dp_wait_steps == 12.0
    assert engine.step_overhead_s == fold.engine("trtllm").step_overhead_s  # not named: the fold's
    assert ceiling.engine("vllm") == fold.engine("vllm")  # other engines untouched
    assert ceiling.generations == fold.generations


def test_a_factor_that_is_not_an_engine_factor_is_refused_by_name() -> None:
    fold, full = _full()
    with pytest.raises(ValueError, match="hbm_efficiency"):
        with_own_factors(fold, full, ["trtllm"], ["hbm_efficiency"])


def test_an_engine_the_full_calibration_lacks_is_refused() -> None:
    fold, full = _full()
    with pytest.raises(ValueError, match="no factors of lmdeploy"):
        with_own_factors(fold, full, ["lmdeploy"], TTFT_FIELDS)


def test_factor_names_are_stripped_and_an_empty_list_refused() -> None:
    assert check_fields([" cohort_fraction", "dp_wait_steps ", ""]) == ("cohort_fraction", "dp_wait_steps")
    with pytest.raises(ValueError, match="none given"):
        check_fields([""])


def test_the_command_refuses_unknown_factors_with_exit_code_2_before_fitting() -> None:
    with pytest.raises(SystemExit) as exit_info:
        benchmarks_main(["ceiling", "--factors", "hbm_efficiency"])
    assert exit_info.value.code == 2


class _FakeModel:
    """Stands in for `benchmarks.accuracy.FastModel`: a fit is the default calibration with each training
    engine's first-token latency set to its row count (ms) and its step overhead to the count of all training
    rows (ms); a prediction reads the row's engine's latency as TTFT and its step overhead as TPOT."""

    fits: ClassVar[list[list[str]]] = []  # the training rows' ids of every fit, in order

    def __init__(self, rows: Sequence[Measurement]) -> None:
        self.rows = rows

    @staticmethod
    def build(rows: Sequence[Measurement]) -> _FakeModel:
        return _FakeModel(rows)

    def fit(self, rows: Sequence[Measurement]) -> Calibration:
        _FakeModel.fits.append([m.id for m in rows])
        base = default_calibration()
        counts = {e: sum(m.engine == e for m in rows) for e in {m.engine for m in rows}}
        engines = {e: base.engine(e).model_copy(update={"prefill_layer_latency_s": n * 1e-3,
                                                        "step_overhead_s": len(rows) * 1e-3})
                   for e, n in counts.items()}
        return base.model_copy(update={"engines": base.engines | engines})

    def predict(self, calibration: Calibration, row: Measurement) -> tuple[float, float]:
        engine = calibration.engine(row.engine)
        return engine.prefill_layer_latency_s * 1e3, engine.step_overhead_s * 1e3


def _row(row_id: str, engine: str, serving: str) -> Measurement:
    return Measurement(id=row_id, model="m", system="h200-sxm", engine=engine, engine_version="", serving=serving,
                       isl=1, osl=1, concurrency=1, scenario={}, layout={}, ttft_ms=1.0, tpot_ms=1.0, assumptions=())


def test_each_group_is_predicted_from_a_fold_without_it_and_again_with_its_engines_own_factors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [_row("v1", "vllm", "aggregated"), _row("t3", "trtllm", "disaggregated"),
            _row("t1", "trtllm", "aggregated"), _row("t2", "trtllm", "aggregated")]
    monkeypatch.setattr("benchmarks.ceiling.FastModel", _FakeModel)
    monkeypatch.setattr(_FakeModel, "fits", [])
    plain, own = held_out_predictions(rows, ["prefill_layer_latency_s"], key="serving")
    # the full fit, then each group's fold in sorted order, the other rows in their input order
    assert _FakeModel.fits == [["v1", "t3", "t1", "t2"], ["t3"], ["v1", "t1", "t2"]]
    assert [p.measurement.id for p in plain] == [p.measurement.id for p in own] == ["v1", "t1", "t2", "t3"]
    assert {(p.fold_key, p.fold_value) for p in own} == {("serving", "aggregated"), ("serving", "disaggregated")}
    # aggregated held out: the fold saw one trtllm row (1 ms); own: the full fit's (3 trtllm rows, 1 vllm row)
    assert [p.ttft_pred_ms for p in own] == [1.0, 3.0, 3.0, 3.0]
    assert [p.ttft_pred_ms for p in plain][1:] == [1.0, 1.0, 2.0]
    # the factors not named stay the fold's (its training row count), not the full fit's (4)
    assert [p.tpot_pred_ms for p in own][1:] == [p.tpot_pred_ms for p in plain][1:] == [1.0, 1.0, 3.0]


def test_the_command_passes_its_factors_and_key_through(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[tuple[tuple[str, ...], str]] = []
    monkeypatch.setattr("benchmarks.ceiling.main", lambda fields, key: called.append((tuple(fields), key)) or 0)
    assert benchmarks_main(["ceiling", "--factors", "cohort_fraction, dp_wait_steps", "--key", "serving"]) == 0
    assert called == [(("cohort_fraction", "dp_wait_steps"), "serving")]
