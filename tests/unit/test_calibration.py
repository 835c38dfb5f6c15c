"""Calibration files and the fit: loadable, in range, deterministic, and better than the priors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.fit import layout_was_guessed, provenance
from benchmarks.measurements import load_measurements
from costmodel.calibration import Calibration, default_calibration, prior_calibration
from costmodel.fitting import MEASURED_FLOORS, MIN_GENERATION_ROWS, ParameterSpace, PlannedRows, factor_bounds, fit
from tests.fit_rows import RowsStub


def test_shipped_calibrations_load_and_cover_every_engine() -> None:
    for calibration in (default_calibration(), prior_calibration()):
        assert set(calibration.engines) >= {"trtllm", "vllm", "sglang", "generic"}
        assert set(calibration.generations) == {"hopper", "blackwell", "cdna3", "cdna4"}
        assert set(calibration.collectives) == {"allreduce", "alltoall", "p2p"}


@pytest.fixture(scope="module")
def shared_dir_module() -> Path:
    shared = Path(__file__).resolve().parents[2].parent / "shared"
    if not shared.is_dir():
        pytest.skip("../shared is not present")
    return shared


@pytest.fixture(scope="module")
def sample(shared_dir_module: Path) -> PlannedRows:
    rows = [m for m in load_measurements(shared_dir_module / "calibration" / "serving_measurements.csv")
            if not layout_was_guessed(m)]
    return PlannedRows.build(rows[::12])  # every 12th row: all models, systems and engines, fast


def test_fit_is_deterministic_in_range_and_beats_the_priors(sample: PlannedRows) -> None:
    first = fit(sample, max_evaluations=60)
    assert first == fit(sample, max_evaluations=60)
    space = ParameterSpace.for_rows(sample, prior_calibration())
    data = first.model_dump()
    for name in space.names():
        node = data
        for part in name.split("."):
            node = node[part]
        lo, hi = factor_bounds(name)
        assert lo <= node <= hi, name
    assert set(MEASURED_FLOORS) <= set(space.names())  # the floors bound factors the fit frees

    def log_error(calibration: Calibration) -> float:
        predicted = sample.predict(calibration)
        return float(np.mean(np.abs(np.log(predicted / sample.measured()))))

    assert log_error(first) < log_error(prior_calibration())


def test_an_unfitted_engine_takes_the_cohort_fraction_of_engines_that_schedule_alike() -> None:
    """vLLM held out: its cohort fraction is TRT-LLM's (both piggyback prompts on decode steps), not the mean
    with SGLang's (prefill first); its other factors, and `generic`'s, are the mean of the fitted engines."""
    space = ParameterSpace(("hopper",), (("hopper", "fp8"),), ("sglang", "trtllm"), prior_calibration(), False)
    names = space.names()
    vector = space.initial()
    vector[names.index("engines.trtllm.cohort_fraction")] = -2.0
    vector[names.index("engines.sglang.cohort_fraction")] = 2.0
    vector[names.index("engines.trtllm.step_overhead_s")] = -3.0
    calibration = space.calibration(vector, "test")
    trtllm, sglang, vllm = (calibration.engine(e) for e in ("trtllm", "sglang", "vllm"))
    assert trtllm.cohort_fraction < 0.2 < 0.8 < sglang.cohort_fraction
    assert vllm.cohort_fraction == trtllm.cohort_fraction
    assert calibration.engine("generic").cohort_fraction == pytest.approx(
        (trtllm.cohort_fraction + sglang.cohort_fraction) / 2)
    assert vllm.step_overhead_s == pytest.approx((trtllm.step_overhead_s + sglang.step_overhead_s) / 2)


def test_an_unfitted_engine_no_fitted_engine_schedules_like_takes_its_policy_cohort() -> None:
    """SGLang held out (prefill first, and neither fitted engine schedules so): a cohort fraction of 1
    (`POLICY_COHORT`), not the piggybacking engines' mean; its other factors are still their mean."""
    space = ParameterSpace(("hopper",), (("hopper", "fp8"),), ("trtllm", "vllm"), prior_calibration(), False)
    names = space.names()
    vector = space.initial()
    vector[names.index("engines.trtllm.cohort_fraction")] = -2.0
    vector[names.index("engines.vllm.cohort_fraction")] = -1.0
    calibration = space.calibration(vector, "test")
    trtllm, vllm, sglang = (calibration.engine(e) for e in ("trtllm", "vllm", "sglang"))
    assert max(trtllm.cohort_fraction, vllm.cohort_fraction) < 0.5 and sglang.cohort_fraction == 1.0
    assert calibration.engine("generic").cohort_fraction == pytest.approx(
        (trtllm.cohort_fraction + vllm.cohort_fraction) / 2)  # no known scheduling: the mean
    assert sglang.step_overhead_s == pytest.approx((trtllm.step_overhead_s + vllm.step_overhead_s) / 2)


@pytest.mark.parametrize(("held_out", "alike"), [("trtllm", "sglang"), ("sglang", "trtllm")])
def test_an_unfitted_engine_takes_the_first_token_latency_of_engines_that_prefill_alike(held_out: str,
                                                                                       alike: str) -> None:
    """TRT-LLM or SGLang held out: the first-token latency of the other (both run prefills eagerly), not the
    mean with vLLM's (compiled); `generic`, of no known prefill execution, the mean."""
    fitted = tuple(sorted({"trtllm", "sglang", "vllm"} - {held_out}))
    space = ParameterSpace(("hopper",), (("hopper", "fp8"),), fitted, prior_calibration(), False)
    names = space.names()
    vector = space.initial()
    vector[names.index(f"engines.{alike}.prefill_layer_latency_s")] = 2.0
    vector[names.index("engines.vllm.prefill_layer_latency_s")] = -2.0
    calibration = space.calibration(vector, "test")
    eager, compiled = (calibration.engine(e).prefill_layer_latency_s for e in (alike, "vllm"))
    assert compiled < 5e-4 < 1.5e-3 < eager
    assert calibration.engine(held_out).prefill_layer_latency_s == eager
    assert calibration.engine("generic").prefill_layer_latency_s == pytest.approx((eager + compiled) / 2)


def test_vllm_held_out_takes_the_mean_first_token_latency_where_no_fitted_engine_compiles() -> None:
    """vLLM held out (compiled prefills, and neither fitted engine compiles): the fitted engines' mean."""
    space = ParameterSpace(("hopper",), (("hopper", "fp8"),), ("sglang", "trtllm"), prior_calibration(), False)
    names = space.names()
    vector = space.initial()
    vector[names.index("engines.sglang.prefill_layer_latency_s")] = 2.0
    vector[names.index("engines.trtllm.prefill_layer_latency_s")] = -2.0
    calibration = space.calibration(vector, "test")
    sglang, trtllm, vllm = (calibration.engine(e).prefill_layer_latency_s for e in ("sglang", "trtllm", "vllm"))
    assert trtllm < 5e-4 < 1.5e-3 < sglang and vllm == pytest.approx((sglang + trtllm) / 2)


def test_a_generation_with_few_training_rows_keeps_its_priors() -> None:
    """Holding out aggregated serving left 12 Hopper rows (five of them H100 TRT-LLM decode at TP16 across two
    nodes), from which Hopper's fp8 GEMMs fitted to 0.34 and its HBM to 0.55 of peak: a generation needs
    `MIN_GENERATION_ROWS` training rows for its factors to be fitted."""
    few = ["h100-sxm"] * (MIN_GENERATION_ROWS - 1) + ["b200-sxm"] * MIN_GENERATION_ROWS
    rows = RowsStub(["trtllm"] * len(few), few)
    space = ParameterSpace.for_rows(rows, prior_calibration())  # type: ignore[arg-type]
    assert space.generations == ("blackwell",)
    assert not any(name.startswith("generations.hopper") for name in space.names())
    assert space.calibration(space.initial(), "t").generations["hopper"] == prior_calibration().generations["hopper"]
    more = RowsStub(["trtllm"] * (len(few) + 1), [*few, "h200-sxm"])
    enough = ParameterSpace.for_rows(more, prior_calibration())  # type: ignore[arg-type]
    assert enough.generations == ("blackwell", "hopper")
    notes = provenance(rows.rows)  # type: ignore[arg-type]
    assert notes["hopper"].endswith("too few to fit: priors") and notes["blackwell"].startswith("fitted on 20 rows")


def test_accuracy_predictions_follow_the_calibration_object_not_its_id(
        sample: PlannedRows, monkeypatch: pytest.MonkeyPatch) -> None:
    """The accuracy harness caches one calibration's predictions; a later fold's calibration gets its own even
    when it takes a freed one's id (forced here: every object's id reads 0 in the harness's module)."""
    from benchmarks.accuracy import FastModel

    monkeypatch.setattr("benchmarks.accuracy.id", lambda _: 0, raising=False)
    model = FastModel(sample, {m.id: i for i, m in enumerate(sample.rows)})
    row = sample.rows[0]
    prior, fitted = prior_calibration(), default_calibration()
    assert model.predict(prior, row) == tuple(sample.predict(prior)[0])
    assert model.predict(fitted, row) == tuple(sample.predict(fitted)[0]) != tuple(sample.predict(prior)[0])


def test_a_kernel_measured_floor_holds_in_the_bundled_calibration_and_the_priors_are_above_it() -> None:
    """Hopper prefill attention at or above the slowest FlashAttention-3-class kernel measured on an H200 at
    2K-16K tokens (0.51 of peak; floor 0.50): the committed fit and the priors it starts from."""
    for name, floor in MEASURED_FLOORS.items():
        generation, field = name.split(".")[1:]
        assert floor <= getattr(default_calibration().generations[generation], field)
        assert floor <= getattr(prior_calibration().generations[generation], field)
        assert factor_bounds(name)[0] == floor
