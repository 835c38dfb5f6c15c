"""Composite deployments: under cluster accounting on an inventory, deployments on disjoint groups side by
side. The set of blocks (`best_packing`) against brute force; the layout schema's deployments; the figures
`plan evaluate` gives a composite layout against its parts; the solver's composite points against
`plan evaluate`; the export of a composite plan, one folder per deployment."""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from costmodel.calibration import default_calibration
from costmodel.evaluate import evaluate
from costmodel.layout import Layout, Pool
from planner import plan_output
from planner.batches import BatchCoverage, refine_inventory
from planner.export import export_plan, load_plan
from planner.formulation.fill import best_fill, placeable
from planner.formulation.model import Selection
from planner.packing import best_packing
from planner.pareto import FrontPoint
from planner.placement import Domains
from planner.reference import exhaustive_front
from planner.scenario import scenario_from_data
from planner.solve import SolveResult, SolveSettings, _with_batch_bound, solve
from planner.solvers import BACKENDS, SolveStatus
from planner.sweep_result import SolvedPoint
from planner.templates import generate
from tests.helpers import run_cli
from tests.planner.small_scenarios import AGENT_WORKLOAD
from tests.planner.test_inventory import TWO_GROUPS, _figures, _with

REL = 1e-9


def _brute_force(groups: list[frozenset[str]], values: list[float]) -> float:
    """The best over every set of blocks on pairwise disjoint groups (grown block by block)."""

    def best(start: int, taken: frozenset[str]) -> float:
        found = 0.0
        for index in range(start, len(groups)):
            if not groups[index] & taken:
                found = max(found, values[index] + best(index + 1, taken | groups[index]))
        return found

    return best(0, frozenset())


@pytest.mark.parametrize("seed", range(40))
def test_best_packing_is_the_brute_force_optimum(seed: int) -> None:
    """Blocks on one group and on ordered pairs (as an inventory's structure blocks), random values (some
    zero: nothing within the cap), against every subset of blocks."""
    rng = random.Random(seed)
    names = [f"g{i}" for i in range(rng.randint(2, 5))]
    groups = [frozenset({n}) for n in names] + [frozenset(pair) for pair in itertools.permutations(names, 2)]
    values = [rng.choice([0.0, rng.uniform(0, 10), rng.uniform(5, 20)]) for _ in groups]
    value, chosen = best_packing(groups, values)
    assert value == pytest.approx(_brute_force(groups, values), rel=REL)
    assert sum(values[i] for i in chosen) == pytest.approx(value, rel=REL)
    taken = [g for i in chosen for g in groups[i]]
    assert len(taken) == len(set(taken))


def _pool(role: str, deployment: int, group: str, **more: int) -> dict[str, object]:
    return {"role": role, "deployment": deployment, "group": group, "batch": 4, **more}


def test_composite_layouts_validate_their_deployments() -> None:
    good = Layout.model_validate({"serving": "composite", "pools": [
        _pool("mixed", 0, "a"), _pool("prefill", 1, "b"), _pool("decode", 1, "b")]})
    first, second = good.parts
    assert (first.serving, second.serving) == ("aggregated", "disaggregated")
    assert Layout.composed([first, second]) == good
    with pytest.raises(ValidationError, match="number the deployments 0, 1"):
        Layout.model_validate({"serving": "composite", "pools": [_pool("mixed", 0, "a"), _pool("mixed", 2, "b")]})
    with pytest.raises(ValidationError, match="need serving: composite"):
        Layout.model_validate({"serving": "aggregated", "pools": [_pool("mixed", 0, "a"), _pool("mixed", 1, "b")]})
    with pytest.raises(ValidationError, match="at least two deployments"):
        Layout.model_validate({"serving": "composite", "pools": [_pool("mixed", 0, "a")]})
    with pytest.raises(ValidationError, match=r"\(deployment 1\)"):
        Layout.model_validate({"serving": "composite", "pools": [_pool("mixed", 0, "a"), _pool("prefill", 1, "b")]})


def _cluster_solve() -> SolveResult:
    return solve(scenario_from_data(_with(TWO_GROUPS, search__gpu_accounting="cluster")),
                 SolveSettings("highs", 60.0, resolution="exact"))


@pytest.fixture(scope="module")
def cluster_result() -> SolveResult:
    return _cluster_solve()


def test_composite_points_are_what_plan_evaluate_says(cluster_result: SolveResult) -> None:
    """Each composite front point: its figures are `evaluate`'s of its layout, whose tokens/s are its parts'
    sum and whose TTFT and TPOT are the slowest part's; it uses each group at most once."""
    resolved = cluster_result.resolved
    composites = [s.point for s in cluster_result.front if s.point.layout.serving == "composite"]
    assert composites
    for point in composites:
        whole = evaluate(resolved, point.layout)
        parts = [evaluate(resolved, part) for part in point.layout.parts]
        assert whole.ttft_ms == pytest.approx(point.ttft_ms, rel=1e-9) == max(p.ttft_ms for p in parts)
        assert whole.tpot_ms == pytest.approx(point.tpot_ms, rel=1e-9) == max(p.tpot_ms for p in parts)
        assert whole.tokens_per_s_per_gpu * whole.gpus == pytest.approx(point.tokens_per_s, rel=1e-9)
        assert whole.tokens_per_s_per_gpu * whole.gpus == pytest.approx(
            sum(p.tokens_per_s_per_gpu * p.gpus for p in parts), rel=1e-12)
        groups = [{pool.group for pool in part.pools} for part in point.layout.parts]
        assert sum(len(g) for g in groups) == len(set().union(*groups))
        assert whole.deployments and sum(d["share_of_requests"] for d in whole.deployments) == pytest.approx(1.0)


def test_composites_beat_every_single_structure(cluster_result: SolveResult) -> None:
    """The front weakly dominates each group's own front (in tokens/s: alone, a group is the whole cluster)
    and is strictly better where both groups serve side by side."""
    singles = [s.point for s in _solve_singles()]
    front = [s.point for s in cluster_result.front]

    def best(points: list, ttft_ms: float) -> float:  # type: ignore[type-arg]
        return max((p.tokens_per_s for p in points if p.ttft_ms <= ttft_ms * (1 + 1e-12)), default=0.0)

    assert all(best(front, p.ttft_ms) >= p.tokens_per_s * (1 - 1e-9) for p in singles)
    assert any(p.tokens_per_s > best(singles, p.ttft_ms) * 1.01 for p in front)


def _solve_singles() -> list:  # type: ignore[type-arg]
    """Each group alone (the cross-group structures need both; `test_inventory` checks the whole front
    against the exhaustive reference)."""
    points = []
    for group in TWO_GROUPS["cluster"]["inventory"]:
        data = _with(TWO_GROUPS, search__gpu_accounting="cluster", cluster__inventory=[group])
        points += solve(scenario_from_data(data), SolveSettings("highs", 60.0, resolution="exact")).front
    return points


def test_plan_evaluate_reads_a_composite_layout(tmp_path: Path, cluster_result: SolveResult) -> None:
    point = next(s for s in cluster_result.front if s.point.layout.serving == "composite")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(_with(TWO_GROUPS, search__gpu_accounting="cluster")), encoding="utf-8")
    layout = tmp_path / "layout.yaml"
    layout.write_text(yaml.safe_dump(plan_output.layout_dict(point.point.layout)), encoding="utf-8")
    out = run_cli("evaluate", str(scenario), "--layout", str(layout), "--format", "json")
    assert out.code == 0, out.err
    data = json.loads(out.out)
    assert data["ttft_ms"] == pytest.approx(point.point.ttft_ms, rel=1e-9)
    assert [d["deployment"] for d in data["deployments"]] == [0, 1]
    bad = plan_output.layout_dict(point.point.layout)
    bad["pools"][-1]["deployment"] = 3
    layout.write_text(yaml.safe_dump(bad), encoding="utf-8")
    out = run_cli("evaluate", str(scenario), "--layout", str(layout))
    assert out.code == 2 and "number the deployments 0, 1" in out.err and "Traceback" not in out.err
    assert "layout.yaml" in out.err


def test_a_composite_plan_exports_with_the_calibration_it_was_solved_with(tmp_path: Path,
                                                                          cluster_result: SolveResult) -> None:
    """Its deployments' shares of the requests are priced again: with the plan's calibration, else exit 2."""
    from dataclasses import replace

    from costmodel.calibration import Calibration
    from planner.errors import InputError

    mine = Calibration.model_validate(default_calibration().model_dump() | {"fitted_on": "my runs"})
    index, point = next((i, s) for i, s in enumerate(cluster_result.front) if s.point.layout.serving == "composite")
    bundled, calibrated = tmp_path / "bundled.yaml", tmp_path / "calibrated.yaml"
    bundled.write_text(plan_output.plan_yaml(cluster_result, index, point), encoding="utf-8")
    calibrated.write_text(plan_output.plan_yaml(replace(cluster_result, calibration=mine), index, point),
                          encoding="utf-8")
    assert export_plan(load_plan(calibrated), "sglang", calibration=mine).files
    with pytest.raises(InputError, match="priced with calibration 'my runs'"):
        export_plan(load_plan(calibrated), "sglang")
    with pytest.raises(InputError, match="priced with the bundled calibration"):
        export_plan(load_plan(bundled), "sglang", calibration=mine)
    out = run_cli("export", str(calibrated), "--engine", "sglang")
    assert out.code == 2 and f"{calibrated}:" in out.err and "give that with --calibration" in out.err


@pytest.mark.parametrize("engine", ["sglang", "dynamo"])
def test_a_composite_plan_exports_one_folder_per_deployment(tmp_path: Path, cluster_result: SolveResult,
                                                            engine: str) -> None:
    index, point = next((i, s) for i, s in enumerate(cluster_result.front) if s.point.layout.serving == "composite")
    path = tmp_path / "plan.yaml"
    path.write_text(plan_output.plan_yaml(cluster_result, index, point), encoding="utf-8")
    exported = export_plan(load_plan(path), engine)
    folders = {name.split("/")[0] for name in exported.files}
    assert folders == {"deployment0", "deployment1"}
    head = next(text for name, text in exported.files.items()
                if name.startswith("deployment1/") and name.endswith((".sh", ".yaml")))
    assert "deployment 1 of 2, share_of_requests" in head  # each deployment's own figures
    written = exported.write(tmp_path / "out")
    assert all(p.exists() for p in written) and {p.parent.name for p in written} == folders


def test_composite_false_keeps_one_structure_per_plan() -> None:
    """`search.composite: false`: no composite point, and the front is the exhaustive one of single
    structures (each group alone, or fills on one and decode on the other)."""
    data = _with(TWO_GROUPS, search__gpu_accounting="cluster", search__composite=False)
    resolved = scenario_from_data(data)
    result = solve(resolved, SolveSettings("cpsat", 60.0, resolution="exact"))
    assert all(s.point.layout.serving != "composite" for s in result.front)
    calibration = default_calibration()
    sets = [generate(resolved.view(group), calibration) for group in resolved.groups]
    refine_inventory(resolved, calibration, sets, math.inf)
    want = exhaustive_front(resolved, sets, calibration)
    assert _figures([s.point for s in result.front]) == pytest.approx(_figures(want), rel=1e-6)


# Aggregated serving on the two groups: each group may hold instances of several sizes side by side.
AGGREGATED = _with(TWO_GROUPS, search__gpu_accounting="cluster", search__serving=["aggregated"],
                   slo={"tpot_ms": 30})


@functools.cache
def _aggregated_reference() -> tuple[FrontPoint, ...]:
    resolved = scenario_from_data(AGGREGATED)
    calibration = default_calibration()
    sets = [generate(resolved.view(group), calibration) for group in resolved.groups]
    refine_inventory(resolved, calibration, sets, math.inf)
    return tuple(exhaustive_front(resolved, sets, calibration))


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixes_of_aggregated_sizes_equal_the_exhaustive_front(backend: str) -> None:
    """Every count vector of aggregated instances that fits each group, composed with the other group's
    deployments: the solver's front equals the reference point for point, and some point mixes sizes on
    one group (the mix is in the space and wins somewhere)."""
    result = solve(scenario_from_data(AGGREGATED), SolveSettings(backend, 60.0, resolution="exact"))
    want = _aggregated_reference()
    assert _figures([s.point for s in result.front]) == pytest.approx(_figures(want), rel=1e-6)
    assert result.status == "optimal"
    mixed_sizes = [s for s in result.front
                   if any(len({p.gpus_per_instance for p in part.pools if p.group == g}) > 1
                          for part in [s.point.layout] for g in ("hop", "bw"))]
    assert mixed_sizes


def test_no_composites_beside_a_shared_kv_store() -> None:
    """The shared KV store is the whole cluster's and each block's deployments may use all of it: nothing
    is composed there (two parts could overfill it), and `plan evaluate` of a composite whose deployments
    both park contexts in the store warns that their sum is not checked."""
    host = {"host_dram_bytes_per_node": 2.0e11, "ssd_capacity_bytes_per_node": 1.0e11}
    data = {
        "schema_version": 1, "name": "store", "model": "llama3.1-8b",
        "precision": {"weights": "fp8", "kv_cache": "bf16"},
        "cluster": {"inventory": [{"name": "a", "system": "h100-sxm", "gpus": 4, "overrides": host},
                                  {"name": "b", "system": "h100-sxm", "gpus": 4, "overrides": host}],
                    "kv_store": {"capacity_bytes": 2.0e11, "bandwidth_bytes_per_s": 1.0e11}},
        "workload": AGENT_WORKLOAD, "slo": {"tpot_ms": 40},
        "search": {"gpu_accounting": "cluster", "serving": ["aggregated"], "pp": [1], "dp_attention": [1],
                   "max_batch": 32},
    }
    resolved = scenario_from_data(data)
    result = solve(resolved, SolveSettings("highs", 60.0))
    assert result.front and all(s.point.layout.serving != "composite" for s in result.front)
    parked = [s.point.layout for s in result.front if s.point.layout.pools[0].kv_store]
    assert parked
    pool = parked[-1].pools[0]
    both = Layout.composed([Layout(serving="aggregated", pools=[pool.model_copy(update={"group": g, "replicas": 1})])
                            for g in ("a", "b")])
    assert any("one shared KV store" in w for w in evaluate(resolved, both).warnings)


def test_an_untimed_batch_bounds_any_point_where_the_sweep_composes() -> None:
    """A point of one group with an open batch interval elsewhere: the interval's deployment could run beside
    it, so the bound is the point's figure plus the interval's (was the interval's alone unless the point was
    a composite); open intervals of two disjoint blocks could both run beside it (was the larger one only)."""
    layout = Layout(serving="aggregated", pools=[Pool(role="mixed", group="a", batch=4, replicas=2)])
    point = FrontPoint(100.0, 20.0, 100.0, 8, layout, 16, "cluster")  # 800 tokens/s, 50 per cluster GPU
    every = frozenset({"a", "b", "c"})
    blocks = (frozenset({"a"}), frozenset({"b"}), frozenset({"c"}), frozenset({"b", "c"}))
    open_batch = BatchCoverage(certified=False, open_ttft=np.array([0.05]), open_value=np.array([700.0]),
                               open_block=np.array([1]), blocks=blocks)
    solved = SolvedPoint(point, Selection(), SolveStatus.OPTIMAL, 0.0)
    alone = _with_batch_bound(solved, open_batch, open_batch.outside(16, False, every))
    assert alone.status == SolveStatus.OPTIMAL  # 700 / 16 < 50: a single structure cannot beat it
    beside = _with_batch_bound(solved, open_batch, open_batch.outside(16, True, every))
    assert beside.status == SolveStatus.FEASIBLE
    assert beside.gap == pytest.approx(1 - 50 / ((800 + 700) / 16), rel=1e-12)
    # b and c open: both beside the point; b>c (on both) could not add to b's or c's own
    two = replace(open_batch, open_ttft=np.array([0.05, 0.04, 0.03]), open_value=np.array([700.0, 300.0, 900.0]),
                  open_block=np.array([1, 2, 3]))
    both = _with_batch_bound(solved, two, two.outside(16, True, every))
    assert both.gap == pytest.approx(1 - 50 / ((800 + 700 + 300) / 16), rel=1e-12)
    # a block on every group runs beside nothing: its bound alone
    whole = replace(open_batch, open_block=np.array([0]), blocks=(every,))
    assert _with_batch_bound(solved, whole, whole.outside(16, True, every)).status == SolveStatus.OPTIMAL


def test_a_tolerance_bounds_every_point_whether_or_not_the_batch_search_ended() -> None:
    """Intervals closed within a tolerance could beat the front by it: a search cut by the time limit keeps
    that in each point's gap (it was counted only when every search ended)."""
    layout = Layout(serving="aggregated", pools=[Pool(role="mixed", group="a", batch=4, replicas=2)])
    point = FrontPoint(100.0, 20.0, 100.0, 8, layout, 16, "cluster")
    solved = SolvedPoint(point, Selection(), SolveStatus.OPTIMAL, 0.0)
    for certified in (True, False):
        batches = BatchCoverage(certified=certified, cut_by_time=not certified, tolerance=0.01)
        bounded = _with_batch_bound(solved, batches, None)
        assert bounded.status == SolveStatus.FEASIBLE and bounded.gap == pytest.approx(0.01 / 1.01, rel=1e-9)


def test_mixes_of_sizes_that_do_not_divide_each_other_are_not_returned() -> None:
    """6 + 4 + 4 on a node of 8 and one of 6 free GPUs is a real packing, but neither the packing rows nor
    the placer's first-fit find it: the planner keeps mixes whose sizes divide each other."""
    domains = Domains(8, 1, (6,))
    fill = best_fill({6: 1.0, 4: 0.6}, domains)
    assert dict(fill.counts) == {6: 1, 4: 2}
    assert not placeable(list(fill.counts.items()), domains)
    assert placeable([(4, 2), (2, 3)], domains)


def test_a_composite_of_many_deployments_reads_back() -> None:
    parts = [Layout(serving="aggregated", pools=[Pool(role="mixed", group=f"g{i}", batch=4)]) for i in range(40)]
    big = Layout.composed(parts)
    assert Layout.model_validate(big.model_dump(mode="json")) == big


def test_batches_closed_within_the_tolerance_add_beside_open_ones() -> None:
    """Where the sweep composes, a batch closed within the tolerance in one block could run beside an open one
    of another: the bound is the point's figure x (1 + tolerance) plus the open one's (was the larger of the
    two sums' parts, about one point of gap too little)."""
    layout = Layout(serving="aggregated", pools=[Pool(role="mixed", group="a", batch=4, replicas=2)])
    point = FrontPoint(100.0, 20.0, 100.0, 8, layout, 16, "cluster")  # 50 tokens/s per cluster GPU
    every = frozenset({"a", "b", "c"})
    batches = BatchCoverage(certified=False, tolerance=0.01, open_ttft=np.array([0.05]),
                            open_value=np.array([160.0]), open_block=np.array([1]),
                            blocks=(frozenset({"a"}), frozenset({"b"})))
    solved = SolvedPoint(point, Selection(), SolveStatus.OPTIMAL, 0.0)
    bounded = _with_batch_bound(solved, batches, batches.outside(16, True, every))
    assert bounded.gap == pytest.approx(1 - 50 / (50 * 1.01 + 10), rel=1e-12)


def test_a_grid_only_inventory_keeps_no_tolerance() -> None:
    """Used accounting keeps the grid's batches: no interval is closed within a tolerance (an inventory said 1%),
    and the batches between are neither timed nor bounded (`off_grid`: the points feasible with gap 1)."""
    data = copy.deepcopy(TWO_GROUPS)
    data["search"] = {**data.get("search", {}), "gpu_accounting": "used"}
    resolved = scenario_from_data(data)
    sets = [generate(resolved.view(group), default_calibration()) for group in resolved.groups]
    coverage = refine_inventory(resolved, default_calibration(), sets, deadline=1e18, tolerance=0.01)
    assert coverage.tolerance == 0.0 and not coverage.certified and coverage.off_grid
