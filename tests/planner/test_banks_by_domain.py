"""Expert banks placed by domain (EPLB's hierarchical policy in prefill pools): named apart from a degree's global
banks, named in each pool's placement, and the ones the export reads for that pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from costmodel.calibration import default_calibration
from costmodel.evaluate import pool_context
from costmodel.layout import Layout
from planner.experts import bank_name, place_experts, pool_bank
from planner.export.base import read_plan
from planner.plan_output import layout_placement
from planner.scenario import scenario_from_data
from planner.templates import generate

SCENARIO = {"schema_version": 1, "name": "banks", "model": "deepseek-v3", "engine": "sglang",
            "cluster": {"system": "h200-sxm", "gpus": 64}, "workload": {"input_tokens": 4096, "output_tokens": 256}}
POOLS = [{"role": role, "replicas": 1, "tp": 1, "dp_attention": 32, "pp": 1, "moe_tp": 1, "moe_ep": 32,
          "batch": 32} for role in ("prefill", "decode")]


def test_a_prefill_pool_gets_banks_by_domain_and_the_export_reads_them() -> None:
    resolved = scenario_from_data(SCENARIO)
    layout = Layout.model_validate({"schema_version": 1, "serving": "disaggregated", "pools": POOLS})
    banks = {pool_bank(resolved, pool) for pool in layout.pools}
    assert banks == {(32, 4), (32, 1)} and resolved.architecture.expert_routing[0] == 8
    experts = {bank_name(ep, d): place_experts(256, ep, 0.0, 0, domains=d, groups=8 if d > 1 else 1)
               for ep, d in banks}
    placement = layout_placement(resolved, layout, experts)
    assert [pool["experts"]["banks"] for pool in placement["pools"]] == ["32-over-4-domains", "32"]
    data = {"layout": layout.model_dump(mode="json"), "placement": placement,
            "expert_banks": {name: banks.to_dict() for name, banks in experts.items()}}
    prefill, decode = read_plan(Path("plan.yaml"), data, resolved).pools
    assert prefill.banks is not None and decode.banks is not None
    assert prefill.banks["gpu_experts"] == [list(gpu) for gpu in experts["32-over-4-domains"].gpu_experts]
    assert decode.banks["gpu_experts"] == [list(gpu) for gpu in experts["32"].gpu_experts]
    # each node's 8 ranks hold two whole groups of 32 experts
    first_node = {e // 32 for gpu in prefill.banks["gpu_experts"][:8] for e in gpu}
    assert len(first_node) == 2


def test_plans_without_named_banks_read_the_degrees() -> None:
    """Plan files written before banks were named in the placement: each pool takes its degree's banks."""
    resolved = scenario_from_data(SCENARIO)
    layout = Layout.model_validate({"schema_version": 1, "serving": "disaggregated", "pools": POOLS})
    placement = layout_placement(resolved, layout)
    banks = place_experts(256, 32, 0.0, 0)
    data = {"layout": layout.model_dump(mode="json"), "placement": placement,
            "expert_banks": {"32": banks.to_dict()}}
    assert all(pool.banks is not None for pool in read_plan(Path("plan.yaml"), data, resolved).pools)


@pytest.mark.parametrize("serving", [["aggregated", "disaggregated"], ["disaggregated"]])
def test_candidates_are_priced_with_their_own_roles_placement(serving: list[str]) -> None:
    """The planner shares a pool context among a layout's candidates; a prefill pool's experts are placed by
    domain and a decode or mixed pool's globally, so each candidate's context is the one `plan evaluate` builds
    for it. Failed when the cache ignored the role: whichever kind came first set every role's placement."""
    resolved = scenario_from_data({**SCENARIO, "search": {"serving": serving, "tp": [1], "dp_attention": [16, 32, 64],
                                                          "pp": [1]}})
    candidates = generate(resolved, default_calibration())
    domains = {}
    for kind, found in candidates.by_role.items():
        for candidate in found:
            own = candidate.timing.plan.ctx.expert_domains
            assert own == pool_context(resolved, candidate.pool).expert_domains, (kind, candidate.pool)
            domains.setdefault(kind, set()).add(own)
    assert {2, 4, 8} <= domains["prefill"] and domains["decode"] == {1}  # prefill: by domain (or expert TP)


def test_candidates_are_priced_with_their_own_roles_expert_activations() -> None:
    """vLLM's decode pools with expert parallelism run MXFP4 experts with bf16 activations where MXFP8 is asked
    (`costmodel.resolve.mxfp8_falls_back`), its mixed and prefill pools with MXFP8: each candidate's context
    is the one `plan evaluate` builds for it, whichever role the shared cache saw first."""
    resolved = scenario_from_data({
        "schema_version": 1, "name": "activations", "model": "gpt-oss-120b", "engine": "vllm",
        "precision": {"expert_activations": "fp8"}, "cluster": {"system": "b200-sxm", "gpus": 16},
        "workload": {"input_tokens": 4096, "output_tokens": 256},
        "search": {"serving": ["aggregated", "disaggregated"], "tp": [1], "dp_attention": [8], "pp": [1]}})
    candidates = generate(resolved, default_calibration())
    formats = {}
    for kind, found in candidates.by_role.items():
        for candidate in found:
            own = candidate.timing.plan.ctx.fmt.expert_compute
            assert own is pool_context(resolved, candidate.pool).fmt.expert_compute, (kind, candidate.pool)
            formats.setdefault((kind, candidate.pool.moe_ep > 1), set()).add(own.value)
    assert formats[("decode", True)] == {"bf16"} and formats[("decode", False)] == {"fp8"}
    assert formats[("prefill", True)] == formats[("mixed", True)] == {"fp8"}
