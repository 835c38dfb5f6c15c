"""Staggered prompts under attention data parallelism (`costmodel.serving`): the ranks step together, so a
step lasts as long as its busiest rank's prompt work, for every rank. Without an engine aligning the ranks'
prompts (TRT-LLM's balance, `PoolContext.holds_prompts`), a staggered prompt step is one rank's chunk beside
the others' decodes (`PoolPlan.lone`) and each rank's round holds the steps the other ranks' prompts stretch:
prefill first, slots x (1 - (1 - q)^(n - 1)) with q = units / (slots + units); piggyback, slots x E[max of n
Binomial(c, q / c)] own chunks where that outlasts the round's aligned chunks. By hand, with the binomial
maximum summed here independently."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.calibration import Calibration, default_calibration
from costmodel.evaluate import plan_layout
from costmodel.lengths import expected_max_binomial
from costmodel.pricing import DirectPricer, price
from costmodel.resolve import ResolvedScenario
from costmodel.serving import PoolTiming, time_pool
from planner.scenario import scenario_from_data
from tests.unit.test_costmodel import layout


def _scenario(engine: str, balance: bool = False, output_tokens: int = 256) -> ResolvedScenario:
    data: dict[str, Any] = {
        "schema_version": 1, "name": "t", "model": "deepseek-v3", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h200-sxm", "gpus": 8}, "engine": engine,
        "workload": {"input_tokens": 1024, "output_tokens": output_tokens}}
    if balance:
        data["attention_dp_balance"] = True
    return scenario_from_data(data)


def _calibration(cohort: float) -> Calibration:
    """No first-token latency or prompt hold: the round's prompt steps alone."""
    base = default_calibration()
    return base.model_copy(update={"engines": {
        name: f.model_copy(update={"cohort_fraction": cohort, "prefill_layer_latency_s": 0.0, "dp_wait_steps": 0.0})
        for name, f in base.engines.items()}})


def _timed(engine: str, dp: int, cohort: float = 0.0, balance: bool = False, batch: int = 64) -> PoolTiming:
    resolved = _scenario(engine, balance)
    plan = plan_layout(resolved, layout(batch=batch, tp=8 // dp, dp=dp, ep=8)).pools[0]
    return time_pool(plan, DirectPricer(resolved.system, _calibration(cohort), engine))


def _step(timing: PoolTiming, which: str, engine: str) -> float:
    works = getattr(timing.plan, which)
    assert works is not None
    return price(works[0], timing.plan.ctx.system, _calibration(0.0), engine).total_s


def _max_of_binomial(trials: int, p: float, n: int) -> float:
    """E[max of n Binomial(trials, p)] by its distribution: sum_k k (F(k)^n - F(k - 1)^n)."""
    total, below, cdf = 0.0, 0.0, 0.0
    for k in range(trials + 1):
        cdf = min(1.0, cdf + math.comb(trials, k) * p**k * (1.0 - p) ** (trials - k))
        total += k * (cdf**n - below**n)
        below = cdf
    return total


@pytest.mark.parametrize(("trials", "mean"), [(1, 0.3), (8, 1 / 32), (8, 2.5), (16, 15.9), (64, 0.5), (400, 3.0)])
@pytest.mark.parametrize("n", [1, 2, 8, 72])
def test_the_busiest_ranks_prompts_by_their_distribution(trials: int, mean: float, n: int) -> None:
    assert expected_max_binomial(trials, mean, n) == pytest.approx(_max_of_binomial(trials, mean / trials, n),
                                                                   rel=1e-9)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(1, 64), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.integers(1, 96))
def test_more_prompts_never_lighten_the_busiest_rank(trials: int, low: float, high: float, n: int) -> None:
    """E[max] grows with the mean: a larger batch never shortens the round (the batch search's bounds)."""
    low, high = sorted((low * trials, high * trials))
    assert expected_max_binomial(trials, high, n) >= expected_max_binomial(trials, low, n) - 1e-9


def test_piggybacked_prompts_stretch_the_other_ranks_steps() -> None:
    """TRT-LLM without balancing against the same launch balanced (no hold): 8 ranks of 8 sequences, one 1K
    chunk each per round of 256 steps, 8 chunks to a step's 8K budget: the busiest rank carries 256 E[max of 8
    Binomial(8, 1/256)] chunks a round; each request's own step is its chunk alone beside the decodes."""
    free, aligned = _timed("trtllm", 8), _timed("trtllm", 8, balance=True)
    plan = free.plan
    assert free.decode is not None and aligned.mixed is not None and plan.own_steps == 1.0
    assert aligned.plan.lone is None and plan.lone is not None
    lone, t_dec = _step(free, "lone", "trtllm"), free.decode.max_s
    busiest = 256 * _max_of_binomial(8, 1 / 256, 8)
    assert busiest == pytest.approx(57.6, abs=0.1)  # against 8 chunks aligned
    extra = max(0.0, busiest * (lone - t_dec) - plan.mixed_steps * (aligned.mixed.max_s - t_dec))
    assert extra > 0.0  # the unaligned round outlasts the aligned one here: the comparison below is not 0 = 0
    assert free.prompt_s - aligned.prompt_s == pytest.approx(extra, rel=1e-9)
    assert free.ttft_s - aligned.ttft_s == pytest.approx(lone - _step(aligned, "own", "trtllm"), rel=1e-9)
    assert free.tpot_s > aligned.tpot_s


def test_prefill_first_prompt_steps_stretch_the_other_ranks_steps() -> None:
    """SGLang: each rank's 8 prompt steps at random among its 256 decode slots and them; a slot meets one of
    the 7 other ranks' prompts with probability 1 - (1 - 8/264)^7."""
    timing = _timed("sglang", 8)
    assert timing.decode is not None and timing.plan.own_steps == 1.0
    lone = _step(timing, "lone", "sglang")
    stretched = 256 * (1.0 - (1.0 - 8 / 264) ** 7)
    assert timing.prompt_s == pytest.approx(8 * lone + stretched * (lone - timing.decode.max_s), rel=1e-9)


def test_one_rank_in_service_a_cohort_or_a_balancing_engine_stretch_nothing() -> None:
    for engine in ("sglang", "vllm"):
        one = _timed(engine, 1)
        assert one.plan.lone is None
        if engine == "sglang":  # every request's prompt its own step, as before
            assert one.prompt_s == pytest.approx(64 * _step(one, "own", engine), rel=1e-9)
        else:  # the round's prompt chunks, as before
            assert one.prompt_s == pytest.approx(one.plan.mixed_steps * one.mixed.max_s, rel=1e-9)  # type: ignore[union-attr]
    single, balanced = _timed("trtllm", 8, batch=1), _timed("trtllm", 8, batch=1, balance=True)
    assert single.plan.lone is None and single.cycle_s == balanced.cycle_s  # one request: no other rank prompts
    cohort, aligned = _timed("trtllm", 8, cohort=1.0), _timed("trtllm", 8, cohort=1.0, balance=True)
    assert cohort.cycle_s == pytest.approx(aligned.cycle_s, rel=1e-12)  # a cohort's prompts start together


@pytest.mark.parametrize("engine", ["vllm", "sglang", "generic"])
@pytest.mark.parametrize(("input_tokens", "output_tokens"), [(1024, 2), (1024, 16), (8192, 16), (1024, 256)])
def test_the_figures_stay_monotone_in_the_batch(engine: str, input_tokens: int, output_tokens: int) -> None:
    """From one sequence to many per rank, through every slot carrying prompts and past it, TTFT and TPOT
    never fall along integer batches (`planner.batches` bounds batch intervals by their ends; the round's prompt
    time is the larger of the aligned and the unaligned)."""
    data: dict[str, Any] = {
        "schema_version": 1, "name": "t", "model": "qwen3-30b", "cluster": {"system": "h200-sxm", "gpus": 8},
        "engine": engine, "workload": {"input_tokens": input_tokens, "output_tokens": output_tokens}}
    resolved = scenario_from_data(data)
    pricer = DirectPricer(resolved.system, default_calibration(), engine)
    for dp in (2, 8):
        timings = [time_pool(plan_layout(resolved, layout(batch=b, tp=8 // dp, dp=dp, ep=8)).pools[0], pricer)
                   for b in range(1, 9 * dp)]
        for name in ("ttft_s", "tpot_s"):
            values = np.array([getattr(t, name) for t in timings])
            assert np.all(np.diff(values) >= -1e-12 * values[:-1]), (engine, output_tokens, dp, name)
