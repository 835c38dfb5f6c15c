"""Pipeline parallelism in decode, and wide expert parallelism against it on a GB200 NVL72 rack (issue 13,
item 2), checked against what the data say.

- PP decode: pp micro-batches are in flight; each stage step re-reads that stage's weights for its
  micro-batch, and a sequence gets a token every pp slowest-stage steps (the other stages wait for the
  slowest one, the LM head's: the bubble).
- K04 in ../shared/calibration/published_measurements.csv (TRT-LLM one-sided NVLink all-to-all on GB200
  NVL72, 128 tokens per rank): dispatch takes 31.7 us at EP8 and 41.6 us at EP64, 1.31x for 8x the ranks.
  The model's all-to-all must grow about as slowly with the EP width, and at equal GPUs and batch the wide
  EP decode (attention DP 32, EP 32) must beat PP4 x EP8 per token, as published wide-EP deployments of
  DeepSeek-R1 on NVL72 choose.
"""

from __future__ import annotations

import pytest

from costmodel.calibration import default_calibration
from costmodel.collectives import dispatch_combine
from costmodel.evaluate import evaluate, plan_layout
from costmodel.hardware import load_system
from costmodel.layout import Layout
from costmodel.operators import Parallel
from costmodel.precision import Dtype
from costmodel.pricing import DirectPricer, price
from costmodel.resolve import ResolvedScenario
from costmodel.serving import time_pool
from costmodel.work import StepWork
from planner.scenario import scenario_from_data


def _deepseek_nvl72() -> ResolvedScenario:
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": "deepseek-ai/DeepSeek-R1",
        "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "racks": 1}, "engine": "trtllm",
        "workload": {"input_tokens": 1024, "output_tokens": 1024}})


def _decode(batch: int, **pool: int) -> Layout:
    return Layout.model_validate({"serving": "disaggregated", "pools": [
        {"role": "prefill", "tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": 8},
        {"role": "decode", "batch": batch, "tp": 1, **pool}]})


def test_pipeline_decode_rereads_stage_weights_per_micro_batch() -> None:
    resolved = _deepseek_nvl72()
    plan = plan_layout(resolved, _decode(256, dp_attention=8, moe_ep=8, pp=4)).pools[1]
    assert plan.decode is not None and len(plan.decode) == 4
    assert all(stage.seqs == 256 / 8 / 4 for stage in plan.decode)  # one micro-batch per stage step
    pricer = DirectPricer(resolved.system, default_calibration(), "trtllm")
    steps = [pricer.price(stage).total_s for stage in plan.decode]
    timing = time_pool(plan, pricer)
    assert timing.tpot_s == pytest.approx(4 * max(steps))  # pp steps of the slowest stage per token
    assert 4 * max(steps) > sum(steps)  # the bubble: stages wait for the slowest (the LM head's)
    expert_bytes = [sum(op.hbm_bytes for op in stage.ops if op.name == "routed_experts") for stage in plan.decode]
    assert min(expert_bytes) > 0  # every stage reads its experts again for each micro-batch


def test_nvl72_all_to_all_grows_with_ep_width_as_k04() -> None:
    system = load_system("gb200-nvl72")

    def dispatch_s(ep: int) -> float:
        transfers = dispatch_combine(128 * ep, 7168, 8, Parallel(dp=ep, moe_ep=ep), 2.0, system)[:1]
        return price(StepWork(transfers=transfers), system, default_calibration(), "trtllm").terms["scaleup_network"]

    assert dispatch_s(64) / dispatch_s(8) == pytest.approx(41.6 / 31.7, rel=0.25)


@pytest.mark.parametrize("batch", [64, 1024])
def test_wide_ep_beats_pipelined_ep_in_decode_on_nvl72(batch: int) -> None:
    resolved = _deepseek_nvl72()
    wide = evaluate(resolved, _decode(batch, dp_attention=32, moe_ep=32))
    piped = evaluate(resolved, _decode(batch, dp_attention=8, moe_ep=8, pp=4))
    assert wide.gpus == piped.gpus
    assert wide.tpot_ms < piped.tpot_ms


def _llama70b(prompt: int) -> ResolvedScenario:
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": "llama3.1-70b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h100-sxm", "gpus": 8}, "engine": "vllm",
        "workload": {"input_tokens": prompt, "output_tokens": 256}})


def _fill_ms(resolved: ResolvedScenario, role: str, pp: int) -> float:
    pools = [{"role": role, "tp": 2, "moe_tp": 2, "pp": pp, "batch": 1}]
    if role == "prefill":
        pools.append({"role": "decode", "tp": 2, "moe_tp": 2, "batch": 1})
    layout = Layout.model_validate({"serving": "aggregated" if role == "mixed" else "disaggregated", "pools": pools})
    return evaluate(resolved, layout).ttft_breakdown_ms["fill"]


def test_one_prompt_chunk_gets_no_pipeline_speed_up() -> None:
    """A prompt that fits one chunk runs its stages one after another: pipeline stages do not shorten it (until
    session 22 a mixed pool spread it over the micro-batches: 944 -> 477 -> 244 ms at pp 1, 2, 4), and no
    stage count takes it below its FLOPs at the GPUs' peak."""
    resolved = _llama70b(8192)
    fills = [_fill_ms(resolved, "mixed", pp) for pp in (1, 2, 4)]
    assert max(fills) < 1.03 * min(fills)
    flops = 2 * resolved.architecture.active_params() * 8192
    assert min(fills) / 1e3 > flops / (2 * resolved.system.peak_flops_per_s[Dtype.FP8])  # tp 2 computes it
    assert fills[2] == pytest.approx(_fill_ms(resolved, "prefill", 4), rel=0.03)  # as a prefill pool's


def test_a_long_prompts_chunks_pipeline_as_a_prefill_pools() -> None:
    """Four chunks through four stages: the first chunk's stages plus three slowest-stage steps, as the
    prefill pool prices them, well short of four whole chunks one after another."""
    resolved = _llama70b(32768)
    mixed, prefill, flat = (_fill_ms(resolved, "mixed", 4), _fill_ms(resolved, "prefill", 4),
                            _fill_ms(resolved, "mixed", 1))
    assert mixed == pytest.approx(prefill, rel=0.05)
    assert mixed < 0.6 * flat


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_a_requests_path_is_the_round(engine: str, pp: int) -> None:
    """Closed loop: a request's TTFT and its decode steps are its slot's round, and the round never less (a
    prompt's pipeline fill once made the path outlast the round: TTFT 1,115 ms + 255 x 19.3 ms against a round
    of 5,649 ms, vLLM at tp2 pp4)."""
    resolved = scenario_from_data({
        "schema_version": 1, "name": "t", "model": "llama3.1-70b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h100-sxm", "gpus": 8}, "engine": engine,
        "workload": {"input_tokens": {"mean": 8192, "range_ratio": 0.5}, "output_tokens": 256}})
    for batch in (3, 24):
        layout = Layout.model_validate({"serving": "aggregated", "pools": [
            {"role": "mixed", "tp": 2, "moe_tp": 2, "pp": pp, "batch": batch}]})
        plan = plan_layout(resolved, layout).pools[0]
        timing = time_pool(plan, DirectPricer(resolved.system, default_calibration(), engine))
        path = timing.ttft_s + (plan.request.output - 1) * timing.tpot_s
        assert path == pytest.approx(timing.cycle_s, rel=1e-9)
