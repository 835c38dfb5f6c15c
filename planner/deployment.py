"""Deployments of the planner's decision space and their exact figures.

- aggregated: one mixed candidate, as many instances as the scale-up domains hold (its per-GPU figures
  do not depend on the count, so filling the cluster costs nothing per GPU and serves the most users);
- disaggregated: one prefill and one decode candidate with P and D instances, P, D >= 1, fitting the
  domains together; figures from `costmodel.serving.disaggregated_serving`.
Both the MILP and the exhaustive reference build their front points here, so they cannot disagree.
"""

from __future__ import annotations

from costmodel.calibration import Calibration
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from costmodel.serving import disaggregated_serving
from planner.pareto import FrontPoint
from planner.placement import domain_bins, max_replicas
from planner.templates import Candidate, with_replicas


def aggregated_point(resolved: ResolvedScenario, candidate: Candidate) -> FrontPoint | None:
    """The aggregated deployment of `candidate` filling the cluster (None if not one instance fits)."""
    count = max_replicas(candidate.gpus, domain_bins(resolved))
    if count < 1:
        return None
    layout = Layout(serving="aggregated", pools=[with_replicas(candidate, count)])
    rate_per_gpu = candidate.requests_per_s * resolved.scenario.workload.output_tokens / candidate.gpus
    return FrontPoint(candidate.timing.ttft_s * 1e3, candidate.timing.tpot_s * 1e3, rate_per_gpu,
                      count * candidate.gpus, layout)


def disaggregated_point(resolved: ResolvedScenario, calibration: Calibration, prefill: Candidate,
                        decode: Candidate, prefills: int, decodes: int) -> FrontPoint:
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
