"""Expert placement: brute-force optima on tiny groups, the routing.py greedy cross-check, and the
invariants of every placement (each expert placed, slots respected, loads adding up)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from costmodel.routing import grouped_loads, static_imbalance
from planner.experts import UNIT, ExpertPlacement, _lpt, _replica_counts, _solve, place_experts
from planner.solvers import BACKENDS, backend
from planner.solvers.base import SolveOptions

AVAILABLE = [name for name in BACKENDS if backend(name).is_available()]


def shares(experts: int, skew: float, redundant: int) -> tuple[list[float], list[int]]:
    popularity = np.arange(1, experts + 1, dtype=float) ** (-skew)
    popularity /= popularity.sum()
    replicas = _replica_counts(popularity, redundant)
    return [float(popularity[e] / replicas[e]) for e in range(experts)], replicas


def brute_force_imbalance(experts: int, ep: int, skew: float, redundant: int) -> float:
    """Every assignment of the replicas to GPUs (the first on GPU 0) within the slot limit."""
    load, replicas = shares(experts, skew, redundant)
    items = [load[e] for e in range(experts) for _ in range(replicas[e])]
    slots = math.ceil(len(items) / ep)
    best = math.inf
    for rest in itertools.product(range(ep), repeat=len(items) - 1):
        gpus = (0, *rest)
        if max(gpus.count(g) for g in range(ep)) <= slots:
            best = min(best, max(sum(s for s, g in zip(items, gpus, strict=True) if g == h) for h in range(ep)))
    return best * ep


def check_valid(p: ExpertPlacement, experts: int, ep: int, skew: float, redundant: int) -> None:
    load, replicas = shares(experts, skew, redundant)
    assert p.replicas == tuple(replicas) and sum(p.replicas) == experts + redundant
    assert len(p.gpu_experts) == ep
    assert all(len(held) <= math.ceil((experts + redundant) / ep) for held in p.gpu_experts)
    held = [e for gpu in p.gpu_experts for e in gpu]
    assert all(held.count(e) == replicas[e] for e in range(experts))  # every expert, each replica once
    gpu_loads = [sum(load[e] for e in gpu) for gpu in p.gpu_experts]
    assert sum(gpu_loads) == pytest.approx(1.0)
    assert gpu_loads == sorted(gpu_loads, reverse=True)
    assert p.max_load == pytest.approx(max(gpu_loads)) and p.mean_load == pytest.approx(1.0 / ep)
    assert p.imbalance == pytest.approx(p.max_load / p.mean_load)
    assert p.lower_bound_imbalance <= p.imbalance <= p.greedy_imbalance
    assert p.gap == pytest.approx(1.0 - p.lower_bound_imbalance / p.imbalance, abs=1e-12)
    assert (p.status == "optimal") == (p.gap <= 1e-4)


@pytest.mark.parametrize(("experts", "ep", "skew", "redundant"), [
    (6, 3, 1.0, 0), (6, 3, 1.0, 1), (6, 3, 1.0, 3),  # the greedy is optimal
    (6, 3, 0.5, 1), (7, 3, 0.5, 0), (5, 3, 1.0, 2), (8, 2, 1.0, 0),  # the greedy is not
])
def test_tiny_groups_reach_the_brute_force_optimum(experts: int, ep: int, skew: float, redundant: int) -> None:
    p = place_experts(experts, ep, skew, redundant)
    check_valid(p, experts, ep, skew, redundant)
    optimum = brute_force_imbalance(experts, ep, skew, redundant)
    assert p.imbalance == pytest.approx(optimum, rel=1e-9)
    assert p.lower_bound_imbalance <= optimum * (1 + 1e-12)
    assert p.status == "optimal"


@pytest.mark.parametrize("name", AVAILABLE)
def test_every_backend_proves_a_tiny_optimum(name: str) -> None:
    p = place_experts(7, 3, 0.5, 0, backend_name=name)  # bounds alone leave a 2.8% gap: the model closes it
    assert p.status == "optimal" and p.imbalance == pytest.approx(brute_force_imbalance(7, 3, 0.5, 0), rel=1e-9)
    assert p.greedy_imbalance > p.imbalance * 1.05


@pytest.mark.parametrize("name", AVAILABLE)
def test_the_model_alone_improves_the_greedy_to_optimal(name: str) -> None:
    load, replicas = shares(7, 0.5, 0)
    greedy = _lpt(load, replicas, 3, 3)
    weights = [round(share * 3 / UNIT) for share in load]  # floor 0: the model proves the bound itself
    packing, bound, status = _solve(weights, replicas, 3, 0, greedy, backend(name), SolveOptions(5.0))
    assert packing is not None and status.value == "optimal"
    best = max(sum(load[e] for e in held) for held in packing) * 3
    assert best == pytest.approx(brute_force_imbalance(7, 3, 0.5, 0), rel=1e-6)
    assert bound == pytest.approx(best, rel=1e-5) and bound <= best


@pytest.mark.parametrize(("experts", "ep", "skew", "redundant"), [
    (6, 3, 1.0, 0), (16, 4, 0.5, 4), (64, 8, 1.2, 8), (256, 32, 0.5, 0), (256, 32, 0.8, 32), (384, 72, 0.5, 32),
    (384, 72, 1.0, 0), (896, 64, 0.5, 0), (160, 16, 0.0, 0), (4096, 64, 0.5, 0),
])
def test_greedy_matches_routing_and_the_result_is_never_worse(experts: int, ep: int, skew: float,
                                                              redundant: int) -> None:
    p = place_experts(experts, ep, skew, redundant, time_limit_s=0.2)
    assert p.greedy_imbalance == static_imbalance(experts, ep, skew, redundant)
    check_valid(p, experts, ep, skew, redundant)


def test_trivial_groups() -> None:
    single = place_experts(8, 1, 1.0, 2)
    assert single.imbalance == pytest.approx(1.0) and single.status == "optimal" and len(single.gpu_experts) == 1
    spread = place_experts(4, 8, 1.0, 2)  # six replicas on eight GPUs: one each at most, two GPUs empty
    assert spread.status == "optimal" and sorted(map(len, spread.gpu_experts)) == [0, 0, 1, 1, 1, 1, 1, 1]
    assert spread.max_load == pytest.approx(max(shares(4, 1.0, 2)[0]))
    check_valid(spread, 4, 8, 1.0, 2)


def test_uniform_routing_is_balanced_up_to_the_slot_granularity() -> None:
    p = place_experts(384, 72, 0.0, 0)  # 384 = 24 GPUs x 6 + 48 x 5 experts
    assert p.imbalance == pytest.approx(6 / (384 / 72)) and p.status == "optimal"


def test_hot_experts_get_the_replicas_and_to_dict_is_compact_json() -> None:
    p = place_experts(6, 3, 1.0, 3)
    assert p.replicas == (3, 2, 1, 1, 1, 1)
    data = p.to_dict()
    assert data["replicas"] == {0: 3, 1: 2} and data["gpu_experts"] == [list(g) for g in p.gpu_experts]
    assert json.loads(json.dumps(data))["replicas"] == {"0": 3, "1": 2}
    assert data["status"] == "optimal" and data["imbalance"] == p.imbalance


def test_deterministic() -> None:
    for args in [(7, 3, 0.5, 0), (256, 32, 0.5, 0)]:  # solved to optimality: no time limit in the way
        assert place_experts(*args, seed=3) == place_experts(*args, seed=3)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="experts >= 1"):
        place_experts(0, 4, 1.0, 0)
    with pytest.raises(ValueError, match="unknown solver"):
        place_experts(4, 2, 1.0, 0, backend_name="gurobi")
    for domains, groups, ep, redundant in [(3, 8, 24, 0), (2, 8, 15, 0), (4, 8, 32, 2), (2, 6, 16, 0)]:
        with pytest.raises(ValueError, match="placing by domain"):
            place_experts(256, ep, 0.5, redundant, domains=domains, groups=groups)


@pytest.mark.parametrize(("experts", "ep", "skew", "redundant", "domains", "groups"), [
    (256, 16, 0.0, 0, 2, 8), (256, 32, 0.5, 0, 4, 8), (256, 32, 0.8, 32, 4, 8), (256, 64, 0.5, 64, 8, 8),
    (64, 8, 1.0, 8, 2, 4),
])
def test_placed_by_domain_each_domain_holds_whole_groups(experts: int, ep: int, skew: float, redundant: int,
                                                         domains: int, groups: int) -> None:
    """EPLB's hierarchical policy: every domain's GPUs (listed domain by domain) hold whole expert groups, the
    same number each, with an even share of the replicas; its greedy is routing.py's; the bound, the balance and
    the accounting hold as for a global placement."""
    p = place_experts(experts, ep, skew, redundant, time_limit_s=0.2, domains=domains, groups=groups)
    size, per_domain = experts // groups, ep // domains
    seen: set[int] = set()
    for d in range(domains):
        held = {e for gpu in p.gpu_experts[d * per_domain:(d + 1) * per_domain] for e in gpu}
        assert len({e // size for e in held}) == groups // domains and len(held) == experts // domains
        assert held == {e for e in range(experts) if e // size in {e // size for e in held}}  # whole groups
        assert not held & seen
        seen |= held
        assert sum(len(gpu) for gpu in p.gpu_experts[d * per_domain:(d + 1) * per_domain]) == \
            (experts + redundant) // domains
    assert sum(p.replicas) == experts + redundant and len(p.gpu_experts) == ep
    assert all(len(gpu) <= math.ceil((experts + redundant) / ep) for gpu in p.gpu_experts)
    load = grouped_loads(experts, skew, groups)
    share = [load[e] / p.replicas[e] for e in range(experts)]
    gpu_loads = [sum(share[e] for e in gpu) for gpu in p.gpu_experts]
    assert sum(gpu_loads) == pytest.approx(1.0) and p.mean_load == pytest.approx(1.0 / ep)
    assert p.max_load == pytest.approx(max(gpu_loads))
    assert p.greedy_imbalance == pytest.approx(static_imbalance(experts, ep, skew, redundant, domains, groups),
                                               rel=1e-12)
    assert p.lower_bound_imbalance <= p.imbalance <= p.greedy_imbalance * (1 + 1e-12)
    assert p.gap == pytest.approx(1.0 - p.lower_bound_imbalance / p.imbalance, abs=1e-12)
    if skew == 0.0:
        assert p.imbalance == pytest.approx(1.0) and p.status == "optimal"


def test_grouped_loads_deal_the_zipf_ranks_over_the_groups() -> None:
    """Rank r is expert (r mod G) E/G + r div G: every group holds one of each G consecutive ranks."""
    loads = grouped_loads(8, 1.0, 2)
    zipf = np.arange(1, 9, dtype=float) ** -1.0 / sum(1 / k for k in range(1, 9))
    assert list(loads) == pytest.approx([zipf[0], zipf[2], zipf[4], zipf[6], zipf[1], zipf[3], zipf[5], zipf[7]])
