"""Expert-bank placement of one expert-parallel group: replicas of hot experts, then replicas on GPUs.

E routed experts with Zipf loads p_i ~ (i + 1)^-s share N GPUs of S = ceil((E + R) / N) slots each,
R of the E + R replicas being extra copies of hot experts; a replica of expert e carries p_e / r_e.
Replica counts come from the greedy of `costmodel.routing.static_imbalance` (each extra slot to the
highest per-replica load), which minimises the largest replica load. The packing starts from the same
longest-processing-time greedy (DeepSeek EPLB's replicate-then-pack), then an integer model solved by
a `planner.solvers` backend improves it or proves it optimal, against a combinatorial lower bound.
Loads are fractions of the group's routed traffic (they sum to 1).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from costmodel.evaluate import expert_domains
from costmodel.layout import Pool
from costmodel.resolve import ResolvedScenario
from costmodel.routing import domain_experts, grouped_loads, zipf_loads
from planner.formulation.linear import LinearModel
from planner.solvers import LazyBackend
from planner.solvers.base import Backend, SolveOptions, SolveReport, SolveStatus

MAX_VARIABLES = 200_000  # above this the model costs more to build than the time limit buys
OPTIMAL_GAP = 1e-4  # relative gap counted as proven optimal (SolveStatus.OPTIMAL's tolerance)
UNIT = 1e-6  # model load unit as a fraction of the mean GPU load: CP-SAT needs integer coefficients

Packing = list[list[int]]  # expert ids per GPU, one entry per replica


@dataclass(frozen=True)
class ExpertPlacement:
    replicas: tuple[int, ...]  # replicas per expert (>= 1)
    gpu_experts: tuple[tuple[int, ...], ...]  # expert ids held by each GPU, busiest first (by domain: per domain)
    max_load: float
    mean_load: float
    imbalance: float  # max_load / mean_load
    greedy_imbalance: float  # of the LPT greedy, equal to costmodel.routing.static_imbalance
    lower_bound_imbalance: float  # proven: no placement of these replicas (by domain: of these groups) does better
    status: str  # SolveStatus value
    gap: float  # (max_load - lower bound) / max_load

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": {e: r for e, r in enumerate(self.replicas) if r > 1},  # json.dumps makes ids strings
            "gpu_experts": [list(experts) for experts in self.gpu_experts],
            "max_load": self.max_load,
            "mean_load": self.mean_load,
            "imbalance": self.imbalance,
            "greedy_imbalance": self.greedy_imbalance,
            "lower_bound_imbalance": self.lower_bound_imbalance,
            "status": self.status,
            "gap": self.gap,
        }


def bank_name(ep: int, domains: int) -> str:
    """Key of a pool's expert banks (`expert_banks` of the JSON, `placement.pools[].experts.banks`): its
    expert-parallel degree, and the domains where they are placed group by group (`place_experts`)."""
    return str(ep) if domains <= 1 else f"{ep}-over-{domains}-domains"


def pool_bank(resolved: ResolvedScenario, pool: Pool) -> tuple[int, int]:
    """(expert-parallel degree, domains placed over) of a pool's banks, as the cost model prices them
    (`costmodel.evaluate.expert_domains`)."""
    group = resolved.group_named(pool.group)
    system = (group or resolved.groups[0]).system
    return pool.moe_ep, expert_domains(resolved, pool, system)


def place_experts(experts: int, ep: int, skew: float, redundant: int, backend_name: str = "cpsat",
                  time_limit_s: float = 2.0, seed: int = 0, domains: int = 1, groups: int = 1) -> ExpertPlacement:
    """Place `experts` experts plus `redundant` hot replicas on `ep` GPUs, minimising the busiest GPU.

    `domains` > 1 (`costmodel.routing.placement_domains`): EPLB's hierarchical policy. Whole expert groups
    (`groups` of consecutive ids) go to each of the `domains` scale-up domains first (`domain_experts`), then
    each domain's experts and its share of the replicas are placed on its ep / domains GPUs as above. The GPUs
    are then listed domain by domain (rank order: GPU i sits in domain i // (ep / domains)), busiest first
    within each, and the bound is over placements that keep the same groups on each domain."""
    if experts < 1 or ep < 1 or redundant < 0:
        raise ValueError(f"need experts >= 1, ep >= 1, redundant >= 0 (got {experts}, {ep}, {redundant})")
    if domains > 1 and (experts % groups or groups % domains or ep % domains or redundant % domains):
        raise ValueError(f"placing by domain needs groups splitting the experts, and domains splitting the groups, "
                         f"GPUs and replicas (got {experts} experts, {groups} groups, {domains} domains, ep {ep}, "
                         f"{redundant} replicas)")
    solver = LazyBackend(backend_name)  # an unknown name fails here; the package loads only if the model runs
    options = SolveOptions(time_limit_s, threads=1, seed=seed, deterministic=True)  # reproducible banks
    slots = math.ceil((experts + redundant) / ep)
    if domains <= 1:
        packed = _pack(zipf_loads(experts, skew), ep, redundant, slots, solver, options)
        return packed.placement()
    loads = grouped_loads(experts, skew, groups)
    held = domain_experts(loads, groups, domains)
    # the time limit shared among the domains' models, as one placement's
    options = SolveOptions(time_limit_s / domains, threads=1, seed=seed, deterministic=True)
    parts = [_pack(loads[ids], ep // domains, redundant // domains, slots, solver, options) for ids in held]
    return _Packed.combine(held, parts, experts)


@dataclass(frozen=True)
class _Packed:
    """One packing of some experts (local ids 0..n-1) on some GPUs; `bound` on its busiest GPU as a multiple of
    its `mean` GPU load."""

    shares: list[float]  # per-replica load of each expert
    replicas: list[int]
    packing: Packing
    greedy_max: float
    max_load: float
    mean: float
    bound: float
    status: SolveStatus

    def placement(self) -> ExpertPlacement:
        """The placement of this packing alone."""
        imbalance = self.max_load / self.mean
        gap = max(0.0, 1.0 - self.bound / imbalance)
        return ExpertPlacement(
            replicas=tuple(self.replicas), gpu_experts=_ordered(self.packing, self.shares), max_load=self.max_load,
            mean_load=self.mean, imbalance=imbalance, greedy_imbalance=self.greedy_max / self.mean,
            lower_bound_imbalance=min(self.bound, imbalance), status=_status(self.status, gap).value, gap=gap)

    @staticmethod
    def combine(held: list[list[int]], parts: list[_Packed], experts: int) -> ExpertPlacement:
        """Domain packings as one placement over all GPUs, domain by domain, with global expert ids."""
        replicas = [0] * experts
        gpus: list[tuple[int, ...]] = []
        total = 0.0
        for ids, part in zip(held, parts, strict=True):
            for local, expert in enumerate(ids):
                replicas[expert] = part.replicas[local]
            gpus += [tuple(sorted(ids[e] for e in experts_on)) for experts_on in _ordered(part.packing, part.shares)]
            total += part.mean * len(part.packing)
        mean = total / len(gpus)
        top, greedy = max(p.max_load for p in parts), max(p.greedy_max for p in parts)
        bound = max(p.bound * p.mean for p in parts)  # the busiest domain's bound, as a load
        gap = max(0.0, 1.0 - bound / top)
        worst = SolveStatus.ERROR if any(p.status == SolveStatus.ERROR for p in parts) else SolveStatus.FEASIBLE
        return ExpertPlacement(
            replicas=tuple(replicas), gpu_experts=tuple(gpus), max_load=top, mean_load=mean, imbalance=top / mean,
            greedy_imbalance=greedy / mean, lower_bound_imbalance=min(bound, top) / mean,
            status=_status(worst, gap).value, gap=gap)


def _status(status: SolveStatus, gap: float) -> SolveStatus:
    if status == SolveStatus.ERROR:
        return status
    return SolveStatus.OPTIMAL if gap <= OPTIMAL_GAP else SolveStatus.FEASIBLE


def _pack(popularity: np.ndarray[Any, np.dtype[np.float64]], ep: int, redundant: int, slots: int,
          solver: Backend, options: SolveOptions) -> _Packed:
    """Replicate-then-pack greedy, improved by steepest descent and the integer model where it falls short of
    the bound."""
    experts = len(popularity)
    replicas = _replica_counts(popularity, redundant)
    shares = [float(popularity[e] / replicas[e]) for e in range(experts)]
    greedy = _lpt(shares, replicas, ep, slots)
    greedy_max, mean = _max_and_mean(greedy, shares, ep)
    weights = [round(share / mean / UNIT) for share in shares]  # integer loads of the model
    floor = _granular_floor(weights, replicas, ep, slots)
    # as an imbalance; the model's loads are rounded by up to half a unit per replica: widen by that much
    bound = max(_lower_bound(_items(shares, replicas), ep, slots) / mean, (floor - slots / 2) * UNIT)
    best = greedy if greedy_max / mean <= bound else _improve(greedy, shares, slots, rounds=20 * ep)
    best_max, _ = _max_and_mean(best, shares, ep)
    status = SolveStatus.FEASIBLE
    if best_max / mean > bound * (1.0 + OPTIMAL_GAP) and experts * ep < MAX_VARIABLES:
        model_packing, model_bound, status = _solve(weights, replicas, slots, floor, best, solver, options)
        bound = max(bound, model_bound)
        if model_packing is not None and _max_and_mean(model_packing, shares, ep)[0] < best_max:
            best = model_packing
            best_max, _ = _max_and_mean(best, shares, ep)
    return _Packed(shares, replicas, best, greedy_max, best_max, mean, bound, status)


def _replica_counts(popularity: np.ndarray[Any, np.dtype[np.float64]], redundant: int) -> list[int]:
    """Each extra slot to the expert with the highest per-replica load (lowest id on ties, as routing.py)."""
    replicas = np.ones(len(popularity), dtype=int)
    for _ in range(redundant):
        replicas[int(np.argmax(popularity / replicas))] += 1
    return [int(r) for r in replicas]


def _lpt(shares: list[float], replicas: list[int], ep: int, slots: int) -> Packing:
    """Longest processing time first onto the least-loaded GPU with a free slot: routing.py's packing."""
    items = sorted(((shares[e], e) for e in range(len(shares)) for _ in range(replicas[e])),
                   key=lambda item: -item[0])
    loads = [0.0] * ep
    packing: Packing = [[] for _ in range(ep)]
    open_gpus = [(0.0, gpu) for gpu in range(ep)]
    for share, expert in items:
        _, gpu = heapq.heappop(open_gpus)
        loads[gpu] += share
        packing[gpu].append(expert)
        if len(packing[gpu]) < slots:
            heapq.heappush(open_gpus, (loads[gpu], gpu))
    return packing


def _gpu_load(held: list[int], shares: list[float]) -> float:
    total = 0.0
    for expert in held:  # summed in placement order so the greedy matches routing.py bit for bit
        total += shares[expert]
    return total


def _max_and_mean(packing: Packing, shares: list[float], ep: int) -> tuple[float, float]:
    loads = [_gpu_load(held, shares) for held in packing]
    return max(loads), sum(loads) / ep


def _items(shares: list[float], replicas: list[int]) -> list[float]:
    """Replica loads, largest first."""
    return sorted((shares[e] for e in range(len(shares)) for _ in range(replicas[e])), reverse=True)


def _lower_bound(items: list[float], ep: int, slots: int) -> float:
    """Proven bound on the busiest GPU from the replica loads `items` (largest first): the mean, the
    pigeonhole bound (some GPU holds k + 1 of the k N + 1 largest), and the slot bound below."""
    n, prefix = len(items), [0.0, *itertools.accumulate(items)]
    bound = max(prefix[n] / ep, items[0])
    for k in range(1, slots):
        if k * ep < n:
            bound = max(bound, prefix[k * ep + 1] - prefix[k * ep - k])
    # the k largest sit on some t GPUs; the other N - t hold at most (N - t) S replicas, so those t GPUs
    # hold the rest beyond: at least their k plus the smallest of the others; the busiest >= the mean of t
    top, gpus = np.arange(1, n + 1)[None, :], np.arange(1, ep + 1)[:, None]
    extra = np.clip(n - (ep - gpus) * slots - top, 0, n - top)
    cumulative = np.array(prefix)
    mean_of_t = (cumulative[top] + cumulative[n] - cumulative[n - extra]) / gpus
    possible = (gpus <= top) & (gpus * slots >= top)
    return max(bound, float(np.where(possible, mean_of_t, np.inf).min(axis=0).max()))


def _granular_floor(weights: list[int], replicas: list[int], ep: int, slots: int) -> int:
    """The bound on integer loads, rounded up to a multiple of their greatest common divisor (which
    settles uniform routing, where every load is a multiple of one replica's)."""
    step = math.gcd(*weights) or 1
    return step * math.ceil(_lower_bound(_items([float(w) for w in weights], replicas), ep, slots) / step)


def _improve(packing: Packing, shares: list[float], slots: int, rounds: int) -> Packing:
    """Steepest descent: swap the busiest GPU's replica with another GPU's replica or empty slot when
    that lowers the pair's larger load; LPT leaves a few per cent when replicas are many and alike."""
    experts, ep = len(shares), len(packing)
    ids = np.full((ep, slots), experts)  # `experts` marks an empty slot, of load 0
    for gpu, held in enumerate(packing):
        ids[gpu, :len(held)] = held
    share = np.array([*shares, 0.0])
    for _ in range(rounds):
        loads = share[ids].sum(axis=1)
        top = int(np.argmax(loads))
        moved = share[ids[top]][:, None, None] - share[ids][None, :, :]  # [top slot, gpu, slot]
        after = np.maximum(loads[top] - moved, loads[None, :, None] + moved)
        after[:, top, :] = np.inf
        i, other, j = np.unravel_index(int(np.argmin(after)), after.shape)
        if after[i, other, j] >= loads[top] * (1.0 - 1e-12):
            break
        ids[top, i], ids[other, j] = ids[other, j], ids[top, i]
    return [[int(e) for e in row if e < experts] for row in ids]


def _solve(weights: list[int], replicas: list[int], slots: int, floor: int, incumbent: Packing,
           solver: Backend, options: SolveOptions) -> tuple[Packing | None, float, SolveStatus]:
    """Solve the packing model; returns (packing or None, proven lower bound as an imbalance, status)."""
    if not solver.is_available():
        return None, 0.0, SolveStatus.ERROR
    model, y = _model(weights, replicas, len(incumbent), slots, floor, incumbent)
    report = solver.solve(model, options)
    bound = 0.0 if math.isnan(report.bound) else (-report.bound - slots / 2) * UNIT
    if not report.status.has_solution:
        failed = report.status in (SolveStatus.ERROR, SolveStatus.INFEASIBLE)  # the greedy was feasible
        return None, bound, SolveStatus.ERROR if failed else SolveStatus.FEASIBLE
    return _packing(report, y, replicas, len(incumbent), slots), bound, report.status


def _model(weights: list[int], replicas: list[int], ep: int, slots: int, floor: int,
           incumbent: Packing) -> tuple[LinearModel, list[list[int]]]:
    """y[e][g] replicas of expert e on GPU g; minimise L >= every GPU load, GPU loads non-increasing in g
    (GPUs are identical: this removes their permutations); hinted with the incumbent, busiest GPU first."""
    experts = len(weights)
    model = LinearModel()
    y = [[model.add_var(f"y[{e},{g}]", "replicas", 0, min(replicas[e], slots), True) for g in range(ep)]
         for e in range(experts)]
    hint = sorted(incumbent, key=lambda held: -sum(weights[e] for e in held))
    loads = [sum(weights[e] for e in held) for held in hint]
    peak = model.add_var("max_load", "max_load", floor, max(loads[0], floor), False)
    for e in range(experts):
        model.add(f"cover[{e}]", "cover", {y[e][g]: 1.0 for g in range(ep)}, "==", replicas[e])
    for g in range(ep):
        model.add(f"slots[{g}]", "slots", {y[e][g]: 1.0 for e in range(experts)}, "<=", slots)
        model.add(f"load[{g}]", "load", {**{y[e][g]: float(weights[e]) for e in range(experts)}, peak: -1.0},
                  "<=", 0.0)
    for g in range(ep - 1):
        order = {y[e][g]: float(weights[e]) for e in range(experts)}
        order.update({y[e][g + 1]: -float(weights[e]) for e in range(experts)})
        model.add(f"order[{g}]", "order", order, ">=", 0.0)
    model.objective = {peak: -1.0}
    model.hint = {y[e][g]: 0.0 for e in range(experts) for g in range(ep)}
    for g, held in enumerate(hint):
        for e in held:
            model.hint[y[e][g]] += 1.0
    model.hint[peak] = float(max(loads[0], floor))
    return model, y


def _packing(report: SolveReport, y: list[list[int]], replicas: list[int], ep: int, slots: int) -> Packing | None:
    """The solution as expert ids per GPU, or None if it breaks the cover or slot constraints."""
    packing: Packing = [[] for _ in range(ep)]
    for e, row in enumerate(y):
        counts = [round(report.values[index]) for index in row]
        if sum(counts) != replicas[e] or min(counts) < 0:
            return None
        for g, count in enumerate(counts):
            packing[g].extend([e] * count)
    return packing if all(len(held) <= slots for held in packing) else None


def _ordered(packing: Packing, shares: list[float]) -> tuple[tuple[int, ...], ...]:
    """Busiest GPU first, expert ids ascending on each: one canonical form for any packing."""
    gpus = sorted(packing, key=lambda held: -_gpu_load(held, shares))
    return tuple(tuple(sorted(held)) for held in gpus)
