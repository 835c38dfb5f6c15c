"""Disaggregated serving: fill pools hand each request's KV to a decode pool over the scale-up fabric or the
NICs (and rack uplinks), and the closed loop of concurrent requests through them sets rate and TTFT.

Split from `costmodel.serving` (pool planning and timing), which this module builds on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.calibration import Calibration
from costmodel.modes import PoolContext
from costmodel.serving import PoolPlan, PoolTiming, RequestShape, fill_parts


def kv_transfer_s(prefill: PoolContext, decode: PoolContext, request: RequestShape,
                  calibration: Calibration) -> float:
    """Moving one request's KV (all layers) from a prefill to a decode instance: over the scale-up
    fabric when a prefill and a decode instance of one group fit in one domain together (the planner then
    packs them so), over the NICs otherwise; striped over the smaller instance's GPUs. A transfer between
    inventory groups, or between domains of a group of several racks, may cross rack uplinks: each GPU then
    gets at most its fair share of an oversubscribed uplink (`PoolContext.uplink_share_bytes_per_s`)."""
    size = _kv_bytes(prefill, request)
    p2p = calibration.collectives["p2p"]
    nic_path = kv_link_bandwidth(prefill, decode, calibration)  # each stream: one sending, one receiving GPU
    link = prefill.system.scaleup_bandwidth_bytes_per_s * p2p.efficiency if nic_path is None else min(nic_path)
    streams = min(prefill.par.instance_gpus, decode.par.instance_gpus)
    latency = p2p.latency_s + (0.0 if nic_path is None else calibration.nic_latency_s)  # as every NIC transfer
    return size / (streams * link) + latency


def kv_link_bandwidth(prefill: PoolContext, decode: PoolContext,
                      calibration: Calibration) -> tuple[float, float] | None:
    """Per-GPU bandwidth a KV transfer's traffic gets on the NIC path, as (egress of a prefill GPU, ingress
    of a decode GPU), each GPU sending or receiving its share over its own NIC, at most its fair share of
    an oversubscribed rack uplink where the traffic may leave the rack (as `kv_transfer_s`); None when the
    transfer stays on the scale-up fabric."""
    pair = prefill.par.instance_gpus + decode.par.instance_gpus
    across = prefill.group != decode.group
    if pair <= prefill.system.scaleup_domain_gpus and not across:
        return None

    def side(ctx: PoolContext) -> float:
        nic = ctx.system.nic_bandwidth_bytes_per_s
        if across or ctx.group_racks > 1:
            nic = min(nic, ctx.uplink_share_bytes_per_s)
        return nic * calibration.nic_efficiency

    return side(prefill), side(decode)


def request_kv_bytes(plan: PoolPlan) -> float:
    """KV bytes of one request's context as a fill pool hands it to decode. Assumption: the MTP draft layers'
    own KV (one layer in 62 for DeepSeek-V3, held in decode memory) is not counted in the transfer."""
    return _kv_bytes(plan.ctx, plan.request)


def _kv_bytes(ctx: PoolContext, request: RequestShape) -> float:
    return ctx.arch.sequence_bytes(request.cached + request.new, ctx.fmt.kv_dtype)  # fixed states included


def kv_link_rate(stations: list[FillStation], decode: PoolTiming, decode_replicas: int,
                 calibration: Calibration) -> float:
    """Most requests per second the NICs and rack uplinks carry the KV of: each fill pool's GPUs send its
    share of the requests' KV, the decode pool's GPUs receive all of it (inf: no transfer leaves a domain)."""
    limit, inbound, inbound_bw = math.inf, 0.0, math.inf
    decode_gpus = decode_replicas * decode.plan.ctx.par.instance_gpus
    for station in stations:
        link = kv_link_bandwidth(station.timing.plan.ctx, decode.plan.ctx, calibration)
        if link is None:
            continue
        flow = station.share * request_kv_bytes(station.timing.plan)
        if flow <= 0:  # nothing to move (a model without a KV cache)
            continue
        limit = min(limit, station.replicas * station.timing.plan.ctx.par.instance_gpus * link[0] / flow)
        inbound, inbound_bw = inbound + flow, min(inbound_bw, link[1])
    if inbound > 0:
        limit = min(limit, decode_gpus * inbound_bw / inbound)
    return limit


@dataclass(frozen=True)
class FillStation:
    """A pool of fill instances in disaggregated serving and the share of requests it fills."""

    timing: PoolTiming
    replicas: int
    share: float = 1.0

    @property
    def capacity(self) -> float:
        """Requests per second the pool can fill, counting its share: replicas x batch / cycle / share."""
        return self.replicas * self.timing.requests_per_s / self.share

    @property
    def admitted(self) -> float:
        """Requests per second the deployment admits through this pool: its capacity x `tier_load`."""
        return self.timing.plan.pool.tier_load * self.capacity


def disaggregated_serving(prefill: PoolTiming, decode: PoolTiming, prefill_replicas: int, decode_replicas: int,
                          calibration: Calibration, engine: str) -> tuple[float, float, float, dict[str, float]]:
    """(TTFT s, TPOT s, requests/s, TTFT parts) of prefill and decode pools of one instance layout each,
    replicated. The planner calls this directly with candidate timings and replica counts."""
    return split_serving([FillStation(prefill, prefill_replicas)], decode, decode_replicas, calibration, engine)


def split_serving(stations: list[FillStation], decode: PoolTiming, decode_replicas: int, calibration: Calibration,
                  engine: str) -> tuple[float, float, float, dict[str, float]]:
    """Disaggregated serving whose fills run in one or more pools, each taking a fixed share of requests
    (sessions with a midfill pool: 1/T first turns to the prefill pool, the rest to the midfill pool).

    A request's mean fill latency and KV transfer are the share-weighted means over the pools; together
    they are one station of the closed loop whose capacity is that of the pool that saturates first,
    min over pools of capacity / share (one pool: exactly the single-pool model). A pool whose KV tiers
    are sized for a part `tier_load` of its rate admits no more: the rate is capped there and the wait
    for admission counts in TTFT (C / rate - Z, Little's law on the loop). So does the rate the NICs and
    rack uplinks carry the requests' KV at (`kv_link_rate`)."""
    request = decode.plan.request
    transfer = sum(s.share * kv_transfer_s(s.timing.plan.ctx, decode.plan.ctx, s.timing.plan.request, calibration)
                   for s in stations)
    fill = sum(s.share * s.timing.ttft_s for s in stations)
    concurrency = decode_replicas * decode.plan.pool.batch
    elsewhere = transfer + (request.output - 1) * decode.tpot_s
    capacity = min(s.capacity for s in stations)
    cohort = calibration.engine(engine).cohort_fraction
    at_prefill = closed_loop_wait_s(concurrency, capacity, fill, elsewhere, cohort)
    rate = concurrency / (at_prefill + elsewhere)
    admitted = min(min(s.admitted for s in stations), kv_link_rate(stations, decode, decode_replicas, calibration))
    if rate > admitted:  # tiers sized for part of a pool's rate, or links full: requests wait to be admitted
        rate = admitted
        at_prefill = concurrency / rate - elsewhere
    first_token = sum(s.share * s.timing.first_token_s for s in stations)
    parts = fill_parts(fill, first_token) | {"queue": at_prefill - fill, "kv_transfer": transfer}
    return at_prefill + transfer, decode.tpot_s, rate, parts


def closed_loop_wait_s(concurrency: float, capacity_per_s: float, min_latency_s: float, elsewhere_s: float,
                       cohort_fraction: float) -> float:
    """Mean time at a station of a closed loop of `concurrency` requests.

    Steady and staggered: the asymptotic bound max(own latency, N / capacity - time elsewhere). Requests
    arriving as one cohort also wait, on average, for half of the others ahead of them: (N - 1) / (2
    capacity), weighted by the engine's cohort fraction as in aggregated serving.
    """
    if capacity_per_s <= 0 or math.isinf(capacity_per_s):
        return min_latency_s
    steady = concurrency / capacity_per_s - elsewhere_s
    bunched = min_latency_s + cohort_fraction * (concurrency - 1.0) / (2.0 * capacity_per_s)
    return max(min_latency_s, steady, bunched)
