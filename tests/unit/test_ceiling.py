"""The held-out-engine ceiling: a fold's calibration with one engine's own values of some factors."""

from __future__ import annotations

import pytest

from benchmarks.ceiling import TTFT_FIELDS, with_own_factors
from costmodel.calibration import Calibration, default_calibration


def _full() -> tuple[Calibration, Calibration]:
    fold = default_calibration()
    trtllm = fold.engine("trtllm").model_copy(update={"prefill_layer_latency_s": 7e-4, "cohort_fraction": 0.9,
                                                      "step_overhead_s": 3e-3})
    return fold, fold.model_copy(update={"engines": fold.engines | {"trtllm": trtllm}})


def test_the_held_out_engine_takes_the_named_factors_and_keeps_the_rest() -> None:
    fold, full = _full()
    ceiling = with_own_factors(fold, full, ["trtllm"], TTFT_FIELDS)
    engine = ceiling.engine("trtllm")
    assert engine.prefill_layer_latency_s == 7e-4
    assert engine.cohort_fraction == 0.9
    assert engine.step_overhead_s == fold.engine("trtllm").step_overhead_s  # not named: the fold's
    assert ceiling.engine("vllm") == fold.engine("vllm")  # other engines untouched
    assert ceiling.generations == fold.generations


def test_a_factor_that_is_not_an_engine_factor_is_refused_by_name() -> None:
    fold, full = _full()
    with pytest.raises(ValueError, match="hbm_efficiency"):
        with_own_factors(fold, full, ["trtllm"], ["hbm_efficiency"])
