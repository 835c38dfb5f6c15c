"""Invariants of the cost model: physics floors, monotonicity, GPU and memory accounting, agreement of the
two pricing paths, determinism."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from costmodel.calibration import default_calibration
from costmodel.evaluate import evaluate, plan_layout, pool_context
from costmodel.hardware import system_names
from costmodel.layout import Layout
from costmodel.memory import stage_weight_bytes
from costmodel.models import model_ids
from costmodel.modes import decode_work, prefill_work
from costmodel.operators import distinct_experts
from costmodel.precision import bytes_per_element
from costmodel.pricing import WorkTable, price
from costmodel.resolve import ResolvedScenario
from costmodel.routing import load_imbalance, static_imbalance
from costmodel.work import roofline_floor_s
from planner.scenario import scenario_from_data


def scenario(model: str = "deepseek-v3", system: str = "h200-sxm", gpus: int = 8, **workload: Any) -> ResolvedScenario:
    load = {"input_tokens": 2048, "output_tokens": 512, **workload}
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": model, "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": system, "gpus": gpus}, "workload": load,
    })


def layout(batch: int = 64, tp: int = 1, dp: int = 8, ep: int = 8, moe_tp: int = 1, pp: int = 1,
           replicas: int = 1) -> Layout:
    return Layout.model_validate({"serving": "aggregated", "pools": [
        {"role": "mixed", "replicas": replicas, "tp": tp, "dp_attention": dp, "pp": pp, "moe_tp": moe_tp,
         "moe_ep": ep, "batch": batch}]})


def disaggregated(prefill_replicas: int = 2, decode_batch: int = 128) -> Layout:
    return Layout.model_validate({"serving": "disaggregated", "pools": [
        {"role": "prefill", "replicas": prefill_replicas, "tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": 8},
        {"role": "decode", "replicas": 1, "tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": decode_batch}]})


LAYOUTS = [layout(), layout(tp=8, dp=1, ep=8), layout(tp=8, dp=1, ep=1, moe_tp=8), layout(tp=2, dp=2, ep=4, pp=2)]


@pytest.mark.parametrize("candidate", LAYOUTS, ids=lambda lay: str(lay.pools[0].model_dump()))
def test_no_step_beats_the_roofline(candidate: Layout) -> None:
    resolved = scenario(gpus=16)
    ctx = pool_context(resolved, candidate.pools[0])
    calibration = default_calibration()
    for work in (decode_work(ctx, 0, 16, 4096), prefill_work(ctx, 0, 2, 2048)):
        floor = roofline_floor_s(work, resolved.system)
        assert floor > 0
        assert price(work, resolved.system, calibration, "generic").total_s >= floor


def test_decode_grows_with_batch_and_context() -> None:
    resolved = scenario()
    ctx = pool_context(resolved, layout().pools[0])
    calibration = default_calibration()

    def step(seqs: float, context: float) -> float:
        return price(decode_work(ctx, 0, seqs, context), resolved.system, calibration, "generic").total_s

    batches = [step(b, 4096) for b in (1, 4, 16, 64, 256)]
    contexts = [step(32, c) for c in (1024, 8192, 65536)]
    assert batches == sorted(batches) and batches[0] < batches[-1]
    assert contexts == sorted(contexts) and contexts[0] < contexts[-1]


def test_latency_grows_with_input_and_batch() -> None:
    ttft = [evaluate(scenario(input_tokens=n), layout()).ttft_ms for n in (512, 2048, 8192)]
    assert ttft == sorted(ttft)
    tpot = [evaluate(scenario(), layout(batch=b)).tpot_ms for b in (8, 64, 512)]
    assert tpot == sorted(tpot)


def test_gpu_accounting_counts_every_pool() -> None:
    resolved = scenario(gpus=24)
    plan = disaggregated(prefill_replicas=2)
    prediction = evaluate(resolved, plan)
    assert prediction.gpus == 24 == sum(pool["gpus"] for pool in prediction.pools)
    # Little's law over the closed loop: requests in flight = throughput x time per request.
    requests_per_s = prediction.tokens_per_s_per_gpu * prediction.gpus / resolved.scenario.workload.output_tokens
    cycle_s = (prediction.ttft_ms + (resolved.scenario.workload.output_tokens - 1) * prediction.tpot_ms) / 1e3
    assert requests_per_s * cycle_s == pytest.approx(128, rel=1e-9)


def test_replicas_scale_throughput_not_per_gpu_rate() -> None:
    one = evaluate(scenario(gpus=16), layout())
    two = evaluate(scenario(gpus=16), layout(replicas=2))
    assert two.gpus == 2 * one.gpus
    assert two.tokens_per_s_per_gpu == pytest.approx(one.tokens_per_s_per_gpu)


def test_layout_over_hbm_is_infeasible_with_the_numbers() -> None:
    prediction = evaluate(scenario(system="h100-sxm"), layout(tp=8, dp=1, ep=8))
    assert not prediction.feasible
    (reason,) = prediction.reasons
    assert "mixed pool: needs" in reason and "HBM holds 85.9 GB" in reason
    assert prediction.memory_per_gpu_gb > 85.9


def test_weights_are_stored_at_least_once_and_split_without_loss() -> None:
    resolved = scenario(model="qwen3-235b", gpus=8)
    arch = resolved.architecture
    for candidate in (layout(tp=8, dp=1, ep=8), layout(tp=8, dp=1, ep=1, moe_tp=8)):
        ctx = pool_context(resolved, candidate.pools[0])
        stored = 8 * stage_weight_bytes(ctx, 0, with_mtp=False)
        model = (arch.total_params() - arch.embedding_params()) * bytes_per_element(resolved.weights)
        model += arch.embedding_params() * 2.0  # embedding and head stay bf16
        # beyond it, only what each of the 8 ranks holds whole: the router, and the k/v projections of the 4
        # KV heads (on 2 ranks each)
        layer = arch.groups[0].layers[0]
        whole = layer.ffn.router_params * 7 + layer.attention.kv_projection_params() * 1
        extra = arch.num_layers * whole * bytes_per_element(resolved.weights)
        assert stored == pytest.approx(model + extra, rel=0.002) and extra / model > 0.002
    replicated = 8 * stage_weight_bytes(pool_context(resolved, layout().pools[0]), 0, with_mtp=False)
    assert replicated > stored  # attention-DP replicates attention on every rank


def test_distinct_experts_limits() -> None:
    assert distinct_experts(256, 8, 1) == pytest.approx(8)
    assert distinct_experts(256, 8, 10_000) == pytest.approx(256)
    rng = np.random.default_rng(0)
    draws = [len({e for _ in range(32) for e in rng.choice(256, 8, replace=False)}) for _ in range(400)]
    assert distinct_experts(256, 8, 32) == pytest.approx(np.mean(draws), rel=0.02)


def test_imbalance_behaves() -> None:
    assert static_imbalance(256, 32, 0.0) == pytest.approx(1.0)
    skewed = static_imbalance(256, 32, 0.5)
    assert 1.3 < skewed < 1.8  # K07: 1.56 busiest/mean on DeepSeek-R1 EP32 without EPLB
    assert static_imbalance(256, 32, 0.5, redundant=32) < 1.1  # replicate-then-pack evens it out
    assert load_imbalance(256, 8, 32, 1e7, 0.0, 0) == pytest.approx(1.0, abs=0.01)
    assert load_imbalance(256, 8, 32, 64, 0.0, 0) > 1.2  # few tokens per rank: sampling noise


def test_vectorised_pricing_matches_direct_pricing() -> None:
    resolved = scenario(gpus=16, cached_tokens=4000, cached_tier="host_dram")
    works = []
    for candidate in LAYOUTS:
        plan = plan_layout(resolved, candidate)
        works += [w for pool in plan.pools for w in pool.works()]
    calibration = default_calibration()
    table = WorkTable(works, [resolved.system] * len(works), ["vllm"] * len(works))
    bulk = table.price(calibration).sum(axis=1)
    singles = [price(w, resolved.system, calibration, "vllm") for w in works]
    assert bulk == pytest.approx([s.total_s for s in singles], rel=1e-12)
    for single in singles:  # the per-operator breakdown accounts for the whole step
        assert sum(single.by_name.values()) == pytest.approx(single.total_s, rel=1e-12)


def test_midfill_from_a_slower_tier_costs_more() -> None:
    times = [evaluate(scenario(cached_tokens=60000, cached_tier=tier), layout()).ttft_ms
             for tier in ("hbm", "host_dram", "ssd")]
    assert times == sorted(times) and times[0] < times[2]


def test_speculative_decoding_lowers_tpot_when_acceptance_is_high() -> None:
    plain = evaluate(scenario(), layout(batch=8)).tpot_ms
    mtp = evaluate(scenario(speculative={"method": "mtp", "draft_tokens": 1, "acceptance_rate": 0.9}),
                   layout(batch=8)).tpot_ms
    assert mtp < plain


def test_same_inputs_same_figures() -> None:
    first = evaluate(scenario(), disaggregated()).to_dict()
    assert first == evaluate(scenario(), disaggregated()).to_dict()
    assert all(math.isfinite(v) for v in (first["ttft_ms"], first["tpot_ms"], first["tokens_per_s_per_gpu"]))


@pytest.mark.parametrize("model", model_ids())
def test_every_bundled_model_evaluates(model: str) -> None:
    resolved = scenario_from_data({
        "schema_version": 1, "name": "t", "model": model, "precision": {"weights": "fp8", "experts": "fp4"},
        "cluster": {"system": "gb300-nvl72", "gpus": 16}, "workload": {"input_tokens": 1024, "output_tokens": 256},
    })
    dense = resolved.architecture.num_experts is None
    candidate = layout(batch=32, tp=8, dp=1, ep=1, moe_tp=8, replicas=2) if dense else layout(batch=32, replicas=2)
    prediction = evaluate(resolved, candidate)
    assert prediction.feasible, prediction.reasons
    assert prediction.ttft_ms > 0 and prediction.tpot_ms > 0 and prediction.tokens_per_s_per_gpu > 0


@pytest.mark.parametrize("system", system_names())
def test_every_system_evaluates(system: str) -> None:
    resolved = scenario(model="qwen3-30b", system=system, gpus=8)
    prediction = evaluate(resolved, layout(batch=64))
    assert prediction.feasible
    assert prediction.tpot_ms > 0 and prediction.ttft_ms > 0
    assert 0 < prediction.utilisation["hbm_capacity"] < 1
    assert 0 < prediction.utilisation["compute"] <= 1 and 0 < prediction.utilisation["hbm_bandwidth"] <= 1


def test_two_batch_overlap_hides_at_most_the_smaller_of_alltoall_and_compute() -> None:
    resolved = scenario(gpus=8)
    work = prefill_work(pool_context(resolved, layout().pools[0]), 0, 4, 2048)
    base = default_calibration()

    def with_overlap(share: float) -> float:
        engines = {name: factors.model_copy(update={"alltoall_overlap": share})
                   for name, factors in base.engines.items()}
        step = price(work, resolved.system, base.model_copy(update={"engines": engines}), "generic")
        assert sum(step.by_name.values()) == pytest.approx(step.total_s, rel=1e-12)
        return step.total_s

    none, most = with_overlap(0.0), with_overlap(0.9)
    plain = price(work, resolved.system, base.model_copy(update={"engines": {
        n: f.model_copy(update={"alltoall_overlap": 0.0}) for n, f in base.engines.items()}}), "generic")
    alltoall = plain.by_name["moe_dispatch"] + plain.by_name["moe_combine"]
    busy = plain.terms["compute"] + plain.terms["hbm_bandwidth"]
    assert none - most == pytest.approx(0.9 * min(alltoall, busy), rel=1e-9)
