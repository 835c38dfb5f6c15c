"""Multi-turn sessions in the planner: the shared KV store as a binding constraint of the MILP, tier
figures on every front point, and the agent scenario end to end."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from costmodel.calibration import default_calibration
from costmodel.evaluate import evaluate
from planner.errors import InfeasibleError
from planner.midfill import midfill_choice
from planner.reference import exhaustive_front
from planner.scenario import load_scenario, scenario_from_data
from planner.solve import SolveSettings, solve
from planner.templates import generate
from tests.planner.small_scenarios import small_data

NAME = "qwen3-30b-16xh100-agent-sessions-store"
REPO = Path(__file__).resolve().parents[2]


def front_with_store(capacity: float) -> list[tuple[float, float, int, bool, float]]:
    data = copy.deepcopy(small_data(NAME))
    data["cluster"]["kv_store"]["capacity_bytes"] = capacity
    data["search"] = {**data["search"], "gpu_accounting": "used"}  # per GPU used: the store's effect alone
    resolved = scenario_from_data(data)
    calibration = default_calibration()
    front = exhaustive_front(resolved, generate(resolved, calibration), calibration)
    pools = [(p, p.layout.pool("prefill")) for p in front]
    return [(p.ttft_ms, p.tokens_per_s_per_gpu, pool.replicas, pool.kv_store, pool.tier_load) for p, pool in pools]


def test_a_small_store_binds_and_changes_the_front() -> None:
    roomy, tight, tiny = front_with_store(1e14), front_with_store(2e12), front_with_store(5e11)
    assert all(parked for *_, parked, _ in roomy)  # fetching over the NIC beats recomputing
    # 2 TB: every pool still parks its overflow there, but most size their tiers for part of their rate; in a
    # roomy store far fewer do (a quarter with the bundled calibration: for smaller idle populations and faster
    # fetches, not for want of room)
    assert all(parked for *_, parked, _ in tight)
    capped = [sum(load < 1.0 for *_, load in front) / len(front) for front in (roomy, tight)]
    assert capped[0] < 0.5 < capped[1] and capped[1] - capped[0] > 0.5
    assert not all(parked for *_, parked, _ in tiny)  # 0.5 TB: some pools recompute what overflows instead
    best = [max(t for _, t, *_ in front) for front in (roomy, tight, tiny)]
    assert best[0] > best[1] > best[2]


def test_kv_store_rows_are_in_the_model_and_every_point_respects_the_store() -> None:
    resolved = scenario_from_data(small_data(NAME))
    result = solve(resolved, SolveSettings())
    assert result.model_statistics()["kv_store"]["constraints"] == 2  # capacity and bandwidth
    store = resolved.scenario.cluster.kv_store
    assert store is not None
    for solved in result.front:
        prediction = evaluate(resolved, solved.point.layout)
        assert prediction.feasible
        tiers = prediction.kv_tiers
        assert tiers is not None
        assert sum(tiers["hit_rates"].values()) == pytest.approx(1.0)
        assert tiers["stored_gb"]["store"] * 1e9 <= store.capacity_bytes * (1 + 1e-9)
        assert tiers["fetch_gb_per_s"]["store"] * 1e9 <= store.bandwidth_bytes_per_s * (1 + 1e-9)


def test_coding_agent_scenario_reports_tiers_on_every_point() -> None:
    resolved = load_scenario(REPO / "scenarios" / "coding-agent-sessions-gb200.yaml")
    result = solve(resolved, SolveSettings(time_limit_s=30.0))
    assert result.front
    for solved in result.front[:: max(1, len(result.front) // 5)]:
        tiers = evaluate(resolved, solved.point.layout).kv_tiers
        assert tiers is not None and 50_000 < tiers["context_tokens"] < 200_000
        assert 0.0 <= tiers["fetch_share_of_ttft"] < 1.0


def test_each_disaggregated_point_says_where_midfill_runs_and_why() -> None:
    resolved = scenario_from_data(small_data("qwen3-30b-8xh100-agent-midfill-pool"))
    result = solve(resolved, SolveSettings())
    choices = [midfill_choice(result, solved) for solved in result.front]
    assert all(choice is not None for choice in choices)
    kinds = {choice["pool"] for choice in choices if choice is not None}
    assert kinds == {"shared", "separate"}  # this scenario's front holds both
    for solved, choice in zip(result.front, choices, strict=True):
        assert choice is not None
        assert (choice["pool"] == "separate") == solved.point.layout.split_fills
        assert choice["first_turn_share"] == pytest.approx(0.1) and "10% of fills" in choice["why"]
        bound = choice["alternative_bound"]
        assert (bound is None) == ("no deployment with" in choice["why"])
        assert bound is None or f"at most {bound:.1f} tok/s per GPU used" in choice["why"]
    data = small_data("qwen3-30b-8xh100-agent-midfill-pool")
    data["search"] = {**data["search"], "separate_midfill": False}
    unsplit = solve(scenario_from_data(data), SolveSettings())
    choice = midfill_choice(unsplit, unsplit.front[0])
    assert choice is not None and "not searched" in choice["why"]
    assert not any(s.point.layout.split_fills for s in unsplit.front)


def test_a_shared_points_bound_beyond_the_pair_limit_is_not_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `SPLIT_BOUND_PAIR_LIMIT` pairs a shared point's sentence quotes no bound of the separate structure
    (tabulating 514 million pairs took 69 s and several GB for one point of a 16-rack MI300X sessions plan);
    below it the bound stands."""
    from planner.formulation import screening

    resolved = scenario_from_data(small_data("qwen3-30b-8xh100-agent-midfill-pool"))
    result = solve(resolved, SolveSettings())
    shared = next(s for s in result.front if not s.point.layout.split_fills)
    quoted = midfill_choice(result, shared)
    assert quoted is not None and quoted["alternative_bound"] is not None
    monkeypatch.setattr(screening, "SPLIT_BOUND_PAIR_LIMIT", 0)
    choice = midfill_choice(result, shared)
    assert choice is not None and choice["pool"] == "shared" and choice["alternative_bound"] is None
    assert "no bound quoted: too many configuration pairs" in choice["why"]


def test_a_store_too_small_for_any_instance_is_named_as_the_binding_resource() -> None:
    data = copy.deepcopy(small_data("qwen3-30b-8xh100-agent-midfill-pool"))
    data["slo"] = {"ttft_ms": 130}  # only pools that park contexts in the store are fast enough (119.7 ms the fastest)
    data["cluster"]["kv_store"]["capacity_bytes"] = 1e11
    with pytest.raises(InfeasibleError, match=r"^KV store: the \d+ layouts that park idle session contexts"):
        solve(scenario_from_data(data), SolveSettings())
