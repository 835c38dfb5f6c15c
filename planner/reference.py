"""Exhaustive reference: every deployment of the planner's decision space, timed exactly, filtered to
its Pareto front. For small clusters only: it is the oracle the MILP is tested against.

Decision space (the same the MILP searches):
- aggregated: one mixed candidate, as many instances as the domains hold (its per-GPU figures do not
  depend on the count);
- disaggregated: one prefill and one decode candidate with P and D instances, P, D >= 1, fitting the
  domains together; figures from `costmodel.serving.disaggregated_serving`.
A deployment must meet the scenario's TTFT and TPOT targets.
"""

from __future__ import annotations

from costmodel.calibration import Calibration
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from costmodel.serving import disaggregated_serving
from planner.errors import PlannerError
from planner.pareto import FrontPoint, non_dominated
from planner.placement import domain_bins, fits, max_replicas
from planner.templates import Candidate, CandidateSet, with_replicas

MAX_DEPLOYMENTS = 2_000_000  # beyond this the enumeration is not a reasonable reference


class TooLargeForReference(PlannerError):
    exit_code = 2


def aggregated_points(resolved: ResolvedScenario, candidates: list[Candidate]) -> list[FrontPoint]:
    bins, osl = domain_bins(resolved), resolved.scenario.workload.output_tokens
    points = []
    for candidate in candidates:
        count = max_replicas(candidate.gpus, bins)
        if count < 1:
            continue
        layout = Layout(serving="aggregated", pools=[with_replicas(candidate, count)])
        rate_per_gpu = candidate.requests_per_s * osl / candidate.gpus
        points.append(FrontPoint(candidate.timing.ttft_s * 1e3, candidate.timing.tpot_s * 1e3, rate_per_gpu,
                                 count * candidate.gpus, layout))
    return points


def disaggregated_point(resolved: ResolvedScenario, calibration: Calibration, prefill: Candidate,
                        decode: Candidate, prefills: int, decodes: int) -> FrontPoint:
    ttft, tpot, rate, _ = disaggregated_serving(prefill.timing, decode.timing, prefills, decodes, calibration,
                                                resolved.scenario.engine)
    gpus = prefills * prefill.gpus + decodes * decode.gpus
    layout = Layout(serving="disaggregated",
                    pools=[with_replicas(prefill, prefills), with_replicas(decode, decodes)])
    return FrontPoint(ttft * 1e3, tpot * 1e3, rate * resolved.scenario.workload.output_tokens / gpus, gpus, layout)


def disaggregated_points(resolved: ResolvedScenario, calibration: Calibration,
                         prefills: list[Candidate], decodes: list[Candidate]) -> list[FrontPoint]:
    bins = domain_bins(resolved)
    budget = sum(bins)
    estimate = sum((budget // p.gpus) * (budget // d.gpus) for p in prefills for d in decodes)
    if estimate > MAX_DEPLOYMENTS:
        raise TooLargeForReference(f"about {estimate:,} disaggregated deployments: too many to enumerate")
    points = []
    for prefill in prefills:
        for decode in decodes:
            for count_p in range(1, budget // prefill.gpus + 1):
                for count_d in range(1, (budget - count_p * prefill.gpus) // decode.gpus + 1):
                    if fits([(prefill.gpus, count_p), (decode.gpus, count_d)], bins):
                        points.append(disaggregated_point(resolved, calibration, prefill, decode, count_p, count_d))
    return points


def meets_slo(resolved: ResolvedScenario, point: FrontPoint) -> bool:
    slo = resolved.scenario.slo
    return ((slo.ttft_ms is None or point.ttft_ms <= slo.ttft_ms)
            and (slo.tpot_ms is None or point.tpot_ms <= slo.tpot_ms))


def exhaustive_front(resolved: ResolvedScenario, candidates: CandidateSet,
                     calibration: Calibration) -> list[FrontPoint]:
    """The exact Pareto front of the decision space (see module docstring)."""
    points = aggregated_points(resolved, candidates.by_role.get("mixed", []))
    if "prefill" in candidates.by_role:
        points += disaggregated_points(resolved, calibration, candidates.by_role["prefill"],
                                       candidates.by_role["decode"])
    return non_dominated([p for p in points if meets_slo(resolved, p)])
