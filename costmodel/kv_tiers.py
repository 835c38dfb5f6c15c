"""Where multi-turn sessions keep their KV between turns, and what fetching it costs a turn.

Sessions (`Workload.sessions`): arrive at lambda per second, T turns each of i new and o generated tokens
after a system prompt of S tokens. Between turns a session idles: a think of theta seconds, or with
probability pi a pause of D seconds. By Little's law, lambda (T - 1) (1 - pi) theta sessions are thinking
and lambda (T - 1) pi D paused at any moment; the gap after turn t holds S + t (i + o) tokens of context,
S + T (i + o) / 2 on average over the gaps.

Tiers: KV blocks are immutable, so any worker may take a session's next turn by fetching its context
from the tier that holds it. Idle sessions fill the tiers shortest-idle first (what an LRU policy keeps):
thinking sessions before paused ones, HBM left free by the deployment first, then host DRAM, then local
SSD; what fits nowhere is recomputed (its context becomes new tokens of the turn). All per GPU: the
cluster's idle KV spread over its GPUs, each GPU's share of its node's DRAM and SSD (a deployment that
fills the cluster, as the planner's do). Usable fractions of DRAM and SSD are assumptions, stated below.

A turn after a think finds its context where thinking sessions sit, after a pause where paused ones do;
the first turn of a session finds only the system prompt (a shared prefix, in HBM). The fill then fetches
the context from its tier over the GPU-host link or the storage path (`costmodel.modes.cache_fetch`),
unless recomputing it is faster: per token, fetching costs KV bytes / the tier's bandwidth per GPU and
recomputing 2 x active parameters / peak FLOP/s (both spread over the same GPUs; the roofline is the
cheapest recompute can be, so the rule errs towards fetching only when fetching is clearly faster).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.hardware import SystemSpec
from costmodel.scenario import Sessions

TIERS = ("hbm", "host_dram", "ssd", "recompute")
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
    """Where idle KV sits, per GPU, and where each turn finds its context."""

    capacity_bytes: dict[str, float]  # per GPU, per tier (hbm: what the deployment leaves free)
    stored_bytes: dict[str, float]  # per GPU, per tier
    turn_shares: dict[str, float]  # fraction of turns whose context comes from each tier (and "recompute")
    context_tokens: float  # mean context before a turn (after its first)
    turns_per_s_per_gpu: float
    recomputed_tiers: tuple[str, ...] = ()  # tiers whose contexts are cheaper to recompute than to fetch

    def fetch_bytes_per_s(self, kv_bytes_per_token: float) -> dict[str, float]:
        """Per GPU, what each tier must deliver to serve its turns."""
        per_turn = self.context_tokens * kv_bytes_per_token * self.turns_per_s_per_gpu
        return {tier: share * per_turn for tier, share in self.turn_shares.items() if tier not in ("hbm", "recompute")}


def turn_context(sessions: Sessions, input_tokens: int, output_tokens: int) -> float:
    """Mean context before a turn that follows a gap: each turn appends its input and output."""
    return sessions.system_prompt_tokens + sessions.turns * (input_tokens + output_tokens) / 2.0


def populations(sessions: Sessions, context_tokens: float, kv_bytes_per_token: float,
                gpus: int) -> tuple[Population, Population]:
    """(thinking, paused) idle sessions per GPU."""
    gaps = sessions.arrival_rate_per_s * (sessions.turns - 1)
    thinking = gaps * (1.0 - sessions.pause_probability) * sessions.think_time_s / gpus
    paused = gaps * sessions.pause_probability * sessions.pause_s / gpus
    each = context_tokens * kv_bytes_per_token
    return Population(thinking, each), Population(paused, each)


def tier_capacity(system: SystemSpec, hbm_free_bytes: float) -> dict[str, float]:
    """Per GPU bytes each tier can hold for idle sessions."""
    return {"hbm": max(0.0, hbm_free_bytes),
            "host_dram": DRAM_USABLE * system.host_dram_bytes_per_node / system.gpus_per_node,
            "ssd": SSD_USABLE * system.ssd_capacity_bytes_per_node / system.gpus_per_node}


def fetch_s_per_token(system: SystemSpec, kv_bytes_per_token: float) -> dict[str, float]:
    """Seconds per context token to fetch from each slower tier, per GPU (SSDs shared by a node's GPUs)."""
    return {"host_dram": kv_bytes_per_token / system.host_link_bandwidth_bytes_per_s,
            "ssd": kv_bytes_per_token / system.ssd_bandwidth_bytes_per_s_per_gpu}


def plan_tiers(sessions: Sessions, input_tokens: int, output_tokens: int, kv_bytes_per_token: float,
               system: SystemSpec, gpus: int, hbm_free_bytes: float,
               recompute_s_per_token: float = float("inf")) -> TierPlan:
    """Fill the tiers shortest-idle first and derive where each turn finds its context; a tier slower to
    fetch from than `recompute_s_per_token` hands its turns to recomputation."""
    context = turn_context(sessions, input_tokens, output_tokens)
    thinking, paused = populations(sessions, context, kv_bytes_per_token, gpus)
    capacity = tier_capacity(system, hbm_free_bytes)
    left = dict(capacity)
    stored = dict.fromkeys(capacity, 0.0)
    placed: list[dict[str, float]] = []
    for population in (thinking, paused):
        need, where = population.bytes_per_gpu, dict.fromkeys(TIERS, 0.0)
        for tier in ("hbm", "host_dram", "ssd"):
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
                 if cost > recompute_s_per_token)
    for tier in slow:
        shares["recompute"] += shares[tier]
        shares[tier] = 0.0
    turns_per_s = sessions.arrival_rate_per_s * sessions.turns / gpus
    return TierPlan(capacity, stored, shares, context, turns_per_s, slow)
