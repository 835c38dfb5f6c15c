"""The fixed costs of layer kinds that run kernels of their own (`EngineFactors.mla_layer_overhead_s`,
`EngineFactors.weight_only_layer_overhead_s`): an MLA layer and a routed-expert layer whose experts the GPU
dequantises are counted once per step, whatever the batch; GQA layers, natively computed experts and dense
models do not pay them; merges, drafting passes and pipeline stages keep the counts."""

from __future__ import annotations

import pytest

from costmodel.calibration import default_calibration
from costmodel.evaluate import plan_layout, pool_context
from costmodel.hardware import load_system
from costmodel.layout import Layout
from costmodel.modes import decode_work, merged_work, prefill_work
from costmodel.pricing import WorkTable
from costmodel.work import StepWork
from tests.unit.test_moe_layer_overhead import _pool, _scenario


def test_every_deepseek_layer_is_mla_and_no_gqa_layer_is() -> None:
    ctx = pool_context(_scenario("deepseek-v3"), _pool().pools[0])
    for work in (decode_work(ctx, 0, 16, 2048), prefill_work(ctx, 0, 2, 4096)):
        assert (work.layers, work.mla_layers, work.weight_only_layers) == (61, 61, 0)
    merged = merged_work(decode_work(ctx, 0, 16, 2048), prefill_work(ctx, 0, 1, 2048))
    assert merged.mla_layers == 61  # one pass over the layers, not two
    llama = pool_context(_scenario("llama3.1-70b"), Layout.model_validate({"serving": "aggregated", "pools": [
        {"role": "mixed", "tp": 8, "moe_tp": 8, "batch": 16}]}).pools[0])
    assert decode_work(llama, 0, 16, 2048).mla_layers == 0


def test_pipeline_stages_split_the_mla_count() -> None:
    ctx = pool_context(_scenario("deepseek-v3"), _pool(pp=2).pools[0])
    assert [decode_work(ctx, stage, 16, 2048).mla_layers for stage in range(2)] == [31, 30]


def test_mtp_drafting_passes_add_their_mla_layers() -> None:
    resolved = _scenario("deepseek-v3", speculative={"method": "mtp", "draft_tokens": 2, "acceptance_rate": 0.7})
    decode = plan_layout(resolved, _pool()).pools[0].decode
    assert decode is not None
    assert decode[-1].mla_layers == 61 + 2


def test_fp4_experts_are_weight_only_layers_on_hopper_only() -> None:
    hopper = pool_context(_scenario("gpt-oss-120b", "h200-sxm", "fp4"), _pool().pools[0])
    blackwell = pool_context(_scenario("gpt-oss-120b", "b200-sxm", "fp4"), _pool().pools[0])
    on_hopper, on_blackwell = decode_work(hopper, 0, 16, 2048), decode_work(blackwell, 0, 16, 2048)
    assert (on_hopper.moe_layers, on_hopper.weight_only_layers, on_hopper.mla_layers) == (36, 36, 0)
    assert (on_blackwell.moe_layers, on_blackwell.weight_only_layers) == (36, 0)  # Blackwell computes in fp4


def test_each_kind_pays_its_engines_overhead_once_per_step() -> None:
    calibration = default_calibration()
    system = load_system("h200-sxm")
    base = StepWork(layers=61, seqs=16.0, moe_layers=58)
    works = [base, StepWork(layers=61, seqs=16.0, moe_layers=58, mla_layers=61),
             StepWork(layers=61, seqs=16.0, moe_layers=58, mla_layers=61, weight_only_layers=58)]
    overheads = WorkTable(works, [system] * 3, ["trtllm"] * 3).price(calibration)[:, 6]
    factors = calibration.engine("trtllm")
    assert factors.mla_layer_overhead_s > 0 and factors.weight_only_layer_overhead_s > 0
    assert overheads[1] - overheads[0] == pytest.approx(61 * factors.mla_layer_overhead_s)
    assert overheads[2] - overheads[1] == pytest.approx(58 * factors.weight_only_layer_overhead_s)


def test_an_engine_whose_rows_run_no_mla_keeps_its_prior() -> None:
    """vLLM's rows here run no MLA model: its MLA overhead is not a free factor of the fit (no row could move
    it); it keeps its prior, and a held-out engine takes the mean of every fitted engine's value, that prior
    included (`ParameterSpace.calibration`)."""
    from costmodel.calibration import prior_calibration
    from costmodel.fitting import ParameterSpace
    from tests.fit_rows import RowsStub

    engines = ["trtllm"] * 20 + ["sglang"] * 20 + ["vllm"] * 20
    rows = RowsStub(engines, mla_layers=[61] * 40 + [0] * 20, weight_only_layers=[36] * 10 + [0] * 50)
    prior = prior_calibration()
    space = ParameterSpace.for_rows(rows, prior)  # type: ignore[arg-type]
    assert space.unexercised == {("vllm", "mla_layer_overhead_s"), ("sglang", "weight_only_layer_overhead_s"),
                                 ("vllm", "weight_only_layer_overhead_s")}
    assert "engines.vllm.mla_layer_overhead_s" not in space.names()
    assert "engines.trtllm.weight_only_layer_overhead_s" in space.names()
    fitted = space.calibration(space.initial() + 0.5, "t").engines  # every free factor moved off its prior
    assert fitted["vllm"].mla_layer_overhead_s == prior.engine("vllm").mla_layer_overhead_s
    assert fitted["trtllm"].mla_layer_overhead_s != prior.engine("trtllm").mla_layer_overhead_s
    mla = [fitted[e].mla_layer_overhead_s for e in ("trtllm", "sglang", "vllm")]
    assert fitted["generic"].mla_layer_overhead_s == pytest.approx(sum(mla) / 3)
