"""What a sequence's cache weighs where it is stored, moved and read: fixed states of windowed and linear
attention in KV transfers, the MTP layer's KV when it drafts, the recurrent state's format, DSA's packed fp8
latent, latent experts' dispatch width, and weights held whole on every tp rank (found by a helper's
independent implementation of the formulas; each test fails on the code before)."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.disaggregated import request_kv_bytes
from costmodel.evaluate import plan_layout, pool_context
from costmodel.layout import Layout
from costmodel.memory import stage_memory, stage_weight_bytes
from costmodel.modes import decode_work
from costmodel.operators import attention_shard_params, ffn_shard_params
from costmodel.precision import Dtype
from costmodel.resolve import ResolvedScenario
from planner.scenario import scenario_from_data


def scenario(model: str, system: str = "b200-sxm", gpus: int = 16, kv: str = "fp8",
             **workload: Any) -> ResolvedScenario:
    load = {"input_tokens": 8192, "output_tokens": 512, **workload}
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": model, "precision": {"weights": "fp8", "kv_cache": kv},
        "cluster": {"system": system, "gpus": gpus}, "workload": load,
    })


def pools(role: str = "mixed", tp: int = 8, dp: int = 1, ep: int = 1) -> Layout:
    pool = {"replicas": 1, "tp": tp, "dp_attention": dp, "moe_tp": tp * dp // ep, "moe_ep": ep, "batch": 8}
    if role == "mixed":
        return Layout.model_validate({"serving": "aggregated", "pools": [{"role": "mixed", **pool}]})
    return Layout.model_validate({"serving": "disaggregated", "pools": [{"role": "prefill", **pool},
                                                                        {"role": "decode", **pool}]})


@pytest.mark.parametrize("model", ["gpt-oss-120b", "Qwen/Qwen3-Next-80B-A3B-Instruct"])
def test_a_kv_transfer_moves_the_fixed_states_too(model: str) -> None:
    """gpt-oss's sliding-window KV and Qwen3-Next's recurrent states go to the decode pool with the request."""
    resolved = scenario(model, kv="bf16")
    arch, kv = resolved.architecture, Dtype.BF16
    prefill = plan_layout(resolved, pools("disaggregated")).pools[0]
    context = prefill.request.cached + prefill.request.new
    states = arch.state_bytes_per_sequence(int(context), kv)
    assert states > 0
    assert request_kv_bytes(prefill) == pytest.approx(arch.kv_bytes_per_token(kv) * context + states)


def test_qwen35_keeps_its_recurrent_state_in_fp32() -> None:
    """Its config asks for an fp32 state (`mamba_ssm_dtype`): 45 layers x 64 heads x 128 x 128 x 4 B = 180 MiB,
    and 3.2 MiB of bf16 conv state."""
    arch = scenario("Qwen/Qwen3.5-397B-A17B").architecture
    assert arch.state_bytes_per_sequence(8192, Dtype.BF16) / 2**20 == pytest.approx(183.2, abs=0.05)
    qwen3_next = scenario("Qwen/Qwen3-Next-80B-A3B-Instruct").architecture
    assert {layer.attention.state_bytes_per_element for group in qwen3_next.groups for layer in group.layers
            if layer.attention.kind == "linear"} == {2.0}


def test_mtp_drafting_holds_the_mtp_layers_kv() -> None:
    plain = scenario("deepseek-v3", gpus=8)
    drafting = scenario("deepseek-v3", gpus=8, speculative={"method": "mtp"})
    ctx = pool_context(plain, pools().pools[0])
    without = stage_memory(ctx, 0, 8, 8192, 1.0, with_mtp=False).kv_cache
    with_mtp = stage_memory(ctx, 0, 8, 8192, 1.0, with_mtp=True).kv_cache
    per_layer = without / 61  # 61 MLA layers, one MTP layer of the same KV
    assert with_mtp == pytest.approx(without + per_layer)
    kv_cache = [plan_layout(s, pools()).pools[0].memory.kv_cache for s in (drafting, plain)]
    assert kv_cache[0] > kv_cache[1]


def test_dsa_decode_reads_the_packed_fp8_latent() -> None:
    """DeepSeek-V3.2's fp8 latent is stored packed with its scales and a bf16 rope (656 B per token and layer)
    and read as stored: 2,048 selected keys of it per layer, the indexer's keys apart."""
    resolved = scenario("deepseek-ai/DeepSeek-V3.2", gpus=8)
    ctx = pool_context(resolved, pools().pools[0])
    work = decode_work(ctx, 0, 4, 16384)
    core = sum(op.hbm_bytes for op in work.ops if op.name == "attention_core")
    layers = sum(count for _, count in ctx.stage_counts[0])
    assert core == pytest.approx(layers * 4 * 2048 * 656)


def test_latent_experts_are_dispatched_at_their_width() -> None:
    """Kimi K3's routed experts work at a latent width: the token is projected down before the all-to-all."""
    resolved = scenario("kimi-k3", gpus=16)
    ctx = pool_context(resolved, pools(tp=1, dp=16, ep=16).pools[0])
    ffn = next(layer.ffn for group in resolved.architecture.groups for layer in group.layers
               if layer.ffn.kind == "moe")
    assert ffn.expert_hidden_size is not None and ffn.expert_hidden_size < resolved.architecture.hidden_size
    work = decode_work(ctx, 0, 8, 4096)
    dispatch = sum(t.bytes for t in work.transfers if t.name == "moe_dispatch")
    moe_layers = sum(count for layer, count in ctx.stage_counts[0] if layer.ffn.kind == "moe")
    tokens_per_gpu, remote = 8 * 16 / 16, 16 * (1 - (15 / 16) ** ffn.top_k) * 15 / 16
    per_layer = tokens_per_gpu * remote * ffn.expert_hidden_size * ctx.fmt.activation_bytes
    assert dispatch == pytest.approx(moe_layers * per_layer)


def test_weights_each_rank_holds_whole() -> None:
    """Past the KV-head count a GQA rank holds a KV head's k/v projections whole, as its KV; the router is on
    every rank (ReplicatedLinear); the rest splits by tp."""
    arch = scenario("qwen3-235b").architecture
    layer = arch.groups[0].layers[0]
    attn, ffn = layer.attention, layer.ffn
    kv = attn.kv_projection_params()
    assert attention_shard_params(attn, 8) == pytest.approx((attn.params() - kv) / 8 + kv / attn.num_kv_heads)
    assert attention_shard_params(attn, 2) == pytest.approx(attn.params() / 2)
    router = ffn.router_params
    assert ffn_shard_params(ffn, 8) == pytest.approx((ffn.dense_params() - router) / 8 + router)
    resolved = scenario("qwen3-235b", gpus=8)
    assert stage_weight_bytes(pool_context(resolved, pools().pools[0]), 0, with_mtp=False) > 0


def test_a_sparse_fill_reads_every_cached_latent() -> None:
    """A DSA midfill's queries each pick their own 2,048 keys: together they span the whole cached context,
    so the latent read is the context's, not 2,048 cached keys (the window rule, which the code applied)."""
    from costmodel.modes import midfill_work

    resolved = scenario("deepseek-ai/DeepSeek-V3.2", gpus=8)
    ctx = pool_context(resolved, pools().pools[0])
    work = midfill_work(ctx, 0, 2, 1024, 16384)
    core = sum(op.hbm_bytes for op in work.ops if op.name == "attention_core")
    layers = sum(count for _, count in ctx.stage_counts[0])
    assert core == pytest.approx(layers * 2 * (16384 + 1024) * 656)


def test_a_windowed_mla_layer_reads_its_latents() -> None:
    """A windowed MLA layer's cache is a per-sequence state, but its entries are still read (was 0 bytes:
    the read took the growing cache's bytes per token, 0 under a window)."""
    from costmodel.operators import StepShape, attention_ops
    arch = scenario("deepseek-v3", gpus=8).architecture
    attn = arch.groups[-1].layers[0].attention.model_copy(update={"window": 1024})
    assert attn.kv_bytes_per_token(Dtype.FP8) == 0 and attn.entry_bytes(Dtype.FP8) == 576
    ctx = pool_context(scenario("deepseek-v3", gpus=8), pools().pools[0])
    core = [op for op in attention_ops(attn, StepShape("decode", 4, 1, 8192), ctx.par, ctx.fmt)
            if op.name == "attention_core"]
    assert core[0].hbm_bytes == pytest.approx(4 * 1024 * 576)


def test_the_kv_diagnosis_counts_the_mtp_layers_kv_where_they_draft() -> None:
    from planner.diagnose import sequence_bytes

    plain = scenario("deepseek-v3", gpus=8)
    drafting = scenario("deepseek-v3", gpus=8, speculative={"method": "mtp"})
    assert sequence_bytes(drafting, 8192) == pytest.approx(sequence_bytes(plain, 8192) * 62 / 61)
