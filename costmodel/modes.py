"""The four operating modes as step-work builders: prefill, midfill, decode attention, decode experts.

A step is built per pipeline stage from the layers that stage holds; the slowest stage sets the pace.
Prefill is a fill step with no earlier context. Midfill appends new tokens to `cached` tokens of context,
first fetched from the tier they live in. A decode step is one new token per sequence (1 + draft tokens
when speculating); its attention part reads every sequence's KV and its expert part reads the weights of
every expert the batch touches (see `operators.routed_expert_ops`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Literal

from costmodel.architecture import Architecture, Layer
from costmodel.collectives import all_reduce, dispatch_combine, pipeline_hop
from costmodel.hardware import SystemSpec
from costmodel.operators import (
    Formats,
    Parallel,
    StepShape,
    activation_traffic_op,
    attention_ops,
    dense_ffn_ops,
    head_ranks,
    kv_share,
    routed_expert_ops,
)
from costmodel.precision import Dtype, bytes_per_element
from costmodel.routing import load_imbalance
from costmodel.work import Op, StepWork, Tier, Transfer

# Embedding and LM head stay in bf16 in the published FP8/FP4 checkpoints (DeepSeek, Kimi, gpt-oss).
HEAD_BYTES = bytes_per_element(Dtype.BF16)
QK_VARIANCE_BYTES = 4.0  # fp32: a whole-width q/k norm's per-token variance
CacheTier = Literal["hbm", "host_dram", "ssd", "store"]  # "store": the shared KV store, over the NIC
_FETCH_PATH: dict[str, Tier] = {"host_dram": "host", "ssd": "storage", "store": "nic"}


OFFLOAD_TRANSFER = "weight_offload"  # the per-step stream of host-offloaded weights (`PoolContext.offload_bytes`)


@dataclass(frozen=True)
class PoolContext:
    """What the step builders need about one pool: model, GPU, parallelism, formats, routing."""

    arch: Architecture
    system: SystemSpec
    par: Parallel
    fmt: Formats
    skew: float
    redundant_experts: int
    stages: tuple[tuple[Layer, ...], ...]
    group: str | None = None  # the inventory group the pool runs on (None: the cluster's only group)
    uplink_share_bytes_per_s: float = math.inf  # a GPU's fair share of its rack uplink (inf: not oversubscribed)
    group_racks: int = 1  # racks of the pool's group: a transfer between its domains may leave a rack
    offload_bytes: float = 0.0  # weights each GPU keeps in host DRAM (`Pool.cpu_offload_gb`), streamed every step
    # a prefill-first engine (`costmodel.calibration.SCHEDULING`) runs waiting prompts as prefill batches of
    # their own, this many tokens per attention-DP rank; None: prompts ride on decode steps (piggyback)
    prefill_batch_tokens: float | None = None
    # the engine holds prompts back under attention DP (`Scenario.attention_dp_balance`, TRT-LLM only)
    holds_prompts: bool = False
    # scale-up domains EPLB's hierarchical policy places the experts over, whole groups on each
    # (`costmodel.routing.placement_domains`); 1: placed globally
    expert_domains: int = 1

    @property
    def prefill_first(self) -> bool:
        return self.prefill_batch_tokens is not None

    @functools.cached_property
    def stage_counts(self) -> tuple[tuple[tuple[Layer, int], ...], ...]:
        """Each stage's distinct layers with their counts. Repeated layers of a group are the same
        object, so grouping by identity is exact and avoids hashing deep pydantic models."""
        return tuple(_count_layers(stage) for stage in self.stages)

    @functools.cached_property
    def stage_keys(self) -> tuple[tuple[object, ...], ...]:
        """Per stage, what its step work depends on besides the step shape: its layers (by identity) with
        their counts, and whether it is the last stage (LM head) or passes activations on. Stages with the
        same key do the same work (a deep pipeline's middle stages), so `stage_work` counts it once."""
        last = len(self.stages) - 1
        return tuple((tuple((id(layer), count) for layer, count in counts), index == last)
                     for index, counts in enumerate(self.stage_counts))

    @functools.cached_property
    def memo(self) -> dict[tuple[object, ...], float]:
        """Results of pure functions of this context and a few scalars (`costmodel.memory`), kept with it:
        the planner times every batch of a layout with one context."""
        return {}

    @functools.cached_property
    def steps(self) -> dict[tuple[object, ...], StepWork]:
        """Step work already counted with this context, by stage and step shape (`stage_work`)."""
        return {}

    @functools.cached_property
    def recent_layers(self) -> RecentLayers:
        """Layer work of the latest step shape (`_layer_work`)."""
        return RecentLayers()


@dataclass
class RecentLayers:
    """One layer's work per distinct layer, for one step shape: the stages of a step (built one after
    another) share it. Only the latest shape's is kept: another plan reaching the same shape finds its
    stages' work in `PoolContext.steps`, so older layer work would only hold memory."""

    shape: StepShape | None = None
    works: dict[int, StepWork] = field(default_factory=dict)  # by the layer's id


def _count_layers(layers: tuple[Layer, ...]) -> tuple[tuple[Layer, int], ...]:
    counts: dict[int, tuple[Layer, int]] = {}
    for layer in layers:
        seen = counts.get(id(layer))
        counts[id(layer)] = (layer, seen[1] + 1 if seen else 1)
    return tuple(counts.values())


def split_stages(layers: tuple[Layer, ...], pp: int) -> tuple[tuple[Layer, ...], ...]:
    """Contiguous stages with layer counts as equal as possible (earlier stages take the extra layer).
    The planner chooses better boundaries; this is the default an engine uses."""
    base, extra = divmod(len(layers), pp)
    stages, start = [], 0
    for index in range(pp):
        size = base + (1 if index < extra else 0)
        stages.append(tuple(layers[start:start + size]))
        start += size
    return tuple(stages)


# Builds a named tuple from a tuple of its fields in one C call (the class's generated `__new__` is a Python
# function): the step builders below make a few hundred operators for every batch the planner times.
_tuple_new = tuple.__new__


def _scaled_ops(ops: list[Op], count: int) -> list[Op]:
    """`count` layers' operators: FLOPs and bytes times `count`; one layer's as they are (a test checks them
    against `_replace`)."""
    if count == 1:
        return ops
    return [_tuple_new(Op, (name, kind, flops * count, hbm * count, peak, dtype, element))
            for name, kind, flops, hbm, peak, dtype, element in ops]


def _scaled_transfers(transfers: list[Transfer], count: int) -> list[Transfer]:
    """`count` layers' transfers: bytes and calls times `count`."""
    if count == 1:
        return transfers
    return [_tuple_new(Transfer, (name, tier, size * count, calls * count, kind, ranks))
            for name, tier, size, calls, kind, ranks in transfers]


def layer_work(ctx: PoolContext, layer: Layer, shape: StepShape) -> StepWork:
    """One layer on one GPU: attention, dense or shared FFN, routed experts, and their collectives."""
    par, hidden = ctx.par, ctx.arch.hidden_size
    work = StepWork(layers=1, mla_layers=int(layer.attention.kind == "mla"))
    work.ops += attention_ops(layer.attention, shape, par, ctx.fmt)
    work.ops += dense_ffn_ops(layer.ffn, shape, par, ctx.fmt)
    work.ops.append(activation_traffic_op(layer.ffn, shape, par, ctx.fmt, hidden))
    payload = shape.tokens * hidden * HEAD_BYTES
    if layer.attention.qk_norm == "layer":  # q and k normalised over all heads: each TP rank holds some, so the
        # variances (one fp32 each for q and k per token) are all-reduced first (vLLM's MiniMax-M2,
        # `MiniMaxText01RMSNormTP.forward_qk`, 0.16.0)
        work.transfers += all_reduce("qk_norm_allreduce", par.tp, shape.tokens * 2 * QK_VARIANCE_BYTES, ctx.system)
    work.transfers += all_reduce("tp_allreduce", par.tp, payload, ctx.system)  # after attention
    work.transfers += all_reduce("tp_allreduce", par.tp, payload, ctx.system)  # after the FFN
    if layer.ffn.kind == "moe":
        work.moe_layers = 1
        work.weight_only_layers = int(ctx.fmt.weight_only_experts is not None)
        group_tokens = shape.group_tokens(par.dp)
        by_domain = ctx.expert_domains > 1 and layer.ffn.group_limited
        groups = (layer.ffn.expert_groups, layer.ffn.groups_per_token) if by_domain else (1, 0)
        imbalance = load_imbalance(layer.ffn.num_experts, layer.ffn.top_k, par.moe_ep, group_tokens,
                                   ctx.skew, ctx.redundant_experts, ctx.expert_domains if by_domain else 1, groups[0])
        work.ops += routed_expert_ops(layer.ffn, group_tokens, par, ctx.fmt, imbalance, ctx.redundant_experts)
        # latent experts (Kimi K3) take the token at their own width: the down projection runs before dispatch
        width = layer.ffn.expert_hidden_size or hidden
        work.transfers += dispatch_combine(group_tokens, width, layer.ffn.top_k, par, ctx.fmt.activation_bytes,
                                           ctx.system, relayed=shape.alone and ctx.system.vendor == "nvidia",
                                           groups=groups)
    return work


def stage_work(ctx: PoolContext, stage: int, shape: StepShape) -> StepWork:
    """One step of pipeline stage `stage` on one GPU. Kept with the context, and shared by every plan that
    takes the same step (a layout's mixed and decode pools, and the batch search, plan the same steps
    again): not to be mutated; a caller that adds work builds a new StepWork (`midfill_work`)."""
    key = ("stage_work", ctx.stage_keys[stage], shape)
    known = ctx.steps.get(key)
    if known is None:
        known = ctx.steps[key] = _stage_work(ctx, stage, shape)
    return known


def _layer_work(ctx: PoolContext, layer: Layer, shape: StepShape) -> StepWork:
    """`layer_work`, kept with the context while the step shape stays the same (every stage of a pipeline
    repeats its layers); not to be mutated (its operators and transfers are frozen; `_stage_work` builds new
    lists from them)."""
    recent = ctx.recent_layers
    if recent.shape != shape:
        recent.shape, recent.works = shape, {}
    known = recent.works.get(id(layer))  # the context's architecture holds the layer: its id is stable
    if known is None:
        known = recent.works[id(layer)] = layer_work(ctx, layer, shape)
    return known


def _stage_work(ctx: PoolContext, stage: int, shape: StepShape) -> StepWork:
    work = StepWork(seqs=shape.seqs)
    for layer, count in ctx.stage_counts[stage]:
        one = _layer_work(ctx, layer, shape)
        work.ops += _scaled_ops(one.ops, count)
        work.transfers += _scaled_transfers(one.transfers, count)
        work.layers += count
        work.moe_layers += count * one.moe_layers
        work.mla_layers += count * one.mla_layers
        work.weight_only_layers += count * one.weight_only_layers
    if ctx.offload_bytes > 0:  # offloaded weights cross the host link once per step (vLLM reads them in place
        # from pinned host memory through unified addressing; SGLang's offloader copies each layer in before use)
        work.transfers.append(Transfer(OFFLOAD_TRANSFER, "host", ctx.offload_bytes, 1.0, "p2p"))
    if stage == len(ctx.stages) - 1:
        work.ops.append(_lm_head(ctx, shape))
    else:
        work.transfers += pipeline_hop(shape.tokens, ctx.arch.hidden_size, ctx.par, ctx.fmt.activation_bytes,
                                       ctx.system)
    return work


def _lm_head(ctx: PoolContext, shape: StepShape) -> Op:
    """Logits: vocab-parallel over tp; a fill step needs only each sequence's last position."""
    tokens = shape.seqs if shape.phase == "fill" else shape.tokens
    params = ctx.arch.hidden_size * ctx.arch.vocab_size / ctx.par.tp
    return Op("lm_head", "gemm", 2.0 * tokens * params, params * HEAD_BYTES, ctx.fmt.peak(Dtype.BF16), Dtype.BF16)


def prefill_work(ctx: PoolContext, stage: int, seqs: float, new_tokens: float) -> StepWork:
    """Prefill: `seqs` sequences per attention-DP rank, `new_tokens` each, no earlier context."""
    return stage_work(ctx, stage, StepShape("fill", seqs, new_tokens, 0.0))


def midfill_work(ctx: PoolContext, stage: int, seqs: float, new_tokens: float, cached: float,
                 fetch: tuple[tuple[CacheTier, float], ...] = (), active_ranks: float | None = None,
                 alone: bool = False) -> StepWork:
    """Midfill: new tokens appended to `cached` tokens of context, of which `fetch` gives the tokens per
    sequence fetched first from each slower tier (the rest is in HBM); `active_ranks` attention-DP ranks
    hold sequences (None: all); `alone`: no decode tokens share the step (`StepShape.alone`)."""
    work = stage_work(ctx, stage, StepShape("fill", seqs, new_tokens, cached, active_ranks, alone))
    if not fetch:
        return work
    fetched = [t for tier, tokens in fetch for t in cache_fetch(ctx, stage, seqs * tokens, tier, cached)]
    return work.copy(fetched)


def cache_fetch(ctx: PoolContext, stage: int, tokens: float, tier: CacheTier, context: float) -> list[Transfer]:
    """Bringing `tokens` of cached KV (this stage's layers, this GPU's share) into HBM, of contexts of `context`
    tokens: the fixed states of windowed and linear-attention layers come with them, a share per token (an
    approximation: a sequence whose cache is split over tiers fetches the tier's share of its states, as if
    they were spread as its tokens are)."""
    if tier == "hbm" or tokens <= 0:
        return []
    kv, states = kv_bytes_per_sequence(ctx, stage, context)
    per_token = (kv + states) / context if context > 0 else 0.0
    path = _FETCH_PATH[tier]
    return [Transfer("kv_fetch_" + tier, path, tokens * per_token, 1.0, "p2p")]


def decode_work(ctx: PoolContext, stage: int, seqs: float, context: float, tokens_per_seq: float = 1.0,
                active_ranks: float | None = None) -> StepWork:
    """One decode step: decode attention (every sequence's KV read) and decode experts (the weights of
    every expert the batch touches), plus the dense parts and collectives."""
    return stage_work(ctx, stage, StepShape("decode", seqs, tokens_per_seq, context, active_ranks))


def merged_work(first: StepWork, second: StepWork) -> StepWork:
    """Two batches of the same stage run as one step (continuous batching): GEMM FLOPs add but each
    weight is read once (bytes: the larger read); attention work and transfers add; layers count once.
    Both works start with `stage_work` of the same stage, so their operators align one to one; what one
    has beyond that (e.g. MTP drafting passes) is kept as it is."""
    # offloaded weights, like the others, are read once for both batches
    second_transfers = [t for t in second.transfers if t.name != OFFLOAD_TRANSFER]
    merged = StepWork(layers=max(first.layers, second.layers), transfers=first.transfers + second_transfers,
                      seqs=first.seqs + second.seqs, moe_layers=max(first.moe_layers, second.moe_layers),
                      mla_layers=max(first.mla_layers, second.mla_layers),
                      weight_only_layers=max(first.weight_only_layers, second.weight_only_layers))
    common = min(len(first.ops), len(second.ops))
    ops = merged.ops
    for (name, kind, flops, hbm, peak, dtype, element), b in zip(first.ops[:common], second.ops[:common], strict=True):
        if name != b.name:
            raise ValueError(f"operators do not align: {name} vs {b.name}")
        # a GEMM's bytes: the larger read, as max(a, b) picks it (b only if larger)
        read = (b.hbm_bytes if b.hbm_bytes > hbm else hbm) if kind == "gemm" else hbm + b.hbm_bytes
        ops.append(_tuple_new(Op, (name, kind, flops + b.flops, read, peak, dtype, element)))
    ops.extend(first.ops[common:] + second.ops[common:])
    return merged


DECODE_ATTENTION_OPS = frozenset({"attention_projections", "attention_core", "sparse_indexer",
                                  "linear_attention_state"})
DECODE_EXPERT_OPS = frozenset({"routed_experts", "moe_dispatch", "moe_combine"})


def kv_bytes_per_sequence(ctx: PoolContext, stage: int, context_tokens: float) -> tuple[float, float]:
    """(KV cache, fixed states) bytes one sequence occupies on one GPU of `stage`."""
    kv_key, states_key = ("kv", stage, context_tokens), ("states", stage, context_tokens)
    kv, states = ctx.memo.get(kv_key), ctx.memo.get(states_key)
    if kv is None or states is None:
        kv, states = ctx.memo[kv_key], ctx.memo[states_key] = _kv_bytes_per_sequence(ctx, stage, context_tokens)
    return kv, states


def _kv_bytes_per_sequence(ctx: PoolContext, stage: int, context_tokens: float) -> tuple[float, float]:
    kv = states = 0.0
    for layer, count in ctx.stage_counts[stage]:
        attn = layer.attention
        kv += count * attn.kv_bytes_per_token(ctx.fmt.kv_dtype) * context_tokens * kv_share(attn, ctx.par.tp)
        states += count * _state_bytes(layer, context_tokens, ctx) / head_ranks(attn, ctx.par.tp)
    return kv, states


def _state_bytes(layer: Layer, context_tokens: float, ctx: PoolContext) -> float:
    """A sequence's fixed state in one layer (all its heads): windowed KV, recurrent and short-conv states."""
    attn = layer.attention
    window = attn.window_state_elements(int(context_tokens)) * bytes_per_element(ctx.fmt.kv_dtype)
    recurrent = attn.linear_state_elements() * attn.state_bytes_per_element
    conv = attn.conv_state_elements() * bytes_per_element(Dtype.BF16)
    return float(window + recurrent + conv)
