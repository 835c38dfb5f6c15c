"""Exhaustive reference: every deployment of the planner's decision space, timed exactly, filtered to
its Pareto front. For small clusters only: it is the oracle the MILP is tested against.

Decision space: the one the MILP searches (see `planner.deployment`), separate midfill pools included;
with `generate(..., every_batch=True)` candidates, every integer batch of each layout (what the planner
certifies under cluster accounting, `planner.batches`).
A deployment must meet the scenario's TTFT and TPOT targets. Under `cluster` accounting on several
inventory groups, deployments on disjoint groups side by side too (`composed_points`).
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator

from costmodel.calibration import Calibration
from costmodel.resolve import ResolvedScenario
from planner.deployment import aggregated_point, composed_point, disaggregated_point, meets_slo, with_instances
from planner.errors import PlannerError
from planner.formulation.fill import placeable
from planner.pareto import FrontPoint, non_dominated
from planner.placement import Domains, fits, group_domains
from planner.sweep import composing
from planner.templates import Candidate, CandidateKind, CandidateSet

MAX_DEPLOYMENTS = 2_000_000  # beyond this the enumeration is not a reasonable reference


class TooLargeForReference(PlannerError):
    exit_code = 2


def aggregated_points(resolved: ResolvedScenario, candidates: list[Candidate]) -> list[FrontPoint]:
    return [p for p in (aggregated_point(resolved, c) for c in candidates) if p is not None]


def disaggregated_points(resolved: ResolvedScenario, calibration: Calibration, prefills: list[Candidate],
                         decodes: list[Candidate], limit: int = MAX_DEPLOYMENTS) -> list[FrontPoint]:
    """Every prefill x decode deployment; the two pools on one inventory group share its domains, on two
    groups each fits its own."""
    estimate = sum((_domains(resolved, p).gpus // p.gpus) * (_domains(resolved, d).gpus // d.gpus)
                   for p in prefills for d in decodes)
    if estimate > limit:
        raise TooLargeForReference(f"about {estimate:,} disaggregated deployments: too many to enumerate")
    points = []
    for prefill in prefills:
        for decode in decodes:
            shared = prefill.pool.group == decode.pool.group
            room_p, room_d = _domains(resolved, prefill), _domains(resolved, decode)
            for count_p in range(1, room_p.gpus // prefill.gpus + 1):
                left = room_p.gpus - count_p * prefill.gpus if shared else room_d.gpus
                for count_d in range(1, left // decode.gpus + 1):
                    pools = [(prefill.gpus, count_p), (decode.gpus, count_d)]
                    if fits(pools, room_p) if shared else (fits(pools[:1], room_p) and fits(pools[1:], room_d)):
                        point = disaggregated_point(resolved, calibration, [(prefill, count_p)], decode, count_d)
                        points += [point] if point is not None else []
    return points


def _domains(resolved: ResolvedScenario, candidate: Candidate) -> Domains:
    group = resolved.group_named(candidate.pool.group)
    assert group is not None
    return group_domains(group)


def split_points(resolved: ResolvedScenario, calibration: Calibration, firsts: list[Candidate],
                 midfills: list[Candidate], decodes: list[Candidate], limit: int = MAX_DEPLOYMENTS) -> list[FrontPoint]:
    """Disaggregated deployments with a separate midfill pool: first-turn prefill, midfill and decode pools."""
    domains = _domains(resolved, firsts[0])  # one group: the three pools share its domains
    budget = domains.gpus
    sizes = [collections.Counter(c.gpus for c in group) for group in (firsts, midfills, decodes)]
    estimate = sum(nf * nm * nd * _count_triples(f, m, d, budget) for f, nf in sizes[0].items()
                   for m, nm in sizes[1].items() for d, nd in sizes[2].items())
    if estimate > limit:
        raise TooLargeForReference(f"about {estimate:,} deployments with a midfill pool: too many to enumerate")
    points = []
    for first, midfill, decode in itertools.product(firsts, midfills, decodes):
        for count_f in range(1, budget // first.gpus + 1):
            left = budget - count_f * first.gpus
            for count_m in range(1, left // midfill.gpus + 1):
                for count_d in range(1, (left - count_m * midfill.gpus) // decode.gpus + 1):
                    pools = [(first.gpus, count_f), (midfill.gpus, count_m), (decode.gpus, count_d)]
                    if fits(pools, domains):
                        point = disaggregated_point(resolved, calibration, [(first, count_f), (midfill, count_m)],
                                                    decode, count_d)
                        points += [point] if point is not None else []
    return points


def _count_triples(f: int, m: int, d: int, budget: int) -> int:
    """Positive counts (P, M, D) with f P + m M + d D <= budget."""
    return sum(max(0, (budget - f * p - m * q) // d) for p in range(1, budget // f + 1)
               for q in range(1, (budget - f * p) // m + 1))


def exhaustive_front(resolved: ResolvedScenario, candidates: CandidateSet | list[CandidateSet],
                     calibration: Calibration, limit: int = MAX_DEPLOYMENTS) -> list[FrontPoint]:
    """The exact Pareto front of the decision space (see module docstring), over every inventory group's
    candidates (one set per group); raises TooLargeForReference beyond `limit` disaggregated deployments."""
    sets = candidates if isinstance(candidates, list) else [candidates]

    def role(name: CandidateKind) -> list[Candidate]:
        return [c for own in sets for c in own.by_role.get(name, [])]

    points = aggregated_points(resolved, role("mixed"))
    if role("prefill"):
        points += disaggregated_points(resolved, calibration, role("prefill"), role("decode"), limit)
    for own in sets:  # a separate midfill pool: the three pools on one group
        if "midfill" in own.by_role:
            points += split_points(resolved, calibration, own.by_role["first"], own.by_role["midfill"],
                                   own.by_role["decode"], limit)
    points = [p for p in points if meets_slo(resolved, p)]
    if composing(resolved, [frozenset({group.name}) for group in resolved.groups]):
        points += mixed_fill_points(resolved, [p for p in points if p.layout.serving == "aggregated"], limit)
        points += composed_points(resolved, points, limit)
    return non_dominated(points)


def mixed_fill_points(resolved: ResolvedScenario, aggregated: list[FrontPoint],
                      limit: int = MAX_DEPLOYMENTS) -> list[FrontPoint]:
    """Aggregated instances of two or more sizes side by side on one group: every count vector that fits
    (sizes dividing each other, as the planner keeps: `planner.formulation.fill.placeable`),
    each size's instances of one candidate drawn from that size's front (of one size, a dominated candidate
    never makes a better mix: another of the size's front is as fast and serves as much per instance)."""
    found = []
    for group in resolved.groups:
        by_size: dict[int, list[FrontPoint]] = collections.defaultdict(list)
        for point in aggregated:
            pool = point.layout.pools[0]
            if pool.group == group.name:
                by_size[pool.gpus_per_instance].append(point)
        fronts = {size: non_dominated(found_) for size, found_ in sorted(by_size.items(), reverse=True)}
        domains = group_domains(group)
        sizes = list(fronts)
        for counts in itertools.product(*(range(domains.gpus // size + 1) for size in sizes)):
            used = [(size, count) for size, count in zip(sizes, counts, strict=True) if count]
            if len(used) < 2 or not placeable(used, domains):
                continue
            combinations = 1
            for size, _ in used:
                combinations *= len(fronts[size])
            if combinations > limit:
                raise TooLargeForReference(f"about {combinations:,} mixes of aggregated instances: too many")
            for chosen in itertools.product(*(fronts[size] for size, _ in used)):
                parts = [with_instances(point, count) for point, (_, count) in zip(chosen, used, strict=True)]
                found.append(composed_point(resolved, parts))
    return found


def composed_points(resolved: ResolvedScenario, points: list[FrontPoint],
                    limit: int = MAX_DEPLOYMENTS) -> list[FrontPoint]:
    """Every set of two or more deployments on disjoint groups, side by side. Each part is drawn from the
    front of the deployments on its groups: a dominated part (slower and no more tokens/s) never makes a
    better composite, whose TTFT is the slowest part's and whose tokens/s the sum."""
    by_groups: dict[frozenset[str], list[FrontPoint]] = collections.defaultdict(list)
    for point in points:
        by_groups[frozenset(pool.group or "" for pool in point.layout.pools)].append(point)
    fronts = {groups: non_dominated(found) for groups, found in by_groups.items()}
    composed = []
    for packing in _packings(sorted(fronts, key=sorted)):
        combinations = 1
        for groups in packing:
            combinations *= len(fronts[groups])
        if combinations > limit:
            raise TooLargeForReference(f"about {combinations:,} composite deployments: too many to enumerate")
        composed += [composed_point(resolved, list(parts))
                     for parts in itertools.product(*(fronts[groups] for groups in packing))]
    return composed


def _packings(keys: list[frozenset[str]]) -> list[list[frozenset[str]]]:
    """Every set of two or more pairwise disjoint keys (in key order)."""

    def grown(chosen: list[frozenset[str]], taken: frozenset[str], start: int) -> Iterator[list[frozenset[str]]]:
        for index in range(start, len(keys)):
            if not keys[index] & taken:
                bigger = [*chosen, keys[index]]
                yield bigger
                yield from grown(bigger, taken | keys[index], index + 1)

    return [packing for packing in grown([], frozenset(), 0) if len(packing) >= 2]
