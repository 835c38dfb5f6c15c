"""FLOPs and HBM bytes of each operator of one layer, on one GPU, for one step.

Conventions (each a modelling choice, stated once):
- a GEMM of M tokens against a K x N weight costs 2 M K N FLOPs and reads the weight once per step;
  activation traffic is neglected (it is below 5% of weight traffic up to M ~ K/20 and compute-bound
  beyond);
- attention scores and values cost 2 x (query-key dim + value dim) FLOPs per query token, head and
  attended key; causal fill attends on average to `context + new/2` keys;
- tensor parallelism (tp) splits heads and the N or K side of projections; MLA's down-projections
  (q_a, kv_a) and its latent KV are replicated on every tp rank (the latent has no head axis);
- GQA KV is split by KV head up to `num_kv_heads` ranks, replicated beyond; query heads (and their
  projections) likewise up to `num_heads` ranks: a tp larger than the head count replicates heads (each
  head computed on tp / heads ranks), as engines do when attention runs at a smaller tp than the experts;
- linear attention (KDA, Gated DeltaNet) reads and writes its state (bf16, as engines keep it) once per
  step and costs
  about 4 x heads x d_k x d_v FLOPs per token (state update plus output; chunked fill is of the same order);
- a sparse-attention indexer (DeepSeek V3.2, GLM-5) scores every cached key with fp8 index heads and
  then MLA attends only to `index_topk` keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from costmodel.architecture import Attention, Ffn
from costmodel.precision import Dtype, bytes_per_element
from costmodel.work import Op


@dataclass(frozen=True)
class Parallel:
    """Parallel degrees of one instance (layout field names)."""

    tp: int = 1
    dp: int = 1
    pp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1

    @property
    def stage_gpus(self) -> int:
        """GPUs in one pipeline stage: the attention TP x DP grid, also the expert group."""
        return self.tp * self.dp

    @property
    def instance_gpus(self) -> int:
        """GPUs of one instance: every pipeline stage's."""
        return self.stage_gpus * self.pp


@dataclass(frozen=True)
class Formats:
    """Storage sizes and compute peaks the operators need (bytes per element, FLOP/s)."""

    weight_bytes: float
    expert_bytes: float
    kv_dtype: Dtype
    activation_bytes: float
    weight_compute: Dtype
    expert_compute: Dtype
    peaks: dict[Dtype, float]  # FLOP/s per compute format on this GPU
    # rows (tokens) of the grouped-GEMM tiles the experts' kernel chooses from by the rows per expert, ascending
    # (`covering_tile`): each expert's rows are padded to whole tiles; empty: no padding
    expert_tiles: tuple[int, ...] = ()
    expert_storage: Dtype | None = None  # the experts' storage format (None: as they compute)
    fp8_attention: bool = False  # the engine's attention kernels compute in fp8 over an fp8 KV cache

    @property
    def weight_only_experts(self) -> Dtype | None:
        """The experts' storage format where the GPU cannot compute in it, so that a weight-only kernel
        dequantises them to `expert_compute` (MXFP4 gpt-oss experts on Hopper through Marlin or Triton
        kernels); None where the tensor cores take them as stored, with activations of their own format or a
        wider one (`costmodel.resolve.expert_compute_dtype`)."""
        storage = self.expert_storage
        return storage if storage is not None and storage not in self.peaks else None

    def peak(self, dtype: Dtype) -> float:
        return self.peaks[dtype]


class StepShape(NamedTuple):
    """One step on one attention-DP rank: `seqs` sequences, each adding `new_tokens` to `context`. A named
    tuple: it keys the step-work caches of `costmodel.modes`, and a tuple hashes and compares in C."""

    phase: Literal["fill", "decode"]
    seqs: float
    new_tokens: float
    context: float
    # Attention-DP ranks that hold sequences (None: all dp). A prefill pool whose batch is below dp runs one
    # request on each of `batch` ranks; the others join only the expert layers, with no tokens.
    active_ranks: float | None = None
    # A fill step with no decode tokens beside it (a prefill or midfill pool's, or a prefill-first engine's
    # prompt batch): engines run their prefill all-to-all kernels for it (`collectives.dispatch_combine`).
    alone: bool = False

    @property
    def tokens(self) -> float:
        return self.seqs * self.new_tokens

    def group_tokens(self, dp: int) -> float:
        """Tokens the whole attention-DP group sends to its shared expert layer in this step."""
        return self.tokens * (dp if self.active_ranks is None else self.active_ranks)

    def attended(self, cap: float | None = None) -> float:
        """Average keys each new token attends to, under an optional window cap."""
        keys = self.context + (self.new_tokens / 2 if self.phase == "fill" else self.new_tokens)
        return min(keys, cap) if cap else keys

    def kv_read_tokens(self, cap: float | None = None) -> float:
        """KV entries read per sequence: fill reads its cached context once (and its new keys while
        computing); decode reads the whole context every step. Under a window cap, fill still reads every new
        key (each query sees only `cap` of them, but together they span all) and at most the last `cap` cached
        ones; decode reads `cap` (a window's tail, or a sparse top-k's picks: callers pass no cap for a sparse
        fill, whose queries' picks together span the context)."""
        if not cap:
            return self.context + self.new_tokens
        if self.phase == "fill":
            return min(self.context, cap) + self.new_tokens
        return min(self.context + self.new_tokens, cap)


def _gemm(name: str, tokens: float, params: float, fmt_bytes: float, fmt: Formats, dtype: Dtype) -> Op:
    return Op(name, "gemm", 2.0 * tokens * params, params * fmt_bytes, fmt.peak(dtype), dtype)


def attention_dtype(fmt: Formats) -> Dtype:
    """Format attention kernels compute in: fp8 over an fp8 KV cache for engines whose kernels do
    (`Formats.fp8_attention`) on GPUs with fp8 tensor cores, bf16 otherwise, whatever the weight format."""
    fp8 = fmt.fp8_attention and fmt.kv_dtype == Dtype.FP8 and Dtype.FP8 in fmt.peaks
    return Dtype.FP8 if fp8 else Dtype.BF16


def _attention(name: str, flops: float, hbm_bytes: float, fmt: Formats) -> Op:
    dtype = attention_dtype(fmt)
    return Op(name, "attention", flops, hbm_bytes, fmt.peak(dtype), dtype)


def attention_ops(attn: Attention, shape: StepShape, par: Parallel, fmt: Formats) -> list[Op]:
    if attn.kind == "linear":
        return _linear_ops(attn, shape, par, fmt)
    if attn.kind == "mla":
        return _mla_ops(attn, shape, par, fmt)
    return _gqa_ops(attn, shape, par, fmt)


def head_ranks(attn: Attention, tp: int) -> int:
    """Ranks the heads are split over: tp, or the head count when tp exceeds it (heads replicated)."""
    heads = attn.linear_v_heads if attn.kind == "linear" else attn.num_heads
    return min(tp, max(heads, 1))


def kv_share(attn: Attention, tp: int) -> float:
    """Share of a layer's KV one tp rank holds and reads: MLA's latent is replicated on every rank; GQA
    KV heads are split up to num_kv_heads ranks and replicated beyond."""
    if attn.kind == "mla":
        return 1.0
    return max(1.0 / tp, 1.0 / max(attn.num_kv_heads, 1))


def _gqa_ops(attn: Attention, shape: StepShape, par: Parallel, fmt: Formats) -> list[Op]:
    cap = attn.window or attn.chunk
    split = head_ranks(attn, par.tp)
    heads = attn.num_heads / split
    core_flops = 2.0 * shape.tokens * shape.attended(cap) * heads * (attn.head_dim + attn.v_head_dim)
    kv_per_token = attn.token_kv_elements() * bytes_per_element(fmt.kv_dtype)
    kv_bytes = shape.seqs * shape.kv_read_tokens(cap) * kv_per_token * kv_share(attn, par.tp)
    return [
        _gemm("attention_projections", shape.tokens, attention_shard_params(attn, par.tp), fmt.weight_bytes, fmt,
              fmt.weight_compute),
        _attention("attention_core", core_flops, kv_bytes, fmt),
    ]


def attention_shard_params(attn: Attention, tp: int) -> float:
    """Attention weights one tp rank holds and reads: heads split over `head_ranks`; GQA's k/v projections over
    at most num_kv_heads ranks, whole beyond (as the KV they produce, `kv_share`: vLLM's QKVParallelLinear
    replicates a KV head over tp / num_kv_heads ranks); MLA's down-projections and indexer on every rank."""
    split = head_ranks(attn, tp)
    if attn.kind == "mla":
        replicated = _mla_replicated_params(attn) + attn.indexer_params()
        return replicated + (attn.params() - replicated) / split
    kv = attn.kv_projection_params()
    return (attn.params() - kv) / split + kv * kv_share(attn, tp)


def _mla_replicated_params(attn: Attention) -> int:
    """MLA down-projections, replicated on every tp rank."""
    q_down = attn.hidden_size * (attn.q_lora_rank or 0)
    return q_down + attn.hidden_size * (attn.kv_lora_rank + attn.qk_rope_head_dim)


def _mla_ops(attn: Attention, shape: StepShape, par: Parallel, fmt: Formats) -> list[Op]:
    indexer = attn.indexer_params()
    split = head_ranks(attn, par.tp)
    heads = attn.num_heads / split
    cap = attn.index_topk or attn.window or attn.chunk
    if shape.phase == "decode":  # absorbed: attend in the latent space
        per_key = 2 * attn.kv_lora_rank + attn.qk_rope_head_dim
        core_flops = 2.0 * shape.tokens * shape.attended(cap) * heads * per_key
    else:  # un-absorbed: decompress the cached latents, then MHA with 192-dim keys
        per_key = attn.qk_nope_head_dim + attn.qk_rope_head_dim + attn.v_head_dim
        core_flops = 2.0 * shape.tokens * shape.attended(cap) * heads * per_key
        decompress = attn.kv_lora_rank * heads * (attn.qk_nope_head_dim + attn.v_head_dim)
        core_flops += 2.0 * shape.seqs * shape.context * decompress
    # as stored (`Attention.entry_bytes`: DSA's packed fp8 latent with its scales and bf16 rope), the indexer's
    # keys apart (`_indexer_op`). A sparse fill's queries each pick their own top-k: together they span the whole
    # context (`StepShape.kv_read_tokens` caps fill reads at a window's contiguous tail only)
    latent_bytes = attn.entry_bytes(fmt.kv_dtype) - attn.indexer_key_bytes_per_token()
    read_cap = (attn.window or attn.chunk) if shape.phase == "fill" else cap
    kv_bytes = shape.seqs * shape.kv_read_tokens(read_cap) * latent_bytes
    ops = [
        _gemm("attention_projections", shape.tokens, attention_shard_params(attn, par.tp) - indexer,
              fmt.weight_bytes, fmt, fmt.weight_compute),
        _attention("attention_core", core_flops, kv_bytes, fmt),
    ]
    if attn.index_topk:
        ops.append(_indexer_op(attn, shape, par, fmt, indexer))
    return ops


def _indexer_op(attn: Attention, shape: StepShape, par: Parallel, fmt: Formats, params: int) -> Op:
    """Lightning indexer: every new token scores every cached key (fp8), reading all index keys."""
    heads = attn.index_heads or 0
    dim = attn.index_head_dim or 0
    flops = 2.0 * shape.tokens * shape.attended() * heads * dim + 2.0 * shape.tokens * params
    key_bytes = shape.seqs * shape.kv_read_tokens() * attn.indexer_key_bytes_per_token()
    return _attention("sparse_indexer", flops, key_bytes + params * fmt.weight_bytes, fmt)


def _linear_ops(attn: Attention, shape: StepShape, par: Parallel, fmt: Formats) -> list[Op]:
    split = head_ranks(attn, par.tp)
    state = attn.linear_state_elements() / split
    heads = attn.linear_v_heads / split
    flops = 4.0 * shape.tokens * heads * attn.linear_k_head_dim * attn.linear_v_head_dim
    state_bytes = 2.0 * shape.seqs * state * attn.state_bytes_per_element  # read and write back
    return [
        _gemm("attention_projections", shape.tokens, attn.params() / split, fmt.weight_bytes, fmt, fmt.weight_compute),
        _attention("linear_attention_state", flops, state_bytes, fmt),
    ]


# Memory-bound passes over bf16 activations per token per layer, outside the GEMMs and attention kernels:
# two RMSNorms (read + write: 4 hidden vectors), two residual adds (read 2, write 1: 6), RoPE and the
# q/k/v split (2), quantising the inputs of the fp8/fp4 GEMMs (read 2 B, write 1 B per element, about 4
# hidden-sized inputs: 6 bytes ~ 3 vectors): about 15 hidden-sized bf16 vectors.
HIDDEN_PASSES = 15
# MoE: each token-expert pair is permuted into its expert's batch and back (write + read, twice) and its
# gated activation reads 2 and writes 1 intermediate-sized vector.
PERMUTE_PASSES = 4
GATED_ACTIVATION_PASSES = 3


def activation_traffic_op(ffn: Ffn, shape: StepShape, par: Parallel, fmt: Formats, hidden: int) -> Op:
    """HBM traffic of the elementwise work between kernels: negligible in decode, ~10-30% of a long
    prefill's time on a large MoE."""
    elements = HIDDEN_PASSES * shape.tokens * hidden
    if ffn.kind == "dense":
        elements += GATED_ACTIVATION_PASSES * shape.tokens * ffn.intermediate_size / par.tp
    else:
        # every GPU of an expert's moe_tp group moves each of its token-expert pairs at full width (it gathers
        # the whole input and writes a whole partial output); only the intermediate is split by moe_tp
        pairs = shape.group_tokens(par.dp) * ffn.top_k / par.moe_ep
        width = ffn.expert_hidden_size or hidden
        intermediate = ffn.expert_intermediate_size / par.moe_tp
        elements += pairs * (PERMUTE_PASSES * width + GATED_ACTIVATION_PASSES * intermediate)
        elements += GATED_ACTIVATION_PASSES * shape.tokens * ffn.shared_intermediate_size / par.tp
    return Op("activation_traffic", "gemm", 0.0, elements * _ACTIVATION_BYTES, fmt.peak(Dtype.BF16), Dtype.BF16)


_ACTIVATION_BYTES = 2.0  # bf16


def distinct_experts(experts: float, top_k: float, tokens: float) -> float:
    """Expected distinct experts touched when `tokens` tokens each pick top_k of `experts` uniformly:
    E (1 - (1 - k/E)^T) (DOMAIN.md, decode experts)."""
    return float(experts * (1.0 - (1.0 - top_k / experts) ** tokens))


def dense_ffn_ops(ffn: Ffn, shape: StepShape, par: Parallel, fmt: Formats) -> list[Op]:
    """Dense FFN, or the shared experts and router of an MoE layer: split by tp but for the router."""
    params = ffn.dense_params()
    if params == 0:
        return []
    name = "dense_ffn" if ffn.kind == "dense" else "shared_experts_and_router"
    return [_gemm(name, shape.tokens, ffn_shard_params(ffn, par.tp), fmt.weight_bytes, fmt, fmt.weight_compute)]


def ffn_shard_params(ffn: Ffn, tp: int) -> float:
    """A layer's non-expert FFN weights one tp rank holds: the dense MLP or shared experts split by tp, the
    router (gate, its bias, a shared-expert gate) whole on every rank (vLLM's and SGLang's MoE gates are
    ReplicatedLinear)."""
    return (ffn.dense_params() - ffn.router_params) / tp + ffn.router_params


def routed_expert_ops(ffn: Ffn, group_tokens: float, par: Parallel, fmt: Formats, imbalance: float,
                      redundant_slots: int = 0) -> list[Op]:
    """Routed experts on one GPU of the expert group (moe_tp x moe_ep GPUs share `group_tokens`).

    Weight bytes: the distinct local experts the step touches (their moe_tp slice), read once.
    FLOPs: the GPU's token-expert rows, scaled by the load imbalance of the busiest GPU, with each touched
    expert's rows padded to whole grouped-GEMM tiles (`padded_rows`), on its moe_tp slice. The operator
    carries the experts' bytes per weight element, so that pricing can slow short groups
    (`costmodel.pricing.grouped_gemm_share`). Experts the GPU cannot compute in their storage format run
    through a weight-only kernel: row blocks sized to the rows per expert (`weight_only_block_rows`) and an
    efficiency of their own, keyed by the storage format (mma.sync dequantising kernels on Hopper reach a
    fraction of bf16 peak of their own; fitted, `costmodel.calibration.GenerationFactors`).
    """
    if ffn.kind != "moe":
        return []
    per_expert = ffn.routed_expert_params()
    local_experts = (ffn.num_experts + redundant_slots) / par.moe_ep
    # Tokens reaching this GPU's experts, spread over its local experts.
    touched_share = distinct_experts(ffn.num_experts, ffn.top_k, group_tokens) / ffn.num_experts
    weight_bytes = local_experts * touched_share * per_expert / par.moe_tp * fmt.expert_bytes
    rows = group_tokens * ffn.top_k / par.moe_ep * imbalance
    efficiency_key, tile = fmt.expert_compute, covering_tile(rows / local_experts, fmt.expert_tiles)
    if fmt.weight_only_experts is not None:
        # its own efficiency, keyed by the storage format, against the peak of the format it computes in
        efficiency_key, tile = fmt.weight_only_experts, weight_only_block_rows(rows / local_experts)
    padded = padded_rows(rows, local_experts * touched_share, tile)
    return [Op("routed_experts", "gemm", 2.0 * padded * per_expert / par.moe_tp, weight_bytes,
               fmt.peak(fmt.expert_compute), efficiency_key, fmt.expert_bytes)]


def covering_tile(rows_per_expert: float, tiles: tuple[int, ...]) -> int:
    """The first of ascending `tiles` that covers the rows per local expert, else the largest (no tiles: 0, no
    padding): how FlashInfer's TRT-LLM-gen MoE picks its token tile (0.7.4 csrc/trtllm_fused_moe_kernel_launcher.cu,
    computeSelectedTileN; its autotuner then tries the neighbours); one tile: always that one."""
    return next((tile for tile in tiles if tile >= rows_per_expert), tiles[-1] if tiles else 0)


# Row blocks of a weight-only MoE kernel: vLLM's fused_marlin_moe takes the first of these blocks whose fill
# (rows per local expert / block) is below 0.9, else 64 (vllm/model_executor/layers/fused_moe/fused_marlin_moe.py,
# 0.11.0). Assumption: the other weight-only MoE kernels (Triton matmul_ogs, TRT-LLM's Hopper W4A16 MoE)
# size their row blocks to the tokens per expert alike.
WEIGHT_ONLY_BLOCKS = (8, 16, 32, 48)
WEIGHT_ONLY_LARGEST_BLOCK = 64
WEIGHT_ONLY_FILL = 0.9


def weight_only_block_rows(rows_per_expert: float) -> int:
    """Row block a weight-only grouped GEMM pads each expert's rows to, for this many rows per local expert."""
    return next((block for block in WEIGHT_ONLY_BLOCKS if rows_per_expert / block < WEIGHT_ONLY_FILL),
                WEIGHT_ONLY_LARGEST_BLOCK)


def padded_rows(rows: float, touched: float, tile: int) -> float:
    """Rows a grouped GEMM computes for `rows` token-expert rows spread over `touched` experts when each
    expert's rows are padded to whole tiles of `tile` rows: an expert with m rows computes about m + tile/2
    (the last tile half empty on average) and never less than one tile. Kernel tails that the fit would
    otherwise push into the GEMM efficiency (K06: DeepGEMM masked 4x256 rows 932 TFLOPS vs contiguous 4x8192
    1346)."""
    if tile <= 0 or touched <= 0:
        return rows
    return max(rows + touched * tile / 2.0, touched * float(tile))
