"""A routed-expert layer's fixed cost per step (`EngineFactors.moe_layer_overhead_s`): counted once per MoE
layer of a step, whatever the batch; dense layers and dense models do not pay it; MTP drafting passes add
theirs; copies (drafting, fetching midfills) and merges of a step's work keep the count."""

from __future__ import annotations

from dataclasses import fields

import pytest

from costmodel.calibration import default_calibration
from costmodel.evaluate import plan_layout, pool_context
from costmodel.hardware import load_system
from costmodel.layout import Layout
from costmodel.modes import decode_work, merged_work, midfill_work, prefill_work
from costmodel.pricing import WorkTable
from costmodel.resolve import ResolvedScenario
from costmodel.work import StepWork
from planner.scenario import scenario_from_data

MTP = {"method": "mtp", "draft_tokens": 2, "acceptance_rate": 0.7}


def _scenario(model: str, system: str = "h200-sxm", precision: str = "fp8", **workload: object) -> ResolvedScenario:
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": model, "precision": {"weights": precision},
        "cluster": {"system": system, "gpus": 8},
        "workload": {"input_tokens": 2048, "output_tokens": 512, **workload}, "engine": "trtllm"})


def _pool(pp: int = 1) -> Layout:
    return Layout.model_validate({"serving": "aggregated", "pools": [
        {"role": "mixed", "tp": 8 // pp, "pp": pp, "moe_ep": 8 // pp, "batch": 16}]})


def test_a_step_counts_its_routed_expert_layers() -> None:
    ctx = pool_context(_scenario("deepseek-v3"), _pool().pools[0])
    moe = sum(1 for layer in ctx.arch.layers if layer.ffn.kind == "moe")
    assert (moe, len(ctx.arch.layers)) == (58, 61)  # DeepSeek-V3: the first three layers are dense
    for work in (decode_work(ctx, 0, 16, 2048), prefill_work(ctx, 0, 2, 4096), midfill_work(ctx, 0, 2, 512, 2048)):
        assert (work.layers, work.moe_layers) == (61, 58)
    merged = merged_work(decode_work(ctx, 0, 16, 2048), prefill_work(ctx, 0, 1, 2048))
    assert (merged.layers, merged.moe_layers) == (61, 58)  # one pass over the layers, not two


def test_mtp_drafting_passes_and_fetching_midfills_keep_the_count() -> None:
    resolved = _scenario("deepseek-v3", speculative=MTP)
    decode = plan_layout(resolved, _pool()).pools[0].decode
    assert decode is not None and resolved.architecture.mtp_layer is not None
    assert resolved.architecture.mtp_layer.ffn.kind == "moe"  # DeepSeek-V3's MTP block has routed experts
    assert (decode[-1].layers, decode[-1].moe_layers) == (61 + 2, 58 + 2)  # two drafting passes
    ctx = pool_context(resolved, _pool().pools[0])
    fetched = midfill_work(ctx, 0, 2, 512, 2048, fetch=(("host_dram", 1024.0),))
    assert fetched.transfers != midfill_work(ctx, 0, 2, 512, 2048).transfers
    assert (fetched.layers, fetched.moe_layers) == (61, 58)


def test_a_merged_step_counts_its_larger_work() -> None:
    drafted = StepWork(layers=63, seqs=16.0, moe_layers=60)
    plain = StepWork(layers=61, seqs=1.0, moe_layers=58)
    assert merged_work(plain, drafted).moe_layers == merged_work(drafted, plain).moe_layers == 60


def test_a_copy_keeps_every_field() -> None:
    work = StepWork(layers=61, seqs=16.0, moe_layers=58)
    copy = work.copy()
    assert copy == work and copy.ops is not work.ops and copy.transfers is not work.transfers
    assert {f.name for f in fields(StepWork)} == {"ops", "transfers", "layers", "seqs", "moe_layers", "mla_layers",
                                                  "weight_only_layers"}


def test_pipeline_stages_split_the_count() -> None:
    ctx = pool_context(_scenario("deepseek-v3"), _pool(pp=2).pools[0])
    counts = [decode_work(ctx, stage, 16, 2048).moe_layers for stage in range(2)]
    assert counts == [28, 30]  # 61 layers split 31 / 30: the first stage holds the three dense ones


def test_dense_models_pay_no_moe_overhead() -> None:
    ctx = pool_context(_scenario("llama3.1-70b"), Layout.model_validate({"serving": "aggregated", "pools": [
        {"role": "mixed", "tp": 8, "moe_tp": 8, "batch": 16}]}).pools[0])
    assert decode_work(ctx, 0, 16, 2048).moe_layers == 0


def test_each_moe_layer_pays_the_engines_overhead_once_per_step() -> None:
    calibration = default_calibration()
    system = load_system("h200-sxm")
    works = [StepWork(layers=61, seqs=16.0), StepWork(layers=61, seqs=16.0, moe_layers=58),
             StepWork(layers=61, seqs=256.0, moe_layers=58)]
    overheads = WorkTable(works, [system] * 3, ["vllm"] * 3).price(calibration)[:, 6]
    factor = calibration.engine("vllm").moe_layer_overhead_s
    assert factor > 0
    assert overheads[1] - overheads[0] == pytest.approx(58 * factor)
    assert overheads[2] - overheads[1] == pytest.approx(240 * calibration.engine("vllm").seq_overhead_s)
