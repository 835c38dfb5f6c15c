"""Numeric formats and their storage cost.

Bytes per element include the block-scale overhead that each format carries in practice, because
the cost model charges HBM traffic and capacity for the scales too:

- bf16: 2 bytes, no scales.
- fp8: 1 byte; DeepSeek-style 128x128 block scales add one fp32 per 16,384 elements (2.4e-4 B/elem),
  which we neglect (below 0.03%).
- fp4: 4 bits plus one 8-bit scale per 16 elements (NVFP4, e4m3 scale per 16-element block:
  0.5 + 1/16 = 0.5625 B), the format an engine quantises to. A published checkpoint's own 4-bit experts
  keep its block scales (`scaled_bytes`, `Architecture.native_expert_bytes`): MXFP4 (gpt-oss, Kimi K3)
  one e8m0 scale per 32 elements, 0.53125 B; Kimi K2.5's int4 one bf16 scale per 32, 0.5625 B.
- int4: weight-only int4 (AWQ/GPTQ style) with one bf16 scale per 128-element group: 0.5 + 2/128.
"""

from __future__ import annotations

from enum import StrEnum


class Dtype(StrEnum):
    """Storage formats a scenario may choose for weights, experts and the KV cache."""

    BF16 = "bf16"
    FP8 = "fp8"
    FP4 = "fp4"
    INT4 = "int4"


def scaled_bytes(bits: int, group_size: int, scale_bytes: float) -> float:
    """Bytes per element of a block-scaled format: `bits` per element plus one scale of `scale_bytes` per
    `group_size` elements (MXFP4: 4 bits, one 1-byte e8m0 scale per 32 -> 0.53125)."""
    return bits / 8.0 + scale_bytes / group_size


# OCP MXFP4 (gpt-oss's `quant_method: mxfp4`, Kimi K3's compressed-tensors float4 with uint8 scales): one e8m0
# scale per 32 elements (`Architecture.native_experts_microscaled`; on NVIDIA GPUs the engines compute such
# experts with MXFP8 or bf16 activations by default: `costmodel.calibration.MX_EXPERT_ACTIVATIONS`).
MXFP4_GROUP = 32
MXFP4_BYTES = scaled_bytes(4, MXFP4_GROUP, 1.0)

BYTES_PER_ELEMENT: dict[Dtype, float] = {
    Dtype.BF16: 2.0,
    Dtype.FP8: 1.0,
    Dtype.FP4: scaled_bytes(4, 16, 1.0),  # NVFP4
    Dtype.INT4: scaled_bytes(4, 128, 2.0),
}

# Formats a KV cache may be stored in (4-bit KV is not offered by the engines we model).
KV_DTYPES: frozenset[Dtype] = frozenset({Dtype.BF16, Dtype.FP8})

# Linear-attention recurrent states as serving engines keep them: in the model's dtype, bf16 (vLLM
# `mamba_ssm_cache_dtype: auto` for Qwen3-Next and Kimi-Linear, SGLang likewise); the fla reference kernels
# accumulate in fp32 registers but read and write the cached state in its storage dtype.
STATE_BYTES_PER_ELEMENT = 2.0


def bytes_per_element(dtype: Dtype | str) -> float:
    """Storage bytes per element of `dtype`, scales included."""
    return BYTES_PER_ELEMENT[Dtype(dtype)]
