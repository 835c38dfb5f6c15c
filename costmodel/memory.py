"""HBM use per GPU: weight shards, KV cache and states, activation workspace, runtime reserve.

Assumptions (sources beside each constant):
- every GPU of a stage holds the weights of that stage's layers, split as the operators split them
  (replicated parts, such as MLA down-projections, counted on every rank that holds them);
- the embedding lives on the first stage and the LM head on the last, both vocab-parallel over tp;
- KV: each stage holds, for every sequence in flight in the instance, the KV of its own layers over the
  whole context (cached + input + output): pipeline parallelism divides weights, not KV per sequence;
- a share of HBM is never given to the KV pool by engines (their default memory fractions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from costmodel.modes import HEAD_BYTES, PoolContext, kv_bytes_per_sequence
from costmodel.operators import attention_shard_params, ffn_shard_params, kv_share

GIB = 2**30
# aiconfigurator systems/*.yaml misc: other_mem 3.5 GiB (runtime, CUDA graphs, allocator) + nccl_mem
# 392 MB at 4-8 ranks.
RUNTIME_RESERVE_BYTES = 3.5 * GIB + 392 * 2**20
# vLLM gpu_memory_utilization 0.90, TRT-LLM free_gpu_memory_fraction 0.90, SGLang mem_fraction_static
# about 0.88: engines leave about 10% of HBM outside their pools.
ENGINE_MEMORY_FRACTION = 0.90
# Activation buffers per token in flight in one step: about 8 hidden-size vectors (residual, norms,
# attention in/out, dispatch buffers) plus 3 FFN-width vectors, in bf16; plus fp32 logits per sequence.
WORKSPACE_HIDDEN_VECTORS = 8
WORKSPACE_FFN_VECTORS = 3


@dataclass(frozen=True)
class MemoryUse:
    """Bytes per GPU on the most loaded stage."""

    weights: float
    kv_cache: float
    states: float
    workspace: float
    reserve: float
    capacity: float

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.states + self.workspace + self.reserve

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    @property
    def utilisation(self) -> float:
        return self.total / self.capacity


def stage_weight_bytes(ctx: PoolContext, stage: int, with_mtp: bool) -> float:
    key = ("weights", stage, with_mtp)
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = _stage_weight_bytes(ctx, stage, with_mtp)
    return found


def _stage_weight_bytes(ctx: PoolContext, stage: int, with_mtp: bool) -> float:
    par, fmt = ctx.par, ctx.fmt
    total = 0.0
    layers = list(ctx.stage_counts[stage])
    if with_mtp and stage == len(ctx.stages) - 1 and ctx.arch.mtp_layer is not None:
        layers.append((ctx.arch.mtp_layer, ctx.arch.mtp_layers))
    for layer, count in layers:
        params = attention_shard_params(layer.attention, par.tp) + ffn_shard_params(layer.ffn, par.tp)
        shard = params * fmt.weight_bytes
        if layer.ffn.kind == "moe":
            slots = (layer.ffn.num_experts + ctx.redundant_experts) / par.moe_ep
            shard += slots * layer.ffn.routed_expert_params() / par.moe_tp * fmt.expert_bytes
        total += count * shard
    vocab = ctx.arch.vocab_size * ctx.arch.hidden_size / par.tp * HEAD_BYTES
    if stage == 0:
        total += vocab
    if stage == len(ctx.stages) - 1 and (stage > 0 or not ctx.arch.tie_word_embeddings):
        total += vocab
    return total


def workspace_bytes(ctx: PoolContext, step_tokens_per_rank: float, seqs_per_rank: float) -> float:
    per_token = ctx.memo.get(("workspace",))
    if per_token is None:
        widest = max(layer.ffn.intermediate_size or layer.ffn.expert_intermediate_size
                     for stage in ctx.stage_counts for layer, _ in stage)
        per_token = ctx.memo[("workspace",)] = (
            WORKSPACE_HIDDEN_VECTORS * ctx.arch.hidden_size + WORKSPACE_FFN_VECTORS * widest / ctx.par.tp) * 2
    logits = seqs_per_rank * ctx.arch.vocab_size / ctx.par.tp * 4
    return step_tokens_per_rank * per_token + logits


def _reserve(ctx: PoolContext) -> float:
    return RUNTIME_RESERVE_BYTES + (1.0 - ENGINE_MEMORY_FRACTION) * ctx.system.hbm_capacity_bytes


def stage_memory(ctx: PoolContext, stage: int, seqs_per_rank: float, context_tokens: float,
                 step_tokens_per_rank: float, with_mtp: bool) -> MemoryUse:
    """Memory per GPU of one stage holding `seqs_per_rank` sequences of `context_tokens` each."""
    kv, states = kv_bytes_per_sequence(ctx, stage, context_tokens)
    mtp = ctx.arch.mtp_layer
    if with_mtp and mtp is not None and stage == len(ctx.stages) - 1:  # the draft layers' own KV cache
        kv += ctx.arch.mtp_kv_bytes_per_token(ctx.fmt.kv_dtype) * context_tokens * kv_share(mtp.attention, ctx.par.tp)
    return MemoryUse(  # weights offloaded to host DRAM (`PoolContext.offload_bytes`) leave HBM
        weights=max(0.0, stage_weight_bytes(ctx, stage, with_mtp) - ctx.offload_bytes),
        kv_cache=kv * seqs_per_rank,
        states=states * seqs_per_rank,
        workspace=workspace_bytes(ctx, step_tokens_per_rank, max(1.0, min(seqs_per_rank, step_tokens_per_rank))),
        reserve=_reserve(ctx),
        capacity=ctx.system.hbm_capacity_bytes,
    )


def seqs_per_rank(batch: float, dp: int) -> float:
    """Sequences on the busiest attention-DP rank: batch / dp, and one when the batch is below dp (a prefill
    pool running fewer requests than it has ranks)."""
    return max(batch / dp, min(batch, 1.0))


def memory_use(ctx: PoolContext, batch: int, context_tokens: float, step_tokens_per_rank: float,
               with_mtp: bool) -> MemoryUse:
    """Memory per GPU of the most loaded stage for `batch` sequences in flight per instance."""
    uses = [stage_memory(ctx, stage, seqs_per_rank(batch, ctx.par.dp), context_tokens, step_tokens_per_rank, with_mtp)
            for stage in range(len(ctx.stages))]
    return max(uses, key=lambda use: use.total)


def largest_fitting(fits: Callable[[int], bool], guess: int, ceiling: int = 10**9) -> int:
    """The largest batch n <= `ceiling` with fits(n), for a `fits` that is monotone (true up to some n, false
    beyond: memory never shrinks as the batch grows); 0 when even one sequence does not fit. Gallops from
    `guess` up or down (a close guess settles in two calls), then bisects."""
    guess = max(1, min(guess, ceiling))
    step = 1
    if fits(guess):  # low fits; find a high that does not
        low = guess
        while low < ceiling:
            high = min(low + step, ceiling)
            if not fits(high):
                break
            low, step = high, step * 2
        else:
            return low
    else:  # high does not fit; find a low that does (0: none)
        high = guess
        while True:
            low = max(high - step, 0)
            if low == 0 or fits(low):
                break
            high, step = low, step * 2
    while high - low > 1:  # fits(low) or low == 0; not fits(high)
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low
