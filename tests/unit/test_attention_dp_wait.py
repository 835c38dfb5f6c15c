"""An engine that holds prompts back under attention data parallelism (`EngineFactors.dp_wait_steps`,
`costmodel.calibration.HOLDS_PROMPTS_UNDER_DP`): the wait joins TTFT and the round, not TPOT; pools without
attention DP, and engines that dispatch at once, do not wait; the fit gives the factor to TRT-LLM alone."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.fit import ParameterSpace
from costmodel.calibration import HOLDS_PROMPTS_UNDER_DP, Calibration, default_calibration, prior_calibration
from costmodel.evaluate import evaluate, plan_layout
from costmodel.layout import Layout
from costmodel.pricing import DirectPricer
from costmodel.serving import PoolTiming, time_pool
from tests.unit.test_costmodel import layout, scenario


def _waiting(steps: float) -> Calibration:
    base = default_calibration()
    engines = {name: f.model_copy(update={"dp_wait_steps": steps}) for name, f in base.engines.items()}
    return base.model_copy(update={"engines": engines})


def _timed(calibration: Calibration, candidate: Layout) -> PoolTiming:
    resolved = scenario(gpus=8, input_tokens=1024, output_tokens=256)
    plan = plan_layout(resolved, candidate).pools[0]
    return time_pool(plan, DirectPricer(resolved.system, calibration, "trtllm"))


def test_the_wait_joins_ttft_and_the_round_not_tpot() -> None:
    held, free = (_timed(_waiting(steps), layout(batch=64, tp=1, dp=8, ep=8)) for steps in (40.0, 0.0))
    assert held.decode is not None and held.dp_wait_s == pytest.approx(40.0 * held.decode.max_s, rel=1e-12)
    assert held.ttft_s - free.ttft_s == pytest.approx(held.dp_wait_s, rel=1e-12)
    assert held.cycle_s - free.cycle_s == pytest.approx(held.dp_wait_s, rel=1e-12)
    assert held.tpot_s == pytest.approx(free.tpot_s, rel=1e-12)
    assert free.dp_wait_s == 0.0


def test_no_wait_without_attention_dp() -> None:
    timing = _timed(_waiting(40.0), layout(batch=64, tp=8, dp=1, ep=8))
    assert timing.dp_wait_s == 0.0


def test_the_breakdown_names_the_wait() -> None:
    prediction = evaluate(scenario(gpus=8, input_tokens=1024, output_tokens=256), layout(batch=64, tp=1, dp=8, ep=8),
                          _waiting(40.0))  # the generic engine, given a wait here
    parts = prediction.ttft_breakdown_ms
    assert parts["attention_dp_wait"] > 0.0
    assert sum(parts.values()) == pytest.approx(prediction.ttft_ms, rel=1e-9)


def test_only_engines_that_hold_prompts_wait() -> None:
    calibration = default_calibration()
    assert {"trtllm"} == HOLDS_PROMPTS_UNDER_DP
    assert calibration.engine("trtllm").dp_wait_steps > 0.0
    for engine in ("vllm", "sglang", "generic"):
        assert calibration.engine(engine).dp_wait_steps == 0.0


class _Rows:
    """The part of `PlannedRows` the parameter space reads, for engines alone."""

    def __init__(self, engines: list[str]) -> None:
        self.rows = [SimpleNamespace(engine=e, system="h200-sxm") for e in engines]
        self.table = SimpleNamespace(op_work=np.zeros(0, dtype=int), op_dtype=np.zeros(0, dtype=int),
                                     op_gemm=np.zeros(0, dtype=bool), op_group_rows=np.zeros(0), generations=[])
        self.work_ids: set[int] = set()


def test_the_fit_gives_the_wait_to_trtllm_alone() -> None:
    space = ParameterSpace.for_rows(_Rows(["trtllm"] * 20 + ["vllm"] * 20), prior_calibration())  # type: ignore[arg-type]
    waits = [name for name in space.names() if name.endswith("dp_wait_steps")]
    assert waits == ["engines.trtllm.dp_wait_steps"]
    fitted = space.calibration(space.initial(), "t")
    assert fitted.engine("sglang").dp_wait_steps == 0.0  # held out, dispatches at once
    held_out = ParameterSpace.for_rows(_Rows(["vllm"] * 20 + ["sglang"] * 20), prior_calibration())  # type: ignore[arg-type]
    trtllm = held_out.calibration(held_out.initial(), "t").engine("trtllm")
    assert trtllm.dp_wait_steps == pytest.approx(prior_calibration().engine("trtllm").dp_wait_steps)
