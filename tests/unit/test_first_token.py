"""A request's first token in a mixed pool: its own prompt's step, the cohort's backlog, and the engine's
first-token latency per layer (`costmodel.serving`, time_pool)."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.calibration import Calibration, default_calibration
from costmodel.evaluate import evaluate, plan_layout
from costmodel.layout import Layout
from costmodel.modes import merged_work, midfill_work
from costmodel.pricing import DirectPricer, price
from costmodel.serving import PoolTiming, time_pool
from tests.unit.test_costmodel import disaggregated, layout, scenario


def _with_engine(**factors: float) -> Calibration:
    base = default_calibration()
    return base.model_copy(update={"engines": {name: f.model_copy(update=factors) for name, f in base.engines.items()}})


def _timed(calibration: Calibration, candidate: Layout, **workload: Any) -> list[PoolTiming]:
    resolved = scenario(gpus=8, **workload)
    plan = plan_layout(resolved, candidate)
    pricer = DirectPricer(resolved.system, calibration, "generic")
    return [time_pool(pool, pricer) for pool in plan.pools]


def test_staggered_arrivals_wait_for_their_own_prompt_only() -> None:
    """Cohort fraction 0: the first token waits out the decode step under way, then one step carrying the
    request's own prompt beside the decode batch, cheaper than the step carrying a full chunk of everyone's
    prompts."""
    resolved = scenario(gpus=8, input_tokens=1024, output_tokens=256)
    plan = plan_layout(resolved, layout(batch=32, tp=8, dp=1, ep=8)).pools[0]
    calibration = _with_engine(cohort_fraction=0.0, prefill_layer_latency_s=0.0)
    timing = time_pool(plan, DirectPricer(resolved.system, calibration, "generic"))
    assert plan.own is not None and plan.mixed is not None and plan.decode is not None
    own = merged_work(plan.decode[0], midfill_work(plan.ctx, 0, 1.0, 1024.0, 0.0))
    own_s = price(own, resolved.system, calibration, "generic").total_s
    assert timing.decode is not None and timing.step_wait_s == timing.decode.max_s > 0.0
    assert timing.ttft_s == pytest.approx(timing.decode.max_s + own_s, rel=1e-12)
    assert timing.mixed is not None and own_s < 0.5 * timing.mixed.max_s  # 4 prompts per 8K chunk


def test_the_step_under_way_is_waited_out_in_ttft_and_in_the_round() -> None:
    """A closed-loop arrival misses the step already scheduled: one decode step (pp of them with a pipeline)
    joins TTFT and the round, so TPOT's decode share, (round - TTFT) / (osl - 1), keeps its value."""
    for candidate in (layout(batch=32, tp=8, dp=1, ep=8), layout(batch=32, tp=4, pp=2, dp=1, ep=4)):
        timing = _timed(_with_engine(cohort_fraction=0.0), candidate, input_tokens=1024, output_tokens=256)[0]
        plan = timing.plan
        assert timing.decode is not None and timing.mixed is not None
        step = plan.ctx.par.pp * timing.decode.max_s
        assert timing.step_wait_s == pytest.approx(step, rel=1e-12)
        riding = min(plan.mixed_steps, 256.0)
        rest = riding * plan.ctx.par.pp * timing.mixed.max_s + (256.0 - riding) * step
        assert timing.cycle_s == pytest.approx(step + rest, rel=1e-12)


def test_the_cohort_adds_half_the_backlog_at_full_chunks() -> None:
    stagger, cohort = (_timed(_with_engine(cohort_fraction=k, prefill_layer_latency_s=0.0),
                              layout(batch=64, tp=8, dp=1, ep=8), input_tokens=2048)[0] for k in (0.0, 1.0))
    plan = stagger.plan
    assert stagger.mixed is not None
    backlog = plan.mixed_steps - plan.own_steps
    assert cohort.ttft_s - stagger.ttft_s == pytest.approx(stagger.mixed.max_s * backlog / 2.0, rel=1e-12)
    assert cohort.cycle_s == stagger.cycle_s  # bunching moves waiting between TTFT and TPOT, not work


MTP = {"speculative": {"method": "mtp", "draft_tokens": 2, "acceptance_rate": 0.7}}


@pytest.mark.parametrize(("candidate", "workload"),
                         [(layout(batch=16), {}), (disaggregated(), {}), (layout(batch=16), MTP)],
                         ids=["mixed", "disaggregated", "mixed-mtp"])
def test_first_token_latency_lengthens_ttft_not_the_round(candidate: Layout, workload: dict[str, Any]) -> None:
    """The latency is paid once per request, per layer of the model (MTP's drafting passes are decode work,
    not layers of the prompt's pass), and overlaps other sequences' steps: every fill pool's TTFT grows by
    layers x latency, its round (or fill rate) stays."""
    without = _timed(_with_engine(prefill_layer_latency_s=0.0), candidate, **workload)
    latency = 1e-3
    slower = _timed(_with_engine(prefill_layer_latency_s=latency), candidate, **workload)
    layers = scenario().architecture.num_layers  # every layer of the model: one stage, no pipeline
    for plain, late in zip(without, slower, strict=True):
        if plain.plan.pool.role == "decode":
            assert late.ttft_s == plain.ttft_s and late.tpot_s == plain.tpot_s
            continue
        assert late.ttft_s - plain.ttft_s == pytest.approx(layers * latency, rel=1e-9)
        assert late.cycle_s == plain.cycle_s and late.requests_per_s == plain.requests_per_s


@pytest.mark.parametrize("candidate", [layout(batch=16), disaggregated()], ids=["mixed", "disaggregated"])
def test_the_ttft_breakdown_names_the_latency_and_adds_up(candidate: Layout) -> None:
    resolved = scenario(gpus=8)
    prediction = evaluate(resolved, candidate, _with_engine(prefill_layer_latency_s=1e-3))
    parts = prediction.ttft_breakdown_ms
    assert parts["first_token_latency"] == pytest.approx(resolved.architecture.num_layers * 1.0, rel=1e-9)
    assert ("step_under_way" in parts) == (candidate.serving == "aggregated")  # a decode pool's arrivals come filled
    assert sum(parts.values()) == pytest.approx(prediction.ttft_ms, rel=1e-9)
