"""Per-layer attention and FFN blocks from a Hugging Face config, one function per family of fields.

Families: GQA/MHA (Llama, Qwen3, Mixtral, GLM-4.5, MiniMax, gpt-oss sliding/full, Llama-4 chunked),
MLA (DeepSeek-V3/V3.2, Kimi K2, GLM-5, with the DSA indexer where present), Gated DeltaNet hybrids
(Qwen3-Next, Qwen3.5) and KDA hybrids (Kimi-Linear, Kimi K3).
"""

from __future__ import annotations

from typing import Literal

from costmodel.architecture import Attention, Ffn
from costmodel.errors import ConfigError
from costmodel.hf_fields import ConfigReader
from costmodel.precision import STATE_BYTES_PER_ELEMENT

LayerKind = Literal["full", "sliding", "chunked", "linear"]

_LAYER_TYPES: dict[str, LayerKind] = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
}
# HF Llama4 default: RoPE + chunked attention except every 4th layer (global NoPE), (i+1) % 4 != 0.
_LLAMA4_NOPE_INTERVAL = 4
# Families whose o_proj carries a bias when attention_bias is set (Qwen and GLM bias q/k/v only).
_O_BIAS_TYPES = frozenset({"llama", "llama4_text", "gpt_oss"})
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "experts_per_token")


def model_type(cfg: ConfigReader, fallback: str = "") -> str:
    return cfg.str_or("model_type", fallback)


# ---------------------------------------------------------------------------------------- attention


def attention_layers(cfg: ConfigReader, hidden: int, n: int, mtype: str, notes: list[str]) -> list[Attention]:
    """One Attention per decoder layer."""
    linear_cfg = cfg.sub("linear_attn_config")
    if linear_cfg is not None:
        return _kda_hybrid(cfg, linear_cfg, hidden, n, notes)
    kinds = layer_kinds(cfg, n, notes)
    if "linear" in kinds:
        if not cfg.has("attn_output_gate"):
            notes.append("attn_output_gate absent: gated full attention assumed (Qwen3-Next design)")
        full = _gqa(cfg, hidden, mtype, output_gate=cfg.bool_or("attn_output_gate", True))
        linear = _gated_deltanet(cfg, hidden)
        return [linear if kind == "linear" else full for kind in kinds]
    if cfg.has("kv_lora_rank"):
        if set(kinds) != {"full"}:
            raise ConfigError("MLA with sliding or chunked layers is not supported", cfg.path("layer_types"))
        return [_mla(cfg, hidden)] * n
    blocks: dict[LayerKind, Attention] = {}
    for kind in set(kinds):
        window = cfg.req_int("sliding_window") if kind == "sliding" else None
        chunk = cfg.req_int("attention_chunk_size") if kind == "chunked" else None
        blocks[kind] = _gqa(cfg, hidden, mtype, window=window, chunk=chunk)
    return [blocks[kind] for kind in kinds]


def layer_kinds(cfg: ConfigReader, n: int, notes: list[str]) -> list[LayerKind]:
    """Attention type of each layer from layer_types, full_attention_interval, Llama-4 chunking or
    Qwen/Mistral sliding-window fields; all full when none is given."""
    types = cfg.str_list("layer_types")
    if types is not None:
        if len(types) != n:
            raise ConfigError(
                f"{cfg.path('layer_types')} lists {len(types)} layers but num_hidden_layers is {n}",
                cfg.path("layer_types"),
            )
        unknown = sorted(set(types) - set(_LAYER_TYPES))
        if unknown:
            raise ConfigError(
                f"{cfg.path('layer_types')} has unknown types {unknown}; known: {sorted(_LAYER_TYPES)}",
                cfg.path("layer_types"),
            )
        return [_LAYER_TYPES[t] for t in types]
    if cfg.has("linear_num_value_heads"):
        interval = cfg.req_int("full_attention_interval")
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(n)]
    if cfg.has("attention_chunk_size"):
        return _llama4_kinds(cfg, n, notes)
    if cfg.has("sliding_window") and cfg.bool_or("use_sliding_window", True):
        # Qwen2-style: layers from max_window_layers on use the window; Mistral: all layers.
        first = cfg.int_or("max_window_layers", 0)
        return ["sliding" if i >= first else "full" for i in range(n)]
    return ["full"] * n


def _llama4_kinds(cfg: ConfigReader, n: int, notes: list[str]) -> list[LayerKind]:
    rope_layers = cfg.int_list("no_rope_layers")
    if rope_layers is not None:  # HF Llama4: 1 = RoPE layer (chunked), 0 = NoPE global layer
        if len(rope_layers) != n:
            raise ConfigError(f"{cfg.path('no_rope_layers')} must list {n} layers", cfg.path("no_rope_layers"))
        return ["chunked" if r else "full" for r in rope_layers]
    notes.append("no_rope_layers absent: chunked attention on layers with (i+1) % 4 != 0 (HF Llama4 default)")
    return ["chunked" if (i + 1) % _LLAMA4_NOPE_INTERVAL else "full" for i in range(n)]


def _qk_norm(cfg: ConfigReader, mtype: str) -> Literal["head", "layer"] | None:
    if mtype.startswith("qwen3"):  # Qwen3 attention always has q_norm/k_norm over head_dim
        return "head"
    if mtype.startswith("llama4"):  # Llama-4 qk-norm is a weightless L2 norm
        return None
    if not cfg.bool_or("use_qk_norm", False):
        return None
    return "layer" if cfg.str_or("qk_norm_type", "") == "per_layer" else "head"


def _gqa(
    cfg: ConfigReader,
    hidden: int,
    mtype: str,
    window: int | None = None,
    chunk: int | None = None,
    output_gate: bool = False,
) -> Attention:
    heads = cfg.req_int("num_attention_heads")
    head_dim = cfg.opt_int("head_dim", 1)
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(
                f"{cfg.path('head_dim')} is missing and hidden_size {hidden} is not a multiple of {heads} heads",
                cfg.path("head_dim"),
            )
        head_dim = hidden // heads  # HF default when head_dim is absent
    bias = cfg.bool_or("attention_bias", False) or cfg.bool_or("qkv_bias", False)
    kv_heads = cfg.int_or("num_key_value_heads", heads, minimum=1)  # absent -> MHA (HF default)
    if heads % kv_heads:
        raise ConfigError(f"{cfg.path('num_key_value_heads')} is {kv_heads}, which does not divide the {heads} "
                          "query heads (each KV head serves a whole group); use a divisor",
                          cfg.path("num_key_value_heads"))
    return Attention(
        kind="gqa",
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        window=window,
        chunk=chunk,
        output_gate=output_gate,
        qkv_bias=bias,
        o_bias=bias and mtype in _O_BIAS_TYPES,
        qk_norm=_qk_norm(cfg, mtype),
        sinks=mtype == "gpt_oss",
    )


def _mla(cfg: ConfigReader, hidden: int) -> Attention:
    nope = cfg.req_int("qk_nope_head_dim", minimum=0)
    rope = cfg.req_int("qk_rope_head_dim", minimum=0)
    index_heads = cfg.opt_int("index_n_heads", 1)
    return Attention(
        kind="mla",
        hidden_size=hidden,
        num_heads=cfg.req_int("num_attention_heads"),
        num_kv_heads=1,
        head_dim=nope + rope,
        v_head_dim=cfg.req_int("v_head_dim"),
        q_lora_rank=cfg.opt_int("q_lora_rank", 1),
        kv_lora_rank=cfg.req_int("kv_lora_rank"),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        index_heads=index_heads,
        index_head_dim=cfg.req_int("index_head_dim") if index_heads is not None else None,
        index_topk=cfg.opt_int("index_topk", 1),
        output_gate=cfg.bool_or("mla_use_output_gate", False),
    )


def _gated_deltanet(cfg: ConfigReader, hidden: int) -> Attention:
    k_heads = cfg.req_int("linear_num_key_heads")
    k_dim = cfg.req_int("linear_key_head_dim")
    v_dim = cfg.req_int("linear_value_head_dim")
    return Attention(
        kind="linear",
        hidden_size=hidden,
        num_heads=k_heads,
        num_kv_heads=k_heads,
        head_dim=k_dim,
        v_head_dim=v_dim,
        linear_kind="gated_deltanet",
        linear_k_heads=k_heads,
        linear_v_heads=cfg.req_int("linear_num_value_heads"),
        linear_k_head_dim=k_dim,
        linear_v_head_dim=v_dim,
        conv_kernel=cfg.req_int("linear_conv_kernel_dim"),
        output_gate=True,  # the z projection of in_proj_qkvz
        # Qwen3.5 asks for an fp32 recurrent state (`mamba_ssm_dtype`), which vLLM's `mamba_ssm_cache_dtype:
        # auto` follows (an assumption read from its config handling, not measured); bf16 otherwise
        state_bytes_per_element=4.0 if cfg.str_or("mamba_ssm_dtype", "") == "float32" else STATE_BYTES_PER_ELEMENT,
    )


def _kda_hybrid(cfg: ConfigReader, linear_cfg: ConfigReader, hidden: int, n: int, notes: list[str]) -> list[Attention]:
    """Kimi-Linear / K3: KDA and MLA layers listed 1-based in linear_attn_config (full_attn_layers of
    Kimi-Linear ends at 27 = num_hidden_layers and kda_layers starts at 1)."""
    kda_layers = linear_cfg.int_list("kda_layers", minimum=1)
    full_layers = linear_cfg.int_list("full_attn_layers", minimum=1)
    if kda_layers is None:
        raise ConfigError(f"{linear_cfg.path('kda_layers')} is missing", linear_cfg.path("kda_layers"))
    if full_layers is None:
        raise ConfigError(f"{linear_cfg.path('full_attn_layers')} is missing", linear_cfg.path("full_attn_layers"))
    if sorted(kda_layers + full_layers) != list(range(1, n + 1)):
        raise ConfigError(
            f"{linear_cfg.path('kda_layers')} and full_attn_layers must together list layers 1..{n} "
            "once each (they are 1-based)",
            linear_cfg.path("kda_layers"),
        )
    heads, head_dim = linear_cfg.req_int("num_heads"), linear_cfg.req_int("head_dim")
    kda = Attention(
        kind="linear",
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        linear_kind="kda",
        linear_k_heads=heads,
        linear_v_heads=heads,
        linear_k_head_dim=head_dim,
        linear_v_head_dim=head_dim,
        conv_kernel=linear_cfg.req_int("short_conv_kernel_size"),
        linear_full_rank_gate=linear_cfg.bool_or("use_full_rank_gate", False),
        output_gate=True,  # KDA's g projection
    )
    notes.append("linear_attn_config layer lists read as 1-based")
    if cfg.bool_or("mla_use_nope", False):
        notes.append("mla_use_nope: MLA layers apply no RoPE; the rope dims still count in the KV latent")
    mla = _mla(cfg, hidden)
    full = set(full_layers)
    return [mla if i + 1 in full else kda for i in range(n)]


# ---------------------------------------------------------------------------------------------- FFN


def ffn_layers(cfg: ConfigReader, hidden: int, n: int, mtype: str, notes: list[str]) -> list[Ffn]:
    """One Ffn per decoder layer: dense, or MoE where the family's layer rule says so."""
    found = cfg.first_int(_EXPERT_KEYS, minimum=1)  # 0 experts is not "dense": omit the key for that
    if found is None:
        return [_dense(cfg, hidden)] * n
    moe = _moe(cfg, hidden, found[1], mtype, notes)
    mask = moe_layer_mask(cfg, n)
    dense = None if all(mask) else _dense(cfg, hidden)
    return [moe if is_moe or dense is None else dense for is_moe in mask]


def moe_layer_mask(cfg: ConfigReader, n: int) -> list[bool]:
    """Which layers are MoE. DeepSeek/Kimi/GLM: i >= first_k_dense_replace and i % moe_layer_freq == 0;
    Qwen: (i+1) % decoder_sparse_step == 0 and i not in mlp_only_layers; Llama-4:
    (i+1) % interleave_moe_layer_step == 0. Rules of absent keys do not apply."""
    first_dense = cfg.int_or("first_k_dense_replace", 0)
    freq = cfg.int_or("moe_layer_freq", 1, minimum=1)
    sparse_step = cfg.int_or("decoder_sparse_step", 1, minimum=1)
    interleave = cfg.int_or("interleave_moe_layer_step", 1, minimum=1)
    mlp_only = set(cfg.int_list("mlp_only_layers") or [])
    beyond = sorted(i for i in mlp_only if i >= n)
    if beyond:  # a layer the model lacks: most likely an index from another model's config
        raise ConfigError(f"{cfg.path('mlp_only_layers')} lists layer{'s' if len(beyond) > 1 else ''} "
                          f"{', '.join(map(str, beyond))}, beyond the model's {n} (0 to {n - 1}); remove "
                          f"{'them' if len(beyond) > 1 else 'it'}", cfg.path("mlp_only_layers"))
    return [
        i >= first_dense
        and i % freq == 0
        and (i + 1) % sparse_step == 0
        and (i + 1) % interleave == 0
        and i not in mlp_only
        for i in range(n)
    ]


def _dense(cfg: ConfigReader, hidden: int) -> Ffn:
    # Llama-4 keeps the dense-layer width in intermediate_size_mlp (intermediate_size is the expert's).
    key = "intermediate_size_mlp" if cfg.has("intermediate_size_mlp") else "intermediate_size"
    return Ffn(kind="dense", hidden_size=hidden, intermediate_size=cfg.req_int(key))


def _moe(cfg: ConfigReader, hidden: int, experts: int, mtype: str, notes: list[str]) -> Ffn:
    # Families without moe_intermediate_size (Mixtral, gpt-oss, Llama-4, MiniMax) size experts by
    # intermediate_size.
    key = "moe_intermediate_size" if cfg.has("moe_intermediate_size") else "intermediate_size"
    expert_width = cfg.req_int(key)
    shared_count, shared_width, shared_gate = _shared_experts(cfg, expert_width, mtype)
    latent = cfg.opt_int("routed_expert_hidden_size", 1)
    if latent is not None:
        notes.append(
            f"latent experts: routed experts run at width {latent}; one hidden->latent down projection, "
            "a latent norm and one latent->hidden up projection per MoE layer; router and shared experts "
            "at full width"
        )
    top_k = cfg.req_first_int(_TOP_K_KEYS)
    if top_k > experts:
        key = next(k for k in _TOP_K_KEYS if cfg.has(k))
        raise ConfigError(f"{cfg.path(key)} is {top_k}, more than the {experts} routed experts a token can use; "
                          f"use at most {experts}", cfg.path(key))
    return Ffn(
        kind="moe",
        hidden_size=hidden,
        num_experts=experts,
        top_k=top_k,
        expert_intermediate_size=expert_width,
        num_shared_experts=shared_count,
        shared_intermediate_size=shared_width,
        expert_hidden_size=latent,
        router_params=_router_params(cfg, hidden, experts, mtype, shared_gate),
        expert_bias=mtype == "gpt_oss",
        **_expert_groups(cfg, experts),
    )


def _expert_groups(cfg: ConfigReader, experts: int) -> dict[str, int]:
    """DeepSeek-V3's group-limited routing (n_group groups of consecutive experts, a token's experts from its
    best topk_group of them); none where either is absent or 1."""
    groups, chosen = cfg.opt_int("n_group", 1), cfg.opt_int("topk_group", 1)
    if groups is None or chosen is None or groups == 1:
        return {}
    if experts % groups:
        raise ConfigError(f"{cfg.path('n_group')} is {groups}, which does not split the {experts} routed experts "
                          "into equal groups; use a divisor of the expert count", cfg.path("n_group"))
    if chosen > groups:
        raise ConfigError(f"{cfg.path('topk_group')} is {chosen}, more than the {groups} expert groups; use at most "
                          f"{groups}", cfg.path("topk_group"))
    return {"expert_groups": groups, "groups_per_token": chosen}


def _shared_experts(cfg: ConfigReader, expert_width: int, mtype: str) -> tuple[int, int, bool]:
    """(count, total width, has a sigmoid shared-expert gate)."""
    count = cfg.first_int(("n_shared_experts", "num_shared_experts"))
    if count is not None:  # DeepSeek: shared MLP width = n_shared_experts x moe_intermediate_size
        return count[1], count[1] * expert_width, False
    width = cfg.opt_int("shared_expert_intermediate_size")
    if width is not None:  # Qwen2-MoE style: one shared expert behind a (hidden x 1) gate
        return (1, width, True) if width else (0, 0, False)
    width = cfg.opt_int("shared_intermediate_size")  # MiniMax
    if width is not None:
        return (1, width, False) if width else (0, 0, False)
    if mtype.startswith("llama4"):  # Llama4TextMoe: one shared expert of intermediate_size
        return 1, expert_width, False
    return 0, 0, False


def _router_params(cfg: ConfigReader, hidden: int, experts: int, mtype: str, shared_gate: bool) -> int:
    """Gate matrix + a per-expert bias where the family has one (sigmoid routers' correction bias,
    gpt-oss router bias) + the shared-expert gate."""
    bias = (
        cfg.str_or("topk_method", "") == "noaux_tc"
        or cfg.bool_or("use_routing_bias", False)
        or cfg.str_or("moe_router_activation_func", "") == "sigmoid"
        or mtype in {"gpt_oss", "glm4_moe"}
    )
    return experts * hidden + (experts if bias else 0) + (hidden if shared_gate else 0)
