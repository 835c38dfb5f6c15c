"""Deployments of the planner's decision space and their exact figures.

- aggregated: one mixed candidate, as many instances as the scale-up domains hold (its per-GPU figures
  do not depend on the count, so filling the cluster costs nothing per GPU and serves the most users),
  or as the shared KV store can serve when its fill pools park contexts there;
- disaggregated: one prefill and one decode candidate with P and D instances, P, D >= 1, fitting the
  domains together; figures from `costmodel.serving.disaggregated_serving`.
With multi-turn sessions and a shared KV store, a disaggregated deployment whose prefill pool parks more
idle contexts in the store than it holds, or fetches them faster than it serves, is not in the space.
Both the MILP and the exhaustive reference build their front points here, so they cannot disagree.
"""

from __future__ import annotations

import math

from costmodel.calibration import Calibration
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from costmodel.serving import disaggregated_serving
from planner.pareto import FrontPoint
from planner.placement import domain_bins, max_replicas
from planner.templates import Candidate, with_replicas


def _store_replicas(resolved: ResolvedScenario, candidate: Candidate) -> int:
    """Most instances of a fill candidate the shared KV store can serve (unbounded without a store)."""
    if resolved.scenario.cluster.kv_store is None:
        return resolved.gpus
    most = candidate.store_use.most_within(resolved.scenario.cluster.kv_store)
    return resolved.gpus if math.isinf(most) else int(most * (1 + 1e-12))


def aggregated_point(resolved: ResolvedScenario, candidate: Candidate) -> FrontPoint | None:
    """The aggregated deployment of `candidate` filling the cluster, or as much of it as the shared KV
    store serves (None if not one instance fits)."""
    count = min(max_replicas(candidate.gpus, domain_bins(resolved)), _store_replicas(resolved, candidate))
    if count < 1:
        return None
    layout = Layout(serving="aggregated", pools=[with_replicas(candidate, count)])
    rate_per_gpu = candidate.requests_per_s * resolved.scenario.workload.output_tokens / candidate.gpus
    return FrontPoint(candidate.timing.ttft_s * 1e3, candidate.timing.tpot_s * 1e3, rate_per_gpu,
                      count * candidate.gpus, layout)


def disaggregated_point(resolved: ResolvedScenario, calibration: Calibration, prefill: Candidate,
                        decode: Candidate, prefills: int, decodes: int) -> FrontPoint | None:
    """The disaggregated deployment (None if the shared KV store cannot serve its prefill pool)."""
    if prefills > _store_replicas(resolved, prefill):
        return None
    ttft, tpot, rate, _ = disaggregated_serving(prefill.timing, decode.timing, prefills, decodes, calibration,
                                                resolved.scenario.engine)
    gpus = prefills * prefill.gpus + decodes * decode.gpus
    layout = Layout(serving="disaggregated",
                    pools=[with_replicas(prefill, prefills), with_replicas(decode, decodes)])
    return FrontPoint(ttft * 1e3, tpot * 1e3, rate * resolved.scenario.workload.output_tokens / gpus, gpus, layout)


def meets_slo(resolved: ResolvedScenario, point: FrontPoint) -> bool:
    slo = resolved.scenario.slo
    return ((slo.ttft_ms is None or point.ttft_ms <= slo.ttft_ms)
            and (slo.tpot_ms is None or point.tpot_ms <= slo.tpot_ms))
