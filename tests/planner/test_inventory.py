"""Real clusters: inventories of several GPU systems, busy or failed GPUs, partial nodes and rack uplinks.

The fronts over two groups against the exhaustive reference (every prefill x decode deployment on each
group and across the two, the link budgets in the cost model) on every backend, with and without the
closed-form screening; mixed-generation deployments that beat each group's own front; an oversubscribed
uplink that changes the front and is named; unavailable GPUs never placed and refused by `plan evaluate`.
"""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from costmodel.calibration import default_calibration
from costmodel.disaggregated import kv_link_bandwidth, request_kv_bytes
from costmodel.evaluate import plan_layout
from planner import plan_output
from planner.batches import refine_inventory
from planner.errors import InputError
from planner.pareto import FrontPoint, non_dominated
from planner.reference import disaggregated_points, exhaustive_front
from planner.scenario import load_layout, scenario_from_data
from planner.solve import SolveResult, SolveSettings, solve
from planner.solvers import BACKENDS
from planner.templates import generate

REL = 1e-6

# Llama-3.1-8B with a bf16 KV cache (1.07 GB per 8K request) on an H100 group and a B200 group with one
# failed GPU; a 300 GB/s rack uplink (9.4 GB/s per GPU): the KV links cap the rate of the widest
# cross-group deployments (a front point is held by them).
TWO_GROUPS: dict[str, Any] = {
    "schema_version": 1, "name": "two-groups", "model": "llama3.1-8b",
    "precision": {"weights": "fp8", "kv_cache": "bf16"},
    "cluster": {"inventory": [{"name": "hop", "system": "h100-sxm", "gpus": 4},
                              {"name": "bw", "system": "b200-sxm", "gpus": 4, "unavailable": ["r0/n0/g3"]}],
                "network": {"uplink_bytes_per_s": 3.0e11}},
    "workload": {"input_tokens": 8192, "output_tokens": 128}, "slo": {"tpot_ms": 40},
    "search": {"serving": ["disaggregated"], "pp": [1], "dp_attention": [1], "max_batch": 16},
}

# DeepSeek-V3 on two H200 nodes and 16 GPUs of a GB200 NVL72 rack, GPUs counted as used.
MIXED_GENERATIONS: dict[str, Any] = {
    "schema_version": 1, "name": "mixed-generations", "model": "deepseek-ai/DeepSeek-V3",
    "precision": {"weights": "fp8", "kv_cache": "fp8"},
    "cluster": {"inventory": [{"name": "hopper", "system": "h200-sxm", "nodes": 2},
                              {"name": "nvl", "system": "gb200-nvl72", "gpus": 16}]},
    "workload": {"input_tokens": 4096, "output_tokens": 1024}, "slo": {"ttft_ms": 2000, "tpot_ms": 50},
    "search": {"gpu_accounting": "used", "serving": ["disaggregated"], "max_batch": 256}, "engine": "sglang",
}


def _with(data: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = out
        for key in path:
            node = node[key]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return out


def _solve(data: dict[str, Any], backend: str = "cpsat", screening: bool = True) -> SolveResult:
    return solve(scenario_from_data(data), SolveSettings(backend, 60.0, pair_screening=screening, resolution="exact"))


def _figures(points: list[FrontPoint] | tuple[FrontPoint, ...]) -> list[float]:
    return [x for p in points for x in (p.ttft_ms, p.tokens_per_s_per_gpu)]


@functools.cache
def _reference(accounting: str) -> tuple[FrontPoint, ...]:
    """Every deployment over the candidates the solve works with: the grid of each group, and under cluster
    accounting the batches each group's own batch search and each cross-group pair's time (to the exact end,
    as `exact` runs them; that search's certificate over every integer batch is tested on one-group
    clusters)."""
    resolved = scenario_from_data(_with(TWO_GROUPS, search__gpu_accounting=accounting))
    calibration = default_calibration()
    sets = [generate(resolved.view(group), calibration) for group in resolved.groups]
    refine_inventory(resolved, calibration, sets, math.inf)
    return tuple(exhaustive_front(resolved, sets, calibration))


@pytest.mark.parametrize("screening", [True, False])
@pytest.mark.parametrize("accounting", ["cluster", "used"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_group_front_equals_the_exhaustive_front(backend: str, accounting: str, screening: bool) -> None:
    result = _solve(_with(TWO_GROUPS, search__gpu_accounting=accounting), backend, screening)
    want = _figures(_reference(accounting))
    assert _figures([s.point for s in result.front]) == pytest.approx(want, rel=REL)
    # each group's and each cross-group pair's batch search ended: certified over every integer batch; used
    # accounting keeps the grid's batches, over which its points are not proven (feasible, gap 1)
    cluster = accounting == "cluster"
    assert result.batches.certified is cluster and result.batches.off_grid is not cluster
    assert result.status == ("optimal" if accounting == "cluster" else "feasible")


def _cross_group_front(data: dict[str, Any]) -> list[FrontPoint]:
    """The front of the deployments whose fill pool runs on one group and decode pool on the other."""
    resolved = scenario_from_data(data)
    calibration = default_calibration()
    sets = {group.name: generate(resolved.view(group), calibration) for group in resolved.groups}
    refine_inventory(resolved, calibration, list(sets.values()), math.inf)
    points = []
    for fills, decodes in (("hop", "bw"), ("bw", "hop")):
        points += disaggregated_points(resolved, calibration, sets[fills].by_role["prefill"],
                                       sets[decodes].by_role["decode"])
    return non_dominated(points)


def test_the_link_budget_holds_a_cross_group_point() -> None:
    """The case above is the one it claims: some cross-group front point runs at exactly the rate the KV
    links carry (the cap binds), and without the budget those deployments' front differs. (Under cluster
    accounting most of this front is of composites now: a deployment on each group beats any across them.)"""
    resolved = scenario_from_data(TWO_GROUPS)
    calibration = default_calibration()
    held = []
    for point in _cross_group_front(TWO_GROUPS):
        fill, decode = plan_layout(resolved, point.layout).pools
        egress, ingress = kv_link_bandwidth(fill.ctx, decode.ctx, calibration) or (math.inf, math.inf)
        cap = min(fill.pool.gpus * egress, decode.pool.gpus * ingress) / request_kv_bytes(fill)
        rate = point.tokens_per_s / resolved.scenario.workload.output_tokens
        held += [point] if rate >= cap * (1 - 1e-9) else []
    assert held
    free = _cross_group_front(_with(TWO_GROUPS, cluster__network=None))
    assert _figures(free) != pytest.approx(_figures(_cross_group_front(TWO_GROUPS)), rel=REL)


def _best_at(front: list[FrontPoint], ttft_ms: float) -> float:
    return max((p.tokens_per_s_per_gpu for p in front if p.ttft_ms <= ttft_ms * (1 + 1e-12)), default=0.0)


def test_mixed_generations_beat_each_group_alone() -> None:
    """GPUs counted as used: the joint front weakly dominates each group's own front and is strictly better
    somewhere, with a deployment whose pools run on both generations."""
    joint = [s.point for s in _solve(MIXED_GENERATIONS).front]
    alone = []
    for group in MIXED_GENERATIONS["cluster"]["inventory"]:
        alone.append([s.point for s in _solve(_with(MIXED_GENERATIONS, cluster__inventory=[group])).front])
    for front in alone:
        assert all(_best_at(joint, p.ttft_ms) >= p.tokens_per_s_per_gpu * (1 - REL) for p in front)
    better = [p for p in joint if p.tokens_per_s_per_gpu > max(_best_at(f, p.ttft_ms) for f in alone) * (1 + 1e-6)]
    assert better and all({q.group for q in p.layout.pools} == {"hopper", "nvl"} for p in better)


def test_oversubscribed_uplinks_change_the_front_and_are_named() -> None:
    """At 4:1 the KV between the groups crosses both racks' uplinks at a quarter of the NICs: the front moves
    and its cross-group points name the uplinks; at 1:1 it is the front of the cluster without a network."""
    plain = _solve(MIXED_GENERATIONS)
    even = _solve(_with(MIXED_GENERATIONS, cluster__network={"oversubscription": 1.0}))
    assert _figures([s.point for s in even.front]) == _figures([s.point for s in plain.front])
    four = _solve(_with(MIXED_GENERATIONS, cluster__network={"oversubscription": 4.0}))
    assert _figures([s.point for s in four.front]) != pytest.approx(_figures([s.point for s in plain.front]), rel=REL)
    crossing = [s for s in four.front if {q.group for q in s.point.layout.pools} == {"hopper", "nvl"}]
    assert crossing
    for solved in crossing:
        names = plan_output.point_dict(four, solved)["binding"]
        assert "uplink hopper/r0" in names and "uplink nvl/r0" in names


def test_unavailable_gpus_are_never_placed() -> None:
    data = _with(TWO_GROUPS, search__gpu_accounting="cluster")
    data["cluster"]["inventory"][0]["unavailable"] = ["r0/n0/g0", "r0/n0/g2"]
    result = _solve(data, "highs")
    for solved in result.front:
        placement = plan_output.placement(result, solved)
        gpus = [g for pool in placement["pools"] for instance in pool["instances"] for g in instance["gpus"]]
        assert len(gpus) == len(set(gpus)) == solved.point.gpus
        assert not {"hop/r0/n0/g0", "hop/r0/n0/g2", "bw/r0/n0/g3"} & set(gpus)


def test_a_whole_node_or_rack_can_be_unavailable() -> None:
    """`r<R>/n<N>` marks every GPU of the node, `r<R>` of the rack (only the installed ones of a partial rack);
    an id beyond the group names its kind."""
    data = {"schema_version": 1, "name": "busy", "model": "deepseek-v3", "precision": {"weights": "fp8"},
            "cluster": {"inventory": [{"name": "h", "system": "h200-sxm", "nodes": 6}]},
            "workload": {"input_tokens": 1000, "output_tokens": 100}}

    def available(ids: list[str]) -> int:
        data["cluster"]["inventory"][0]["unavailable"] = ids
        return scenario_from_data(data).groups[0].gpus

    assert available([]) == 48
    assert available(["r0/n1"]) == 40
    assert available(["r0/n1", "r0/n1/g3"]) == 40  # a GPU of a listed node counts once
    assert available(["r1"]) == 32  # rack 1 holds nodes 4 and 5 of the six installed
    for ids, message in ((["r0/n4"], "r0/n4 is not a node of this group"), (["r2"], "r2 is not a rack"),
                         (["n1"], "'n1' is not a GPU, node or rack id"),
                         (["r0/n1", "r0/n5/g1", "r2"], "r0/n5/g1 is not a GPU; r2 is not a rack of this group")):
        with pytest.raises(InputError, match=message):
            available(ids)


def test_an_inventory_with_no_deployment_names_the_binding_resource() -> None:
    """Three groups with busy GPUs, disaggregated only, a 500 ms TTFT target no pair of pools meets: the
    diagnosis weighs the model on one group's pool (it ended `plan solve` with ScenarioError: no inventory group
    named None, exit 1; found by fuzzing)."""
    from planner.api import solve as api_solve
    from planner.errors import InfeasibleError

    data = {"schema_version": 1, "name": "three-groups", "model": "deepseek-ai/DeepSeek-V3",
            "precision": {"weights": "fp8", "kv_cache": "fp8"}, "engine": "generic",
            "cluster": {"inventory": [
                {"name": "g0", "system": "mi300x", "nodes": 1},
                {"name": "g1", "system": "h100-sxm", "nodes": 2, "unavailable": ["r0/n0/g0", "r0/n1/g3"]},
                {"name": "g2", "system": "gb200-nvl72", "nodes": 1, "unavailable": ["r0/n0/g1"]}]},
            "workload": {"input_tokens": 8192, "output_tokens": 64, "concurrency": 4096},
            "slo": {"ttft_ms": 500, "tpot_ms": 60}, "search": {"serving": ["disaggregated"], "time_limit_s": 8}}
    with pytest.raises(InfeasibleError, match=r"TTFT: no deployment meets slo\.ttft_ms = 500 ms"):
        api_solve(scenario_from_data(data))


def test_unavailable_gpus_that_bind_are_named() -> None:
    """Kimi K2 on 8 GB200s needs an 8-GPU instance; one failed GPU leaves instances of 4, which hold no copy of
    the weights: the failed GPU binds, not the instance layouts the search allows (as it said before)."""
    from planner.api import solve as api_solve
    from planner.errors import InfeasibleError

    data = {"schema_version": 1, "name": "one-failed", "model": "moonshotai/Kimi-K2-Instruct",
            "precision": {"weights": "fp8", "kv_cache": "fp8"},
            "cluster": {"inventory": [{"name": "nvl", "system": "gb200-nvl72", "gpus": 8,
                                       "unavailable": ["r0/n1/g3"]}]},
            "workload": {"input_tokens": 4096, "output_tokens": 1024}, "search": {"time_limit_s": 10}}
    with pytest.raises(InfeasibleError, match=r"GPUs: the 1 GPU marked unavailable .* leaves no 8 available GPUs"):
        api_solve(scenario_from_data(data))
    data["search"] = {"tp": [1, 2, 4], "dp_attention": [1], "pp": [1], "time_limit_s": 10}  # 4 GPUs at most anyway
    with pytest.raises(InfeasibleError, match=r"HBM: no instance layout the search allows fits"):
        api_solve(scenario_from_data(data))


def test_evaluate_refuses_a_placement_on_an_unavailable_gpu(tmp_path: Path) -> None:
    result = _solve(TWO_GROUPS, "highs")
    resolved = result.resolved
    solved = result.front[-1]
    data = yaml.safe_load(plan_output.plan_yaml(result, 0, solved))
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert load_layout(path, resolved) == solved.point.layout  # as written: accepted
    pool = next(i for i, p in enumerate(data["layout"]["pools"]) if p.get("group") == "bw")
    data["placement"]["pools"][pool]["instances"][0]["gpus"][0] = "bw/r0/n0/g3"  # the failed one
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_layout(path, resolved)
    problem = info.value.problems[0]
    assert problem.field == f"placement.pools.{pool}.instances.0.gpus.0" and "unavailable" in problem.message
    assert problem.line is not None


def test_partial_node_clusters_plan() -> None:
    """18 GB200 GPUs: four trays and half of a fifth, one NVLink domain of 18."""
    data = _with(TWO_GROUPS, cluster={"system": "gb200-nvl72", "gpus": 18}, search__gpu_accounting="cluster")
    resolved = scenario_from_data(data)
    assert resolved.gpus == 18 and resolved.group.nodes == 5
    result = solve(resolved, SolveSettings("highs", 60.0))
    assert result.front and all(s.point.gpus <= 18 for s in result.front)


@pytest.mark.parametrize(("cluster", "field", "words"), [
    ({"inventory": [{"name": "a", "system": "h100-sxm", "gpus": 8, "unavailable": ["r0/n1/g0"]}]},
     "cluster.inventory.0.unavailable.0", "not a GPU of this group"),
    ({"inventory": [{"name": "a", "system": "h100-sxm", "gpus": 8}, {"name": "a", "system": "b200-sxm", "gpus": 8}]},
     "cluster", "names must differ"),
    ({"system": "h100-sxm", "gpus": 8, "inventory": [{"name": "a", "system": "h100-sxm", "gpus": 8}]},
     "cluster", "not both"),
    ({"inventory": [{"name": "a", "system": "h100-sxm", "gpus": 1, "unavailable": ["r0/n0/g0"]}]},
     "cluster.inventory.0.unavailable", "no available GPU"),
])
def test_inventory_errors_name_the_field(cluster: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InputError) as info:
        scenario_from_data(_with(TWO_GROUPS, cluster=cluster))
    problem = info.value.problems[0]
    assert problem.field == field and words in problem.message


def test_a_group_nothing_fits_on_leaves_the_others_to_plan() -> None:
    """A group whose GPUs hold no instance (2 GB of HBM) yields no candidates; the other group still plans."""
    data = _with(TWO_GROUPS, search__gpu_accounting="cluster")
    data["cluster"]["inventory"][0]["overrides"] = {"hbm_capacity_bytes": 2.0e9}
    result = _solve(data, "highs")
    assert result.front
    assert all(pool.group == "bw" for s in result.front for pool in s.point.layout.pools)


def test_weights_no_group_holds_alone_name_the_largest_group() -> None:
    """4 H100s and 4 H200s hold DeepSeek-V3's 0.67 TB together but an instance cannot span groups: the message
    names the largest group, not the cluster's mean HBM per GPU (it said '119 GB each' and 'allow larger
    instances', which could not help)."""
    data = {"schema_version": 1, "name": "t", "model": "deepseek-ai/DeepSeek-V3",
            "precision": {"weights": "fp8", "kv_cache": "fp8"},
            "cluster": {"inventory": [{"name": "a", "system": "h100-sxm", "gpus": 4},
                                      {"name": "b", "system": "h200-sxm", "gpus": 4}]},
            "workload": {"input_tokens": 4096, "output_tokens": 1024}}
    from planner.errors import InfeasibleError

    with pytest.raises(InfeasibleError, match=r"largest inventory group \('b', 4 GPUs of h200-sxm\) holds 0.61 TB"):
        solve(scenario_from_data(data), SolveSettings("cpsat", 20.0))


@pytest.mark.parametrize("data", [_with(TWO_GROUPS, search__gpu_accounting="cluster"),
                                  _with(MIXED_GENERATIONS, search__gpu_accounting="cluster")])
def test_every_block_carries_the_table_its_searches_built(data: dict[str, Any]) -> None:
    """Each structure block's options (each group's own, each cross-group pair's) carry their unit table,
    joined from the tables of the block's batch search and of the pairs the later searches' candidates make:
    the entries of the table built afresh, and at most near-ties of them besides (the KV links of TWO_GROUPS
    cap rates in it)."""
    from planner.batches import InventorySearch
    from planner.formulation.units import _unit_table, first_cap
    from planner.solve import _search_blocks
    from tests.planner.test_units import same_table

    resolved = scenario_from_data(data)
    calibration = default_calibration()
    sets = [generate(resolved.view(group), calibration) for group in resolved.groups]
    blocks, coverage = _search_blocks(resolved, InventorySearch(resolved, calibration, sets, 0.01), math.inf)
    cap = first_cap(resolved)
    assert coverage.certified and len(blocks) == 4
    for block in blocks:
        joined, fresh = block.unit_tables[cap], _unit_table(block, cap)
        assert (joined is None) == (fresh is None), block.label
        if joined is not None and fresh is not None:
            assert same_table(joined, fresh), block.label


def test_blocks_searched_on_the_grid_only_build_no_table() -> None:
    """Under `used` accounting the searches keep the grid and the sweep reads no unit table: none is built
    (each would be a full build, seconds on large inventories)."""
    from planner.batches import InventorySearch
    from planner.solve import _search_blocks

    resolved = scenario_from_data(MIXED_GENERATIONS)
    calibration = default_calibration()
    sets = [generate(resolved.view(group), calibration) for group in resolved.groups]
    blocks, _ = _search_blocks(resolved, InventorySearch(resolved, calibration, sets, 0.01), math.inf)
    assert blocks and all(not block.unit_tables for block in blocks)


def test_searches_cut_by_their_share_go_on_in_what_the_others_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every search of an inventory (each group's, each cross-group pair's) cut at once by its first share goes
    on in the time the others left: the front certified over every integer batch, equal to the uncut searches'
    (the exhaustive front over what they timed), and no batch timed twice (another search's timings inside a
    cut search's intervals are taken, not timed again)."""
    from planner import batches

    resolved = scenario_from_data(_with(TWO_GROUPS, search__gpu_accounting="cluster"))
    calibration = default_calibration()
    sets = [generate(resolved.view(group), calibration) for group in resolved.groups]
    real, first_pass = batches._share_end, []

    def cut_first_pass(deadline: float, searches: int) -> float:
        first_pass.append(searches)
        return -math.inf if len(first_pass) <= first_pass[0] else real(deadline, searches)

    monkeypatch.setattr(batches, "_share_end", cut_first_pass)
    coverage = refine_inventory(resolved, calibration, sets, math.inf)
    assert first_pass[0] == 4 and len(first_pass) > 4  # two groups, two pairs, then resumed
    assert coverage.certified and not coverage.cut_by_time and coverage.open_ttft.size == 0
    for candidates in sets:
        for rungs in candidates.ladders.values():
            assert len({c.pool.batch for c in rungs}) == len(rungs)
    front = exhaustive_front(resolved, sets, default_calibration())
    assert _figures(front) == pytest.approx(_figures(_reference("cluster")), rel=REL)


def test_an_inventory_solve_whose_searches_are_cut_at_once_resumes_them_after_the_sweep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With no share of the limit for the batch searches, each is cut before its first split, the sweep takes
    well under the time left, and the searches go on after it: certified, the exhaustive front of the
    uncut searches' candidates."""
    import importlib

    from planner.templates import merged

    solve_module = importlib.import_module("planner.solve")
    monkeypatch.setattr(solve_module, "BATCH_SHARE", 0.0)
    searches, real = [], solve_module._search_blocks

    def kept(*args: Any) -> Any:
        searches.append(args[1])
        return real(*args)

    monkeypatch.setattr(solve_module, "_search_blocks", kept)
    data = _with(TWO_GROUPS, search__gpu_accounting="cluster")
    result = solve(scenario_from_data(data), SolveSettings("cpsat", 120.0, resolution="exact"))
    assert result.batches.certified and not result.timed_out and result.batches.rounds >= 1
    assert _figures([p.point for p in result.front]) == pytest.approx(_figures(_reference("cluster")), rel=REL)
    assert len(searches) == 2  # before the sweep and after it; the counts reported are those of every batch timed
    assert result.candidates == {str(role): len(c) for role, c in merged(searches[-1].sets).by_role.items()}
