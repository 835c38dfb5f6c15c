"""Normalised model architecture: the per-layer structure the cost model needs, and its counting.

Parameter conventions (checked against the recomputed figures of shared/reference/models.md):
- every linear layer is counted as its weight matrix (plus biases where the family has them); all FFNs
  are gated (SwiGLU: gate, up and down projections, 3 x width x intermediate);
- each layer counts its two pre-norms (one in `Attention.params`, one in `Ffn.params`) and the norms
  inside the block (MLA latent norms, qk-norms, linear-attention output norms);
- `total_params` = input embedding + lm head (once if tied) + all layers + final norm, excluding MTP;
- `active_params` = the same but with only `top_k` routed experts per MoE layer. The embedding table
  and the lm head are both counted as active: that is the convention of the "calc" figures of
  models.md (gpt-oss-120b 5.7B "incl. embed", Mixtral 12.9B, Llama-4 17.2B all include both).
"""

from __future__ import annotations

from collections.abc import Callable
from math import ceil
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from costmodel.precision import BYTES_PER_ELEMENT, MXFP4_BYTES, STATE_BYTES_PER_ELEMENT, Dtype

_FROZEN = ConfigDict(frozen=True, extra="forbid")

_FP32_BYTES, _BF16_BYTES = 4, 2
# DeepSeek-V3.2 indexer keys: fp8 values plus one fp32 scale per 128 dims (DeepSeek-V3.2-Exp
# inference/model.py: k_cache fp8 [.., 128] + fp32 scale [.., 128 / 128]). vLLM's packed fp8 MLA cache
# ("fp8_ds_mla", vLLM PR #48405) scales the fp8 latent the same way and keeps the rope part in bf16:
# 512 + 4 x 4 + 64 x 2 = 656 B/token/layer for DeepSeek-V3.2.
_SCALE_BLOCK = 128


class Attention(BaseModel):
    """One attention block. Field meaning depends on `kind`; unused fields stay None/0.

    - gqa: `num_heads` query heads, `num_kv_heads` KV heads (== num_heads for MHA), `head_dim` q/k dim,
      `v_head_dim` v dim; `window` (sliding) or `chunk` (chunked-local) bound the KV kept.
    - mla: `head_dim` = qk_nope + qk_rope, `num_kv_heads` = 1 (one latent shared by all heads);
      optional DSA indexer (`index_*`).
    - linear: `num_heads`/`num_kv_heads` mirror `linear_k_heads` (q/k heads), `head_dim`/`v_head_dim`
      mirror the linear head dims; the recurrence has `linear_v_heads` states of d_k x d_v.
    """

    model_config = _FROZEN

    kind: Literal["gqa", "mla", "linear"]
    hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(default=0, ge=0)
    head_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0)
    window: int | None = Field(default=None, gt=0)  # tokens
    chunk: int | None = Field(default=None, gt=0)  # tokens
    # MLA
    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_nope_head_dim: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    # DeepSeek sparse attention (DSA) lightning indexer
    index_heads: int | None = Field(default=None, gt=0)
    index_head_dim: int | None = Field(default=None, gt=0)
    index_topk: int | None = Field(default=None, gt=0)
    # linear attention (KDA, Gated DeltaNet)
    linear_kind: Literal["kda", "gated_deltanet"] | None = None
    linear_k_heads: int = Field(default=0, ge=0)
    linear_v_heads: int = Field(default=0, ge=0)
    linear_k_head_dim: int = Field(default=0, ge=0)
    linear_v_head_dim: int = Field(default=0, ge=0)
    conv_kernel: int = Field(default=0, ge=0)
    # bytes per element of the cached recurrent state: bf16 as engines keep it by default
    # (`costmodel.precision.STATE_BYTES_PER_ELEMENT`), fp32 where the config asks (`mamba_ssm_dtype`)
    state_bytes_per_element: float = Field(default=STATE_BYTES_PER_ELEMENT, gt=0)
    linear_full_rank_gate: bool = False  # KDA: full-rank gate projections instead of rank-head_dim
    output_gate: bool = False  # sigmoid gate on the attention output (its own projection)
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: Literal["head", "layer"] | None = None  # RMSNorm on q and k: per head dim or whole width
    sinks: bool = False  # gpt-oss learned attention sinks, one scalar per head

    @model_validator(mode="after")
    def _check_kind(self) -> Attention:
        if self.window is not None and self.chunk is not None:
            raise ValueError("an attention layer has either a sliding window or a chunk, not both")
        if self.kind == "gqa" and (self.num_kv_heads <= 0 or self.head_dim <= 0 or self.v_head_dim <= 0):
            raise ValueError("gqa attention needs num_kv_heads, head_dim and v_head_dim > 0")
        if self.kind == "gqa" and self.num_heads % self.num_kv_heads:  # as `plan import-hf` checks the config's
            raise ValueError(f"num_kv_heads {self.num_kv_heads} does not divide the {self.num_heads} query heads "
                             "(each KV head serves a whole group); use a divisor")
        if self.kind == "mla" and (self.kv_lora_rank <= 0 or self.v_head_dim <= 0):
            raise ValueError("mla attention needs kv_lora_rank and v_head_dim > 0")
        if self.kind == "linear" and (self.linear_kind is None or min(self.linear_k_heads, self.linear_v_heads) <= 0):
            raise ValueError("linear attention needs linear_kind, linear_k_heads and linear_v_heads")
        return self

    @property
    def is_full(self) -> bool:
        """Keeps KV for every token of the context (no window, chunk or recurrence)."""
        return self.kind != "linear" and self.window is None and self.chunk is None

    def params(self) -> int:
        """Weights of the block, its pre-norm included."""
        pre_norm = self.hidden_size
        if self.kind == "mla":
            return pre_norm + self._mla_params() + self.indexer_params()
        if self.kind == "linear":
            return pre_norm + self._linear_params()
        return pre_norm + self._gqa_params()

    def kv_projection_params(self) -> int:
        """GQA's k and v projections (with their biases): split over at most num_kv_heads tp ranks, whole on
        each rank beyond (`costmodel.operators.attention_shard_params`); 0 for MLA and linear attention."""
        if self.kind != "gqa":
            return 0
        kv_dim = self.num_kv_heads * (self.head_dim + self.v_head_dim)
        return self.hidden_size * kv_dim + (kv_dim if self.qkv_bias else 0)

    def _gqa_params(self) -> int:
        h, q_dim = self.hidden_size, self.num_heads * self.head_dim
        kv_dim = self.num_kv_heads * (self.head_dim + self.v_head_dim)
        out_in = self.num_heads * self.v_head_dim
        n = h * q_dim + h * kv_dim + out_in * h
        if self.output_gate:  # Qwen3-Next/3.5: q_proj doubles to emit the gate
            n += h * out_in
        if self.qkv_bias:
            n += q_dim + kv_dim
        if self.o_bias:
            n += h
        if self.qk_norm == "head":
            n += 2 * self.head_dim
        elif self.qk_norm == "layer":
            n += q_dim + self.num_kv_heads * self.head_dim
        if self.sinks:
            n += self.num_heads
        return n

    def _mla_params(self) -> int:
        h, heads = self.hidden_size, self.num_heads
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank is not None:  # q_a_proj + q_a_layernorm + q_b_proj
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk
        else:
            q = h * heads * qk
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank  # + kv_a_layernorm
        kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        out = heads * self.v_head_dim * h
        gate = h * heads * self.v_head_dim if self.output_gate else 0
        return q + kv_a + kv_b + out + gate

    def indexer_params(self) -> int:
        """DSA indexer: wq_b from the q latent, wk, k LayerNorm (weight + bias), per-head weights_proj."""
        if self.index_heads is None or self.index_head_dim is None:
            return 0
        q_in = self.q_lora_rank if self.q_lora_rank is not None else self.hidden_size
        return (
            q_in * self.index_heads * self.index_head_dim
            + self.hidden_size * self.index_head_dim
            + 2 * self.index_head_dim
            + self.hidden_size * self.index_heads
        )

    def _linear_params(self) -> int:
        h = self.hidden_size
        k_dim = self.linear_k_heads * self.linear_k_head_dim
        v_dim = self.linear_v_heads * self.linear_v_head_dim
        n = h * (2 * k_dim + v_dim) + self.conv_channels * self.conv_kernel  # q, k, v + depthwise conv
        n += v_dim * h + self.linear_v_head_dim  # out proj + gated output RMSNorm (per head dim)
        if self.linear_kind == "kda":
            # fla KimiDeltaAttention: decay gate f and output gate g (low rank via head_dim unless
            # full-rank), beta b_proj (h x heads), A_log (heads), dt_bias (per channel).
            rank_h = h * self.linear_k_head_dim
            f = h * k_dim if self.linear_full_rank_gate else rank_h + self.linear_k_head_dim * k_dim
            g = h * v_dim if self.linear_full_rank_gate else rank_h + self.linear_k_head_dim * v_dim
            n += f + (g if self.output_gate else 0) + h * self.linear_v_heads
            n += self.linear_v_heads + k_dim
        else:
            # Qwen3-Next GatedDeltaNet: z (output gate) in in_proj_qkvz, b and a in in_proj_ba,
            # dt_bias and A_log per value head.
            n += (h * v_dim if self.output_gate else 0) + 2 * h * self.linear_v_heads
            n += 2 * self.linear_v_heads
        return n

    @property
    def conv_channels(self) -> int:
        """Channels of the short causal convolution on q, k and v (linear attention only)."""
        if self.kind != "linear":
            return 0
        k_dim = self.linear_k_heads * self.linear_k_head_dim
        return 2 * k_dim + self.linear_v_heads * self.linear_v_head_dim

    def token_kv_elements(self) -> int:
        """KV elements one token occupies in this layer, whatever bounds the layer's cache."""
        if self.kind == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        if self.kind == "linear":
            return 0
        return self.num_kv_heads * (self.head_dim + self.v_head_dim)

    def kv_elements_per_token(self) -> int:
        """KV elements per context token; 0 for windowed/chunked/linear layers (per-sequence state)."""
        return self.token_kv_elements() if self.is_full else 0

    def indexer_key_bytes_per_token(self) -> int:
        """DSA indexer key cache: fp8 values + one fp32 scale per 128 dims (132 B for dim 128)."""
        if self.index_head_dim is None:
            return 0
        return self.index_head_dim + _FP32_BYTES * ceil(self.index_head_dim / _SCALE_BLOCK)

    def kv_bytes_per_token(self, kv_dtype: Dtype) -> float:
        """Bytes per context token of this layer's growing cache, indexer keys included (0 for windowed,
        chunked and linear layers, whose cache is a per-sequence state: `Architecture.state_bytes_per_sequence`)."""
        return self.entry_bytes(kv_dtype) if self.is_full else 0.0

    def entry_bytes(self, kv_dtype: Dtype) -> float:
        """Bytes of one token's cache entry as stored, indexer keys included, window or not (0: linear layers).

        MLA with a DSA indexer stored in fp8 uses vLLM's packed layout (the one sparse-MLA kernels
        read): fp8 latent + fp32 scale per 128 + bf16 rope = 656 B for DeepSeek-V3.2. Plain MLA and
        GQA in fp8 take one byte per element (models.md Table 2: DeepSeek-V3 fp8 = 35,136 B/token).
        """
        if self.kind == "linear":
            return 0.0
        if self.kind == "mla" and self.index_head_dim is not None and Dtype(kv_dtype) is Dtype.FP8:
            scales = _FP32_BYTES * ceil(self.kv_lora_rank / _SCALE_BLOCK)
            latent = self.kv_lora_rank + scales + _BF16_BYTES * self.qk_rope_head_dim
            return float(latent + self.indexer_key_bytes_per_token())
        elements = self.token_kv_elements() * BYTES_PER_ELEMENT[Dtype(kv_dtype)]
        return elements + self.indexer_key_bytes_per_token()

    def window_state_elements(self, context_tokens: int) -> int:
        """KV elements a windowed or chunked layer holds for one sequence of `context_tokens`."""
        span = self.window if self.window is not None else self.chunk
        if span is None or self.kind == "linear":
            return 0
        return min(context_tokens, span) * self.token_kv_elements()

    def linear_state_elements(self) -> int:
        """Recurrent state of a linear-attention layer: value heads x d_k x d_v."""
        if self.kind != "linear":
            return 0
        return self.linear_v_heads * self.linear_k_head_dim * self.linear_v_head_dim

    def conv_state_elements(self) -> int:
        """Short-convolution state: the last (kernel - 1) inputs of every conv channel."""
        if self.kind != "linear" or self.conv_kernel == 0:
            return 0
        return (self.conv_kernel - 1) * self.conv_channels


class Ffn(BaseModel):
    """Feed-forward block: dense gated MLP, or routed experts (+ shared experts) with a router.

    `router_params` holds every routing weight: the gate (experts x hidden), its bias or DeepSeek
    e_score_correction_bias, and a Qwen shared-expert gate (hidden x 1) where the model has one.
    `expert_hidden_size` (Kimi K3 latent experts): routed experts work in a smaller hidden space,
    reached through a per-layer down projection (hidden -> latent) with a norm and back up.
    `expert_groups` / `groups_per_token` (DeepSeek-V3's n_group / topk_group): the routed experts form equal
    groups of consecutive ids, and a token's top_k experts come from its best `groups_per_token` groups
    (node-limited routing); 1 / 0: no such limit.
    """

    model_config = _FROZEN

    kind: Literal["dense", "moe"]
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(default=0, ge=0)
    num_experts: int = Field(default=0, ge=0)
    top_k: int = Field(default=0, ge=0)
    expert_intermediate_size: int = Field(default=0, ge=0)
    num_shared_experts: int = Field(default=0, ge=0)
    shared_intermediate_size: int = Field(default=0, ge=0)  # total width of all shared experts
    expert_hidden_size: int | None = Field(default=None, gt=0)
    router_params: int = Field(default=0, ge=0)
    expert_bias: bool = False  # gpt-oss: biases on the expert projections
    expert_groups: int = Field(default=1, ge=1)
    groups_per_token: int = Field(default=0, ge=0)  # 0: every group

    @model_validator(mode="after")
    def _check_kind(self) -> Ffn:
        if self.kind == "dense" and self.intermediate_size <= 0:
            raise ValueError("a dense FFN needs intermediate_size > 0")
        if self.kind == "moe" and not 0 < self.top_k <= self.num_experts:
            raise ValueError("a MoE FFN needs 0 < top_k <= num_experts")
        if self.kind == "moe" and self.expert_intermediate_size <= 0:
            raise ValueError("a MoE FFN needs expert_intermediate_size > 0")
        if self.expert_groups > 1 and (self.num_experts % self.expert_groups
                                       or self.groups_per_token > self.expert_groups):
            raise ValueError("expert groups must split the routed experts evenly; a token uses at most all of them")
        return self

    @property
    def group_limited(self) -> bool:
        """A token's experts come from some of the expert groups only (DeepSeek-V3: 4 of 8)."""
        return self.kind == "moe" and self.expert_groups > 1 and 0 < self.groups_per_token < self.expert_groups

    def routed_expert_params(self) -> int:
        """Weights of one routed expert (0 for a dense FFN)."""
        if self.kind == "dense":
            return 0
        width = self.expert_hidden_size or self.hidden_size
        n = 3 * width * self.expert_intermediate_size
        if self.expert_bias:
            n += 2 * self.expert_intermediate_size + width
        return n

    def dense_params(self) -> int:
        """Everything but the routed experts: pre-norm, dense MLP or shared experts, router, latent
        projections."""
        h = self.hidden_size
        if self.kind == "dense":
            return h + 3 * h * self.intermediate_size
        latent = 0
        if self.expert_hidden_size is not None:  # down + up projection and the latent norm
            latent = 2 * h * self.expert_hidden_size + self.expert_hidden_size
        return h + 3 * h * self.shared_intermediate_size + self.router_params + latent

    def params(self) -> int:
        return self.dense_params() + self.num_experts * self.routed_expert_params()

    def active_params(self) -> int:
        """Weights one token uses: all but the routed experts it was not sent to."""
        return self.dense_params() + self.top_k * self.routed_expert_params()


class Layer(BaseModel):
    model_config = _FROZEN

    attention: Attention
    ffn: Ffn

    def params(self) -> int:
        return self.attention.params() + self.ffn.params()

    def active_params(self) -> int:
        return self.attention.params() + self.ffn.active_params()


class LayerGroup(BaseModel):
    """`repeats` consecutive copies of the unit `layers`, starting at 0-based layer `first_layer`."""

    model_config = _FROZEN

    layers: tuple[Layer, ...] = Field(min_length=1)
    repeats: int = Field(gt=0)
    first_layer: int = Field(ge=0)

    @property
    def num_layers(self) -> int:
        return len(self.layers) * self.repeats

    def expanded(self) -> tuple[Layer, ...]:
        return self.layers * self.repeats


_Cost = tuple[int, int, int]  # (units off phase, groups + layers listed, layers listed)


def _off_phase(unit: tuple[Layer, ...], start: int) -> bool:
    """A hybrid unit should end on its full-attention layer ((KDA, KDA, KDA, MLA), (sliding, full));
    a unit of one attention kind should start at a multiple of its period ((dense, moe) from 0)."""
    full = [layer.attention.is_full for layer in unit]
    if any(full) and not all(full):
        return not full[-1]
    return start % len(unit) != 0


def group_layers(layers: tuple[Layer, ...] | list[Layer], max_period: int = 8) -> tuple[LayerGroup, ...]:
    """Compress a per-layer list into runs of a repeating unit (period 1..max_period).

    Dynamic programming over the start position, minimising lexicographically: units off their
    natural phase (`_off_phase`); then groups + layers listed in all units (a short description, so
    [dense] x 3, [moe] x 5 beats one 8-layer unit); then layers listed, i.e. the shortest periods.
    Adjacent groups are never merged (DeepSeek-V3 stays [dense] x 3, [moe] x 58).
    """
    seq = tuple(layers)
    n = len(seq)
    best: list[tuple[_Cost, tuple[int, int]]] = [((0, 0, 0), (0, 0))] * (n + 1)
    for i in range(n - 1, -1, -1):
        choice: tuple[_Cost, tuple[int, int]] | None = None
        for period in range(1, min(max_period, n - i) + 1):
            unit = seq[i : i + period]
            off = int(_off_phase(unit, i))
            repeats = 1
            while True:
                rest = best[i + repeats * period][0]
                cost = (rest[0] + off, rest[1] + 1 + period, rest[2] + period)
                if choice is None or cost < choice[0]:
                    choice = (cost, (period, repeats))
                nxt = i + (repeats + 1) * period
                if nxt > n or seq[nxt - period : nxt] != unit:
                    break
                repeats += 1
        assert choice is not None
        best[i] = choice
    groups: list[LayerGroup] = []
    i = 0
    while i < n:
        period, repeats = best[i][1]
        groups.append(LayerGroup(layers=seq[i : i + period], repeats=repeats, first_layer=i))
        i += period * repeats
    return tuple(groups)


class Architecture(BaseModel):
    """A model as the cost model sees it: layer groups, embeddings, MTP and native formats."""

    model_config = _FROZEN

    schema_version: Literal[1] = 1
    name: str = Field(min_length=1)  # HF repo id or the name given at import
    model_type: str = ""  # the config's `model_type` (engines pick model code by it); "" when built by hand
    hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    groups: tuple[LayerGroup, ...] = Field(min_length=1)
    mtp_layers: int = Field(default=0, ge=0)  # multi-token-prediction modules (not in total/active)
    mtp_layer: Layer | None = None  # the decoder layer inside each MTP module
    max_position_embeddings: int = Field(gt=0)  # tokens
    native_weights: Dtype = Dtype.BF16  # format of the published non-expert weights
    native_experts: Dtype = Dtype.BF16  # format of the published routed-expert weights
    # bytes per element of the published experts where their block scales differ from the format's default
    # (`costmodel.precision`: MXFP4's one byte per 32 elements against NVFP4's per 16); None: the default
    native_expert_bytes: float | None = Field(default=None, gt=0)
    # the published experts are in OCP MX format (MXFP4, an e8m0 scale per 32 elements: gpt-oss, Kimi K3), which
    # NVIDIA engines compute with MXFP8 or bf16 activations (`costmodel.calibration.MX_EXPERT_ACTIVATIONS`)
    native_experts_microscaled: bool = False
    notes: tuple[str, ...] = ()  # assumptions made while parsing

    @model_validator(mode="before")
    @classmethod
    def _microscaled_by_size(cls, data: Any) -> Any:
        """Model files written before the flag existed: fp4 experts at MXFP4's size (an e8m0 scale per 32)
        are MXFP4, the only 4-bit float format read at that size then."""
        if isinstance(data, dict) and "native_experts_microscaled" not in data:
            mx = data.get("native_experts") == Dtype.FP4 and data.get("native_expert_bytes") == MXFP4_BYTES
            return {**data, "native_experts_microscaled": mx}
        return data

    @model_validator(mode="after")
    def _check_structure(self) -> Architecture:
        start = 0
        for index, group in enumerate(self.groups):
            if group.first_layer != start:
                raise ValueError(f"groups.{index}.first_layer is {group.first_layer}, expected {start}")
            start += group.num_layers
        if self.mtp_layers > 0 and self.mtp_layer is None:
            raise ValueError("mtp_layers > 0 needs mtp_layer")
        widths = {layer.attention.hidden_size for g in self.groups for layer in g.layers}
        widths |= {layer.ffn.hidden_size for g in self.groups for layer in g.layers}
        if widths != {self.hidden_size}:
            raise ValueError(f"layer hidden sizes {sorted(widths)} differ from hidden_size {self.hidden_size}")
        return self

    @property
    def layers(self) -> tuple[Layer, ...]:
        """Every decoder layer in order (MTP excluded)."""
        return tuple(layer for group in self.groups for layer in group.expanded())

    @property
    def num_layers(self) -> int:
        return sum(group.num_layers for group in self.groups)

    @property
    def moe_layers(self) -> int:
        return sum(1 for layer in self.layers if layer.ffn.kind == "moe")

    @property
    def num_experts(self) -> int | None:
        """Routed experts per MoE layer (the largest, should layers differ); None for a dense model."""
        counts = [layer.ffn.num_experts for layer in self.layers if layer.ffn.kind == "moe"]
        return max(counts) if counts else None

    @property
    def expert_routing(self) -> tuple[int, int]:
        """(expert groups, groups a token's experts come from) of the MoE layers (DeepSeek-V3: (8, 4));
        (1, 0) for a dense model or routing without groups."""
        ffn = next((layer.ffn for layer in self.layers if layer.ffn.kind == "moe"), None)
        return (ffn.expert_groups, ffn.groups_per_token) if ffn is not None else (1, 0)

    @property
    def top_k(self) -> int | None:
        counts = [layer.ffn.top_k for layer in self.layers if layer.ffn.kind == "moe"]
        return max(counts) if counts else None

    def embedding_params(self) -> int:
        """Input embedding plus lm head (one table if tied)."""
        tables = 1 if self.tie_word_embeddings else 2
        return tables * self.vocab_size * self.hidden_size

    def _count(self, per_layer: Callable[[Layer], int]) -> int:
        return sum(group.repeats * sum(per_layer(layer) for layer in group.layers) for group in self.groups)

    def total_params(self) -> int:
        """Embeddings + lm head + all layers + final norm; MTP excluded."""
        return self.embedding_params() + self._count(Layer.params) + self.hidden_size

    def active_params(self) -> int:
        """Per-token weights: as `total_params` with top_k routed experts per MoE layer."""
        return self.embedding_params() + self._count(Layer.active_params) + self.hidden_size

    def expert_params(self) -> int:
        """All routed-expert weights (stored in `native_experts`)."""
        return self._count(lambda layer: layer.ffn.num_experts * layer.ffn.routed_expert_params())

    def dense_params(self) -> int:
        """All weights but the routed experts (stored in `native_weights`)."""
        return self.total_params() - self.expert_params()

    def mtp_params(self) -> int:
        """MTP modules: a decoder layer + eh_proj (2h x h) + enorm, hnorm and the head norm each.

        The embedding and lm head are shared with the main model when serving (DeepSeek-V3 MTP
        design); checkpoints that store copies of them (DeepSeek-V3's 685B) are larger by those.
        """
        if self.mtp_layer is None:
            return 0
        h = self.hidden_size
        return self.mtp_layers * (self.mtp_layer.params() + 2 * h * h + 3 * h)

    def kv_bytes_per_token(self, kv_dtype: Dtype) -> float:
        """Bytes per context token summed over full-attention layers (+ DSA indexer keys)."""
        return sum(
            group.repeats * sum(layer.attention.kv_bytes_per_token(kv_dtype) for layer in group.layers)
            for group in self.groups
        )

    def sequence_bytes(self, context_tokens: float, kv_dtype: Dtype) -> float:
        """One sequence's whole cache at `context_tokens` (all layers, one copy): the growing KV and the fixed
        states of windowed and linear-attention layers (what a transfer or a fetch moves)."""
        return self.kv_bytes_per_token(kv_dtype) * context_tokens + self.state_bytes_per_sequence(
            int(context_tokens), kv_dtype)

    def bytes_per_context_token(self, context_tokens: float, kv_dtype: Dtype) -> float:
        """`sequence_bytes` per context token at `context_tokens`: the rate KV tiers size and fetch by."""
        if context_tokens <= 0:
            return self.kv_bytes_per_token(kv_dtype)
        return self.sequence_bytes(context_tokens, kv_dtype) / context_tokens

    def mtp_kv_bytes_per_token(self, kv_dtype: Dtype) -> float:
        """Extra KV per token when the MTP layers are used for speculative decoding."""
        if self.mtp_layer is None:
            return 0.0
        return self.mtp_layers * self.mtp_layer.attention.kv_bytes_per_token(kv_dtype)

    def state_bytes_per_sequence(self, context_tokens: int, kv_dtype: Dtype) -> float:
        """Per-sequence state that does not grow with context past a bound.

        Window/chunk KV at the KV format, linear-attention recurrent states in their own format
        (`Attention.state_bytes_per_element`: bf16, or fp32 where the config says so) and short-conv states in bf16.
        """
        kv_bytes = BYTES_PER_ELEMENT[Dtype(kv_dtype)]
        total = 0.0
        for group in self.groups:
            for layer in group.layers:
                att = layer.attention
                per_layer = att.window_state_elements(context_tokens) * kv_bytes
                per_layer += att.linear_state_elements() * att.state_bytes_per_element
                per_layer += att.conv_state_elements() * _BF16_BYTES
                total += group.repeats * per_layer
        return total

    def to_yaml_dict(self) -> dict[str, Any]:
        """Plain data for a model YAML; `Architecture.model_validate` reads it back unchanged.

        Top-level fields are all written; inside layers, fields at their default are left out.
        """
        full = self.model_dump(mode="json")
        compact = self.model_dump(mode="json", exclude_defaults=True)
        return {key: compact.get(key, value) for key, value in full.items()}
