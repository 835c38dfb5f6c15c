"""Expert load imbalance across expert-parallel ranks.

Two sources, multiplied:
- static skew: expert popularity follows a Zipf law p_i ~ (i + 1)^-s (s = the scenario's routing_skew).
  Redundant slots hold replicas of the hottest experts (each replica takes an equal share of its
  expert's load), then experts are packed on ranks by longest-processing-time greedy with equal slot
  counts per rank: DeepSeek EPLB's replicate-then-pack. Imbalance = busiest rank / mean rank load.
- sampling noise: per step a rank receives a random number of token-expert pairs; with mean mu per rank
  the expected maximum over ep ranks is about mu + sqrt(2 ln(ep) mu) (Gaussian extreme value), which
  matters in decode, where few tokens reach each rank.

A pool whose experts EPLB's hierarchical policy places by scale-up domain (`placement_domains`) packs whole
expert groups on each domain first, then replicates and packs within it, so its imbalance is that of the
busiest domain's busiest rank.
"""

from __future__ import annotations

import functools
import heapq
import math

import numpy as np

# Roles whose pools EPLB's hierarchical policy places (DeepSeek's EPLB README: the hierarchical policy for the
# prefilling stage, with its smaller expert-parallel size; the global policy for decoding, with its larger one).
HIERARCHICAL_ROLES = frozenset({"prefill", "midfill"})


def placement_domains(groups: int, groups_per_token: int, role: str, ep: int, moe_tp: int, domain_gpus: int,
                      redundant: int, vendor: str) -> int:
    """Scale-up domains over which a pool's experts are placed group by group (1: placed globally).

    EPLB's hierarchical policy, which harnesses group-limited routing (a token's experts from `groups_per_token`
    of `groups` groups), applies where the number of nodes divides the number of expert groups (EPLB README); here,
    in prefill and midfill pools of NVIDIA GPUs (where prompt steps relay their all-to-all per domain:
    `costmodel.collectives.dispatch_combine`) whose expert-parallel group fills whole domains, with the
    redundant slots split evenly over them (EPLB asserts that too). Anything else: the global policy."""
    if (role not in HIERARCHICAL_ROLES or vendor != "nvidia" or moe_tp != 1 or not 0 < groups_per_token < groups
            or ep <= domain_gpus or ep % domain_gpus):
        return 1
    domains = ep // domain_gpus
    return domains if groups % domains == 0 and redundant % domains == 0 else 1


def zipf_loads(experts: int, skew: float) -> np.ndarray:
    """Expert loads p_i ~ (i + 1)^-s by expert id, summing to 1."""
    popularity = (np.arange(1, experts + 1, dtype=float)) ** (-skew)
    return np.asarray(popularity / popularity.sum())


def grouped_loads(experts: int, skew: float, groups: int) -> np.ndarray:
    """Loads by expert id of a model whose experts form `groups` groups of consecutive ids: the Zipf ranks dealt
    over the groups in turn (rank r is expert (r mod G) E/G + r div G). Assumption: the routing's balancing
    (DeepSeek-V3's auxiliary-loss-free bias) spreads the hot experts over the groups; the Zipf law says how
    skewed experts are, not where the hot ones sit. Dealt so, the groups are as even as one expert per tier
    allows: the group holding rank 0 carries 1.15x the mean group's load at skew 0.5, 1.93x at 1.0."""
    size = experts // groups
    ids = np.arange(experts)
    return np.asarray(zipf_loads(experts, skew)[(ids % size) * groups + ids // size])


def domain_experts(loads: np.ndarray, groups: int, domains: int) -> list[list[int]]:
    """EPLB's hierarchical first step: whole groups onto domains, groups / domains each, heaviest group first
    onto the least-loaded domain with room. Expert ids per domain, ascending."""
    size, per_domain = len(loads) // groups, groups // domains
    weights = [float(loads[g * size:(g + 1) * size].sum()) for g in range(groups)]
    held: list[list[int]] = [[] for _ in range(domains)]
    totals = [0.0] * domains
    for g in sorted(range(groups), key=lambda g: -weights[g]):
        d = min((d for d in range(domains) if len(held[d]) < per_domain), key=lambda d: totals[d])
        held[d].append(g)
        totals[d] += weights[g]
    return [sorted(e for g in gs for e in range(g * size, (g + 1) * size)) for gs in held]


@functools.lru_cache(maxsize=4096)
def static_imbalance(experts: int, ep: int, skew: float, redundant: int = 0, domains: int = 1,
                     groups: int = 1) -> float:
    """Busiest-rank load over mean rank load after replicate-then-pack placement; over `domains` > 1, EPLB's
    hierarchical placement of `groups` expert groups (`placement_domains`)."""
    if ep <= 1 or experts <= 0:
        return 1.0
    if domains > 1:
        loads = grouped_loads(experts, skew, groups)
        slots = math.ceil((experts + redundant) / ep)
        packed = [_packed(loads[ids], ep // domains, redundant // domains, slots)
                  for ids in domain_experts(loads, groups, domains)]
        return float(max(top for top, _ in packed) / (sum(total for _, total in packed) / ep))
    top, total = _packed(zipf_loads(experts, skew), ep, redundant, 0)
    return float(top / (total / ep))


def _packed(popularity: np.ndarray, ep: int, redundant: int, slots_per_rank: int) -> tuple[float, float]:
    """(busiest rank's load, all ranks' load) after replicate-then-pack (`slots_per_rank` 0: the fewest that hold
    every replica)."""
    experts = len(popularity)
    replicas = np.ones(experts, dtype=int)
    for _ in range(redundant):  # give each extra slot to the expert with the highest per-replica load
        replicas[int(np.argmax(popularity / replicas))] += 1
    shards = sorted(
        ((float(popularity[i] / replicas[i])) for i in range(experts) for _ in range(replicas[i])), reverse=True
    )
    slots_per_rank = slots_per_rank or math.ceil(len(shards) / ep)
    loads, slots = [0.0] * ep, [0] * ep
    open_ranks = [(0.0, rank) for rank in range(ep)]  # least-loaded rank with a free slot first
    for share in shards:
        _, rank = heapq.heappop(open_ranks)
        loads[rank] += share
        slots[rank] += 1
        if slots[rank] < slots_per_rank:
            heapq.heappush(open_ranks, (loads[rank], rank))
    return max(loads), sum(loads)


def sampling_imbalance(pairs_per_rank: float, ep: int) -> float:
    """Expected busiest-rank over mean load from random routing of `pairs_per_rank` pairs on average."""
    if ep <= 1 or pairs_per_rank <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(ep) / pairs_per_rank)


def load_imbalance(experts: int, top_k: int, ep: int, group_tokens: float, skew: float, redundant: int,
                   domains: int = 1, groups: int = 1) -> float:
    """Busiest EP rank's share of routed work relative to a perfectly even split (`domains`, `groups`: as
    `static_imbalance`)."""
    static = static_imbalance(experts, ep, round(skew, 6), redundant, domains, groups)
    pairs_per_rank = group_tokens * top_k / max(ep, 1)
    return static * sampling_imbalance(pairs_per_rank * static, ep)
