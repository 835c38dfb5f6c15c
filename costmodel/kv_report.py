"""What the KV tiers of a multi-turn deployment hold and deliver, for reports (per front point, per
evaluation): totals over the fill pool's GPUs in GB and GB/s at the deployment's rate (the split between
tiers is the one sized for the fill pool's full rate), the share of turns each tier serves (its hit
rate), the share of TTFT the fill spends fetching contexts, and what the scenario's session arrival rate
asks of such deployments."""

from __future__ import annotations

from typing import Any

from costmodel.hardware import GB
from costmodel.scenario import Scenario
from costmodel.serving import PoolTiming


def kv_tier_report(fill_pool: PoolTiming, ttft_s: float, transfer_s: float, rate_per_s: float,
                   scenario: Scenario, latency_share: float = 1.0) -> dict[str, Any] | None:
    """`fill_pool`: the pool that holds the sessions' contexts and fills their turns (mixed, prefill, or
    midfill); `transfer_s`: KV transfer to the decode pool inside TTFT (disaggregated); `rate_per_s`: the
    deployment's turns per second; `latency_share`: the part of the mean fill latency spent in this pool
    (first turns in a pool of their own fetch nothing). None without sessions."""
    plan = fill_pool.plan
    tiers, sessions = plan.request.tiers, scenario.workload.sessions
    phase = fill_pool.fill or fill_pool.mixed
    if tiers is None or phase is None or sessions is None:
        return None
    gpus = plan.pool.gpus
    kv_bytes = plan.ctx.arch.bytes_per_context_token(tiers.context_tokens, plan.ctx.fmt.kv_dtype)
    terms = phase.slowest.terms
    fetch_s = terms["host_link"] + terms["storage"] + phase.slowest.by_name.get("kv_fetch_store", 0.0)
    fetching = fetch_s / phase.slowest.total_s if phase.slowest.total_s else 0.0
    in_fills = latency_share * max(0.0, ttft_s - transfer_s) / ttft_s if ttft_s > 0 else 0.0
    capacity = {tier: cap * gpus / GB for tier, cap in tiers.capacity_bytes.items()}
    store = scenario.cluster.kv_store
    if plan.pool.kv_store and store is not None:
        capacity["store"] = store.capacity_bytes / GB  # the cluster's, shared by every pool that uses it
    arrival = sessions.arrival_rate_per_s * sessions.turns
    sized_for = tiers.turns_per_s_per_gpu * gpus
    scale = rate_per_s / sized_for if sized_for > 0 else 0.0  # the split is fixed; bytes follow the rate
    return {
        "turns_per_s": rate_per_s,
        "sized_for_turns_per_s": sized_for,
        "capacity_gb": capacity,
        "stored_gb": {tier: held * scale * gpus / GB for tier, held in tiers.stored_bytes.items()},
        "hit_rates": dict(tiers.turn_shares),
        "recomputed_tiers": list(tiers.recomputed_tiers),
        "fetch_gb_per_s": {tier: bw * scale * gpus / GB for tier, bw in tiers.fetch_bytes_per_s(kv_bytes).items()},
        "fetch_share_of_ttft": fetching * in_fills,
        "context_tokens": tiers.context_tokens,
        "arrival_turns_per_s": arrival,
        "deployments_for_arrival_rate": arrival / rate_per_s if rate_per_s > 0 else float("inf"),
    }
