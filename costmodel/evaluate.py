"""`evaluate(scenario, layout) -> Prediction`: what a deployment will do, why, and whether it fits."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from costmodel.calibration import SCHEDULING, Calibration, default_calibration, generation_of
from costmodel.disaggregated import FillStation, split_serving
from costmodel.errors import ScenarioError
from costmodel.expected_error import ExpectedError, decode_batch_per_rank, expected_error
from costmodel.hardware import GB, SystemSpec
from costmodel.inventory import ClusterGroup
from costmodel.kv_report import kv_tier_report
from costmodel.kv_tiers import host_dram_share, store_use
from costmodel.layout import Layout, Pool
from costmodel.memory import GIB, stage_weight_bytes
from costmodel.modes import PoolContext, split_stages
from costmodel.operators import Formats, Parallel
from costmodel.precision import Dtype, bytes_per_element
from costmodel.pricing import DirectPricer, Pricer
from costmodel.resolve import (
    ResolvedScenario,
    check_session_pools,
    compute_dtype,
    expert_compute_dtype,
    layout_warnings,
    mxfp8_falls_back,
)
from costmodel.routing import placement_domains
from costmodel.scenario import Scenario, Workload
from costmodel.serving import (
    PhaseTime,
    PoolPlan,
    PoolTiming,
    admitted_plan,
    fill_parts,
    plan_pool,
    pool_turns,
    prefill_batch,
    time_pool,
    turn_share,
    with_session_tiers,
)
from costmodel.work import roofline_floor_s


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
    utilisation: dict[str, float] = field(default_factory=dict)
    pools: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    kv_tiers: dict[str, Any] | None = None  # multi-turn sessions: see costmodel.kv_report
    warnings: tuple[str, ...] = ()  # layouts that run but waste GPUs (`costmodel.resolve.layout_warnings`)
    deployments: tuple[dict[str, Any], ...] = ()  # a composite layout: each deployment's own figures
    expected_error: ExpectedError | None = None  # how far to trust the figures
    cluster_gpus: int = 0  # the scenario's available GPUs (`evaluate`; 0: not known, taken as `gpus`)

    @property
    def tokens_per_s_per_cluster_gpu(self) -> float:
        """The deployment's tokens/s over every available GPU of the cluster (idle ones earn nothing): what a front
        point ranks by under `cluster` accounting; `tokens_per_s_per_gpu` is per GPU the layout uses."""
        return self.tokens_per_s_per_gpu * self.gpus / (self.cluster_gpus or self.gpus)

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {} if self.kv_tiers is None else {"kv_tiers": self.kv_tiers}
        if self.warnings:
            extra["warnings"] = list(self.warnings)
        if self.deployments:
            extra["deployments"] = list(self.deployments)
        if self.expected_error is not None:
            extra["expected_error"] = self.expected_error.to_dict()
        return {
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_s_per_cluster_gpu": self.tokens_per_s_per_cluster_gpu,
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "gpus": self.gpus,
            "cluster_gpus": self.cluster_gpus or self.gpus,
            "feasible": self.feasible,
            "reasons": list(self.reasons),
            "bottleneck": self.bottleneck,
            "memory_per_gpu_gb": self.memory_per_gpu_gb,
            "ttft_breakdown_ms": self.ttft_breakdown_ms,
            "utilisation": self.utilisation,
            "pools": list(self.pools),
            **extra,
        }


# Rows (tokens) of one MoE grouped-GEMM tile: Hopper wgmma computes 64-row tiles per warpgroup (DeepGEMM
# BLOCK_M 64 for small M, CUTLASS sm90 grouped GEMM); Blackwell tcgen05 UMMA tiles are 128 rows per CTA (CUTLASS
# sm100 grouped GEMMs); CDNA MFMA-based hipBLASLt grouped tiles, assumption: 64 as Hopper. Blackwell's TRT-LLM-gen
# MoE picks smaller token tiles for few rows per expert (below); assumption: the grouped GEMMs other than MXFP4
# experts' keep these tiles, which the bundled calibration fits (sizing them to the rows per expert too and
# refitting cost TTFT held out by model 2.5 points: docs/calibration-log.md, session 35).
EXPERT_TILE_ROWS: dict[str, int] = {"hopper": 64, "blackwell": 128, "cdna3": 64, "cdna4": 64}
# Token tiles of MXFP4 experts on NVIDIA fp4 tensor cores, by the activations they pair with: vLLM 0.34 and SGLang
# 0.5.23 run them through FlashInfer's `trtllm_fp4_block_scale_moe` (TRT-LLM's TRTLLM MoE backend alike,
# assumption), whose launcher takes the first of these tiles that covers the rows per local expert
# (`costmodel.operators.covering_tile`; its autotuner then tries the neighbours), A and B swapped so that a
# decode step's few rows per expert fill the MMA's N side: flashinfer 0.7.4
# csrc/trtllm_fused_moe_kernel_launcher.cu, FP4BlockScaleLauncher::getSupportedTileNums and computeSelectedTileN.
# MXFP4 x MXFP4 runs in no engine on NVIDIA (the fp4 rate priced by default): assumption, MXFP8's tiles.
MXFP4_TOKEN_TILES: dict[Dtype, tuple[int, ...]] = {
    Dtype.BF16: (8, 16, 32, 64),
    Dtype.FP8: (8, 16, 32, 64, 128, 192, 256),
    Dtype.FP4: (8, 16, 32, 64, 128, 192, 256),
}
# Engines whose attention computes in fp8 over an fp8 KV cache, prefill included: TRT-LLM's FP8 context and
# generation FMHA (`use_fp8_context_fmha`, on with an FP8 KV cache on Hopper and Blackwell). vLLM and SGLang
# dequantise an fp8 cache to bf16 in their FlashAttention/FlashInfer prefill paths; their decode reads fp8
# bytes (counted in every engine's HBM traffic) but is bound by those bytes, not by compute. FP8 FMHA speed:
# FlashAttention-3 FP8 about 1.2 PFLOPS on H100 against 0.74 in bf16; FlashMLA FP8 decode 410 TFLOPS (K05).
FP8_ATTENTION_ENGINES = frozenset({"trtllm"})


def pool_context(resolved: ResolvedScenario, pool: Pool) -> PoolContext:
    group = resolved.group_named(pool.group)
    if group is None:
        raise ScenarioError(f"no inventory group named {pool.group!r}; use one of "
                            f"{', '.join(g.name for g in resolved.groups)}", "pools")
    system = spanning_racks(group, pool.gpus_per_instance)
    scenario = resolved.scenario
    expert_compute = expert_compute_dtype(resolved, system,
                                          mxfp8_falls_back(resolved, pool.role, pool.moe_ep, pool.dp_attention))
    fmt = Formats(
        weight_bytes=bytes_per_element(resolved.weights),
        expert_bytes=resolved.expert_bytes,
        kv_dtype=resolved.kv_cache,
        activation_bytes=bytes_per_element(Dtype(scenario.precision.activations)),
        weight_compute=compute_dtype(resolved.weights, system),
        expert_compute=expert_compute,
        peaks=dict(system.peak_flops_per_s),
        expert_tiles=expert_tiles(resolved, system, expert_compute),
        expert_storage=resolved.experts,
        fp8_attention=scenario.engine in FP8_ATTENTION_ENGINES,
    )
    par = Parallel(tp=pool.tp, dp=pool.dp_attention, pp=pool.pp, moe_tp=pool.moe_tp, moe_ep=pool.moe_ep)
    ctx = PoolContext(
        arch=resolved.architecture, system=system, par=par, fmt=fmt,
        skew=scenario.workload.routing_skew, redundant_experts=scenario.search.redundant_experts,
        stages=split_stages(resolved.architecture.layers, pool.pp),
        group=pool.group, uplink_share_bytes_per_s=group.uplink_share_bytes_per_s, group_racks=group.racks,
        offload_bytes=pool.cpu_offload_gb * GIB,
        prefill_batch_tokens=prefill_batch_tokens(scenario, system),
        holds_prompts=scenario.attention_dp_balance,
        expert_domains=expert_domains(resolved, pool, system),
    )
    if ctx.offload_bytes > 0:
        _check_offload(ctx, pool, scenario.workload.speculative.method == "mtp")
    return ctx


def expert_tiles(resolved: ResolvedScenario, system: SystemSpec, expert_compute: Dtype) -> tuple[int, ...]:
    """Token tiles the routed experts' grouped GEMMs pad each expert's rows to, by the rows per expert: MXFP4
    experts' kernels choose by the activations they compute with (`expert_compute`: MXFP4_TOKEN_TILES), other
    grouped GEMMs run one tile."""
    if resolved.mx_activations_on(system):
        return MXFP4_TOKEN_TILES[expert_compute]
    return (EXPERT_TILE_ROWS[generation_of(system)],)


def expert_domains(resolved: ResolvedScenario, pool: Pool, system: SystemSpec) -> int:
    """Scale-up domains the pool's experts are placed over group by group (`costmodel.routing.placement_domains`;
    the planner's expert banks follow it: `planner.experts`)."""
    groups, chosen = resolved.architecture.expert_routing
    return placement_domains(groups, chosen, pool.role, pool.moe_ep, pool.moe_tp, system.scaleup_domain_gpus,
                             resolved.scenario.search.redundant_experts, system.vendor)


def prefill_batch_tokens(scenario: Scenario, system: SystemSpec) -> float | None:
    """A prefill-first engine's prompt tokens per attention-DP rank in one batch (the scenario's, else SGLang's
    default for the GPU); None for engines whose prompts ride on decode steps."""
    if SCHEDULING.get(scenario.engine) != "prefill_first":
        return None
    return prefill_batch(scenario.prefill_batch_tokens, system.hbm_capacity_bytes)


def check_offload(resolved: ResolvedScenario, layout: Layout) -> None:
    """Each pool's CPU weight offload, as `pool_context` checks it, with the field to change."""
    for index, pool in enumerate(layout.pools):
        if pool.cpu_offload_gb > 0:
            try:
                pool_context(resolved, pool)
            except ScenarioError as exc:
                raise ScenarioError(str(exc), f"pools.{index}.cpu_offload_gb") from None


def _check_offload(ctx: PoolContext, pool: Pool, with_mtp: bool) -> None:
    """Offloaded weights must exist on every GPU (each stage's own, the MTP layer's where the workload
    drafts with it) and fit in the host DRAM an engine may use (`kv_tiers.host_dram_share`, which the KV
    host tier then shares with them)."""
    fewest = min(stage_weight_bytes(ctx, stage, with_mtp) for stage in range(len(ctx.stages)))
    if ctx.offload_bytes > fewest:
        raise ScenarioError(f"cpu_offload_gb {pool.cpu_offload_gb:g} is more than the {fewest / GIB:.1f} GiB of "
                            "weights a GPU of this layout holds; offload at most that", "pools")
    host = host_dram_share(ctx.system)
    if ctx.offload_bytes > host:
        raise ScenarioError(f"cpu_offload_gb {pool.cpu_offload_gb:g} per GPU needs more than its share of host DRAM "
                            f"({host / GIB:.0f} GiB usable per GPU on {ctx.system.name}); offload at most that",
                            "pools")


def spanning_racks(group: ClusterGroup, instance_gpus: int) -> SystemSpec:
    """The system an instance of `instance_gpus` GPUs runs on: its group's, except that an instance wider
    than a rack sends the share (n - R) / (n - D) of its scale-out traffic (peers spread evenly; R GPUs to a
    rack, D to a domain) across its racks' uplinks, where each GPU gets its fair share u: its scale-out
    bandwidth is min(NIC, u (n - D) / (n - R))."""
    system = group.system
    rack, domain = system.gpus_per_rack, system.scaleup_domain_gpus
    share = group.uplink_share_bytes_per_s
    if instance_gpus <= rack or not math.isfinite(share):
        return system
    effective = share * (instance_gpus - domain) / (instance_gpus - rack)
    if effective >= system.nic_bandwidth_bytes_per_s:
        return system
    return system.model_copy(update={"nic_bandwidth_bytes_per_s": effective})


@dataclass(frozen=True)
class LayoutPlan:
    """A layout's planned work, independent of calibration: re-timed cheaply when fitting."""

    resolved: ResolvedScenario
    layout: Layout
    pools: tuple[PoolPlan, ...]


def plan_layout(resolved: ResolvedScenario, layout: Layout, pricer: Pricer | None = None) -> LayoutPlan:
    """Every pool's work; with sessions and a `pricer`, the fill pool's contexts placed in KV tiers sized
    for its rate (`costmodel.serving.with_session_tiers`), else all in HBM."""
    workload = resolved.scenario.workload
    check_session_pools(resolved, layout)
    plans = [plan_pool(pool_context(resolved, pool), pool, workload, None, pool_turns(pool, layout.split_fills))
             for pool in layout.pools]
    if workload.sessions is not None and pricer is not None:
        plans = [with_session_tiers(plan, time_pool(plan, pricer), workload) for plan in plans]
    return LayoutPlan(resolved, layout, tuple(admitted_plan(plan, workload) for plan in plans))


def evaluate(resolved: ResolvedScenario, layout: Layout, calibration: Calibration | None = None) -> Prediction:
    """Predict TTFT, TPOT, throughput per GPU and memory of `layout` serving `resolved`, with the error to
    expect of those figures."""
    prediction = _predict_layout(resolved, layout, calibration or default_calibration())
    runs = decode_batch_per_rank(layout, [pool["max_batch"] for pool in prediction.pools])  # what each pool runs
    trust = expected_error(resolved, calibration, layout_systems(resolved, layout), [runs])
    return replace(prediction, expected_error=trust, cluster_gpus=resolved.gpus)


def memory_reasons(resolved: ResolvedScenario, layout: Layout) -> tuple[str, ...]:
    """Why pools of `layout` do not fit in HBM, from their own weights, KV cache and workspace (calibration-free,
    unlike `Prediction.reasons`, whose KV-store check depends on the rate). Multi-turn sessions: none, as their
    pools' HBM share depends on the tiers sized for the rate (`plan_layout` with a pricer)."""
    if resolved.scenario.workload.sessions is not None:
        return ()
    parts = layout.parts if layout.serving == "composite" else [layout]
    return tuple((f"deployment {i}: " if len(parts) > 1 else "") + reason for i, part in enumerate(parts)
                 for plan in plan_layout(resolved, part).pools for reason in _memory_reasons(plan))


def layout_systems(resolved: ResolvedScenario, layout: Layout) -> list[SystemSpec]:
    """The systems a layout's pools run on (every deployment's of a composite layout), in cluster order."""
    parts = layout.parts if layout.serving == "composite" else [layout]
    names = {pool.group for part in parts for pool in part.pools}
    groups = [resolved.group_named(name) for name in names]
    return [g.system for g in resolved.groups if g in groups]


def _predict_layout(resolved: ResolvedScenario, layout: Layout, calibration: Calibration) -> Prediction:
    pricer = DirectPricer(resolved.system, calibration, resolved.scenario.engine)
    if layout.serving == "composite":
        whole = composite([predict(plan_layout(resolved, part, pricer), pricer) for part in layout.parts])
        parking = [i for i, part in enumerate(layout.parts) if any(pool.kv_store for pool in part.pools)]
        if len(parking) < 2:
            return whole
        shared = (f"deployments {', '.join(map(str, parking))} all park idle contexts in the cluster's one shared KV "
                  "store; its capacity and bandwidth are checked for each deployment alone, not for their sum")
        return replace(whole, warnings=(*whole.warnings, shared))
    return predict(plan_layout(resolved, layout, pricer), pricer)


def composite(parts: list[Prediction]) -> Prediction:
    """Independent deployments behind one router, each serving the requests it has capacity for at its own
    operating point: their tokens/s add up; TTFT and TPOT are the slowest deployment's (what a request may
    see, as an SLO reads them); the bottleneck and utilisation are those of the deployment with the slowest
    TPOT, the TTFT breakdown that of the slowest TTFT. Each deployment's own figures and KV tiers are in
    `deployments`."""
    gpus = sum(p.gpus for p in parts)
    tokens_per_s = sum(p.tokens_per_s_per_gpu * p.gpus for p in parts)
    pace = max(range(len(parts)), key=lambda i: parts[i].tpot_ms)
    slowest_fill = max(range(len(parts)), key=lambda i: parts[i].ttft_ms)
    return Prediction(
        ttft_ms=parts[slowest_fill].ttft_ms,
        tpot_ms=parts[pace].tpot_ms,
        tokens_per_s_per_gpu=tokens_per_s / gpus,
        tokens_per_s_per_user=min(p.tokens_per_s_per_user for p in parts),
        gpus=gpus,
        feasible=all(p.feasible for p in parts),
        reasons=tuple(f"deployment {i}: {reason}" for i, p in enumerate(parts) for reason in p.reasons),
        bottleneck=f"deployment {pace}: {parts[pace].bottleneck}",
        memory_per_gpu_gb=max(p.memory_per_gpu_gb for p in parts),
        ttft_breakdown_ms=parts[slowest_fill].ttft_breakdown_ms,
        utilisation=parts[pace].utilisation,
        pools=tuple({"deployment": i, **pool} for i, p in enumerate(parts) for pool in p.pools),
        warnings=tuple(f"deployment {i}: {warning}" for i, p in enumerate(parts) for warning in p.warnings),
        deployments=tuple({"deployment": i, "ttft_ms": p.ttft_ms, "tpot_ms": p.tpot_ms,
                           "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu, "gpus": p.gpus,
                           "share_of_requests": p.tokens_per_s_per_gpu * p.gpus / tokens_per_s if tokens_per_s else 0.0,
                           **({"kv_tiers": p.kv_tiers} if p.kv_tiers is not None else {})}
                          for i, p in enumerate(parts)),
    )


def _serving(plan: LayoutPlan, timings: list[PoolTiming],
             calibration: Calibration) -> tuple[float, float, float, dict[str, float]]:
    if plan.layout.serving == "aggregated":
        return _aggregated(timings[0])
    return _disaggregated(timings, calibration, plan.resolved.scenario.workload, plan.resolved.scenario.engine)


def serving_latencies(plan: LayoutPlan, pricer: Pricer) -> tuple[float, float]:
    """(TTFT, TPOT) in seconds, without the reports: the fast path calibration fitting uses."""
    ttft, tpot, _, _ = _serving(plan, [time_pool(pool, pricer) for pool in plan.pools], pricer.calibration)
    return ttft, tpot


def predict(plan: LayoutPlan, pricer: Pricer) -> Prediction:
    """Time a planned layout with `pricer` and compose the serving metrics."""
    timings = [time_pool(pool, pricer) for pool in plan.pools]
    ttft, tpot, rate, ttft_parts = _serving(plan, timings, pricer.calibration)
    reasons = tuple(reason for timing in timings for reason in _memory_reasons(timing.plan))
    fill = next(t for t in timings if t.plan.turns != "first" and t.plan.pool.role != "decode")
    store = store_breach(plan.resolved, fill.plan)
    reasons += (store,) if store else ()
    worst = max(plan.pools, key=lambda p: p.memory.utilisation)
    return Prediction(
        ttft_ms=ttft * 1e3,
        tpot_ms=tpot * 1e3,
        tokens_per_s_per_gpu=_per_gpu(plan, timings, rate),
        tokens_per_s_per_user=1e3 / (tpot * 1e3),  # as a front point computes it from its TPOT in ms, digit for digit
        gpus=plan.layout.gpus,
        feasible=not reasons,
        reasons=reasons,
        bottleneck=_bottleneck(timings),
        memory_per_gpu_gb=worst.memory.total / GB,
        ttft_breakdown_ms={k: v * 1e3 for k, v in ttft_parts.items()},
        utilisation=_utilisation(timings),
        pools=tuple(_pool_report(timing) for timing in timings),
        kv_tiers=kv_tier_report(fill, ttft, ttft_parts.get("kv_transfer", 0.0), rate, plan.resolved.scenario,
                                _latency_share(fill, timings, plan.resolved.scenario.workload)),
        warnings=layout_warnings(plan.resolved, plan.layout),
    )


def _latency_share(fill: PoolTiming, timings: list[PoolTiming], workload: Workload) -> float:
    """The part of a request's mean fill latency spent in `fill` (1 unless first turns have their own pool)."""
    fills = [t for t in timings if t.plan.pool.role in ("prefill", "midfill")]
    if len(fills) < 2:
        return 1.0
    latency = sum(turn_share(workload, t.plan.turns) * t.ttft_s for t in fills)
    return turn_share(workload, fill.plan.turns) * fill.ttft_s / latency if latency > 0 else 1.0


def store_breach(resolved: ResolvedScenario, fill: PoolPlan) -> str | None:
    """Why the cluster's shared KV store cannot hold or serve what the fill pool parks in it (None if it can)."""
    tiers = fill.request.tiers
    context = tiers.context_tokens if tiers is not None else 0.0
    kv_bytes = fill.ctx.arch.bytes_per_context_token(context, fill.ctx.fmt.kv_dtype)
    return store_use(tiers, kv_bytes, fill.pool.gpus).breach(resolved.scenario.cluster.kv_store)


def _per_gpu(plan: LayoutPlan, timings: list[PoolTiming], rate: float) -> float:
    """Output tokens/s per GPU; an aggregated pool's from one instance, as its front point computes it
    (`planner.deployment.aggregated_point`: the same figure to the last digit, not the replicas' sum over theirs)."""
    tokens = plan.resolved.scenario.workload.output_tokens
    if plan.layout.serving == "aggregated":
        return timings[0].requests_per_s * tokens / plan.layout.pools[0].gpus_per_instance
    return rate * tokens / plan.layout.gpus


def _aggregated(timing: PoolTiming) -> tuple[float, float, float, dict[str, float]]:
    """Continuous batching: TTFT, TPOT, requests/s over the whole pool. When the engine admits fewer than the
    layout's batch (it does not fit, `admitted_plan`), the rest queue for admission: by Little's law each of
    the N requests spends N / rate in the loop, of which one round in service, so it waits (N - slots) / rate
    before its first token."""
    pool = timing.plan.pool
    slots = pool.replicas * timing.plan.in_service
    rate = pool.replicas * timing.requests_per_s
    queue = (pool.replicas * pool.batch - slots) / rate
    parts = (fill_parts(timing.ttft_s, timing.first_token_s, timing.step_wait_s, timing.dp_wait_s)
             | ({"queue": queue} if queue else {}))
    return timing.ttft_s + queue, timing.tpot_s, rate, parts


def _disaggregated(timings: list[PoolTiming], calibration: Calibration, workload: Workload,
                   engine: str) -> tuple[float, float, float, dict[str, float]]:
    decode = next(t for t in timings if t.plan.pool.role == "decode")
    stations = [FillStation(t, t.plan.pool.replicas, turn_share(workload, t.plan.turns))
                for t in timings if t is not decode]
    return split_serving(stations, decode, decode.plan.pool.replicas, calibration, engine)


def _memory_reasons(plan: PoolPlan) -> list[str]:
    memory = plan.memory
    if memory.fits:
        return []
    return [
        f"{plan.pool.role} pool: needs {memory.total / GB:.1f} GB per GPU (weights {memory.weights / GB:.1f}, "
        f"KV {memory.kv_cache / GB:.1f}, states {memory.states / GB:.1f}, workspace {memory.workspace / GB:.1f}, "
        f"reserve {memory.reserve / GB:.1f}) but HBM holds {memory.capacity / GB:.1f} GB; "
        + (f"the largest batch that fits is {plan.max_batch}" if plan.max_batch
           else "not even one sequence fits: use more GPUs per instance or a smaller format")
    ]


def _phases(timing: PoolTiming) -> list[tuple[str, PhaseTime]]:
    named = (("fill", timing.fill), ("mixed", timing.mixed), ("decode", timing.decode))
    return [(name, phase) for name, phase in named if phase is not None]


def _dominant(timings: list[PoolTiming]) -> tuple[PoolTiming, str, PhaseTime]:
    """The step that sets the pace: the slowest decode (or mixed) step when any pool decodes."""
    candidates = [(t, name, phase) for t in timings for name, phase in _phases(t)]
    decoding = [c for c in candidates if c[1] != "fill"] or candidates
    return max(decoding, key=lambda c: c[2].max_s)


def _bottleneck(timings: list[PoolTiming]) -> str:
    timing, name, phase = _dominant(timings)
    return f"{timing.plan.pool.role} {name}: {phase.slowest.bottleneck}"


def _step_utilisation(phase: PhaseTime, system: SystemSpec) -> dict[str, float]:
    """Share of the GPU's HBM bandwidth and peak compute the step actually uses."""
    seconds = phase.max_s
    busy = sum(op.flops / op.peak_flops_per_s for op in phase.work.ops)
    return {"hbm_bandwidth": phase.work.hbm_bytes / (seconds * system.hbm_bandwidth_bytes_per_s),
            "compute": busy / seconds}


def _utilisation(timings: list[PoolTiming]) -> dict[str, float]:
    timing, _, phase = _dominant(timings)
    fullest = max(t.plan.memory.utilisation for t in timings)
    return {"hbm_capacity": fullest, **_step_utilisation(phase, timing.plan.ctx.system)}


def _phase_report(phase: PhaseTime, system: SystemSpec) -> dict[str, Any]:
    return {
        "step_ms": phase.max_s * 1e3,
        "terms_ms": {k: v * 1e3 for k, v in phase.slowest.terms.items()},
        "by_operator_ms": {k: v * 1e3 for k, v in sorted(phase.slowest.by_name.items())},
        "bottleneck": phase.slowest.bottleneck,
        "roofline_floor_ms": roofline_floor_s(phase.work, system) * 1e3,
        "utilisation": _step_utilisation(phase, system),
    }


def _pool_report(timing: PoolTiming) -> dict[str, Any]:
    plan = timing.plan
    memory = plan.memory
    report: dict[str, Any] = {
        "role": plan.pool.role,
        "gpus": plan.pool.gpus,
        "batch": plan.pool.batch,
        "max_batch": plan.max_batch,
        "memory_per_gpu_gb": {
            "weights": memory.weights / GB, "kv_cache": memory.kv_cache / GB, "states": memory.states / GB,
            "workspace": memory.workspace / GB, "reserve": memory.reserve / GB, "total": memory.total / GB,
            "capacity": memory.capacity / GB,
        },
    }
    for name, phase in _phases(timing):
        report[name] = _phase_report(phase, plan.ctx.system)
    return report
