"""Steady-state serving metrics of a layout, closed-loop at the layout's batch.

Aggregated serving (one pool, continuous batching), cohort model: a closed-loop benchmark starts its
`concurrency` requests together and, all having the same lengths, they stay in step. Each round every
attention-DP rank prefills its sequences in chunks of `ENGINE_STEP_TOKENS` tokens (so the mean request
waits for half the round's prefill), then the cohort decodes `osl - 1` further tokens together.

Disaggregated serving: prefill instances process `batch` requests per fill; decode instances hold
`batch` sequences each. Requests cycle between the prefill queue and the decode pool; the mean time at
the prefill pool is the asymptotic closed-network bound max(fill latency, N / capacity - time elsewhere)
(exact at light and at saturating load). KV moves from prefill to decode over NVLink when both pools
fit in one scale-up domain, over the NICs otherwise, striped over the smaller instance's GPUs.

Pipelines: a fill chunk passes every stage (latency = sum of stage times, one chunk per slowest-stage
time); decode keeps pp micro-batches in flight, so a sequence gets a token every pp slowest-stage steps.
Speculative decoding verifies 1 + d tokens per step and accepts 1 + a + ... + a^d of them on average.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from costmodel.calibration import Calibration
from costmodel.layout import Pool
from costmodel.memory import MemoryUse, max_batch, memory_use
from costmodel.modes import PoolContext, decode_work, layer_work, midfill_work
from costmodel.operators import StepShape
from costmodel.scenario import Workload
from costmodel.work import StepTime, StepWork, price

# Largest number of new tokens one attention-DP rank puts in one fill step: TRT-LLM max_num_tokens
# 8192, vLLM max_num_batched_tokens 8192 (online default on large GPUs), SGLang chunked_prefill_size 8192.
ENGINE_STEP_TOKENS = 8192


@dataclass(frozen=True)
class Phase:
    """A priced phase: latency of its first result, total time, and the slowest stage's step."""

    latency_s: float
    total_s: float
    step: StepTime
    work: StepWork


@dataclass(frozen=True)
class PoolResult:
    role: str
    ctx: PoolContext
    pool: Pool
    memory: MemoryUse
    max_batch: int
    fill: Phase | None
    decode: Phase | None


def _price_stages(ctx: PoolContext, build: Callable[[int], StepWork], calibration: Calibration,
                  engine: str) -> tuple[list[float], StepTime, StepWork]:
    times, slowest, slowest_work = [], None, None
    for stage in range(len(ctx.stages)):
        work = build(stage)
        step = price(work, ctx.system, calibration, engine)
        times.append(step.total_s)
        if slowest is None or step.total_s > slowest.total_s:
            slowest, slowest_work = step, work
    assert slowest is not None and slowest_work is not None
    return times, slowest, slowest_work


def fill_phase(ctx: PoolContext, seqs_per_rank: float, workload: Workload, calibration: Calibration,
               engine: str) -> Phase:
    """Prefill or midfill of `seqs_per_rank` requests on each rank, in engine-sized chunks."""
    new = workload.input_tokens * (1.0 - workload.prefix_hit_rate)
    cached = workload.cached_tokens + workload.input_tokens * workload.prefix_hit_rate
    total_tokens = max(seqs_per_rank * new, 1.0)
    chunk = min(float(ENGINE_STEP_TOKENS), total_tokens)
    chunks = total_tokens / chunk
    times, step, work = _price_stages(
        ctx, lambda s: midfill_work(ctx, s, chunk / new, new, cached, workload.cached_tier), calibration, engine)
    latency = sum(times)
    return Phase(latency, latency + (chunks - 1.0) * max(times), step, work)


def accepted_tokens(draft: int, acceptance: float) -> float:
    """Expected tokens accepted per verification step: 1 + a + a^2 + ... + a^d."""
    return sum(acceptance**i for i in range(draft + 1))


def decode_phase(ctx: PoolContext, seqs_per_rank: float, workload: Workload, calibration: Calibration,
                 engine: str) -> Phase:
    """One decode step at mid-generation context; `latency_s` is the time per output token."""
    spec = workload.speculative
    draft = spec.draft_tokens if spec.method != "none" else 0
    context = workload.cached_tokens + workload.input_tokens + workload.output_tokens / 2.0
    micro = seqs_per_rank / ctx.par.pp
    times, step, work = _price_stages(
        ctx, lambda s: _decode_stage(ctx, s, micro, context, draft), calibration, engine)
    per_step = ctx.par.pp * max(times)
    tpot = per_step / accepted_tokens(draft, spec.acceptance_rate)
    return Phase(tpot, per_step, step, work)


def _decode_stage(ctx: PoolContext, stage: int, seqs: float, context: float, draft: int) -> StepWork:
    work = decode_work(ctx, stage, seqs, context, 1.0 + draft)
    last = stage == len(ctx.stages) - 1
    if draft and last and ctx.arch.mtp_layer is not None:  # d sequential MTP drafting passes
        for _ in range(draft):
            work.extend(layer_work(ctx, ctx.arch.mtp_layer, StepShape("decode", seqs, 1.0, context)))
    return work


def pool_memory(ctx: PoolContext, pool: Pool, workload: Workload) -> tuple[MemoryUse, int]:
    """Memory per GPU at the pool's batch, and the largest batch that would fit."""
    context = workload.cached_tokens + workload.input_tokens
    if pool.role != "prefill":
        context += workload.output_tokens
    with_mtp = workload.speculative.method == "mtp"
    step_tokens = float(ENGINE_STEP_TOKENS) if pool.role != "decode" else pool.batch / ctx.par.dp * 2.0
    return (memory_use(ctx, pool.batch, context, step_tokens, with_mtp),
            max_batch(ctx, context, step_tokens, with_mtp))


def kv_transfer_s(prefill: PoolContext, decode: PoolContext, workload: Workload, total_gpus: int,
                  calibration: Calibration) -> float:
    """Moving one request's KV (all layers) from a prefill to a decode instance."""
    system = prefill.system
    per_token = prefill.arch.kv_bytes_per_token(prefill.fmt.kv_dtype)
    size = (workload.cached_tokens + workload.input_tokens) * per_token
    if total_gpus <= system.scaleup_domain_gpus:
        link = system.scaleup_bandwidth_bytes_per_s * calibration.scaleup_efficiency
    else:
        link = system.nic_bandwidth_bytes_per_s * calibration.nic_efficiency
    streams = min(prefill.par.stage_gpus * prefill.par.pp, decode.par.stage_gpus * decode.par.pp)
    return size / (streams * link) + calibration.collective_latency_s


def cohort_ttft_s(fill: Phase, seqs_per_rank: float) -> float:
    """Mean first-token time when a rank's cohort is prefilled first-come first-served."""
    if seqs_per_rank <= 1.0:
        return fill.total_s
    return max(fill.latency_s, fill.total_s * (1.0 + 1.0 / seqs_per_rank) / 2.0)


def closed_loop_wait_s(concurrency: float, capacity_per_s: float, min_latency_s: float, elsewhere_s: float) -> float:
    """Mean time at a station of a closed loop: max(own latency, N / capacity - time elsewhere)."""
    if capacity_per_s <= 0 or math.isinf(capacity_per_s):
        return min_latency_s
    return max(min_latency_s, concurrency / capacity_per_s - elsewhere_s)
