"""A prefill-first engine (SGLang's default schedule): waiting prompts run as prefill batches of their own
while every decode waits (`costmodel.serving`, `PoolContext.prefill_first`)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.measurements import _sglang_default_batch
from costmodel.calibration import Calibration, default_calibration
from costmodel.economics import mixed_phase_seconds
from costmodel.evaluate import plan_layout
from costmodel.layout import Layout
from costmodel.modes import midfill_work
from costmodel.pricing import DirectPricer, price
from costmodel.resolve import ResolvedScenario
from costmodel.serving import PoolTiming, admitted_plan, sglang_chunked_prefill, time_pool
from planner.errors import InputError
from planner.scenario import scenario_from_data
from tests.unit.test_costmodel import layout


def _scenario(engine: str, system: str = "h200-sxm", input_tokens: int = 1024,
              output_tokens: int = 256) -> ResolvedScenario:
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": "deepseek-v3", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": system, "gpus": 8}, "engine": engine,
        "workload": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    })


def _calibration(cohort: float) -> Calibration:
    base = default_calibration()
    return base.model_copy(update={"engines": {
        name: f.model_copy(update={"cohort_fraction": cohort, "prefill_layer_latency_s": 0.0})
        for name, f in base.engines.items()}})


def _timed(engine: str, candidate: Layout, cohort: float, **kwargs: int | str) -> PoolTiming:
    resolved = _scenario(engine, **kwargs)  # type: ignore[arg-type]
    plan = plan_layout(resolved, candidate).pools[0]
    return time_pool(plan, DirectPricer(resolved.system, _calibration(cohort), engine))


def test_the_budget_is_sglangs_default_per_attention_dp_rank() -> None:
    """SGLang's chunked_prefill_size: 8192 under 160 GiB of HBM, 16384 from it, divided among DP ranks."""
    gib = 2.0**30
    assert sglang_chunked_prefill(141e9) == 8192  # H200
    assert sglang_chunked_prefill(80 * gib) == 8192  # H100
    assert sglang_chunked_prefill(180 * gib) == 16384  # B200
    assert _sglang_default_batch("b200-sxm", 8) == 2048  # the calibration rows' batch per rank


def test_a_plans_batch_is_the_scenarios_or_sglangs_default_per_rank() -> None:
    """A plan launches its own flag (`plan export`): by default SGLang's default per attention-DP rank, not
    divided among ranks; the scenario can set it."""
    candidate = layout(batch=64, tp=1, dp=8, ep=8)
    for system, tokens in (("h200-sxm", 8192.0), ("b200-sxm", 16384.0)):
        resolved = _scenario("sglang", system)
        assert plan_layout(resolved, candidate).pools[0].ctx.prefill_batch_tokens == tokens
    resolved = _scenario("sglang", "b200-sxm")
    resolved = dataclasses.replace(resolved, scenario=resolved.scenario.model_copy(
        update={"prefill_batch_tokens": 2048}))
    assert plan_layout(resolved, candidate).pools[0].ctx.prefill_batch_tokens == 2048.0


def test_only_sglang_schedules_prefill_first() -> None:
    for engine, expected in (("sglang", True), ("trtllm", False), ("vllm", False), ("generic", False)):
        resolved = _scenario(engine)
        assert plan_layout(resolved, layout(batch=32, tp=8, dp=1, ep=8)).pools[0].ctx.prefill_first is expected


def test_prompt_steps_carry_no_decode_batch() -> None:
    """The prompt batch is a fill of the batch's prompt tokens alone: 32 prompts of 1K in 8K batches."""
    timing = _timed("sglang", layout(batch=32, tp=8, dp=1, ep=8), 1.0)
    plan = timing.plan
    assert plan.mixed is not None and plan.mixed_steps == 4.0 and plan.own_steps == 1.0
    fill = midfill_work(plan.ctx, 0, 8.0, 1024.0, 0.0)
    system, calibration = plan.ctx.system, _calibration(1.0)
    assert timing.mixed is not None
    assert timing.mixed.max_s == pytest.approx(price(fill, system, calibration, "sglang").total_s, rel=1e-12)


@pytest.mark.parametrize("input_tokens", [1024, 8192, 12288])
def test_a_cohort_waits_for_the_batches_ahead_and_stalls_every_decode(input_tokens: int) -> None:
    """Cohort (k = 1): TTFT = the step under way + (batches + own steps) / 2 batches; the round is every decode
    step, the one under way and one batch per chunk of the cohort's prompts."""
    timing = _timed("sglang", layout(batch=16, tp=8, dp=1, ep=8), 1.0, input_tokens=input_tokens)
    plan = timing.plan
    assert timing.decode is not None and timing.mixed is not None
    t_decode, t_batch = timing.decode.max_s, timing.mixed.max_s
    batches = 16 * input_tokens / 8192
    assert plan.mixed_steps == pytest.approx(batches)
    assert plan.own_steps == pytest.approx(max(1.0, input_tokens / 8192))
    assert timing.ttft_s == pytest.approx(t_decode + t_batch * (batches + plan.own_steps) / 2.0, rel=1e-12)
    # the prompt's step gives the first token: 255 decode steps
    assert timing.cycle_s == pytest.approx(t_decode + 255 * t_decode + batches * t_batch, rel=1e-12)
    assert timing.tpot_s == pytest.approx((timing.cycle_s - timing.ttft_s) / 255, rel=1e-12)


def test_a_staggered_request_runs_its_prompt_alone() -> None:
    """Staggered (k = 0): TTFT = the step under way + its own prompt's step; every request's prompt is its own
    step in the round, so 32 short prompts cost more than 4 full batches of them."""
    stagger, cohort = (_timed("sglang", layout(batch=32, tp=8, dp=1, ep=8), k) for k in (0.0, 1.0))
    plan = stagger.plan
    assert stagger.decode is not None and plan.own is not None
    alone = price(plan.own[0], plan.ctx.system, _calibration(0.0), "sglang").total_s
    assert stagger.ttft_s == pytest.approx(stagger.decode.max_s + alone, rel=1e-12)
    assert stagger.prompt_s == pytest.approx(32 * alone, rel=1e-12)
    assert cohort.prompt_s < stagger.prompt_s and cohort.ttft_s > stagger.ttft_s


def test_prefill_first_prompts_do_not_ride_on_decode_steps() -> None:
    """Piggyback (TRT-LLM): prompt chunks replace decode steps; prefill first (SGLang): they add to them."""
    candidate = layout(batch=32, tp=8, dp=1, ep=8)
    for engine in ("sglang", "trtllm"):
        timing = _timed(engine, candidate, 1.0)
        plan = timing.plan
        assert timing.decode is not None
        decode_only = timing.cycle_s - timing.prompt_s
        decode_steps = 255.0 if plan.ctx.prefill_first else 256.0 - plan.mixed_steps
        assert decode_only == pytest.approx((1 + decode_steps) * timing.decode.max_s, rel=1e-12)
        assert mixed_phase_seconds(timing) == (timing.prompt_s, decode_only)


def test_a_prefill_batch_for_an_engine_without_one_is_refused() -> None:
    data = {"schema_version": 1, "name": "t", "model": "deepseek-v3", "cluster": {"system": "h200-sxm", "gpus": 8},
            "engine": "trtllm", "prefill_batch_tokens": 4096,
            "workload": {"input_tokens": 1024, "output_tokens": 128}}
    with pytest.raises(InputError, match=r"prefill_batch_tokens.*engine trtllm runs prompts on decode steps"):
        scenario_from_data(data)


def test_an_admitted_batch_sets_the_staggered_prompts() -> None:
    """A batch beyond HBM runs as the largest batch that fits, the rest queued: the round's staggered prompt
    steps are those of the requests in service, whatever batch was asked for."""
    resolved = _scenario("sglang")
    plans = [admitted_plan(plan_layout(resolved, layout(batch=batch, tp=1, dp=8, ep=8)).pools[0],
                           resolved.scenario.workload) for batch in (20_000, 100_000)]
    timings = [time_pool(plan, DirectPricer(resolved.system, _calibration(0.0), "sglang")) for plan in plans]
    assert timings[0].plan.admitted is not None and timings[0].plan.admitted == timings[1].plan.admitted
    assert timings[0].cycle_s == timings[1].cycle_s and timings[0].tpot_s == timings[1].tpot_s


def test_the_prefill_batch_sets_the_workspace() -> None:
    """Activations in flight are the prefill batch's tokens: a larger batch leaves room for fewer sequences."""
    resolved = _scenario("sglang")
    fits = []
    for tokens in (1024, 65536):
        scenario = resolved.scenario.model_copy(update={"prefill_batch_tokens": tokens})
        plan = plan_layout(dataclasses.replace(resolved, scenario=scenario), layout(batch=64, tp=8, dp=1, ep=8))
        fits.append((plan.pools[0].memory.total, plan.pools[0].max_batch))
    assert fits[0][0] < fits[1][0] and fits[0][1] > fits[1][1]
