"""Candidate pool layouts, enumerated outside the optimisation model and timed once with the exact cost
model (planned per layout, priced in bulk).

Degrees (unless the scenario's `search` lists them): tp in powers of two up to 8 that divide the attention
heads; attention-DP in powers of two (MoE models; a dense model's attention-DP ranks would share nothing, so
they are replicas, which the optimisation chooses and places more freely); pp in {1, 2, 4}; experts either
spread (moe_ep = tp x dp) or tensor-parallel (moe_tp = tp x dp); dense models put all stage GPUs in moe_tp.
Instances never exceed the cluster. Batches per attention-DP rank on a geometric grid (1, 2, 4, ... 1024;
prefill 1 to 8 requests per fill). Pruned: candidates over HBM, and candidates that break an SLO on their
own (TPOT of mixed and decode pools, TTFT of mixed pools, fill latency of prefill pools).
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

from costmodel.calibration import Calibration
from costmodel.evaluate import pool_context
from costmodel.kv_tiers import StoreUse, store_use
from costmodel.layout import Pool, PoolRole
from costmodel.modes import PoolContext
from costmodel.pricing import TablePricer, WorkTable
from costmodel.resolve import ResolvedScenario, mxfp8_falls_back
from costmodel.scenario import MAX_BATCH, KvStore
from costmodel.serving import (
    ENGINE_STEP_TOKENS,
    PoolPlan,
    PoolTiming,
    RequestShape,
    Turns,
    plan_pool,
    time_pool,
    turn_share,
    with_session_tiers,
)
from planner.experts import pool_bank

POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
BATCH_PER_RANK = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
PREFILL_BATCH_PER_RANK = (1, 2, 4, 8)
MAX_TP = 8  # tensor parallelism beyond one HGX board's worth stops paying for attention
PIPELINE_DEPTHS = (1, 2, 4)

UNBOUNDED = 2**31  # instance count standing for "no limit"

# Shares of a disaggregated fill pool's full rate its KV tiers may be sized for (`Pool.tier_load`).
TIER_LOADS = (1.0, 0.5, 0.25, 0.125)

# mixed, prefill and decode as their pool roles; "first": prefill layouts for sessions' first turns and
# "midfill": layouts for their later turns, the two pools of disaggregated serving with a midfill pool.
CandidateKind = Literal["mixed", "prefill", "decode", "first", "midfill"]


@dataclass(frozen=True)
class Candidate:
    """One instance layout of one role, timed per instance (replicas = 1)."""

    pool: Pool
    timing: PoolTiming

    @property
    def gpus(self) -> int:
        return self.pool.gpus_per_instance

    @functools.cached_property  # options are rebuilt each batch-search round: computed once per candidate
    def store_use(self) -> StoreUse:
        """Multi-turn sessions: what one instance asks of the shared KV store (sized for its full rate)."""
        plan = self.timing.plan
        tiers = plan.request.tiers
        context = tiers.context_tokens if tiers is not None else 0.0
        return store_use(tiers, plan.ctx.arch.bytes_per_context_token(context, plan.ctx.fmt.kv_dtype), self.gpus)

    def store_instances(self, store: KvStore | None) -> int:
        """Most instances the shared KV store serves (`UNBOUNDED` when it asks nothing of one, or none is
        given); 1e-12 of slack so that an exact fit is not lost to rounding."""
        most = self.store_use.most_within(store)
        return UNBOUNDED if math.isinf(most) else int(most * (1 + 1e-12))

    @property
    def requests_per_s(self) -> float:
        """Mixed: requests completed per second per instance; prefill: fills per second (capacity)."""
        return self.timing.requests_per_s


@dataclass
class CandidateSet:
    """Candidates per role, with the counts of what was pruned and why."""

    group: str | None = None  # the inventory group they were generated on (None: the cluster's only group)
    by_role: dict[CandidateKind, list[Candidate]] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)
    fastest_ms: dict[str, float] = field(default_factory=dict)  # best TPOT / TTFT among layouts that fit HBM
    instance_gpus: int = 0  # GPUs of the largest instance layout tried
    # grid batches that fit but were left untimed at `generate`'s deadline, per kind and parallel layout
    untimed_batches: dict[tuple[CandidateKind, tuple[int, int, int, int, int]], list[int]] = field(
        default_factory=dict)
    # per kind and parallel layout, every timed batch that fits HBM, in batch order (planner.batches)
    ladders: dict[tuple[CandidateKind, tuple[int, int, int, int, int]], list[Candidate]] = field(
        default_factory=dict)
    # each layout's pool context, built once for all its batches (`planned`)
    contexts: dict[tuple[object, ...], tuple[ResolvedScenario, PoolContext]] = field(default_factory=dict, repr=False)
    # each mixed candidate's aggregated deployment (by id: the set keeps the candidate alive), for options
    # rebuilt every batch-search round (`planner.formulation.options`)
    aggregated: dict[int, object] = field(default_factory=dict, repr=False)
    # each fill or decode candidate's option on given domains, likewise (`planner.formulation.options`)
    pool_options: dict[tuple[object, ...], object] = field(default_factory=dict, repr=False)

    @property
    def untimed(self) -> int:
        return sum(len(batches) for batches in self.untimed_batches.values())

    def total(self) -> int:
        return sum(len(c) for c in self.by_role.values())

    def note_speed(self, candidate: Candidate) -> None:
        timing, role = candidate.timing, candidate.pool.role
        if timing.plan.turns != "all":
            return  # a first-turn or midfill pool alone does not set a deployment's TTFT
        if role != "prefill":
            self.fastest_ms["tpot"] = min(self.fastest_ms.get("tpot", float("inf")), timing.tpot_s * 1e3)
        if role != "decode":
            self.fastest_ms["ttft"] = min(self.fastest_ms.get("ttft", float("inf")), timing.ttft_s * 1e3)

    def count(self, reason: str) -> None:
        self.pruned[reason] = self.pruned.get(reason, 0) + 1

    def add(self, resolved: ResolvedScenario, kind: CandidateKind, candidate: Candidate, ladder: bool) -> None:
        """Keep a timed candidate that fits HBM: among the kind's candidates unless it breaks an SLO on its
        own, and (`ladder`) on its layout's batch ladder either way."""
        self.note_speed(candidate)
        if ladder:
            rungs = self.ladders.setdefault((kind, layout_key(candidate.pool)), [])
            rungs.append(candidate)
            rungs.sort(key=lambda c: c.pool.batch)
        reason = _slo_breach(resolved, candidate)
        if reason:
            self.count(reason)
        else:
            self.by_role.setdefault(kind, []).append(candidate)


def kinds_for(resolved: ResolvedScenario) -> tuple[CandidateKind, ...]:
    """Candidate kinds the scenario allows: mixed (aggregated), prefill and decode (disaggregated) and, for
    sessions of two turns or more, first-turn prefill and midfill layouts for a separate midfill pool."""
    search, sessions = resolved.scenario.search, resolved.scenario.workload.sessions
    kinds: list[CandidateKind] = []
    if "aggregated" in search.serving:
        kinds.append("mixed")
    if "disaggregated" in search.serving:
        kinds += ["prefill", "decode"]
        if sessions is not None and sessions.turns > 1 and search.separate_midfill:
            kinds += ["first", "midfill"]
    return tuple(kinds)


def kind_role(kind: CandidateKind) -> tuple[PoolRole, Turns]:
    """The pool role of a candidate kind and the turns its requests are."""
    if kind == "first":
        return "prefill", "first"
    return kind, "later" if kind == "midfill" else "all"


def _tp_options(resolved: ResolvedScenario) -> tuple[int, ...]:
    if resolved.scenario.search.tp:
        return tuple(resolved.scenario.search.tp)
    heads = max(layer.attention.num_heads for layer in resolved.architecture.layers)
    return tuple(t for t in POWERS_OF_TWO if t <= MAX_TP and heads % t == 0)


def _parallel_options(resolved: ResolvedScenario) -> Iterator[tuple[int, int, int, int, int]]:
    """(tp, dp, pp, moe_tp, moe_ep) within the cluster and the search's allowed degrees."""
    search, arch = resolved.scenario.search, resolved.architecture
    # Attention DP splits a batch among ranks that share the experts; a dense model's ranks share nothing: its
    # layout prices as dp replicas of tp (within 0.1% where the admitted batch rounds differently, Llama-3.1-70B
    # on H100), which engines run as replicas (SGLang's dense models have no DP attention, vLLM's DP ranks of a
    # dense model are independent engines): unless the scenario asks for it, dense models get none.
    dense = arch.num_experts is None
    dps = search.dp_attention or [d for d in POWERS_OF_TWO if d <= (1 if dense else resolved.gpus)]
    pps = search.pp or [p for p in PIPELINE_DEPTHS if p <= arch.num_layers]
    for tp, dp, pp in itertools.product(_tp_options(resolved), dps, pps):
        group = tp * dp
        if group * pp > resolved.gpus:
            continue
        splits = {(group, 1)} if arch.num_experts is None else {(group, 1), (1, group)}
        for moe_tp, moe_ep in sorted(splits):
            if (search.moe_tp and moe_tp not in search.moe_tp) or (search.moe_ep and moe_ep not in search.moe_ep):
                continue
            if arch.num_experts is not None and moe_ep > arch.num_experts:
                continue
            yield tp, dp, pp, moe_tp, moe_ep


def _group_name(resolved: ResolvedScenario) -> str | None:
    """The group candidates are generated on (a view's one group), as pools name it."""
    return resolved.group.name if resolved.group.named else None


def candidate_pools(resolved: ResolvedScenario, role: PoolRole) -> list[Pool]:
    per_rank = PREFILL_BATCH_PER_RANK if role in ("prefill", "midfill") else BATCH_PER_RANK
    cap = resolved.scenario.search.max_batch
    group = _group_name(resolved)
    pools = []
    for tp, dp, pp, moe_tp, moe_ep in _parallel_options(resolved):
        for batch in (b * dp for b in per_rank):
            if cap is None or batch <= cap:
                pools.append(Pool(role=role, group=group, replicas=1, tp=tp, dp_attention=dp, pp=pp, moe_tp=moe_tp,
                                  moe_ep=moe_ep, batch=batch))
    return pools


def generate(resolved: ResolvedScenario, calibration: Calibration, every_batch: bool = False,
             deadline: float | None = None) -> CandidateSet:
    """Every candidate of every kind the scenario allows, timed, with infeasible ones pruned. Without
    sessions, each layout's batches also include the ends of its batch range (`ladder_ends`), and every
    timed batch that fits is kept in `ladders` (SLO breaches too: they bound the batches between);
    `every_batch` times every integer batch of each range (the exhaustive reference's candidates).

    `deadline` (`time.perf_counter()` seconds; without sessions): the ends of every layout's range are timed
    first, whatever the deadline, then the grid's batches between, the most promising layouts first, until
    the deadline; the grid batches left untimed are counted in `untimed` (every untimed batch then lies
    between two timed ones of its layout, which bound it: `planner.batches`). Whatever the deadline, the
    candidates timed are the same as without one when time suffices, in the same order."""
    workload = resolved.scenario.workload
    if workload.sessions is None and not every_batch:
        return _generate_anytime(resolved, calibration, deadline)
    result = CandidateSet(group=_group_name(resolved))
    for kind in kinds_for(resolved):
        role, turns = kind_role(kind)
        plans = planned(resolved, candidate_pools(resolved, role), turns, result)
        if workload.sessions is None:
            plans += planned(resolved, _ladder_extras(resolved, plans, every_batch), turns, result)
        timings = timed_plans(plans, resolved, calibration)
        if workload.sessions is not None and role != "decode" and turns != "first":
            timings = timed_plans(_session_variants(resolved, timings), resolved, calibration)
        result.by_role[kind] = []
        for timing in timings:
            result.add(resolved, kind, Candidate(timing.plan.pool, timing), ladder=workload.sessions is None)
    return result


CHUNK_POOLS = 48  # grid batches planned and priced together between two looks at the deadline


@dataclass
class _Layout:
    """One parallel layout of one kind: its grid pools and batch range, as `generate` times them."""

    kind: CandidateKind
    grid: list[Pool]  # the grid's pools (every batch, fitting or not)
    fitting: list[Pool] = field(default_factory=list)  # the grid's that fit HBM
    ends: list[Pool] = field(default_factory=list)  # the range's ends the grid lacks
    timed: dict[int, PoolTiming] = field(default_factory=dict)  # by batch
    potential: float = 0.0  # requests/s per GPU at the top of the range: what it may bring to the front
    queue: list[Pool] = field(default_factory=list)  # grid batches that fit, not yet timed, in batch order


def _generate_anytime(resolved: ResolvedScenario, calibration: Calibration, deadline: float | None) -> CandidateSet:
    """`generate` without sessions: each layout's ends first (batch 1, whose memory count gives the largest
    batch that fits, and the top of its range), then its other grid batches by the layouts' potential until
    the deadline. A grid batch fits exactly when it is at most the largest batch that fits (memory grows
    with the batch), so those beyond are counted over HBM without being planned."""
    result = CandidateSet(group=_group_name(resolved))
    layouts: list[_Layout] = []
    for kind in kinds_for(resolved):
        role, turns = kind_role(kind)
        by_key: dict[tuple[int, int, int, int, int], _Layout] = {}
        for pool in candidate_pools(resolved, role):
            result.instance_gpus = max(result.instance_gpus, pool.gpus_per_instance)
            by_key.setdefault(layout_key(pool), _Layout(kind, [])).grid.append(pool)
        probe = CandidateSet(contexts=result.contexts)  # batch 1 not fitting is no pool of the grid: not counted
        ones = {layout_key(plan.pool): plan for plan in
                planned(resolved, [group.grid[0].model_copy(update={"batch": 1}) for group in by_key.values()],
                        turns, probe)}
        ends_planned = []
        for key, group in by_key.items():
            layouts.append(group)
            one = ones.get(key)
            largest = one.max_batch if one is not None else 0  # batch 1 does not fit: no batch does
            group.fitting = [pool for pool in group.grid if pool.batch <= largest]
            for _ in range(len(group.grid) - len(group.fitting)):
                result.count("over HBM")
            if one is None or not group.fitting:  # no grid batch fits: the layout is not a candidate
                continue
            ends = ladder_ends(resolved, role, group.grid[0].dp_attention, largest)
            have = {pool.batch for pool in group.fitting}
            group.ends = [group.grid[0].model_copy(update={"batch": batch}) for batch in sorted(ends - have)]
            tops = [group.grid[0].model_copy(update={"batch": batch}) for batch in sorted(ends) if batch != 1]
            ends_planned += ([one] if 1 in ends else []) + planned(resolved, tops, turns, result)
        for timing in timed_plans(ends_planned, resolved, calibration):
            group = by_key[layout_key(timing.plan.pool)]
            group.timed[timing.plan.pool.batch] = timing
            group.potential = max(group.potential, timing.requests_per_s / timing.plan.pool.gpus_per_instance)
        for group in by_key.values():
            group.queue = [pool for pool in group.fitting if pool.batch not in group.timed]
    # the other grid batches, in waves (each live layout's next batch, layouts by potential); a layout whose
    # batch breaks an SLO its figures only worsen in (TPOT of mixed and decode pools, fill latency of
    # prefill pools) breaks it at every larger batch too: those are counted as such, not timed
    order = [group for group in _by_potential(layouts) if group.queue and not _stops(resolved, group)]
    cut: list[tuple[Pool, _Layout]] = []  # batches of the wave the deadline stopped
    while order and not cut:
        wave = [(group.queue.pop(0), group) for group in order]
        for start in range(0, len(wave), CHUNK_POOLS):
            if deadline is not None and time.perf_counter() >= deadline:
                cut = wave[start:]
                break
            chunk = wave[start:start + CHUNK_POOLS]
            plans = [plan for pool, group in chunk for plan in planned(resolved, [pool], kind_role(group.kind)[1],
                                                                         result)]
            for timing, (_, group) in zip(timed_plans(plans, resolved, calibration), chunk, strict=True):
                group.timed[timing.plan.pool.batch] = timing
        order = [group for group in order if group.queue and not _stops(resolved, group)]
    for pool, group in cut + [(pool, g) for g in layouts if not _stops(resolved, g) for pool in g.queue]:
        result.untimed_batches.setdefault((group.kind, layout_key(pool)), []).append(pool.batch)
    for kind in kinds_for(resolved):  # the grid's batches, then the ends, as the grid path orders them
        result.by_role[kind] = []
        members = [group for group in layouts if group.kind == kind]
        for group, pool in [(g, p) for g in members for p in g.fitting] + [(g, p) for g in members for p in g.ends]:
            found = group.timed.get(pool.batch)
            if found is not None:
                result.add(resolved, kind, Candidate(found.plan.pool, found), ladder=True)
    for group in layouts:  # grid batches beyond a breach (after the others: the same order of reasons)
        stopped = _stops(resolved, group)
        if stopped is not None:
            for _ in group.queue:
                result.count(stopped)
    return result


def _stops(resolved: ResolvedScenario, group: _Layout) -> str | None:
    """Why every grid batch of the layout above its last one timed is pruned, if it is: that batch breaks,
    by more than rounding, an SLO that the layout's figures only worsen in as the batch grows (TPOT of mixed
    and decode pools, checked first as in `_slo_breach`; fill latency of prefill pools and TTFT of mixed
    pools, which `planner.batches` bounds by the same monotonicity)."""
    if not group.timed or not group.queue:
        return None
    timed = [batch for batch in group.timed if batch < group.queue[0].batch]
    if not timed:
        return None
    timing, slo = group.timed[max(timed)], resolved.scenario.slo
    role = timing.plan.pool.role
    if slo.tpot_ms is not None and role in ("mixed", "decode") and timing.tpot_s * 1e3 > slo.tpot_ms * (1 + 1e-9):
        return "TPOT over the SLO"
    if slo.ttft_ms is not None and role in ("prefill", "mixed") and timing.ttft_s * 1e3 > slo.ttft_ms * (1 + 1e-9):
        return "TTFT over the SLO"
    return None


def _by_potential(layouts: list[_Layout]) -> list[_Layout]:
    """Layouts in the order their grid batches are timed: within each kind by potential (most first), the
    kinds interleaved by rank (the i-th best of each kind before the (i+1)-th of any)."""
    ranked: list[tuple[float, int, _Layout]] = []
    kinds = sorted({group.kind for group in layouts})
    for kind in kinds:
        members = sorted((g for g in layouts if g.kind == kind and g.timed), key=lambda g: -g.potential)
        ranked += [(rank / len(members), kinds.index(kind), group) for rank, group in enumerate(members)]
    return [group for _, _, group in sorted(ranked, key=lambda item: item[:2])]


def planned(resolved: ResolvedScenario, pools: list[Pool], turns: Turns, result: CandidateSet) -> list[PoolPlan]:
    """The work of each pool that fits HBM (the others counted in `result` as pruned)."""
    plans = []
    for pool in pools:
        result.instance_gpus = max(result.instance_gpus, pool.gpus_per_instance)
        plan = plan_pool(_context(resolved, pool, result), pool, resolved.scenario.workload, None, turns)
        if plan.memory.fits:
            plans.append(plan)
        else:
            result.count("over HBM")
    return plans


def _context(resolved: ResolvedScenario, pool: Pool, result: CandidateSet) -> PoolContext:
    """The pool's context, shared by every batch of its layout: it depends on the scenario and the pool's
    parallel layout (and inventory group) only, not on its batch or tiers, and on its role only through the
    domains its experts are placed over (`planner.experts.pool_bank`: prefill and midfill pools may place
    them by domain) and the activations its experts compute with (`costmodel.resolve.mxfp8_falls_back`).
    Sharing it lets what the context caches per layout (its stages' layer counts and step work) serve every
    batch and every role placed alike."""
    key = (*layout_key(pool), getattr(pool, "group", None), getattr(pool, "cpu_offload_gb", 0.0),
           pool_bank(resolved, pool)[1], mxfp8_falls_back(resolved, pool.role, pool.moe_ep, pool.dp_attention))
    cached = result.contexts.get(key)
    if cached is None or cached[0] is not resolved:
        cached = result.contexts[key] = (resolved, pool_context(resolved, pool))
    return cached[1]


def layout_key(pool: Pool) -> tuple[int, int, int, int, int]:
    return pool.tp, pool.dp_attention, pool.pp, pool.moe_tp, pool.moe_ep


def ladder_ends(resolved: ResolvedScenario, role: PoolRole, dp: int, largest: int) -> set[int]:
    """The ends of a layout's batch range: 1, and the largest batch worth running: the largest that fits HBM
    (and `search.max_batch`) for decode and mixed pools; for fill pools the batch that fills one engine
    step per rank (ENGINE_STEP_TOKENS), beyond which capacity stays flat and fill latency grows (dominated:
    same capacity, longer fill). Never above MAX_BATCH, the most a layout states (a one-token workload's KV
    lets 32 million sequences fit 72 GPUs)."""
    top = largest
    if role in ("prefill", "midfill"):
        new = max(1.0, RequestShape.of(resolved.scenario.workload).new)
        top = min(top, dp * max(1, math.ceil(ENGINE_STEP_TOKENS / new)))
    cap = resolved.scenario.search.max_batch
    top = min(top, MAX_BATCH if cap is None else cap)
    return {1, top} if top >= 1 else set()


def _ladder_extras(resolved: ResolvedScenario, plans: list[PoolPlan], every_batch: bool = False) -> list[Pool]:
    """Pools at each planned layout's batch-range ends (or, `every_batch`, at each batch of the range) that
    the grid lacks."""
    by_layout: dict[tuple[int, int, int, int, int], list[PoolPlan]] = {}
    for plan in plans:
        by_layout.setdefault(layout_key(plan.pool), []).append(plan)
    extras = []
    for group in by_layout.values():
        first = group[0].pool
        have = {plan.pool.batch for plan in group}
        largest = group[0].max_batch  # the largest batch that fits does not depend on the planned batch
        ends = ladder_ends(resolved, first.role, first.dp_attention, largest)
        wanted = set(range(1, max(ends) + 1)) if every_batch and ends else ends
        for batch in sorted(wanted - have):
            extras.append(first.model_copy(update={"batch": batch}))
    return extras


def timed_plans(plans: list[PoolPlan], resolved: ResolvedScenario, calibration: Calibration) -> list[PoolTiming]:
    """Time planned pools, priced in bulk."""
    engine = resolved.scenario.engine
    pairs = [(w, plan.ctx.system) for plan in plans for w in plan.works()]
    works = [w for w, _ in pairs]
    table = WorkTable(works, [system for _, system in pairs], [engine] * len(works))
    pricer = TablePricer(table, table.price(calibration), calibration, engine)
    return [time_pool(plan, pricer) for plan in plans]


def _session_variants(resolved: ResolvedScenario, timings: list[PoolTiming]) -> list[PoolPlan]:
    """Fill pools of a sessions workload re-planned with their KV tiers (sized from their all-HBM timing):
    each also with the shared store when the cluster has one and the pool would park contexts there, and
    each disaggregated one also sized for part of its rate (`TIER_LOADS`) where that changes its tiers."""
    workload, store = resolved.scenario.workload, resolved.scenario.cluster.kv_store
    plans = []
    for timing in timings:
        pool = timing.plan.pool
        loads = TIER_LOADS if pool.role in ("prefill", "midfill") else (1.0,)
        for parked in (False, True) if store is not None else (False,):
            full: PoolPlan | None = None
            for load in loads:
                variant = replace(timing.plan, pool=pool.model_copy(update={"kv_store": parked, "tier_load": load}))
                planned = with_session_tiers(variant, timing, workload)
                tiers = planned.request.tiers
                if tiers is None or (parked and tiers.stored_bytes["store"] <= 0):
                    break  # nothing parked in the store: the variant without it is the same pool
                if full is not None and full.request.tiers is not None and \
                        tiers.turn_shares == full.request.tiers.turn_shares:
                    break  # the tiers already hold everything at this load: a lower one only caps the rate
                full = full or planned
                plans.append(planned)
    return plans


def _slo_breach(resolved: ResolvedScenario, candidate: Candidate) -> str | None:
    """A pool that alone breaks an SLO; a first-turn or midfill fill counts in the mean TTFT by its share."""
    slo, role, timing = resolved.scenario.slo, candidate.pool.role, candidate.timing
    if slo.tpot_ms is not None and role in ("mixed", "decode") and timing.tpot_s * 1e3 > slo.tpot_ms:
        return "TPOT over the SLO"
    share = turn_share(resolved.scenario.workload, timing.plan.turns)
    if slo.ttft_ms is not None and role != "decode" and share * timing.ttft_s * 1e3 > slo.ttft_ms:
        return "TTFT over the SLO"
    return None



def with_replicas(candidate: Candidate, replicas: int) -> Pool:
    """The candidate's pool as a layout entry with `replicas` instances."""
    return candidate.pool.model_copy(update={"replicas": replicas})


def merged(sets: list[CandidateSet]) -> CandidateSet:
    """The candidates of several inventory groups together (for counts and the infeasibility diagnosis)."""
    result = CandidateSet()
    for own in sets:
        for kind, members in own.by_role.items():
            result.by_role.setdefault(kind, []).extend(members)
        for reason, count in own.pruned.items():
            result.pruned[reason] = result.pruned.get(reason, 0) + count
        for name, value in own.fastest_ms.items():
            result.fastest_ms[name] = min(result.fastest_ms.get(name, value), value)
        result.instance_gpus = max(result.instance_gpus, own.instance_gpus)
    return result
