"""The held-out-engine ceiling: a fold's calibration with one engine's own values of some factors."""

from __future__ import annotations

import pytest

from benchmarks.__main__ import main as benchmarks_main
from benchmarks.ceiling import TTFT_FIELDS, check_fields, with_own_factors
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
