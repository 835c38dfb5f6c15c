"""Deployments of the planner's decision space and their exact figures.

- aggregated: one mixed candidate, as many instances as the scale-up domains hold (its per-GPU figures
  do not depend on the count, so filling the cluster costs nothing per GPU and serves the most users),
  or as the shared KV store can serve when its fill pools park contexts there;
- disaggregated: one prefill and one decode candidate with P and D instances, P, D >= 1, fitting the
  domains together (for sessions, optionally a first-turn prefill pool and a midfill pool instead of the
  one prefill pool); figures from `costmodel.disaggregated.split_serving`.
With multi-turn sessions and a shared KV store, a disaggregated deployment whose prefill pool parks more
idle contexts in the store than it holds, or fetches them faster than it serves, is not in the space.
Under `cluster` accounting on an inventory of several groups, deployments on disjoint groups also run side
by side (`composed_point`): a composite layout, one router in front.
Both the MILP and the exhaustive reference build their front points here, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.calibration import Calibration
from costmodel.disaggregated import FillStation, split_serving
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from costmodel.serving import turn_share
from planner.pareto import FrontPoint
from planner.placement import group_domains, max_replicas
from planner.templates import Candidate, with_replicas


def aggregated_point(resolved: ResolvedScenario, candidate: Candidate) -> FrontPoint | None:
    """The aggregated deployment of `candidate` filling the cluster, or as much of it as the shared KV
    store serves (None if not one instance fits)."""
    store = resolved.scenario.cluster.kv_store
    group = resolved.group_named(candidate.pool.group)
    assert group is not None  # candidates are generated on the scenario's groups
    count = min(max_replicas(candidate.gpus, group_domains(group)), candidate.store_instances(store))
    if count < 1:
        return None
    layout = Layout(serving="aggregated", pools=[with_replicas(candidate, count)])
    rate_per_gpu = candidate.requests_per_s * resolved.scenario.workload.output_tokens / candidate.gpus
    return FrontPoint(candidate.timing.ttft_s * 1e3, candidate.timing.tpot_s * 1e3, rate_per_gpu,
                      count * candidate.gpus, layout, resolved.gpus, resolved.scenario.search.gpu_accounting)


def disaggregated_point(resolved: ResolvedScenario, calibration: Calibration, fills: list[tuple[Candidate, int]],
                        decode: Candidate, decodes: int) -> FrontPoint | None:
    """The disaggregated deployment of fill pools `fills` ((candidate, instances): one prefill pool, or a
    first-turn prefill pool and a midfill pool) and a decode pool (None if the shared KV store cannot
    serve the fill pool that parks contexts there)."""
    store = resolved.scenario.cluster.kv_store
    if any(count > candidate.store_instances(store) for candidate, count in fills):
        return None
    workload = resolved.scenario.workload
    stations = [FillStation(c.timing, n, turn_share(workload, c.timing.plan.turns)) for c, n in fills]
    ttft, tpot, rate, _ = split_serving(stations, decode.timing, decodes, calibration, resolved.scenario.engine)
    gpus = sum(n * c.gpus for c, n in fills) + decodes * decode.gpus
    layout = Layout(serving="disaggregated", pools=[*(with_replicas(c, n) for c, n in fills),
                                                    with_replicas(decode, decodes)])
    return FrontPoint(ttft * 1e3, tpot * 1e3, rate * workload.output_tokens / gpus, gpus, layout, resolved.gpus,
                      resolved.scenario.search.gpu_accounting)


def with_instances(point: FrontPoint, count: int) -> FrontPoint:
    """An aggregated deployment with `count` instances instead of its own (its per-GPU figures do not depend
    on the count)."""
    pool = point.layout.pools[0]
    layout = Layout(serving="aggregated", pools=[pool.model_copy(update={"replicas": count})])
    return replace(point, gpus=count * pool.gpus_per_instance, layout=layout)


def composed_point(resolved: ResolvedScenario, parts: list[FrontPoint]) -> FrontPoint:
    """Deployments on disjoint GPUs side by side behind one router, each serving the requests it has capacity
    for at its own operating point: tokens/s add up, TTFT and TPOT are the slowest part's (every request meets
    them). Parts in the order of their first group in the inventory (one part: itself)."""
    if len(parts) == 1:
        return parts[0]
    order = {group.name: index for index, group in enumerate(resolved.groups)}
    parts = sorted(parts, key=lambda p: min(order.get(pool.group or "", 0) for pool in p.layout.pools))
    gpus = sum(p.gpus for p in parts)
    layout = Layout.composed([p.layout for p in parts])
    return FrontPoint(max(p.ttft_ms for p in parts), max(p.tpot_ms for p in parts),
                      sum(p.tokens_per_s for p in parts) / gpus, gpus, layout, resolved.gpus,
                      resolved.scenario.search.gpu_accounting)


def meets_slo(resolved: ResolvedScenario, point: FrontPoint) -> bool:
    slo = resolved.scenario.slo
    return ((slo.ttft_ms is None or point.ttft_ms <= slo.ttft_ms)
            and (slo.tpot_ms is None or point.tpot_ms <= slo.tpot_ms))
