"""MXFP4 routed experts on NVIDIA fp4 tensor cores: the activations they pair with (`precision.expert_activations`:
W4A8, W4A16 at the wider format's rate; weight-only experts on Hopper priced as before), the token tiles of
their kernels, the expected error's note and the engines' launches of the format priced."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from costmodel.evaluate import evaluate, pool_context
from costmodel.expected_error import expected_error
from costmodel.layout import Layout
from costmodel.operators import covering_tile, distinct_experts, padded_rows, routed_expert_ops
from costmodel.precision import Dtype
from costmodel.resolve import ResolvedScenario
from planner.errors import InputError
from planner.export import export_plan, load_plan
from planner.scenario import scenario_from_data
from tests.export.engine_check import check_args, flags_of

PLAN = Path(__file__).resolve().parents[1] / "export" / "plans" / "gpt-oss-120b-8xb200-plan-24.yaml"
MIXED = {"inventory": [{"name": "hopper", "system": "h200-sxm", "nodes": 1},
                       {"name": "blackwell", "system": "b200-sxm", "nodes": 1}]}


def _resolved(activations: str | None = None, model: str = "gpt-oss-120b", cluster: dict[str, Any] | None = None,
              engine: str = "sglang") -> ResolvedScenario:
    precision = {} if activations is None else {"expert_activations": activations}
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": model, "precision": precision,
        "cluster": cluster or {"system": "b200-sxm", "gpus": 8},
        "workload": {"input_tokens": 8192, "output_tokens": 1024}, "engine": engine})


def _layout(batch: int, group: str | None = None) -> Layout:
    pool = {"role": "mixed", "tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": batch} | (
        {"group": group} if group else {})
    return Layout.model_validate({"schema_version": 1, "serving": "aggregated", "pools": [pool]})


@pytest.mark.parametrize(("activations", "compute"), [(None, Dtype.FP4), ("fp8", Dtype.FP8), ("bf16", Dtype.BF16)])
def test_mxfp4_experts_on_fp4_tensor_cores_compute_at_the_activations_rate(activations: str | None,
                                                                            compute: Dtype) -> None:
    fmt = pool_context(_resolved(activations), _layout(64).pools[0]).fmt
    assert fmt.expert_compute is compute and fmt.weight_only_experts is None  # a fused kernel, not weight-only
    assert fmt.expert_bytes == 0.53125  # the weights stay MXFP4 in HBM


def test_covering_tiles_by_hand() -> None:
    tiles = (8, 16, 32, 64, 128)
    assert [covering_tile(rows, tiles) for rows in (0.5, 8, 8.1, 33, 128, 500)] == [8, 8, 16, 64, 128, 128]
    assert covering_tile(3.0, (128,)) == covering_tile(500.0, (128,)) == 128 and covering_tile(3.0, ()) == 0


@pytest.mark.parametrize(("activations", "batch", "tile"), [
    (None, 1, 8), (None, 64, 16), (None, 256, 64), (None, 1024, 256), ("fp8", 512, 128), ("fp8", 768, 192),
    ("bf16", 64, 16), ("bf16", 1024, 64),
])
def test_mxfp4_experts_on_blackwell_pad_their_rows_to_the_covering_token_tile(activations: str | None, batch: int,
                                                                              tile: int) -> None:
    """gpt-oss-120b at EP 8: 16 local experts; a decode step of `batch` sequences on each of 8 ranks sends
    batch x 8 x 4 rows over 8 GPUs, batch / 4 per local expert (no imbalance at skew 0), padded to the first
    tile of the kernel's activations that covers them (bf16 activations: 64 rows at most)."""
    resolved = _resolved(activations)
    ctx = pool_context(resolved, _layout(batch).pools[0])
    ffn = next(layer.ffn for layer in resolved.architecture.layers if layer.ffn.kind == "moe")
    rows = batch * 8 * ffn.top_k / 8
    touched = 16 * distinct_experts(ffn.num_experts, ffn.top_k, batch * 8) / ffn.num_experts
    op = routed_expert_ops(ffn, batch * 8, ctx.par, ctx.fmt, 1.0)[0]
    assert op.flops == pytest.approx(2.0 * padded_rows(rows, touched, tile) * ffn.routed_expert_params())


def test_other_experts_keep_their_generations_tile() -> None:
    nvfp4 = scenario_from_data({
        "schema_version": 1, "name": "t", "model": "deepseek-v3", "precision": {"experts": "fp4"},
        "cluster": {"system": "b200-sxm", "gpus": 8}, "workload": {"input_tokens": 1024, "output_tokens": 1024}})
    assert pool_context(nvfp4, _layout(64).pools[0]).fmt.expert_tiles == (128,)
    hopper = pool_context(_resolved(cluster={"system": "h200-sxm", "gpus": 8}), _layout(64).pools[0]).fmt
    assert hopper.expert_tiles == (64,) and hopper.weight_only_experts is Dtype.FP4  # Marlin-style blocks instead


def test_b200_is_not_priced_slower_than_hopper_whatever_the_activations() -> None:
    """The generations invariant with the activations engines run: a B200 with MXFP4 x BF16 experts against an
    H100 or H200 running them weight-only in bf16 (the same kernels' class; 128-row tiles at bf16's rate priced
    a B200 decode step slower than an H100's before the covering tiles)."""
    for batch in (1, 16, 64, 256):
        b200 = evaluate(_resolved("bf16"), _layout(batch))
        for system in ("h100-sxm", "h200-sxm"):
            hopper = evaluate(_resolved(cluster={"system": system, "gpus": 8}), _layout(batch))
            assert b200.ttft_ms <= hopper.ttft_ms and b200.tpot_ms <= hopper.tpot_ms, (batch, system)


def test_experts_a_gpu_cannot_compute_as_stored_stay_weight_only_in_bf16() -> None:
    resolved = _resolved("fp8", cluster=MIXED)
    hopper = pool_context(resolved, _layout(64, "hopper").pools[0]).fmt
    blackwell = pool_context(resolved, _layout(64, "blackwell").pools[0]).fmt
    assert (hopper.expert_compute, hopper.weight_only_experts) == (Dtype.BF16, Dtype.FP4)
    assert (blackwell.expert_compute, blackwell.weight_only_experts) == (Dtype.FP8, None)


@pytest.mark.parametrize("batch", [1, 16, 64, 256, 1024])
def test_wider_activations_are_never_faster(batch: int) -> None:
    """The same layout: fp4 rate <= MXFP8's <= bf16's in TTFT and TPOT, at every batch (their kernels share their
    token tiles); the 8K-token prompts are compute-bound, so TTFT grows strictly."""
    figures = [evaluate(_resolved(a), _layout(batch)) for a in (None, "fp8", "bf16")]
    ttft = [f.ttft_ms for f in figures]
    tpot = [f.tpot_ms for f in figures]
    assert ttft[0] < ttft[1] < ttft[2]
    assert tpot[0] <= tpot[1] <= tpot[2]


@pytest.mark.parametrize(("model", "experts", "cluster", "says"), [
    ("deepseek-v3", None, None, "these experts compute as stored (fp8)"),  # W8A16 no engine runs
    ("deepseek-v3", "fp4", None, "these experts compute as stored (NVFP4, W4A4)"),
    ("kimi-k2.5", None, None, "these experts compute as stored (int4)"),
    ("gpt-oss-120b", None, {"system": "h200-sxm", "gpus": 8}, "no GPU of this cluster (h200-sxm) has NVIDIA fp4"),
    ("gpt-oss-120b", None, {"system": "mi355x", "gpus": 8}, "no GPU of this cluster (mi355x) has NVIDIA fp4"),
])
def test_activations_the_engines_do_not_choose_are_refused_naming_the_field(
        model: str, experts: str | None, cluster: dict[str, Any] | None, says: str) -> None:
    document = {"schema_version": 1, "name": "t", "model": model,
                "precision": {"expert_activations": "bf16"} | ({"experts": experts} if experts else {}),
                "cluster": cluster or {"system": "b200-sxm", "gpus": 8},
                "workload": {"input_tokens": 1024, "output_tokens": 1024}, "engine": "vllm"}
    with pytest.raises(InputError) as caught:
        scenario_from_data(document)
    assert "precision.expert_activations: " in str(caught.value) and says in str(caught.value)


def test_the_expected_error_says_what_the_experts_were_priced_with() -> None:
    default = expected_error(_resolved()).basis
    assert "priced at the fp4 tensor-core rate" in default and "may be optimistic" in default
    chosen = expected_error(_resolved("fp8")).basis
    assert "priced on NVIDIA fp4 tensor cores with MXFP8 activations as precision.expert_activations sets" in chosen
    assert "sglang computes such experts with MXFP8 activations by default" in chosen
    assert "optimistic" not in chosen


def _plan(activations: str | None) -> Any:
    plan = load_plan(PLAN)
    precision = plan.resolved.scenario.precision.model_copy(update={"expert_activations": activations})
    scenario = plan.resolved.scenario.model_copy(update={"precision": precision})
    return dataclasses.replace(plan, resolved=dataclasses.replace(plan.resolved, scenario=scenario))


def _words(exported: Any) -> list[str]:
    return [word for commands in exported.commands.values() for command in commands for word in command.args]


def test_vllm_launches_mxfp8_activations_where_they_were_priced() -> None:
    default, fp8, bf16 = (export_plan(_plan(a), "vllm") for a in (None, "fp8", "bf16"))
    assert "--quantization-config" not in _words(default) + _words(bf16)  # bf16: vLLM's default
    args = _words(fp8)
    assert json.loads(args[args.index("--quantization-config") + 1]) == {"moe": {"activation": "mxfp8"}}
    assert check_args(args, flags_of("vllm"), positionals=1) == []
    assert any("priced them at the fp4 rate" in note for note in default.unexpressed)
    assert not any("fp4 rate" in note for note in fp8.unexpressed + bf16.unexpressed)


def _decode_plan(activations: str, engine: str) -> Any:  # a Plan (planner.export.base)
    plan = _plan(activations)
    scenario = plan.resolved.scenario.model_copy(update={"engine": engine})
    return dataclasses.replace(plan, resolved=dataclasses.replace(plan.resolved, scenario=scenario),
                               pools=tuple(dataclasses.replace(p, role="decode") for p in plan.pools))


def test_vllm_decode_pools_on_deepep_low_latency_say_they_cannot_run_mxfp8() -> None:
    """vLLM's MXFP8 MoE kernels take no batched (DeepEP low-latency) input: 0.31 would stop at start-up, so a
    decode pool with expert parallelism gets no flag and a note: priced bf16 where the plan was priced for vLLM,
    a mismatch where it was priced for another engine."""
    for engine, note in (("trtllm", "slower than priced"), ("vllm", "as the plan priced them")):
        exported = export_plan(_decode_plan("fp8", engine), "vllm")
        assert "deepep_low_latency" in _words(exported) and "--quantization-config" not in _words(exported)
        assert any("take no DeepEP low-latency (batched) input" in n and note in n for n in exported.unexpressed)


def test_sglang_says_where_a_vllm_plan_priced_mxfp8_experts_bf16() -> None:
    """A plan solved for vLLM prices its DeepEP low-latency decode pools' MXFP4 experts with bf16 activations where
    MXFP8 was asked; exported to SGLang it launches that format (the flag) and says why, not silently."""
    for engine, priced_bf16 in (("vllm", True), ("sglang", False)):
        exported = export_plan(_decode_plan("fp8", engine), "sglang")
        words = _words(exported)
        assert ("--flashinfer-mxfp4-moe-precision" in words) is priced_bf16
        assert any("as its engine, vLLM, runs them over DeepEP low-latency" in n
                   for n in exported.unexpressed) is priced_bf16


@pytest.mark.parametrize(("engine", "role", "dp", "moe_ep", "compute"), [
    ("vllm", "decode", 8, 8, Dtype.BF16),  # DeepEP low-latency's batched input: vLLM falls back to bf16 activations
    ("vllm", "decode", 1, 8, Dtype.FP8),  # expert parallelism without DP: no all-to-all kernels, Standard input
    ("vllm", "decode", 8, 1, Dtype.FP8), ("vllm", "prefill", 8, 8, Dtype.FP8), ("sglang", "decode", 8, 8, Dtype.FP8)])
def test_mxfp8_asked_of_vllm_decode_pools_on_deepep_low_latency_is_priced_bf16(engine: str, role: str, dp: int,
                                                                               moe_ep: int, compute: Dtype) -> None:
    pools = [{"role": "prefill", "tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": 8},
             {"role": "decode", "tp": 8 // dp, "dp_attention": dp, "moe_tp": 8 // moe_ep, "moe_ep": moe_ep,
              "batch": 64}]
    layout = Layout.model_validate({"schema_version": 1, "serving": "disaggregated", "pools": pools})
    cluster = {"system": "b200-sxm", "gpus": 16}
    pool = next(p for p in layout.pools if p.role == role)
    fmt = pool_context(_resolved("fp8", cluster=cluster, engine=engine), pool).fmt
    assert fmt.expert_compute is compute
    bf16 = pool_context(_resolved("bf16", cluster=cluster, engine=engine), pool).fmt
    assert (fmt.expert_tiles == bf16.expert_tiles) is (compute is Dtype.BF16)


def test_a_hopper_pool_of_a_mixed_cluster_launches_no_activation_flag() -> None:
    plan = _plan("bf16")
    hopper = next(g.system for g in _resolved("bf16", cluster=MIXED).groups if g.name == "hopper")
    on_hopper = dataclasses.replace(plan, pools=tuple(dataclasses.replace(p, system=hopper) for p in plan.pools))
    exported = export_plan(on_hopper, "sglang")
    assert "--flashinfer-mxfp4-moe-precision" not in _words(exported)
    assert not any("MXFP4" in note for note in exported.unexpressed)


def test_sglang_launches_bf16_activations_where_they_were_priced() -> None:
    default, fp8, bf16 = (export_plan(_plan(a), "sglang") for a in (None, "fp8", "bf16"))
    args = _words(bf16)
    assert args[args.index("--flashinfer-mxfp4-moe-precision") + 1] == "bf16"
    assert check_args(args, flags_of("sglang")) == []
    assert "--flashinfer-mxfp4-moe-precision" not in _words(fp8) + _words(default)  # MXFP8: SGLang's default
    assert any("MXFP8 activations on these GPUs by default" in note for note in default.unexpressed)
    assert not any("fp4 rate" in note for note in fp8.unexpressed + bf16.unexpressed)


def test_trtllm_says_the_format_priced_which_its_config_does_not_choose() -> None:
    notes = export_plan(_plan("bf16"), "trtllm").unexpressed
    assert any(note.startswith("the plan priced MXFP4 experts with bf16 activations") for note in notes)
