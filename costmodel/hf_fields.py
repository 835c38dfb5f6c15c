"""Typed reads of Hugging Face config.json fields, with errors that name the key and its meaning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from costmodel.errors import ConfigError

# What each key means, for error messages ("text_config.hidden_size is missing: the model width ...").
MEANINGS: dict[str, str] = {
    "hidden_size": "the model width (size of the residual stream)",
    "num_hidden_layers": "the number of decoder layers",
    "vocab_size": "the vocabulary size (rows of the embedding table)",
    "num_attention_heads": "the number of query heads per attention layer",
    "num_key_value_heads": "the number of key/value heads (GQA groups)",
    "head_dim": "the per-head query/key dimension",
    "intermediate_size": "the width of the dense (or expert) MLP",
    "moe_intermediate_size": "the width of one routed expert's MLP",
    "num_experts_per_tok": "how many routed experts each token uses (top-k)",
    "n_group": "how many equal groups the routed experts form (DeepSeek-V3's group-limited routing)",
    "topk_group": "from how many expert groups a token's experts come",
    "kv_lora_rank": "the MLA compressed KV latent width",
    "qk_nope_head_dim": "the MLA per-head q/k dimension without RoPE",
    "qk_rope_head_dim": "the MLA per-head q/k dimension carrying RoPE",
    "v_head_dim": "the per-head value dimension",
    "max_position_embeddings": "the longest context the model supports, in tokens",
    "linear_num_key_heads": "the number of Gated DeltaNet query/key heads",
    "linear_num_value_heads": "the number of Gated DeltaNet value heads",
    "linear_key_head_dim": "the Gated DeltaNet key head dimension",
    "linear_value_head_dim": "the Gated DeltaNet value head dimension",
    "linear_conv_kernel_dim": "the Gated DeltaNet short-convolution kernel size",
    "full_attention_interval": "every how many layers a full-attention layer comes (hybrid models)",
    "num_heads": "the number of KDA heads",
    "short_conv_kernel_size": "the KDA short-convolution kernel size",
    "kda_layers": "the 1-based indices of the KDA (linear attention) layers",
    "full_attn_layers": "the 1-based indices of the full (MLA) attention layers",
    "layer_types": "the attention type of each layer",
    "sliding_window": "the sliding-window span in tokens",
    "attention_chunk_size": "the chunked-local attention span in tokens",
    "index_head_dim": "the DSA indexer head dimension",
}


# Largest value each key may take: far above any published model, low enough that building the layer list
# and counting parameters stay cheap and no float overflows (num_hidden_layers: 10**30 overflowed).
_LIMITS: dict[str, int] = {
    "num_hidden_layers": 512,  # 4x the deepest published model (126); grouping layers is quadratic in the count
    "num_nextn_predict_layers": 64,
    "mtp_num_hidden_layers": 64,
    "num_mtp_modules": 64,
    "mtp_transformer_layers": 64,
    "n_routed_experts": 65_536,
    "num_experts": 65_536,
    "num_local_experts": 65_536,
    "n_shared_experts": 1024,
    "num_shared_experts": 1024,
    "hidden_size": 1_048_576,
    "vocab_size": 100_000_000,
    "max_position_embeddings": 1_000_000_000,
    "model_max_length": 1_000_000_000,
}
_DEFAULT_LIMIT = 100_000_000  # widths, heads, ranks, windows


def _limit(key: str) -> int:
    return _LIMITS.get(key.split("[", 1)[0], _DEFAULT_LIMIT)


class ConfigReader:
    """A config mapping plus the dotted prefix of where it sits (e.g. "text_config.")."""

    def __init__(self, data: Mapping[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def has(self, key: str) -> bool:
        """Present and not null."""
        return self.data.get(key) is not None

    def _missing(self, key: str) -> ConfigError:
        meaning = MEANINGS.get(key, "a value this model family needs")
        return ConfigError(f"{self.path(key)} is missing: it gives {meaning}", field=self.path(key))

    def _bad(self, key: str, value: Any, expected: str) -> ConfigError:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return ConfigError(
            f"{self.path(key)} must be {expected}, got {shown} ({type(value).__name__})",
            field=self.path(key),
        )

    def _as_int(self, key: str, value: Any, minimum: int) -> int:
        # bool is an int subclass: reject it; accept integral floats such as 4096.0.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(key, value, "an integer")
        if not minimum <= value <= _limit(key):
            raise self._bad(key, value, f"an integer from {minimum} to {_limit(key):,}")
        return value

    def req_int(self, key: str, minimum: int = 1) -> int:
        if not self.has(key):
            raise self._missing(key)
        return self._as_int(key, self.data[key], minimum)

    def opt_int(self, key: str, minimum: int = 0) -> int | None:
        return self._as_int(key, self.data[key], minimum) if self.has(key) else None

    def int_or(self, key: str, default: int, minimum: int = 0) -> int:
        value = self.opt_int(key, minimum)
        return default if value is None else value

    def first_int(self, keys: Sequence[str], minimum: int = 0) -> tuple[str, int] | None:
        """The first present key among alternative spellings (e.g. n_routed_experts, num_experts)."""
        for key in keys:
            if self.has(key):
                return key, self._as_int(key, self.data[key], minimum)
        return None

    def req_first_int(self, keys: Sequence[str], minimum: int = 1) -> int:
        found = self.first_int(keys, minimum)
        if found is None:
            meaning = MEANINGS.get(keys[0], "a value this model family needs")
            names = " or ".join(self.path(k) for k in keys)
            raise ConfigError(f"{names} is missing: it gives {meaning}", field=self.path(keys[0]))
        return found[1]

    def bool_or(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            raise self._bad(key, value, "true or false")
        return value

    def str_or(self, key: str, default: str) -> str:
        if not self.has(key):
            return default
        value = self.data[key]
        if not isinstance(value, str):
            raise self._bad(key, value, "a string")
        return value

    def int_list(self, key: str, minimum: int = 0) -> list[int] | None:
        if not self.has(key):
            return None
        value = self.data[key]
        if not isinstance(value, list):
            raise self._bad(key, value, "a list of integers")
        return [self._as_int(f"{key}[{i}]", v, minimum) for i, v in enumerate(value)]

    def str_list(self, key: str) -> list[str] | None:
        if not self.has(key):
            return None
        value = self.data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(key, value, "a list of strings")
        return list(value)

    def sub(self, key: str) -> ConfigReader | None:
        """A nested mapping (e.g. linear_attn_config) as its own reader; None when absent."""
        if not self.has(key):
            return None
        value = self.data[key]
        if not isinstance(value, Mapping):
            raise self._bad(key, value, "a mapping")
        return ConfigReader(value, f"{self.path(key)}.")
