"""Parse a Hugging Face config.json into a normalised `Architecture`.

Multimodal configs (Kimi K2.5/K3, Qwen3.5, Llama-4) keep the language model under `text_config`: only
that part is read (the vision tower is not counted). Unknown keys are ignored; a missing or mistyped
key that the architecture needs raises `ConfigError` naming the dotted key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import ValidationError

from costmodel.architecture import Architecture, Layer, group_layers
from costmodel.errors import ConfigError
from costmodel.hf_fields import ConfigReader
from costmodel.hf_layers import attention_layers, ffn_layers, model_type
from costmodel.precision import MXFP4_BYTES, MXFP4_GROUP, Dtype, scaled_bytes

_TORCH_DTYPES = {"bfloat16": Dtype.BF16, "float16": Dtype.BF16, "float32": Dtype.BF16}
_CONTEXT_KEYS = ("max_position_embeddings", "model_max_length")


def parse_hf_config(config: Mapping[str, Any], name: str) -> Architecture:
    """Normalise `config` (a parsed config.json) of the model `name`."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"a Hugging Face config must be a JSON object, got {type(config).__name__}")
    root = ConfigReader(config)
    cfg = root.sub("text_config") or root
    notes: list[str] = []
    if "_NOTE" in config:
        notes.append("reconstructed config, not a verbatim Hugging Face config.json (see its _NOTE)")
    if cfg is not root:
        notes.append("language model read from text_config; vision tower not counted")
    mtype = model_type(cfg, model_type(root))
    hidden = cfg.req_int("hidden_size")
    n = cfg.req_int("num_hidden_layers")
    try:
        attentions = attention_layers(cfg, hidden, n, mtype, notes)
        ffns = ffn_layers(cfg, hidden, n, mtype, notes)
        layers = [Layer(attention=a, ffn=f) for a, f in zip(attentions, ffns, strict=True)]
        mtp = _mtp_modules(cfg, notes)
        formats = native_formats(root, cfg, notes)
        return Architecture(
            name=name,
            model_type=mtype,
            hidden_size=hidden,
            vocab_size=cfg.req_int("vocab_size"),
            tie_word_embeddings=_tied(root, cfg, notes),
            groups=group_layers(layers),
            mtp_layers=mtp,
            mtp_layer=layers[-1] if mtp else None,
            max_position_embeddings=_context(cfg, notes),
            native_weights=formats.weights,
            native_experts=formats.experts,
            native_expert_bytes=formats.expert_bytes,
            native_experts_microscaled=formats.microscaled,
            notes=tuple(dict.fromkeys(notes)),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        check = str(first["msg"]).removeprefix("Value error, ")  # a model validator's own message, as written
        raise ConfigError(f"config of {name} is inconsistent: {where + ': ' if where else ''}{check}") from None


def _tied(root: ConfigReader, cfg: ConfigReader, notes: list[str]) -> bool:
    for reader in (cfg, root):
        if reader.has("tie_word_embeddings"):
            return reader.bool_or("tie_word_embeddings", False)
    notes.append("tie_word_embeddings absent: assumed false (separate lm head)")
    return False


def _context(cfg: ConfigReader, notes: list[str]) -> int:
    found = cfg.first_int(_CONTEXT_KEYS, minimum=1)
    if found is None:
        return cfg.req_int("max_position_embeddings")  # absent: raises the missing-field error
    if found[0] != "max_position_embeddings":
        notes.append(f"max_position_embeddings absent: context taken from {found[0]}")
    return found[1]


def _mtp_modules(cfg: ConfigReader, notes: list[str]) -> int:
    """MTP modules: DeepSeek/GLM/Kimi num_nextn_predict_layers, Qwen3.5 mtp_num_hidden_layers,
    MiniMax num_mtp_modules (when use_mtp). Each is assumed to hold a copy of the last decoder layer."""
    found = cfg.first_int(("num_nextn_predict_layers", "mtp_num_hidden_layers"))
    count = found[1] if found is not None else 0
    if count == 0 and cfg.bool_or("use_mtp", False):
        count = cfg.int_or("num_mtp_modules", 0) * cfg.int_or("mtp_transformer_layers", 1)
    if count:
        notes.append(f"{count} MTP module(s), each modelled as the last decoder layer + eh_proj; not in totals")
    return count


class NativeFormats(NamedTuple):
    """Formats of a published checkpoint: non-expert weights, routed experts, the experts' bytes per element
    where their block scales differ from the format's default (`costmodel.precision`), and whether the experts
    are in OCP MX format (MXFP4: an e8m0 scale per 32 elements)."""

    weights: Dtype
    experts: Dtype
    expert_bytes: float | None = None
    microscaled: bool = False


def native_formats(root: ConfigReader, cfg: ConfigReader, notes: list[str]) -> NativeFormats:
    quant = cfg.sub("quantization_config") or root.sub("quantization_config")
    base = _torch_dtype(root, cfg, notes)
    if quant is None:
        return NativeFormats(base, base)
    method = quant.str_or("quant_method", "")
    if method == "fp8":  # DeepSeek-style 128x128 block fp8 on all linear layers
        return NativeFormats(Dtype.FP8, Dtype.FP8)
    if method == "mxfp4":  # gpt-oss: experts only; attention, router, embeddings stay bf16
        return NativeFormats(base, Dtype.FP4, MXFP4_BYTES, microscaled=True)
    if method == "compressed-tensors":
        return _compressed_tensors_experts(base, quant, notes)
    notes.append(f"quantization method {method!r} not modelled: assumed {base} weights")
    return NativeFormats(base, base)


def _compressed_tensors_experts(base: Dtype, quant: ConfigReader, notes: list[str]) -> NativeFormats:
    """Kimi K2.5 (int4, one bf16 scale per 32) and K3 (mxfp4: float, one uint8 scale per 32): 4-bit routed
    experts with their bytes per element; the ignore list keeps attention, shared experts, dense MLPs and the lm
    head in bf16. Scales are 2 bytes (compressed-tensors' fp16/bf16 default) unless `scale_dtype` names a byte
    type; float elements in groups of 32 with uint8 (e8m0) scales, or an `mxfp4` format, are MXFP4."""
    groups = quant.sub("config_groups")
    members = [groups.sub(key) for key in groups.data] if groups is not None else []
    for member in (m for m in members if m is not None):
        spec = member.sub("weights")
        if spec is None or spec.int_or("num_bits", 16) != 4:
            continue
        notes.append("compressed-tensors 4-bit weights read as routed experts only")
        dtype = Dtype.FP4 if spec.str_or("type", "int") == "float" else Dtype.INT4
        group, scale_dtype = spec.int_or("group_size", 0), spec.str_or("scale_dtype", "")
        mx = dtype is Dtype.FP4 and ("mxfp4" in (member.str_or("format", "") + quant.str_or("format", ""))
                                     or (group == MXFP4_GROUP and "uint8" in scale_dtype))
        scale = 1.0 if mx or any(t in scale_dtype for t in ("int8", "float8")) else 2.0  # MX scales: e8m0 bytes
        return NativeFormats(base, dtype, scaled_bytes(4, group, scale) if group > 0 else None, mx)
    notes.append("compressed-tensors config without 4-bit weight groups: assumed bf16 experts")
    return NativeFormats(base, Dtype.BF16)


def _torch_dtype(root: ConfigReader, cfg: ConfigReader, notes: list[str]) -> Dtype:
    for reader in (cfg, root):
        for key in ("torch_dtype", "dtype"):
            if reader.has(key):
                text = reader.str_or(key, "bfloat16")
                if text not in _TORCH_DTYPES:
                    raise ConfigError(
                        f"{reader.path(key)} is {text!r}; expected one of {sorted(_TORCH_DTYPES)}",
                        reader.path(key),
                    )
                if text != "bfloat16":
                    notes.append(f"{key} {text}: served as bf16")
                return _TORCH_DTYPES[text]
    notes.append("no torch_dtype: assumed bf16 weights")
    return Dtype.BF16
