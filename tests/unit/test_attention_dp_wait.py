"""TRT-LLM holding prompts back under attention data parallelism (`EngineFactors.dp_wait_steps`,
`Scenario.attention_dp_balance`, `costmodel.calibration.HOLDS_PROMPTS_UNDER_DP`): the wait joins TTFT and the
round, not TPOT, one round's decode step per held step (pp stages included); only aggregated pools with
attention DP of a scenario whose launch balances wait; the fit gives the factor to TRT-LLM alone."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.calibration import Calibration, default_calibration, prior_calibration
from costmodel.evaluate import evaluate, plan_layout
from costmodel.fitting import ParameterSpace
from costmodel.layout import Layout
from costmodel.pricing import DirectPricer
from costmodel.resolve import ResolvedScenario
from costmodel.serving import PoolTiming, time_pool
from planner.errors import InputError
from planner.scenario import scenario_from_data
from tests.fit_rows import RowsStub
from tests.unit.test_costmodel import disaggregated, layout


def _scenario(balance: bool = True, engine: str = "trtllm") -> ResolvedScenario:
    data: dict[str, Any] = {
        "schema_version": 1, "name": "t", "model": "deepseek-v3", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h200-sxm", "gpus": 8}, "workload": {"input_tokens": 1024, "output_tokens": 256},
        "engine": engine}
    if balance:
        data["attention_dp_balance"] = True
    return scenario_from_data(data)


def _waiting(steps: float) -> Calibration:
    base = default_calibration()
    engines = {name: f.model_copy(update={"dp_wait_steps": steps}) for name, f in base.engines.items()}
    return base.model_copy(update={"engines": engines})


def _timed(calibration: Calibration, candidate: Layout, balance: bool = True) -> list[PoolTiming]:
    resolved = _scenario(balance)
    pricer = DirectPricer(resolved.system, calibration, "trtllm")
    return [time_pool(pool, pricer) for pool in plan_layout(resolved, candidate).pools]


def test_the_wait_joins_ttft_and_the_round_not_tpot() -> None:
    held, free = (_timed(_waiting(steps), layout(batch=64, tp=1, dp=8, ep=8))[0] for steps in (40.0, 0.0))
    assert held.decode is not None and held.dp_wait_s == pytest.approx(40.0 * held.decode.max_s, rel=1e-12)
    assert held.ttft_s - free.ttft_s == pytest.approx(held.dp_wait_s, rel=1e-12)
    assert held.cycle_s - free.cycle_s == pytest.approx(held.dp_wait_s, rel=1e-12)
    assert held.tpot_s == pytest.approx(free.tpot_s, rel=1e-12)
    assert free.dp_wait_s == 0.0


def test_a_held_step_is_a_whole_decode_step_of_the_pipeline() -> None:
    timing = _timed(_waiting(40.0), layout(batch=64, tp=1, dp=4, ep=4, pp=2))[0]
    assert timing.decode is not None
    assert timing.dp_wait_s == pytest.approx(40.0 * 2 * timing.decode.max_s, rel=1e-12)  # pp x slowest stage


def test_no_wait_without_attention_dp_balancing_or_outside_aggregated_pools() -> None:
    assert _timed(_waiting(40.0), layout(batch=64, tp=8, dp=1, ep=8))[0].dp_wait_s == 0.0  # no attention DP
    assert _timed(_waiting(40.0), layout(batch=64, tp=1, dp=8, ep=8), balance=False)[0].dp_wait_s == 0.0
    assert all(t.dp_wait_s == 0.0 for t in _timed(_waiting(40.0), disaggregated()))


def test_the_breakdown_names_the_wait() -> None:
    prediction = evaluate(_scenario(), layout(batch=64, tp=1, dp=8, ep=8))
    parts = prediction.ttft_breakdown_ms
    assert parts["attention_dp_wait"] > 0.0
    assert sum(parts.values()) == pytest.approx(prediction.ttft_ms, rel=1e-9)
    assert "attention_dp_wait" not in evaluate(_scenario(balance=False), layout(batch=64, tp=1, dp=8, ep=8)
                                               ).ttft_breakdown_ms


def test_only_trtllm_balances() -> None:
    with pytest.raises(InputError, match="attention_dp_balance"):
        _scenario(engine="vllm")
    calibration = default_calibration()
    for engine in ("vllm", "sglang", "generic"):
        assert calibration.engine(engine).dp_wait_steps == 0.0


def test_the_fit_gives_the_wait_to_trtllm_alone() -> None:
    space = ParameterSpace.for_rows(RowsStub(["trtllm"] * 20 + ["vllm"] * 20), prior_calibration())  # type: ignore[arg-type]
    waits = [name for name in space.names() if name.endswith("dp_wait_steps")]
    assert waits == ["engines.trtllm.dp_wait_steps"]
    fitted = space.calibration(space.initial(), "t")
    assert fitted.engine("sglang").dp_wait_steps == 0.0  # held out, dispatches at once
    held_out = ParameterSpace.for_rows(RowsStub(["vllm"] * 20 + ["sglang"] * 20), prior_calibration())  # type: ignore[arg-type]
    trtllm = held_out.calibration(held_out.initial(), "t").engine("trtllm")
    assert trtllm.dp_wait_steps == pytest.approx(prior_calibration().engine("trtllm").dp_wait_steps)
