"""Bytes per element of routed experts as stored: a published checkpoint's 4-bit experts keep their block
scales (MXFP4: one e8m0 byte per 32 elements, 0.53125 B; Kimi K2.5's int4: one bf16 scale per 32, 0.5625 B);
experts an engine quantises take the format's default (NVFP4: 0.5625 B; int4: one bf16 per 128)."""

from __future__ import annotations

import pytest

from costmodel.evaluate import pool_context
from costmodel.layout import Layout
from costmodel.models import load_model
from costmodel.precision import Dtype, bytes_per_element, scaled_bytes
from costmodel.resolve import ResolvedScenario
from planner.scenario import scenario_from_data


def _resolved(model: str, **precision: str) -> ResolvedScenario:
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": model, "precision": precision,
        "cluster": {"system": "b200-sxm", "gpus": 8},
        "workload": {"input_tokens": 1024, "output_tokens": 1024}, "engine": "vllm"})


def test_block_scaled_bytes_by_hand() -> None:
    assert scaled_bytes(4, 32, 1.0) == 0.5 + 1 / 32 == 0.53125  # MXFP4
    assert scaled_bytes(4, 16, 1.0) == bytes_per_element(Dtype.FP4) == 0.5625  # NVFP4
    assert scaled_bytes(4, 128, 2.0) == bytes_per_element(Dtype.INT4)


def test_published_checkpoints_keep_their_block_scales() -> None:
    assert (load_model("gpt-oss-120b").native_experts, load_model("gpt-oss-120b").native_expert_bytes) == \
        (Dtype.FP4, 0.53125)
    assert load_model("kimi-k3").native_expert_bytes == 0.53125  # compressed-tensors mxfp4, uint8 scales
    assert load_model("kimi-k2.5").native_expert_bytes == 0.5625  # int4, group 32, bf16 scales
    assert load_model("deepseek-v3").native_expert_bytes is None  # block fp8: the format's default


@pytest.mark.parametrize(("model", "precision", "expected"), [
    ("gpt-oss-120b", {}, 0.53125),  # the checkpoint's MXFP4
    ("gpt-oss-120b", {"experts": "fp4"}, 0.53125),  # fp4 as published: still MXFP4
    ("gpt-oss-120b", {"experts": "fp8"}, 1.0),  # requantised: the format's default
    ("deepseek-v3", {"experts": "fp4"}, 0.5625),  # an engine's NVFP4
])
def test_experts_as_stored(model: str, precision: dict[str, str], expected: float) -> None:
    resolved = _resolved(model, **precision)
    assert resolved.expert_bytes == expected
    pool = Layout.model_validate({"serving": "aggregated", "pools": [
        {"role": "mixed", "tp": 8, "moe_ep": 8, "batch": 8}]}).pools[0]
    assert pool_context(resolved, pool).fmt.expert_bytes == expected
