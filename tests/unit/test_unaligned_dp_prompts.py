"""Staggered prompts under attention data parallelism (`costmodel.serving._stretched_steps`): the ranks step
together, so a step in which any rank runs a prompt lasts as long as that prompt's, for every rank. Without an
engine aligning the ranks' prompts (TRT-LLM's balance, `PoolContext.holds_prompts`), each rank's round holds
the steps stretched by the other ranks' prompts: steps x (1 - (1 - q)^dp) - units, q = units / steps, by hand."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.calibration import Calibration, default_calibration
from costmodel.evaluate import plan_layout
from costmodel.pricing import DirectPricer, price
from costmodel.resolve import ResolvedScenario
from costmodel.serving import PoolTiming, time_pool
from planner.scenario import scenario_from_data
from tests.unit.test_costmodel import layout


def _scenario(engine: str, balance: bool = False) -> ResolvedScenario:
    data: dict[str, Any] = {
        "schema_version": 1, "name": "t", "model": "deepseek-v3", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h200-sxm", "gpus": 8}, "engine": engine,
        "workload": {"input_tokens": 1024, "output_tokens": 256}}
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


def _stretched(units: float, steps: float, dp: int) -> float:
    return steps * (1.0 - (1.0 - units / steps) ** dp) - units


def test_piggybacked_prompts_stretch_the_other_ranks_steps() -> None:
    """TRT-LLM without balancing against the same launch balanced (no hold): 8 ranks of 8 sequences, one 1K
    prompt step each per round of 256 steps: 256 (1 - (1 - 8/256)^8) - 8 = 49.4 more steps at the prompt's."""
    free, aligned = _timed("trtllm", 8), _timed("trtllm", 8, balance=True)
    plan = free.plan
    assert free.decode is not None and plan.own is not None and plan.own_steps == 1.0
    own = price(plan.own[0], plan.ctx.system, _calibration(0.0), "trtllm").total_s
    extra = _stretched(8.0, 256.0, 8) * (own - free.decode.max_s)
    assert _stretched(8.0, 256.0, 8) == pytest.approx(49.42, abs=0.01)
    assert free.cycle_s - aligned.cycle_s == pytest.approx(extra, rel=1e-9)
    assert free.prompt_s - aligned.prompt_s == pytest.approx(extra, rel=1e-9)
    assert free.ttft_s == aligned.ttft_s and free.tpot_s > aligned.tpot_s


def test_prefill_first_prompt_steps_stretch_the_other_ranks_steps() -> None:
    """SGLang: a rank's round is its 255 decode steps and its 8 prompt steps; others' prompts stretch
    263 (1 - (1 - 8/263)^8) - 8 of them from a decode step to a prompt step."""
    timing = _timed("sglang", 8)
    plan = timing.plan
    assert timing.decode is not None and plan.own is not None and plan.own_steps == 1.0
    alone = price(plan.own[0], plan.ctx.system, _calibration(0.0), "sglang").total_s
    stretched = _stretched(8.0, 256.0 + 8.0, 8)
    assert timing.prompt_s == pytest.approx(8 * alone + stretched * (alone - timing.decode.max_s), rel=1e-9)


def test_one_rank_a_cohort_or_a_balancing_engine_stretch_nothing() -> None:
    for engine in ("sglang", "trtllm", "vllm"):
        one = _timed(engine, 1)
        assert one.decode is not None and one.plan.own is not None
        alone = price(one.plan.own[0], one.plan.ctx.system, _calibration(0.0), engine).total_s
        if engine == "sglang":  # every request's prompt its own step, as before
            assert one.prompt_s == pytest.approx(64 * alone, rel=1e-9)
        else:  # the round's prompt chunks, as before
            assert one.prompt_s == pytest.approx(one.plan.mixed_steps * one.mixed.max_s, rel=1e-9)  # type: ignore[union-attr]
    cohort, aligned = _timed("trtllm", 8, cohort=1.0), _timed("trtllm", 8, cohort=1.0, balance=True)
    assert cohort.cycle_s == pytest.approx(aligned.cycle_s, rel=1e-12)  # a cohort's prompts start together


def test_more_ranks_stretch_more_and_a_full_round_of_prompts_none() -> None:
    """At the same sequences per rank, more ranks stretch more of each rank's steps; when every step of a
    rank carries its own prompt (q = 1) no step is left to stretch."""
    per_rank = [(_timed("vllm", dp, batch=8 * dp).tpot_s) for dp in (1, 2, 4, 8)]
    assert per_rank == sorted(per_rank) and per_rank[0] < per_rank[-1]
    assert _stretched(256.0, 256.0, 8) == 0.0
