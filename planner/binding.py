"""The resources that bind a deployment: what a user would have to add to move its front point.

- `hbm <role>`: the pool runs the largest batch that fits its GPUs' HBM;
- `nic <group>/r<R>/n<N>` or `uplink <group>/r<R>`: the KV the pool sends or receives fills its GPUs'
  NICs, or their fair share of the rack uplink (`costmodel.disaggregated.kv_link_rate`: the rate is capped there);
- `uplink <group>/r<R>` also where the pool's scale-out traffic (KV transfers between groups or racks,
  collectives of an instance wider than a rack) runs at the uplink's fair share, below the NIC: an
  oversubscribed uplink slows it.
The rack and node named are those of the pool's first instance (`planner.placement.assign`).
"""

from __future__ import annotations

from costmodel.calibration import Calibration
from costmodel.disaggregated import kv_link_bandwidth, request_kv_bytes
from costmodel.evaluate import evaluate, plan_layout
from costmodel.inventory import ClusterGroup
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from costmodel.serving import PoolPlan, turn_share
from planner.placement import layout_gpus

RATE_TOL = 1e-9  # relative: a rate within this of a link's limit is held by it


def binding(resolved: ResolvedScenario, layout: Layout, rate_per_s: float, calibration: Calibration,
            first_gpus: list[str] | None = None) -> list[str]:
    """The binding resources of `layout` serving `rate_per_s` requests per second (its figures');
    `first_gpus`: each pool's first GPU id where a placement already gives them."""
    first = _first_gpus(resolved, layout) if first_gpus is None else [
        (_group_of(resolved, pool.group), gpu) for pool, gpu in zip(layout.pools, first_gpus, strict=True)]
    if layout.serving == "composite":  # each deployment at its own rate, on its own pools' GPUs
        found = []
        for number, part in enumerate(layout.parts):
            own = evaluate(resolved, part, calibration)
            rate = own.tokens_per_s_per_gpu * own.gpus / resolved.scenario.workload.output_tokens
            firsts = [first[i] for i in layout.pool_indices(number)]
            found += _binding(resolved, part, rate, calibration, firsts)
        return list(dict.fromkeys(found))
    return _binding(resolved, layout, rate_per_s, calibration, first)


def _binding(resolved: ResolvedScenario, layout: Layout, rate_per_s: float, calibration: Calibration,
             first: list[tuple[ClusterGroup, str]]) -> list[str]:
    plans = plan_layout(resolved, layout).pools
    found: list[str] = []
    for plan in plans:
        if plan.pool.batch >= plan.max_batch > 0:
            found.append(f"hbm {plan.pool.role}")
    if layout.serving == "disaggregated":
        found += _links(resolved, layout, plans, first, rate_per_s, calibration)
    for index, plan in enumerate(plans):
        if _wide_at_share(plan, first[index][0]):
            found.append(_uplink(first[index]))
    return list(dict.fromkeys(found))


def _links(resolved: ResolvedScenario, layout: Layout, plans: tuple[PoolPlan, ...],
           first: list[tuple[ClusterGroup, str]], rate: float, calibration: Calibration) -> list[str]:
    decode_index = next(i for i, p in enumerate(layout.pools) if p.role == "decode")
    decode = plans[decode_index]
    found, inbound, inbound_bw, inbound_uplink = [], 0.0, float("inf"), False
    for index, plan in enumerate(plans):
        if index == decode_index:
            continue
        link = kv_link_bandwidth(plan.ctx, decode.ctx, calibration)
        if link is None:
            continue
        share = turn_share(resolved.scenario.workload, plan.turns) if layout.split_fills else 1.0
        flow = share * request_kv_bytes(plan)
        gpus = layout.pools[index].gpus
        if rate * flow >= gpus * link[0] * (1 - RATE_TOL):
            found.append(_link_name(first[index], plan, link[0] / calibration.nic_efficiency))
        elif _at_share(plan, link[0] / calibration.nic_efficiency):
            found.append(_uplink(first[index]))
        inbound, inbound_bw = inbound + flow, min(inbound_bw, link[1])
        inbound_uplink |= _at_share(decode, link[1] / calibration.nic_efficiency)
    if inbound > 0:
        gpus = layout.pools[decode_index].gpus
        if rate * inbound >= gpus * inbound_bw * (1 - RATE_TOL):
            found.append(_link_name(first[decode_index], decode, inbound_bw / calibration.nic_efficiency))
        elif inbound_uplink:
            found.append(_uplink(first[decode_index]))
    return found


def _at_share(plan: PoolPlan, bandwidth: float) -> bool:
    """The pool's per-GPU link is its uplink share, below its NIC."""
    return bandwidth < plan.ctx.system.nic_bandwidth_bytes_per_s and bandwidth >= plan.ctx.uplink_share_bytes_per_s


def _wide_at_share(plan: PoolPlan, group: ClusterGroup) -> bool:
    """An instance wider than a rack whose scale-out bandwidth is lowered to its uplink share
    (`costmodel.evaluate.spanning_racks`)."""
    return plan.ctx.system.nic_bandwidth_bytes_per_s < group.system.nic_bandwidth_bytes_per_s


def _link_name(first: tuple[ClusterGroup, str], plan: PoolPlan, bandwidth: float) -> str:
    if _at_share(plan, bandwidth):
        return _uplink(first)
    return f"nic {first[1].rsplit('/', 1)[0]}"


def _uplink(first: tuple[ClusterGroup, str]) -> str:
    group, gpu = first
    return f"uplink {group.name}/{gpu.split('/')[1]}"


def _group_of(resolved: ResolvedScenario, name: str | None) -> ClusterGroup:
    group = resolved.group_named(name)
    assert group is not None  # the layout was checked against the scenario
    return group


def _first_gpus(resolved: ResolvedScenario, layout: Layout) -> list[tuple[ClusterGroup, str]]:
    """Each pool's group and its first instance's first GPU id."""
    placed = layout_gpus(resolved, layout)
    return [(group, group.gpu_id(placed[i][0][0]))
            for i, group in enumerate(_group_of(resolved, pool.group) for pool in layout.pools)]
