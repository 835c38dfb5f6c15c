"""Expert load imbalance across expert-parallel ranks.

Two sources, multiplied:
- static skew: expert popularity follows a Zipf law p_i ~ (i + 1)^-s (s = the scenario's routing_skew).
  Redundant slots hold replicas of the hottest experts (each replica takes an equal share of its
  expert's load), then experts are packed on ranks by longest-processing-time greedy with equal slot
  counts per rank: DeepSeek EPLB's replicate-then-pack. Imbalance = busiest rank / mean rank load.
- sampling noise: per step a rank receives a random number of token-expert pairs; with mean mu per rank
  the expected maximum over ep ranks is about mu + sqrt(2 ln(ep) mu) (Gaussian extreme value), which
  matters in decode, where few tokens reach each rank.
"""

from __future__ import annotations

import functools
import heapq
import math

import numpy as np


@functools.lru_cache(maxsize=4096)
def static_imbalance(experts: int, ep: int, skew: float, redundant: int = 0) -> float:
    """Busiest-rank load over mean rank load after replicate-then-pack placement."""
    if ep <= 1 or experts <= 0:
        return 1.0
    popularity = (np.arange(1, experts + 1, dtype=float)) ** (-skew)
    popularity /= popularity.sum()
    replicas = np.ones(experts, dtype=int)
    for _ in range(redundant):  # give each extra slot to the expert with the highest per-replica load
        replicas[int(np.argmax(popularity / replicas))] += 1
    shards = sorted(
        ((float(popularity[i] / replicas[i])) for i in range(experts) for _ in range(replicas[i])), reverse=True
    )
    slots_per_rank = math.ceil(len(shards) / ep)
    loads, slots = [0.0] * ep, [0] * ep
    open_ranks = [(0.0, rank) for rank in range(ep)]  # least-loaded rank with a free slot first
    for share in shards:
        _, rank = heapq.heappop(open_ranks)
        loads[rank] += share
        slots[rank] += 1
        if slots[rank] < slots_per_rank:
            heapq.heappush(open_ranks, (loads[rank], rank))
    return float(max(loads) / (sum(loads) / ep))


def sampling_imbalance(pairs_per_rank: float, ep: int) -> float:
    """Expected busiest-rank over mean load from random routing of `pairs_per_rank` pairs on average."""
    if ep <= 1 or pairs_per_rank <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(ep) / pairs_per_rank)


def load_imbalance(experts: int, top_k: int, ep: int, group_tokens: float, skew: float, redundant: int) -> float:
    """Busiest EP rank's share of routed work relative to a perfectly even split."""
    static = static_imbalance(experts, ep, round(skew, 6), redundant)
    pairs_per_rank = group_tokens * top_k / max(ep, 1)
    return static * sampling_imbalance(pairs_per_rank * static, ep)
