"""CPU weight offload (`Pool.cpu_offload_gb`, vLLM's and SGLang's --cpu-offload-gb), by hand: the offloaded
weights leave HBM (a batch that did not fit fits) and cross the GPU's host link once per step (the step
grows by their bytes over the link, and a mixed step reads them once for both of its batches)."""

from __future__ import annotations

from typing import Any

import pytest

from costmodel.calibration import default_calibration
from costmodel.errors import ScenarioError
from costmodel.evaluate import evaluate, pool_context
from costmodel.hardware import load_system
from costmodel.layout import Layout
from costmodel.memory import GIB
from costmodel.modes import OFFLOAD_TRANSFER, decode_work, merged_work, midfill_work
from costmodel.resolve import ResolvedScenario
from planner.errors import InputError
from planner.scenario import layout_from_text, scenario_from_data
from tests.planner.small_scenarios import small_data


def _scenario(system: str = "gb200-nvl72", gpus: int = 8) -> ResolvedScenario:
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": "deepseek-v3", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": system, "gpus": gpus}, "workload": {"input_tokens": 4096, "output_tokens": 1024},
        "engine": "sglang"})


def _decode(batch: int, offload: float, **extra: Any) -> Layout:
    pool = {"role": "decode", "tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": batch, "cpu_offload_gb": offload}
    return Layout.model_validate({"serving": "disaggregated", "pools": [
        {"role": "prefill", "tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": 8}, {**pool, **extra}]})


def test_offloaded_weights_cross_the_host_link_every_step() -> None:
    """Each decode step grows by exactly the offloaded bytes over the host link at the fitted link efficiency,
    plus one transfer's latency (transfers add to the step; nothing overlaps them)."""
    resolved, calibration = _scenario(), default_calibration()
    base, offloaded = evaluate(resolved, _decode(256, 0.0)), evaluate(resolved, _decode(256, 20.0))
    link = load_system("gb200-nvl72").host_link_bandwidth_bytes_per_s
    expected_s = 20 * GIB / (link * calibration.nic_efficiency) + calibration.collectives["p2p"].latency_s
    assert (offloaded.tpot_ms - base.tpot_ms) / 1e3 == pytest.approx(expected_s, rel=1e-9)


def test_offload_frees_hbm_for_kv() -> None:
    resolved = _scenario()
    too_many = 5000  # over HBM without offload (238 GB a GPU), within it with 40 GiB offloaded (195 GB)
    assert not evaluate(resolved, _decode(too_many, 0.0)).feasible
    assert evaluate(resolved, _decode(too_many, 40.0)).feasible


def test_a_mixed_step_reads_the_offloaded_weights_once() -> None:
    resolved = _scenario()
    pool = _decode(64, 10.0).pools[1].model_copy(update={"role": "mixed"})
    ctx = pool_context(resolved, pool)
    mixed = merged_work(decode_work(ctx, 0, 8.0, 4096.0), midfill_work(ctx, 0, 1.0, 4096.0, 0.0))
    assert [t.bytes for t in mixed.transfers if t.name == OFFLOAD_TRANSFER] == [10 * GIB]


def test_offload_beyond_the_weights_or_the_host_dram_is_refused() -> None:
    resolved = _scenario()
    with pytest.raises(ScenarioError, match="GiB of weights a GPU of this layout holds"):
        evaluate(resolved, _decode(64, 400.0))
    with pytest.raises(ScenarioError, match="host DRAM"):  # one GPU holds all 625 GiB; 2 TB a node: 233 GiB a GPU
        pool_context(_scenario("h200-sxm"), _decode(64, 300.0, dp_attention=1, moe_ep=1).pools[1])


def test_a_layout_file_with_too_much_offload_names_its_line_and_field() -> None:
    text = ("serving: aggregated\npools:\n"
            "  - {role: mixed, tp: 1, dp_attention: 8, moe_ep: 8, batch: 64, cpu_offload_gb: 500}\n")
    with pytest.raises(InputError) as caught:
        layout_from_text(text, _scenario())
    problem = caught.value.problems[0]
    assert (problem.line, problem.field) == (3, "pools.0.cpu_offload_gb") and "offload at most" in problem.message


def test_offloaded_weights_take_their_share_of_the_kv_host_tier() -> None:
    """Host DRAM holds the offloaded weights and idle sessions' KV together: the tier gets what is left."""
    resolved = scenario_from_data(small_data("qwen3-30b-16xh100-agent-sessions-store"))

    def host_tier_gb(offload: float) -> float:
        layout = Layout.model_validate({"serving": "disaggregated", "pools": [
            {"role": "prefill", "tp": 1, "batch": 8, "cpu_offload_gb": offload},
            {"role": "decode", "tp": 1, "batch": 64}]})
        tiers = evaluate(resolved, layout).kv_tiers
        assert tiers is not None
        return float(tiers["capacity_gb"]["host_dram"])

    assert host_tier_gb(10.0) == pytest.approx(host_tier_gb(0.0) - 10 * GIB / 1e9)
