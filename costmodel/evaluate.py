"""`evaluate(scenario, layout) -> Prediction`: what a deployment will do, why, and whether it fits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from costmodel.calibration import Calibration, default_calibration
from costmodel.layout import Layout, Pool
from costmodel.modes import PoolContext, split_stages
from costmodel.operators import Formats, Parallel
from costmodel.precision import Dtype, bytes_per_element
from costmodel.resolve import ResolvedScenario, compute_dtype
from costmodel.serving import (
    Phase,
    PoolResult,
    closed_loop_wait_s,
    cohort_ttft_s,
    decode_phase,
    fill_phase,
    kv_transfer_s,
    pool_memory,
)
from costmodel.work import roofline_floor_s

GB = 1e9


@dataclass(frozen=True)
class Prediction:
    """Predicted steady state of one layout. Times in ms, rates per second."""

    ttft_ms: float
    tpot_ms: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    gpus: int
    feasible: bool
    reasons: tuple[str, ...]
    bottleneck: str
    memory_per_gpu_gb: float
    ttft_breakdown_ms: dict[str, float]
    pools: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "gpus": self.gpus,
            "feasible": self.feasible,
            "reasons": list(self.reasons),
            "bottleneck": self.bottleneck,
            "memory_per_gpu_gb": self.memory_per_gpu_gb,
            "ttft_breakdown_ms": self.ttft_breakdown_ms,
            "pools": list(self.pools),
        }


def pool_context(resolved: ResolvedScenario, pool: Pool) -> PoolContext:
    system = resolved.system
    scenario = resolved.scenario
    fmt = Formats(
        weight_bytes=bytes_per_element(resolved.weights),
        expert_bytes=bytes_per_element(resolved.experts),
        kv_dtype=resolved.kv_cache,
        activation_bytes=bytes_per_element(Dtype(scenario.precision.activations)),
        weight_peak=system.peak_flops_per_s[compute_dtype(resolved.weights, system)],
        expert_peak=system.peak_flops_per_s[compute_dtype(resolved.experts, system)],
        attention_peak=system.peak_flops_per_s[Dtype.BF16],
    )
    par = Parallel(tp=pool.tp, dp=pool.dp_attention, pp=pool.pp, moe_tp=pool.moe_tp, moe_ep=pool.moe_ep)
    return PoolContext(
        arch=resolved.architecture, system=system, par=par, fmt=fmt,
        skew=scenario.workload.routing_skew, redundant_experts=scenario.search.redundant_experts,
        stages=split_stages(resolved.architecture.layers, pool.pp),
    )


def _pool_result(resolved: ResolvedScenario, pool: Pool, calibration: Calibration) -> PoolResult:
    ctx = pool_context(resolved, pool)
    workload, engine = resolved.scenario.workload, resolved.scenario.engine
    memory, largest = pool_memory(ctx, pool, workload)
    seqs = pool.batch / pool.dp_attention
    fill = fill_phase(ctx, seqs, workload, calibration, engine) if pool.role != "decode" else None
    decode = decode_phase(ctx, seqs, workload, calibration, engine) if pool.role != "prefill" else None
    return PoolResult(pool.role, ctx, pool, memory, largest, fill, decode)


def evaluate(resolved: ResolvedScenario, layout: Layout, calibration: Calibration | None = None) -> Prediction:
    """Predict TTFT, TPOT, throughput per GPU and memory of `layout` serving `resolved`."""
    calibration = calibration or default_calibration()
    results = [_pool_result(resolved, pool, calibration) for pool in layout.pools]
    if layout.serving == "aggregated":
        ttft, tpot, rate, ttft_parts = _aggregated(results[0], resolved)
    else:
        ttft, tpot, rate, ttft_parts = _disaggregated(results, resolved, layout.gpus, calibration)
    reasons = tuple(reason for result in results for reason in _memory_reasons(result))
    worst = max(results, key=lambda r: r.memory.utilisation)
    return Prediction(
        ttft_ms=ttft * 1e3,
        tpot_ms=tpot * 1e3,
        tokens_per_s_per_gpu=rate * resolved.scenario.workload.output_tokens / layout.gpus,
        tokens_per_s_per_user=1.0 / tpot,
        gpus=layout.gpus,
        feasible=not reasons,
        reasons=reasons,
        bottleneck=_bottleneck(results),
        memory_per_gpu_gb=worst.memory.total / GB,
        ttft_breakdown_ms={k: v * 1e3 for k, v in ttft_parts.items()},
        pools=tuple(_pool_report(result) for result in results),
    )


def _aggregated(result: PoolResult, resolved: ResolvedScenario) -> tuple[float, float, float, dict[str, float]]:
    """Cohort model: TTFT, TPOT, requests/s over the whole pool."""
    assert result.fill is not None and result.decode is not None
    osl = resolved.scenario.workload.output_tokens
    seqs = result.pool.batch / result.pool.dp_attention
    ttft = cohort_ttft_s(result.fill, seqs)
    tpot = result.decode.latency_s
    round_s = result.fill.total_s + (osl - 1) * tpot
    rate = result.pool.replicas * result.pool.batch / round_s
    return ttft, tpot, rate, {"fill": ttft}


def _disaggregated(results: list[PoolResult], resolved: ResolvedScenario, gpus: int,
                   calibration: Calibration) -> tuple[float, float, float, dict[str, float]]:
    prefill = next(r for r in results if r.role == "prefill")
    decode = next(r for r in results if r.role == "decode")
    assert prefill.fill is not None and decode.decode is not None
    workload = resolved.scenario.workload
    transfer = kv_transfer_s(prefill.ctx, decode.ctx, workload, gpus, calibration)
    tpot = decode.decode.latency_s
    concurrency = decode.pool.replicas * decode.pool.batch
    elsewhere = transfer + (workload.output_tokens - 1) * tpot
    capacity = prefill.pool.replicas * prefill.pool.batch / prefill.fill.total_s
    at_prefill = closed_loop_wait_s(concurrency, capacity, prefill.fill.total_s, elsewhere)
    rate = concurrency / (at_prefill + elsewhere)
    parts = {"fill": prefill.fill.total_s, "queue": at_prefill - prefill.fill.total_s, "kv_transfer": transfer}
    return at_prefill + transfer, tpot, rate, parts


def _memory_reasons(result: PoolResult) -> list[str]:
    memory = result.memory
    if memory.fits:
        return []
    return [
        f"{result.role} pool: needs {memory.total / GB:.1f} GB per GPU (weights {memory.weights / GB:.1f}, "
        f"KV {memory.kv_cache / GB:.1f}, states {memory.states / GB:.1f}, workspace {memory.workspace / GB:.1f}, "
        f"reserve {memory.reserve / GB:.1f}) but HBM holds {memory.capacity / GB:.1f} GB; "
        f"the largest batch that fits is {result.max_batch}"
    ]


def _bottleneck(results: list[PoolResult]) -> str:
    phases = [(r.role, name, phase) for r in results
              for name, phase in (("fill", r.fill), ("decode", r.decode)) if phase is not None]
    role, name, phase = max(phases, key=lambda item: item[2].step.total_s if item[1] == "decode" else 0.0) \
        if any(p[1] == "decode" for p in phases) else phases[0]
    return f"{role} {name}: {phase.step.bottleneck}"


def _phase_report(phase: Phase, system_peak_s: float) -> dict[str, Any]:
    return {
        "step_ms": phase.step.total_s * 1e3,
        "terms_ms": {k: v * 1e3 for k, v in phase.step.terms.items()},
        "by_operator_ms": {k: v * 1e3 for k, v in sorted(phase.step.by_name.items())},
        "bottleneck": phase.step.bottleneck,
        "roofline_floor_ms": system_peak_s * 1e3,
    }


def _pool_report(result: PoolResult) -> dict[str, Any]:
    report: dict[str, Any] = {
        "role": result.role,
        "gpus": result.pool.gpus,
        "batch": result.pool.batch,
        "max_batch": result.max_batch,
        "memory_per_gpu_gb": {
            "weights": result.memory.weights / GB, "kv_cache": result.memory.kv_cache / GB,
            "states": result.memory.states / GB, "workspace": result.memory.workspace / GB,
            "reserve": result.memory.reserve / GB, "total": result.memory.total / GB,
            "capacity": result.memory.capacity / GB,
        },
    }
    for name, phase in (("fill", result.fill), ("decode", result.decode)):
        if phase is not None:
            report[name] = _phase_report(phase, roofline_floor_s(phase.work, result.ctx.system))
    return report
