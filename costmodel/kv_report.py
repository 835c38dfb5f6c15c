"""What the KV tiers of a multi-turn deployment hold and deliver, for reports (per front point, per
evaluation): cluster totals in GB and GB/s, the share of turns each tier serves, and the share of TTFT
the fill spends fetching contexts."""

from __future__ import annotations

from typing import Any

from costmodel.hardware import GB
from costmodel.serving import PoolTiming


def kv_tier_report(fill_pool: PoolTiming, cluster_gpus: int, ttft_s: float,
                   transfer_s: float = 0.0) -> dict[str, Any] | None:
    """`fill_pool`: the pool that runs the turns' fills (mixed or prefill); `transfer_s`: KV transfer to
    the decode pool inside TTFT (disaggregated). None without sessions."""
    plan = fill_pool.plan
    tiers = plan.request.tiers
    phase = fill_pool.fill or fill_pool.mixed
    if tiers is None or phase is None:
        return None
    kv_bytes = plan.ctx.arch.kv_bytes_per_token(plan.ctx.fmt.kv_dtype)
    terms = phase.slowest.terms
    fetching = (terms["host_link"] + terms["storage"]) / phase.slowest.total_s if phase.slowest.total_s else 0.0
    in_fills = max(0.0, ttft_s - transfer_s) / ttft_s if ttft_s > 0 else 0.0
    return {
        "capacity_gb": {tier: cap * cluster_gpus / GB for tier, cap in tiers.capacity_bytes.items()},
        "stored_gb": {tier: held * cluster_gpus / GB for tier, held in tiers.stored_bytes.items()},
        "turn_shares": dict(tiers.turn_shares),
        "fetch_gb_per_s": {tier: rate * cluster_gpus / GB for tier, rate in tiers.fetch_bytes_per_s(kv_bytes).items()},
        "fetch_share_of_ttft": fetching * in_fills,
        "context_tokens": tiers.context_tokens,
    }
