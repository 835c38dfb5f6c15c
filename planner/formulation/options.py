"""The constants the deployment MILP needs, computed once per scenario from the timed candidates.

Per prefill candidate p: GPUs g_p, fill latency t_p (s), capacity mu_p (fills of requests per second per
instance), most instances the domains hold. Per decode candidate d: g_d, sequences b_d per instance, the
time a request spends decoding after its first token Z_d = (osl - 1) TPOT_d, most instances. Per pair of
instance sizes: the KV transfer time t_kv (it depends only on the two sizes: see
`costmodel.disaggregated.kv_transfer_s`). Per mixed candidate: its aggregated deployment's exact figures.

Multi-turn sessions with a shared KV store: per prefill candidate, the bytes one instance parks in the
store and the bytes/s it fetches from it (sized for its full rate, `costmodel.kv_tiers`).

Prefill candidates are pruned by a dominance that is safe for every figure of the front: same GPUs, no
longer fill latency, no less capacity, no lower `tier_load` and no more use of the shared KV store per
request (any deployment with the dominated one does at least as well with the dominating one at the same
counts). Decode candidates are not pruned: a lower TPOT shortens the time requests spend away from the
prefill pool and so raises its queueing (a TTFT trade-off).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from costmodel.calibration import Calibration
from costmodel.disaggregated import kv_link_bandwidth, kv_transfer_s, request_kv_bytes
from costmodel.kv_tiers import NO_STORE_USE, StoreUse
from costmodel.resolve import ResolvedScenario
from costmodel.scenario import KvStore
from costmodel.serving import turn_share
from planner.deployment import aggregated_point
from planner.pareto import FrontPoint
from planner.placement import Domains, fits, group_domains, max_replicas
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
    kv_bytes: float = 0.0  # KV of one request as it leaves for decode (`costmodel.disaggregated.request_kv_bytes`)


@dataclass(frozen=True)
class DecodeOption:
    candidate: Candidate
    gpus: int
    slots: int  # sequences per instance
    decoding_s: float  # (osl - 1) x TPOT
    most: int


@dataclass(frozen=True, eq=False)
class FillGroup:
    """Fill options of one kind in disaggregated serving with a midfill pool: the first-turn prefill
    options or the midfill options, the share of requests they fill, and their KV transfer times by
    (fill GPUs, decode GPUs) for their own turns' contexts."""

    options: tuple[PrefillOption, ...]
    share: float
    transfer_s: dict[tuple[int, int], float]
    links: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)

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
    domains: Domains  # where the fill pools run (and the decode pool, unless `decode_domains` is given)
    output_tokens: int
    cohort_fraction: float
    pruned_prefill: int
    store: KvStore | None = None  # the cluster's shared KV store (multi-turn sessions)
    split: tuple[FillGroup, FillGroup] | None = None  # (first turns, midfill): a separate midfill pool
    decode_domains: Domains | None = None  # the decode pool on another inventory group: its own domains
    # (fill GPUs, decode GPUs) -> per-GPU bytes/s (egress of a fill GPU, ingress of a decode GPU) where the
    # KV transfer takes the NICs (`costmodel.disaggregated.kv_link_bandwidth`): the link rows
    links: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    label: str = ""  # the inventory groups of this structure block, e.g. "hopper>nvl" (prefill > decode)
    # unit tables of these options by first TTFT cap (`planner.formulation.units.unit_table`); not an init
    # field, so that `dataclasses.replace` gives a copy with other options an empty one
    unit_tables: dict[float | None, Any] = field(default_factory=dict, init=False, repr=False)

    @property
    def groups(self) -> frozenset[str]:
        """The inventory groups the block's deployments run on (empty: the cluster's only group)."""
        return frozenset(self.label.split(">")) if self.label else frozenset()

    @property
    def shared_domains(self) -> bool:
        """The fill and decode pools share one group's domains (their packing rows are joint)."""
        return self.decode_domains is None

    @property
    def decode_room(self) -> Domains:
        return self.domains if self.decode_domains is None else self.decode_domains

    def fill_room(self, decode_gpus: Any) -> Any:
        """GPUs the fill pools may take beside a decode pool of `decode_gpus` (a number or an array)."""
        return self.domains.gpus - decode_gpus if self.decode_domains is None else self.domains.gpus

    def fits(self, fills: list[tuple[int, int]], decode: tuple[int, int]) -> bool:
        """Whether fill pools of (instance GPUs, instances) and the decode pool fit their groups."""
        if self.decode_domains is None:
            return fits([*fills, decode], self.domains)
        return fits(fills, self.domains) and fits([decode], self.decode_domains)

    def decode_room_gpus(self, fill_gpus: int) -> int:
        """GPUs the decode pool may take beside fill pools of at least `fill_gpus`."""
        return self.domains.gpus - fill_gpus if self.decode_domains is None else self.decode_domains.gpus

    @property
    def disaggregated(self) -> bool:
        """Some disaggregated deployment exists: shared fills, or split ones (first-turn and midfill pools)."""
        return bool((self.prefill or self.split) and self.decode)


def _domains_of(resolved: ResolvedScenario, candidates: CandidateSet) -> Domains:
    """The domains of the group a candidate set was generated on (every candidate of a set shares it)."""
    group = resolved.group_named(candidates.group)
    assert group is not None  # candidates are generated on the scenario's groups
    return group_domains(group)


def _prune_prefill(options: list[PrefillOption]) -> list[PrefillOption]:
    kept: list[PrefillOption] = []
    ordered = sorted(options, key=lambda o: (o.gpus, o.fill_s, -o.capacity, -o.load, o.store.bytes,
                                             o.store.bytes_per_s))
    for option in ordered:  # within one size, keep the capacity staircase along fill latency
        same = [k for k in kept if k.gpus == option.gpus]
        if not any(k.fill_s <= option.fill_s and k.capacity >= option.capacity and k.load >= option.load
                   and k.store.bytes <= option.store.bytes and k.store.bytes_per_s <= option.store.bytes_per_s
                   and k.kv_bytes <= option.kv_bytes for k in same):
            kept.append(option)
    return kept


def deployment_options(resolved: ResolvedScenario, candidates: CandidateSet, calibration: Calibration,
                       decode_from: CandidateSet | None = None, label: str = "") -> DeploymentOptions:
    """The options of one structure block: every structure on one group (`candidates`), or, with
    `decode_from`, fills on `candidates`' group and decode on another's (no mixed or midfill pools)."""
    workload = resolved.scenario.workload
    domains = _domains_of(resolved, candidates)
    decode_domains = None if decode_from is None else _domains_of(resolved, decode_from)
    mixed = []
    for candidate in candidates.by_role.get("mixed", []) if decode_from is None else []:
        if id(candidate) not in candidates.aggregated:
            candidates.aggregated[id(candidate)] = aggregated_point(resolved, candidate)
        point = cast(FrontPoint | None, candidates.aggregated[id(candidate)])
        if point is not None:
            mixed.append(MixedOption(candidate, point))
        elif max_replicas(candidate.gpus, domains) >= 1:
            candidates.count(STORE_TOO_SMALL)
    store = resolved.scenario.cluster.kv_store
    prefill_all = _fill_options(resolved, domains, candidates.by_role.get("prefill", []), candidates)
    prefill = _prune_prefill(prefill_all)
    source = decode_from or candidates
    decode = [_decode_option(c, decode_domains or domains, workload.output_tokens, source)
              for c in source.by_role.get("decode", [])]
    decode = [d for d in decode if d.most >= 1]
    split = None
    if decode_from is None:
        first = _prune_prefill(_fill_options(resolved, domains, candidates.by_role.get("first", []), candidates))
        midfill = _prune_prefill(_fill_options(resolved, domains, candidates.by_role.get("midfill", []),
                                               candidates))
        if first and midfill and decode:
            split = (FillGroup(tuple(first), turn_share(workload, "first"), _transfers(first, decode, calibration),
                               _links(first, decode, calibration)),
                     FillGroup(tuple(midfill), turn_share(workload, "later"),
                               _transfers(midfill, decode, calibration), _links(midfill, decode, calibration)))
    return DeploymentOptions(
        mixed=tuple(mixed), prefill=tuple(prefill), decode=tuple(decode),
        kv_transfer_s=_transfers(prefill, decode, calibration), links=_links(prefill, decode, calibration),
        domains=domains, output_tokens=workload.output_tokens,
        cohort_fraction=calibration.engine(resolved.scenario.engine).cohort_fraction,
        pruned_prefill=len(prefill_all) - len(prefill), store=store, split=split,
        decode_domains=decode_domains, label=label,
    )


def _fill_options(resolved: ResolvedScenario, domains: Domains, candidates: list[Candidate],
                  pruned: CandidateSet | None = None) -> list[PrefillOption]:
    """Fill options with the most instances the domains and the shared KV store hold; those that fit the
    domains but not the store are counted in `pruned` (for the diagnosis of an infeasible scenario)."""
    store = resolved.scenario.cluster.kv_store
    options = []
    for c in candidates:
        key = ("fill", id(c), domains)  # the set keeps the candidate alive: its id is stable
        known = pruned.pool_options.get(key) if pruned is not None else None
        if known is None:
            fitting = max_replicas(c.gpus, domains)
            known = (fitting, PrefillOption(c, c.gpus, c.timing.ttft_s, c.requests_per_s,
                                            min(fitting, c.store_instances(store)), c.store_use, c.pool.tier_load,
                                            request_kv_bytes(c.timing.plan)))
            if pruned is not None:
                pruned.pool_options[key] = known
        fitting, option = cast(tuple[int, PrefillOption], known)
        if fitting >= 1 and option.most < 1 and pruned is not None:
            pruned.count(STORE_TOO_SMALL)
        options.append(option)
    return [p for p in options if p.most >= 1]


def _decode_option(c: Candidate, domains: Domains, output_tokens: int, memo: CandidateSet) -> DecodeOption:
    """A decode candidate's option on `domains`, kept in the candidate set (rebuilt every batch-search round)."""
    key = ("decode", id(c), domains)
    known = memo.pool_options.get(key)
    if known is None:
        known = memo.pool_options[key] = DecodeOption(c, c.gpus, c.pool.batch, (output_tokens - 1) * c.timing.tpot_s,
                                                      max_replicas(c.gpus, domains))
    return cast(DecodeOption, known)


def _transfers(fills: list[PrefillOption], decode: list[DecodeOption],
               calibration: Calibration) -> dict[tuple[int, int], float]:
    """KV transfer time by (fill GPUs, decode GPUs): it depends on the two sizes and the fills' turns only
    (and, between inventory groups, on their NICs and rack uplinks: one block has one group pair)."""
    return {(a, b): kv_transfer_s(p.candidate.timing.plan.ctx, d.candidate.timing.plan.ctx,
                                  p.candidate.timing.plan.request, calibration)
            for a, p in _by_size(fills).items() for b, d in _by_size(decode).items()}


def _by_size(options: Sequence[PrefillOption | DecodeOption]) -> dict[int, Any]:
    """One option of each instance size (the first), which stands for the size's transfers and links."""
    first: dict[int, Any] = {}
    for option in options:
        first.setdefault(option.gpus, option)
    return first


def _links(fills: list[PrefillOption], decode: list[DecodeOption],
           calibration: Calibration) -> dict[tuple[int, int], tuple[float, float]]:
    """Per-GPU link bandwidths by (fill GPUs, decode GPUs) where the transfer takes the NICs."""
    links = {}
    for a, p in _by_size(fills).items():
        for b, d in _by_size(decode).items():
            link = kv_link_bandwidth(p.candidate.timing.plan.ctx, d.candidate.timing.plan.ctx, calibration)
            if link is not None:
                links[a, b] = link
    return links
