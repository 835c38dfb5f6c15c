"""The constants the deployment MILP needs, computed once per scenario from the timed candidates.

Per prefill candidate p: GPUs g_p, fill latency t_p (s), capacity mu_p (fills of requests per second per
instance), most instances the domains hold. Per decode candidate d: g_d, sequences b_d per instance, the
time a request spends decoding after its first token Z_d = (osl - 1) TPOT_d, most instances. Per pair of
instance sizes: the KV transfer time t_kv (it depends only on the two sizes: see
`costmodel.serving.kv_transfer_s`). Per mixed candidate: its aggregated deployment's exact figures.

Multi-turn sessions with a shared KV store: per prefill candidate, the bytes one instance parks in the
store and the bytes/s it fetches from it (sized for its full rate, `costmodel.kv_tiers`).

Prefill candidates are pruned by a dominance that is safe for every figure of the front: same GPUs, no
longer fill latency, no less capacity, no lower `tier_load` and no more use of the shared KV store per
request (any deployment with the dominated one does at least as well with the dominating one at the same
counts). Decode candidates are not pruned: a lower TPOT shortens the time requests spend away from the
prefill pool and so raises its queueing (a TTFT trade-off).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.calibration import Calibration
from costmodel.kv_tiers import NO_STORE_USE, StoreUse
from costmodel.resolve import ResolvedScenario
from costmodel.scenario import KvStore
from costmodel.serving import kv_transfer_s, turn_share
from planner.deployment import aggregated_point
from planner.pareto import FrontPoint
from planner.placement import domain_bins, max_replicas
from planner.templates import Candidate, CandidateSet

STORE_TOO_SMALL = "shared KV store too small for one instance"


@dataclass(frozen=True)
class MixedOption:
    candidate: Candidate
    point: FrontPoint  # the aggregated deployment, exact


@dataclass(frozen=True)
class PrefillOption:
    candidate: Candidate
    gpus: int
    fill_s: float
    capacity: float  # requests per second per instance
    most: int  # instances the domains (and the shared KV store) hold
    store: StoreUse = NO_STORE_USE  # multi-turn sessions: shared-store bytes and bytes/s per instance
    load: float = 1.0  # multi-turn sessions: the share of its capacity the pool may run at (`Pool.tier_load`)


@dataclass(frozen=True)
class DecodeOption:
    candidate: Candidate
    gpus: int
    slots: int  # sequences per instance
    decoding_s: float  # (osl - 1) x TPOT
    most: int


@dataclass(frozen=True)
class Domains:
    """Scale-up domains: `full` of `size` GPUs and one of `rest` GPUs (0 if none)."""

    size: int
    full: int
    rest: int

    @property
    def gpus(self) -> int:
        return self.size * self.full + self.rest


@dataclass(frozen=True, eq=False)
class FillGroup:
    """Fill options of one kind in disaggregated serving with a midfill pool: the first-turn prefill
    options or the midfill options, the share of requests they fill, and their KV transfer times by
    (fill GPUs, decode GPUs) for their own turns' contexts."""

    options: tuple[PrefillOption, ...]
    share: float
    transfer_s: dict[tuple[int, int], float]

    @property
    def shortest_s(self) -> float:
        """Share of the shortest fill plus transfer a request can get from this group."""
        return self.share * (min(o.fill_s for o in self.options) + min(self.transfer_s.values()))

    @property
    def capacity_bound(self) -> float:
        """Most requests per second the group can serve (its share of them), largest pool."""
        return max(o.capacity * o.most for o in self.options) / self.share


@dataclass(frozen=True, eq=False)  # identity: screening caches per options object
class DeploymentOptions:
    mixed: tuple[MixedOption, ...]
    prefill: tuple[PrefillOption, ...]
    decode: tuple[DecodeOption, ...]
    kv_transfer_s: dict[tuple[int, int], float]  # (prefill GPUs, decode GPUs) -> s
    domains: Domains
    output_tokens: int
    cohort_fraction: float
    pruned_prefill: int
    store: KvStore | None = None  # the cluster's shared KV store (multi-turn sessions)
    split: tuple[FillGroup, FillGroup] | None = None  # (first turns, midfill): a separate midfill pool

    @property
    def disaggregated(self) -> bool:
        """Some disaggregated deployment exists: shared fills, or split ones (first-turn and midfill pools)."""
        return bool((self.prefill or self.split) and self.decode)


def _domains(resolved: ResolvedScenario) -> Domains:
    bins = domain_bins(resolved)
    full = sum(1 for b in bins if b == bins[0])
    return Domains(bins[0], full, sum(bins) - full * bins[0])


def _prune_prefill(options: list[PrefillOption]) -> list[PrefillOption]:
    kept: list[PrefillOption] = []
    ordered = sorted(options, key=lambda o: (o.gpus, o.fill_s, -o.capacity, -o.load, o.store.bytes,
                                             o.store.bytes_per_s))
    for option in ordered:  # within one size, keep the capacity staircase along fill latency
        same = [k for k in kept if k.gpus == option.gpus]
        if not any(k.fill_s <= option.fill_s and k.capacity >= option.capacity and k.load >= option.load
                   and k.store.bytes <= option.store.bytes and k.store.bytes_per_s <= option.store.bytes_per_s
                   for k in same):
            kept.append(option)
    return kept


def deployment_options(resolved: ResolvedScenario, candidates: CandidateSet,
                       calibration: Calibration) -> DeploymentOptions:
    bins, workload = domain_bins(resolved), resolved.scenario.workload
    mixed = []
    for candidate in candidates.by_role.get("mixed", []):
        point = aggregated_point(resolved, candidate)
        if point is not None:
            mixed.append(MixedOption(candidate, point))
        elif max_replicas(candidate.gpus, bins) >= 1:
            candidates.count(STORE_TOO_SMALL)
    store = resolved.scenario.cluster.kv_store
    prefill_all = _fill_options(resolved, candidates.by_role.get("prefill", []), candidates)
    prefill = _prune_prefill(prefill_all)
    decode = [DecodeOption(c, c.gpus, c.pool.batch, (workload.output_tokens - 1) * c.timing.tpot_s,
                           max_replicas(c.gpus, bins)) for c in candidates.by_role.get("decode", [])]
    decode = [d for d in decode if d.most >= 1]
    first = _prune_prefill(_fill_options(resolved, candidates.by_role.get("first", []), candidates))
    midfill = _prune_prefill(_fill_options(resolved, candidates.by_role.get("midfill", []), candidates))
    split = None
    if first and midfill and decode:
        split = (FillGroup(tuple(first), turn_share(workload, "first"), _transfers(first, decode, calibration)),
                 FillGroup(tuple(midfill), turn_share(workload, "later"), _transfers(midfill, decode, calibration)))
    return DeploymentOptions(
        mixed=tuple(mixed), prefill=tuple(prefill), decode=tuple(decode),
        kv_transfer_s=_transfers(prefill, decode, calibration), domains=_domains(resolved),
        output_tokens=workload.output_tokens,
        cohort_fraction=calibration.engine(resolved.scenario.engine).cohort_fraction,
        pruned_prefill=len(prefill_all) - len(prefill), store=store, split=split,
    )


def _fill_options(resolved: ResolvedScenario, candidates: list[Candidate],
                  pruned: CandidateSet | None = None) -> list[PrefillOption]:
    """Fill options with the most instances the domains and the shared KV store hold; those that fit the
    domains but not the store are counted in `pruned` (for the diagnosis of an infeasible scenario)."""
    bins, store = domain_bins(resolved), resolved.scenario.cluster.kv_store
    options = []
    for c in candidates:
        fitting = max_replicas(c.gpus, bins)
        most = min(fitting, c.store_instances(store))
        if fitting >= 1 and most < 1 and pruned is not None:
            pruned.count(STORE_TOO_SMALL)
        options.append(PrefillOption(c, c.gpus, c.timing.ttft_s, c.requests_per_s, most, c.store_use,
                                     c.pool.tier_load))
    return [p for p in options if p.most >= 1]


def _transfers(fills: list[PrefillOption], decode: list[DecodeOption],
               calibration: Calibration) -> dict[tuple[int, int], float]:
    """KV transfer time by (fill GPUs, decode GPUs): it depends on the two sizes and the fills' turns only."""
    transfer = {}
    for p in fills:
        for d in decode:
            key = (p.gpus, d.gpus)
            if key not in transfer:
                transfer[key] = kv_transfer_s(p.candidate.timing.plan.ctx, d.candidate.timing.plan.ctx,
                                              p.candidate.timing.plan.request, calibration)
    return transfer

