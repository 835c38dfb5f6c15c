"""Where multi-turn sessions keep their KV between turns, and what fetching it costs a turn.

Sessions (`Workload.sessions`): T turns each of i new and o generated tokens (means of `turn_lengths`
when given) after a system prompt of S tokens. Between turns a session idles: a think of theta seconds,
or with probability pi a pause of D seconds. The gap after turn t holds S + t (i + o) tokens of context,
S + T (i + o) / 2 on average over the gaps.

Sizing: per GPU of the pool that runs the fills (the mixed pool, or the prefill pool in disaggregated
serving), for the turn rate r that pool serves. By Little's law a turn rate r leaves r (T - 1) / T gaps
per second, so r (T - 1) / T (1 - pi) theta sessions think and r (T - 1) / T pi D are paused on each
GPU. r is the pool's rate with every context in HBM, an upper bound on its rate with the tiers (fetching
only slows fills), so the tiers are never undersized; a disaggregated prefill pool is sized for its full
capacity even when the decode pool keeps it partly idle. Everything is per GPU, so a configuration's
tiers do not depend on how many replicas it has (the shared store, below, is the exception).

Tiers: KV blocks are immutable, so any worker may take a session's next turn by fetching its context
from the tier that holds it. Idle sessions fill the tiers shortest-idle first (what an LRU policy keeps,
and the most turns per byte held): thinking sessions before paused ones, into the HBM the pool leaves
free, then its nodes' host DRAM, then their local SSD, then (for a pool with `kv_store`) the cluster's
shared store; what fits nowhere is recomputed (its context becomes new tokens of the turn). The host
DRAM and SSD of the decode pool's nodes are not used: a fill would reach them over the NICs, which is
what the shared store models. Usable fractions of DRAM and SSD are assumptions, stated below. The store
has no per-GPU limit; its capacity and bandwidth are the cluster's and bind the whole deployment, sized
like the other tiers for the fill pool's full rate (`store_use`; checked by `plan evaluate`, a row of the
planner's MILP).

A turn after a think finds its context where thinking sessions sit, after a pause where paused ones do;
the first turn of a session finds only the system prompt (a shared prefix, in HBM). The fill then fetches
the context from its tier over the GPU-host link, the storage path or the NIC (`costmodel.modes.cache_fetch`),
unless recomputing it is faster: per token, fetching costs KV bytes / the tier's bandwidth per GPU and
recomputing 2 x active parameters / peak FLOP/s (both spread over the same GPUs; the roofline is the
cheapest recompute can be, so the rule errs towards fetching only when fetching is clearly faster).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.hardware import GB, TB, SystemSpec
from costmodel.modes import CacheTier
from costmodel.scenario import KvStore, Sessions

LOCAL_TIERS = ("hbm", "host_dram", "ssd")
FETCHED_TIERS: tuple[CacheTier, ...] = ("host_dram", "ssd", "store")
TIERS = (*LOCAL_TIERS, "store", "recompute")
DRAM_USABLE = 0.8  # assumption: the rest of host memory serves the OS, the engine and pinned buffers
SSD_USABLE = 0.9  # assumption: headroom for the file system and wear levelling


@dataclass(frozen=True)
class Population:
    """Idle sessions of one kind: how many per GPU and the KV bytes each holds."""

    sessions_per_gpu: float
    bytes_each: float

    @property
    def bytes_per_gpu(self) -> float:
        return self.sessions_per_gpu * self.bytes_each


@dataclass(frozen=True)
class TierPlan:
    """Where idle KV sits, per GPU of the fill pool, and where each turn finds its context."""

    capacity_bytes: dict[str, float]  # per GPU, local tiers (hbm: what the pool leaves free)
    stored_bytes: dict[str, float]  # per GPU, every tier but recompute (store: this GPU's part of it)
    turn_shares: dict[str, float]  # fraction of turns whose context comes from each tier (and "recompute")
    context_tokens: float  # mean context before a turn (after its first)
    turns_per_s_per_gpu: float  # the rate the tiers are sized for
    recomputed_tiers: tuple[str, ...] = ()  # tiers whose contexts are cheaper to recompute than to fetch

    def fetch_bytes_per_s(self, kv_bytes_per_token: float) -> dict[str, float]:
        """Per GPU, what each slower tier must deliver to serve its turns."""
        per_turn = self.context_tokens * kv_bytes_per_token * self.turns_per_s_per_gpu
        return {tier: self.turn_shares[tier] * per_turn for tier in FETCHED_TIERS}


def turn_context(sessions: Sessions, input_tokens: int, output_tokens: int) -> float:
    """Mean context before a turn that follows a gap: each turn appends its input and output."""
    return sessions.system_prompt_tokens + sessions.turns * (input_tokens + output_tokens) / 2.0


def populations(sessions: Sessions, context_tokens: float, kv_bytes_per_token: float,
                turns_per_s_per_gpu: float) -> tuple[Population, Population]:
    """(thinking, paused) idle sessions per GPU, by Little's law on the gaps between turns."""
    gaps = turns_per_s_per_gpu * (sessions.turns - 1) / sessions.turns
    thinking = gaps * (1.0 - sessions.pause_probability) * sessions.think_time_s
    paused = gaps * sessions.pause_probability * sessions.pause_s
    each = context_tokens * kv_bytes_per_token
    return Population(thinking, each), Population(paused, each)


def host_dram_share(system: SystemSpec) -> float:
    """Host DRAM bytes per GPU an engine may use (offloaded weights, idle KV)."""
    return DRAM_USABLE * system.host_dram_bytes_per_node / system.gpus_per_node


def tier_capacity(system: SystemSpec, hbm_free_bytes: float, host_used_bytes: float = 0.0) -> dict[str, float]:
    """Per GPU bytes each local tier can hold for idle sessions (`host_used_bytes`: host DRAM per GPU that
    weights offloaded there already take)."""
    return {"hbm": max(0.0, hbm_free_bytes),
            "host_dram": max(0.0, host_dram_share(system) - host_used_bytes),
            "ssd": SSD_USABLE * system.ssd_capacity_bytes_per_node / system.gpus_per_node}


def fetch_s_per_token(system: SystemSpec, kv_bytes_per_token: float) -> dict[str, float]:
    """Seconds per context token to fetch from each slower tier, per GPU (SSDs shared by a node's GPUs;
    the store read through the GPU's NIC)."""
    return {"host_dram": kv_bytes_per_token / system.host_link_bandwidth_bytes_per_s,
            "ssd": kv_bytes_per_token / system.ssd_bandwidth_bytes_per_s_per_gpu,
            "store": kv_bytes_per_token / system.nic_bandwidth_bytes_per_s}


def plan_tiers(sessions: Sessions, input_tokens: int, output_tokens: int, kv_bytes_per_token: float,
               system: SystemSpec, turns_per_s_per_gpu: float, hbm_free_bytes: float,
               recompute_s_per_token: float = float("inf"), store: bool = False,
               host_used_bytes: float = 0.0) -> TierPlan:
    """Fill the tiers shortest-idle first and derive where each turn finds its context; a tier slower to
    fetch from than `recompute_s_per_token` hands its turns to recomputation; `store`: the pool may park
    what its local tiers cannot hold in the shared store."""
    context = turn_context(sessions, input_tokens, output_tokens)
    thinking, paused = populations(sessions, context, kv_bytes_per_token, turns_per_s_per_gpu)
    capacity = tier_capacity(system, hbm_free_bytes, host_used_bytes)
    left = {**capacity, "store": float("inf") if store else 0.0}
    stored = dict.fromkeys(left, 0.0)
    placed: list[dict[str, float]] = []
    for population in (thinking, paused):
        need, where = population.bytes_per_gpu, dict.fromkeys(TIERS, 0.0)
        for tier in left:
            take = min(need, left[tier])
            left[tier] -= take
            stored[tier] += take
            need -= take
            where[tier] = take / population.bytes_per_gpu if population.bytes_per_gpu else float(tier == "hbm")
        where["recompute"] = need / population.bytes_per_gpu if population.bytes_per_gpu else 0.0
        placed.append(where)
    later = (sessions.turns - 1) / sessions.turns  # turns that follow a gap
    pause = sessions.pause_probability
    shares = {tier: later * ((1 - pause) * placed[0][tier] + pause * placed[1][tier]) for tier in TIERS}
    shares["hbm"] += 1.0 / sessions.turns  # first turns: only the system prompt, a shared prefix
    slow = tuple(t for t, cost in fetch_s_per_token(system, kv_bytes_per_token).items()
                 if cost > recompute_s_per_token and shares[t] > 0.0)
    for tier in slow:
        shares["recompute"] += shares[tier]
        shares[tier] = 0.0
        stored[tier] = 0.0  # nothing worth keeping there
    return TierPlan(capacity, stored, shares, context, turns_per_s_per_gpu, slow)


@dataclass(frozen=True)
class StoreUse:
    """What a deployment's fill pools ask of the shared store, cluster totals."""

    bytes: float
    bytes_per_s: float

    def most_within(self, store: KvStore | None) -> float:
        """How many times this use fits in `store` (inf when it asks nothing or there is no limit to it)."""
        limits = [math.inf]
        if store is not None and self.bytes > 0:
            limits.append(store.capacity_bytes / self.bytes)
        if store is not None and self.bytes_per_s > 0:
            limits.append(store.bandwidth_bytes_per_s / self.bytes_per_s)
        return min(limits)

    def breach(self, store: KvStore | None) -> str | None:
        """Why the store cannot serve this use (None if it can, or if nothing is asked of it)."""
        if self.bytes <= 0.0 and self.bytes_per_s <= 0.0:
            return None
        if store is None:
            return "the layout parks contexts in a KV store but the cluster has none (cluster.kv_store)"
        if self.bytes > store.capacity_bytes * (1 + 1e-9):
            return (f"KV store: the idle contexts need {self.bytes / TB:.2f} TB but the store holds "
                    f"{store.capacity_bytes / TB:.2f} TB")
        if self.bytes_per_s > store.bandwidth_bytes_per_s * (1 + 1e-9):
            return (f"KV store: fetching contexts needs {self.bytes_per_s / GB:.1f} GB/s but the store serves "
                    f"{store.bandwidth_bytes_per_s / GB:.1f} GB/s")
        return None


NO_STORE_USE = StoreUse(0.0, 0.0)


def store_use(tiers: TierPlan | None, kv_bytes_per_token: float, fill_gpus: int) -> StoreUse:
    """What a fill pool of `fill_gpus` GPUs asks of the shared store at the rate its tiers are sized for."""
    if tiers is None:
        return NO_STORE_USE
    return StoreUse(tiers.stored_bytes["store"] * fill_gpus,
                    tiers.fetch_bytes_per_s(kv_bytes_per_token)["store"] * fill_gpus)

