"""Fitting instances into one group's scale-up domains and racks.

Rules (`costmodel.inventory` numbers the GPUs):
- an instance no larger than a domain sits inside one domain, on any of its free GPUs (the cost model
  prices its collectives on the scale-up fabric);
- a larger one takes whole complete domains (every GPU installed and available), ceil(size / domain) of
  them, inside one rack when it fits a rack (its traffic then stays under the rack's switches);
- one larger than a rack takes as many whole complete racks as its domains fill and the rest of its
  domains in one more rack (ceil(span / rack) racks; the rest of that rack stays free for others), and
  its traffic crosses the rack uplinks.

So a group's room is two independent bin packings (`Domains.rack_items`): wide instances' complete domains
into each rack's complete domains (a whole rack is an item of a rack's domains), and narrow instances into
the domains the wide ones leave (complete domains are interchangeable, so which ones the wide take does not
matter).

Packing rows, a relaxation of both: for every size t up to a domain, the GPUs of instances in multiples of t
(s // t x t) fit the domains' multiples of t (a complete domain taken by a wider instance removes all of
its room); the same one level up for the wide instances' rack items, counted in domains, against each
rack's complete domains. With sizes that divide each other (powers of two, as tp, dp and pp give) the rows
are exact and first-fit decreasing is optimal. The MILP states these rows (`planner.formulation.model`),
the unit table solves them in closed form (`planner.formulation.units`); other sizes are packed exactly
here (`_fill_bins`, which `fits` asks and the placer follows where first fit fails).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodel.errors import ScenarioError
from costmodel.evaluate import pool_context
from costmodel.inventory import ClusterGroup, Domain, GpuIndex, parse_gpu_id
from costmodel.layout import Layout, Pool
from costmodel.resolve import ResolvedScenario


@dataclass(frozen=True)
class Domains:
    """One group's scale-up domains: `full` complete ones of `size` GPUs, `partial` incomplete ones (their
    free GPUs: failed or busy GPUs, a partial node or rack), and the complete domains of each rack (`racks`,
    `per_rack` domains to a rack; empty: each complete domain a rack of its own)."""

    size: int
    full: int
    partial: tuple[int, ...] = ()
    racks: tuple[int, ...] = field(default=())
    per_rack: int = 1

    @property
    def gpus(self) -> int:
        return self.size * self.full + sum(self.partial)

    @property
    def rack_counts(self) -> tuple[int, ...]:
        return self.racks if self.racks else (1,) * self.full

    def room(self, s: int) -> int:
        """GPUs instances of size s can use: each domain's largest multiple of s."""
        return self.size // s * s * self.full + sum(b // s * s for b in self.partial)

    def span(self, size: int) -> int:
        """Domains an instance wider than a domain takes."""
        return -(-size // self.size)

    def racks_taken(self, size: int) -> int:
        """Racks an instance wider than a rack takes."""
        return -(-self.span(size) // self.per_rack)

    def rack_items(self, size: int) -> tuple[int, ...]:
        """The complete domains a wide instance takes in each rack it uses: its span within one rack, or
        whole racks and the rest in one more."""
        span = self.span(size)
        if span <= self.per_rack:
            return (span,)
        whole, rest = divmod(span, self.per_rack)
        return (self.per_rack,) * whole + ((rest,) if rest else ())

    @property
    def bins(self) -> tuple[int, ...]:
        """Free GPUs of each domain, largest first."""
        return (self.size,) * self.full + tuple(sorted(self.partial, reverse=True))


def group_domains(group: ClusterGroup) -> Domains:
    complete = [d for d in group.domains if d.complete]
    partial = tuple(sorted((d.capacity for d in group.domains if not d.complete), reverse=True))
    return Domains(group.system.scaleup_domain_gpus, len(complete), partial, group.complete_per_rack,
                   group.domains_per_rack)


def cluster_domains(resolved: ResolvedScenario) -> Domains:
    """The domains of a one-group scenario (or of a group's view)."""
    return group_domains(resolved.group)


@dataclass(frozen=True)
class PackingRow:
    """sum over instances of weight(size) <= rhs."""

    name: str
    rhs: int
    weights: dict[int, int]  # instance size -> weight per instance

    def weight(self, size: int) -> int:
        return self.weights.get(size, 0)


def packing_rows(domains: Domains, sizes: Sequence[int]) -> tuple[PackingRow, ...]:
    """The rows of the module docstring for instances of `sizes`."""
    return _packing_rows(domains, tuple(sorted(set(sizes))))


@functools.lru_cache(maxsize=1 << 12)
def _packing_rows(domains: Domains, distinct: tuple[int, ...]) -> tuple[PackingRow, ...]:
    """`packing_rows`, kept per (domains, sizes): the exact packer asks them for every count it checks (a
    row's right-hand side sums over the racks: 256 of them on 256 GB200 racks). Each weight counts the
    multiples of the row's size an instance takes (sum of floor <= floor of sum: a relaxation)."""
    narrow = [s for s in distinct if s <= domains.size]
    wide = [s for s in distinct if s > domains.size]
    rows = []
    for t in narrow:
        weights = {s: s // t * t for s in narrow if s >= t} | {s: domains.span(s) * (domains.size // t * t)
                                                                for s in wide}
        rows.append(PackingRow(f"size{t}", domains.room(t), weights))
    for w in sorted({k for s in wide for k in domains.rack_items(s)}):
        weights = {s: sum(k // w * w for k in domains.rack_items(s)) for s in wide}
        rows.append(PackingRow(f"wide{w}", sum(w * (c // w) for c in domains.rack_counts),
                               {s: v for s, v in weights.items() if v}))
    return tuple(rows)


def divisible(sizes: Sequence[int], domains: Domains) -> bool:
    """Whether the packing rows are exact: sizes within a domain divide each other, and so do the wider
    ones' domain spans (within a rack), powers of two as tp, dp and pp give."""
    narrow = sorted({s for s in sizes if s <= domains.size})
    spans = sorted({domains.span(s) for s in sizes if s > domains.size} | {domains.per_rack})
    return all(b % a == 0 for i, a in enumerate(narrow) for b in narrow[i:]) and all(
        b % a == 0 for i, a in enumerate(spans) for b in spans[i:])


def fits(instances: Sequence[tuple[int, int]], domains: Domains) -> bool:
    """Whether `count` instances of each `size` fit the domains."""
    return _fits(tuple(sorted((size, count) for size, count in instances if count)), domains)  # one cache entry per mix


@functools.lru_cache(maxsize=1 << 16)
def _fits(instances: tuple[tuple[int, int], ...], domains: Domains) -> bool:
    """`fits`, kept per (instances, domains): the unit table asks the same counts in every batch round and
    again in the sweep (thousands of exact packings where sizes do not divide the domain, e.g. 72 GPUs)."""
    sizes = [size for size, _ in instances]
    if not all(sum(row.weight(size) * count for size, count in instances) <= row.rhs
               for row in packing_rows(domains, sizes)):
        return False
    if divisible(sizes, domains):
        return True
    wide, narrow = _levels(instances, domains)
    return _packs(wide, _rack_bins(domains)) and _packs(narrow, _domain_bins(instances, domains))


def _levels(instances: Sequence[tuple[int, int]], domains: Domains) -> tuple[Items, Items]:
    """The two packings' items, (size, count) largest first: wide instances' rack items (in domains) and
    narrow instances (in GPUs)."""
    wide: dict[int, int] = {}
    for size, count in instances:
        if size > domains.size:
            for k in domains.rack_items(size):
                wide[k] = wide.get(k, 0) + count
    narrow: dict[int, int] = {}
    for size, count in instances:
        if size <= domains.size:
            narrow[size] = narrow.get(size, 0) + count
    return _items(wide), _items(narrow)


def _items(counts: dict[int, int]) -> Items:
    return tuple(sorted(((size, count) for size, count in counts.items() if count), reverse=True))


def _rack_bins(domains: Domains) -> tuple[int, ...]:
    return tuple(sorted(domains.rack_counts, reverse=True))


def _domain_bins(instances: Sequence[tuple[int, int]], domains: Domains) -> tuple[int, ...]:
    """Free GPUs of each domain the wide instances leave (which complete ones they take does not matter)."""
    taken = sum(domains.span(size) * count for size, count in instances if size > domains.size)
    return (domains.size,) * (domains.full - taken) + tuple(sorted(domains.partial, reverse=True))


Items = tuple[tuple[int, int], ...]
Filling = tuple[tuple[int, ...], ...]  # per bin, the count of each item size in it


def _packs(items: Items, bins: tuple[int, ...]) -> bool:
    """Whether the items pack into the bins, as `_fill_bins` finds, without the filling: for two sizes (what
    the unit table asks, thousands of times) a look-up in the table of their packings (`_two_sizes`)."""
    if len(items) == 2:
        (large, n_large), (small, n_small) = items
        most = _two_sizes(large, small, bins)
        return n_large < most.size and int(most[n_large]) >= n_small
    return _fill_bins(items, bins) is not None


@functools.lru_cache(maxsize=1 << 8)
def _two_sizes(large: int, small: int, bins: tuple[int, ...]) -> np.ndarray:
    """Items of two sizes: the most small ones that pack beside each count of large ones (`_two_size_program`),
    kept per bins (the unit table asks every count beside every count)."""
    most = _two_size_program(large, small, bins, None)
    most.setflags(write=False)  # shared by every caller of the cache
    return most


def _two_size_program(large: int, small: int, bins: tuple[int, ...], choices: list[np.ndarray] | None) -> np.ndarray:
    """Exact packing of two item sizes, by dynamic programming over the bins: a bin holding x large items holds
    (capacity - large x) // small small ones at most, so the most small items beside X large ones is the best
    split of X over the bins, bin by bin (each takes 0 to capacity // large of them: every X up to the sum is
    reached). `choices`: where each bin's best x per X is appended, to rebuild a packing (`_two_size_fill`)."""
    most = np.zeros(1, dtype=np.int64)
    for capacity in bins:
        fits_large = capacity // large
        reached = most.size - 1
        new = np.full(reached + fits_large + 1, -1, dtype=np.int64)
        pick = np.zeros(new.size, dtype=np.int32)
        for x in range(fits_large + 1):  # the first x reaching the best is kept: deterministic
            candidate = most + (capacity - large * x) // small
            window = new[x:x + reached + 1]
            better = candidate > window
            window[better] = candidate[better]
            pick[x:x + reached + 1][better] = x
        most = new
        if choices is not None:
            choices.append(pick)
    return most


def _two_size_fill(items: Items, bins: tuple[int, ...]) -> Filling | None:
    """`_fill_bins` for two item sizes: the packing `_two_size_program` finds, or None where none exists."""
    (large, n_large), (small, n_small) = items
    choices: list[np.ndarray] = []
    most = _two_size_program(large, small, bins, choices)
    if n_large >= most.size or int(most[n_large]) < n_small:
        return None
    filling: list[tuple[int, ...]] = []
    left_large, left_small = n_large, n_small
    for capacity, pick in zip(reversed(bins), reversed(choices), strict=True):
        x = int(pick[left_large])
        y = min(left_small, (capacity - large * x) // small)
        left_large, left_small = left_large - x, left_small - y
        filling.append((x, y))
    return tuple(reversed(filling))


@functools.lru_cache(maxsize=1 << 14)
def _fill_bins(items: Items, bins: tuple[int, ...]) -> Filling | None:
    """How many of each item (size, count) go into each bin, or None if they cannot all be packed: first
    fit; else, for two sizes, the exact program (`_two_size_fill`); else best fit decreasing (a 24-GPU
    instance on H200 racks into the rack with three complete domains left, not four), else the exact
    arc-flow model (`_exact_fill`, milliseconds, but thousands of them in a unit table)."""
    bins = _useful(tuple(size for size, _ in items), bins)
    if sum(size * count for size, count in items) > sum(bins):
        return None
    left = [count for _, count in items]
    filling = []
    for capacity in bins:
        room, taken = capacity, []
        for i, (size, _) in enumerate(items):
            take = min(left[i], room // size)
            room -= take * size
            left[i] -= take
            taken.append(take)
        filling.append(tuple(taken))
    if not any(left):
        return tuple(filling)
    if len(items) == 2:
        return _two_size_fill(items, bins)
    found = _best_fit(items, bins)
    return found if found is not None else _exact_fill(items, bins)


def _useful(sizes: tuple[int, ...], bins: tuple[int, ...]) -> tuple[int, ...]:
    """Each bin's capacity lowered to the most the item sizes can fill of it (a sum of sizes, any counts): no
    packing changes, and the total-size check then refuses mixes whose sizes cannot fill what is left (4- and
    6-GPU instances in 71-GPU domains fill 70 of each: on the 64-rack mixed fleet with pipeline depth 3 the
    exact packings asked fell from 4,440, 3,497 of them refusals, to 2,710)."""
    return tuple(_most_filled(sizes, capacity) for capacity in bins)


@functools.lru_cache(maxsize=1 << 12)
def _most_filled(sizes: tuple[int, ...], capacity: int) -> int:
    """The largest sum of `sizes` (each any number of times) at most `capacity`."""
    reachable = 1  # bit t: a sum of t
    for size in sizes:
        if size <= 0:
            continue
        step = reachable
        while step:
            step = (step << size) & ((1 << (capacity + 1)) - 1) & ~reachable
            reachable |= step
    return reachable.bit_length() - 1


def _best_fit(items: Items, bins: tuple[int, ...]) -> Filling | None:
    """Best fit decreasing: each item, largest first, into the bin with the least room that holds it (bins
    kept by their room, rooms being small integers)."""
    by_room: dict[int, list[int]] = {}
    for index in range(len(bins) - 1, -1, -1):  # the first bin of a room taken first
        by_room.setdefault(bins[index], []).append(index)
    largest = max(bins, default=0)
    taken = [[0] * len(items) for _ in bins]
    for i, (size, count) in enumerate(items):
        for _ in range(count):
            room = next((r for r in range(size, largest + 1) if by_room.get(r)), None)
            if room is None:
                return None
            index = by_room[room].pop()
            taken[index][i] += 1
            by_room.setdefault(room - size, []).append(index)
    return tuple(tuple(row) for row in taken)


# The exact packing's effort limit (CP-SAT deterministic time, about seconds on one core): arc-flow models of
# 64 racks of mixed non-dividing sizes are proven in well under 0.1; a model it cannot decide in time is
# refused (conservative: `fits` never accepts what it has not packed).
PACKING_EFFORT = 5.0


def _exact_fill(items: Items, bins: tuple[int, ...]) -> Filling | None:
    """The arc-flow model of bin packing (Valerio de Carvalho 1999), exact: nodes 0..largest bin, an arc
    (u, u + s) per item size and a loss arc (u, u + 1) at every node; each unit of flow from 0 to node c is
    one bin of capacity c (at most as many as there are), the item arcs carry each item's count. Any
    integer flow splits into paths, each a bin's items, so the items pack iff the model is feasible. Solved
    by CP-SAT, one worker, deterministic (imported here: a solve that packs by the rows alone skips it)."""
    from planner.formulation.linear import LinearModel
    from planner.solvers import LazyBackend
    from planner.solvers.base import SolveOptions

    largest = max(bins, default=0)
    model = LinearModel()
    arcs: list[tuple[int, int, int]] = [(u, u + size, i) for u in range(largest) for i, (size, _) in enumerate(items)
                                        if u + size <= largest] + [(u, u + 1, -1) for u in range(largest)]
    flow = [model.add_var(f"f{u},{v}", "flow", 0, len(bins) if kind < 0 else items[kind][1], True)
            for u, v, kind in arcs]
    have = {c: bins.count(c) for c in set(bins) if c > 0}  # racks with no complete domain hold nothing
    ends = {c: model.add_var(f"end{c}", "bins", 0, count, True) for c, count in sorted(have.items())}
    rows: list[dict[int, float]] = [{} for _ in range(largest + 1)]  # into the node less out of it
    for f, (u, v, _) in zip(flow, arcs, strict=True):
        rows[u][f], rows[v][f] = -1.0, 1.0
    rows[0].update({e: 1.0 for e in ends.values()})  # what leaves node 0 is the bins used
    for node, end in ends.items():
        rows[node][end] = -1.0
    for node, row in enumerate(rows):
        model.add(f"node{node}", "flow", row, "==", 0.0)
    for i, (_, count) in enumerate(items):
        model.add(f"count{i}", "items", {f: 1.0 for f, (_, _, kind) in zip(flow, arcs, strict=True) if kind == i},
                  "==", float(count))
    report = LazyBackend("cpsat").solve(model, SolveOptions(PACKING_EFFORT, threads=1, seed=0, deterministic=True))
    if not report.status.has_solution:  # infeasible, or undecided within the effort (refused: conservative)
        return None
    left = [round(report.values[f]) for f in flow]
    stops = {c: round(report.values[e]) for c, e in ends.items()}
    return _bins_of_paths(_paths(arcs, left, stops, len(items)), bins)


def _paths(arcs: list[tuple[int, int, int]], left: list[int], stops: dict[int, int],
           kinds: int) -> list[tuple[int, tuple[int, ...]]]:
    """The flow split into paths from node 0, each (the node it ends at, its count of each item)."""
    out: dict[int, list[int]] = {}
    for index, (u, _, _) in enumerate(arcs):
        out.setdefault(u, []).append(index)
    paths = []
    for _ in range(sum(stops.values())):
        node, taken = 0, [0] * kinds
        while node == 0 or stops.get(node, 0) == 0:  # flow conservation: an arc with flow leaves the node
            index = next(i for i in out[node] if left[i] > 0)
            left[index] -= 1
            node = arcs[index][1]
            if arcs[index][2] >= 0:
                taken[arcs[index][2]] += 1
        stops[node] -= 1
        paths.append((node, tuple(taken)))
    return paths


def _bins_of_paths(paths: list[tuple[int, tuple[int, ...]]], bins: tuple[int, ...]) -> Filling:
    """Each path's items into a bin of the capacity it ends at; bins no path takes stay empty."""
    by_capacity: dict[int, list[tuple[int, ...]]] = {}
    for end, taken in paths:
        by_capacity.setdefault(end, []).append(taken)
    kinds = len(paths[0][1]) if paths else 0
    return tuple(by_capacity[c].pop(0) if by_capacity.get(c) else (0,) * kinds for c in bins)


@functools.lru_cache(maxsize=1 << 12)
def max_replicas(size: int, domains: Domains) -> int:
    """Most instances of one size the domains hold."""
    rows = [row for row in packing_rows(domains, [size]) if row.weight(size) > 0]
    most = min((row.rhs // row.weight(size) for row in rows), default=0)
    while most > 0 and not fits([(size, most)], domains):  # sizes the rows do not cover exactly
        most -= 1
    return max(0, most)


def assign(sizes: Sequence[int], group: ClusterGroup) -> list[tuple[GpuIndex, ...]]:
    """GPUs for instances of `sizes` (in order), by the module docstring's rules: first-fit decreasing by
    level, and where that leaves an instance out (sizes that do not divide each other), the exact packing
    `fits` checks. Raises ValueError if they do not fit."""
    try:
        return _first_fit(sizes, group)
    except ValueError:
        return _exact_assign(sizes, group)


def _first_fit(sizes: Sequence[int], group: ClusterGroup) -> list[tuple[GpuIndex, ...]]:
    """Instances wider than a rack take whole complete racks (the rest of the last one stays free), then
    those wider than a domain complete domains within one rack, then the rest any free GPUs of one domain."""
    domains, size = group.domains, group.system.scaleup_domain_gpus
    per_rack = group.domains_per_rack
    used = [0] * len(domains)  # GPUs taken in each domain (wide instances take all)
    by_rack = _by_rack(domains)
    placed: dict[int, tuple[GpuIndex, ...]] = {}
    first_room: dict[int, int] = {}  # per size, no domain before this one has room (rooms only shrink)
    for item in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        need = sizes[item]
        if need > size:
            span = -(-need // size)
            chosen = _whole_racks(span, per_rack, by_rack, domains, used) if span > per_rack else \
                _domains_in_rack(span, by_rack, domains, used)
            placed[item] = _take_domains(chosen, need, domains, used)
            continue
        target = first_room.get(need, 0)
        while target < len(domains) and domains[target].capacity - used[target] < need:
            target += 1
        if target == len(domains):
            raise ValueError("instances do not fit the domains")
        first_room[need] = target
        placed[item] = _take_gpus(target, need, domains, used)
    return [placed[i] for i in range(len(sizes))]


def _exact_assign(sizes: Sequence[int], group: ClusterGroup) -> list[tuple[GpuIndex, ...]]:
    """The packing `fits` finds (`_fill_bins` on both levels), made concrete: rack items to racks with
    that many complete domains, then narrow instances to the domains left, largest bins first."""
    domains, room = group.domains, group_domains(group)
    instances = sorted(Counter(sizes).items())
    wide, narrow = _levels(instances, room)
    racks = sorted(range(len(group.complete_per_rack)), key=lambda r: -group.complete_per_rack[r])  # as _rack_bins
    rack_slots = _slots(wide, _fill_bins(wide, _rack_bins(room)), racks)
    complete = {rack: [i for i in members if domains[i].complete] for rack, members in _by_rack(domains).items()}
    used = [0] * len(domains)
    placed: dict[int, tuple[GpuIndex, ...]] = {}
    for item in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        if sizes[item] > room.size:
            chosen = []
            for k in room.rack_items(sizes[item]):
                rack = rack_slots[k].pop(0)
                chosen += [complete[rack].pop(0) for _ in range(k)]
            placed[item] = _take_domains(sorted(chosen), sizes[item], domains, used)
    left = [i for members in complete.values() for i in members] + sorted(  # as _domain_bins
        (i for i, d in enumerate(domains) if not d.complete), key=lambda i: -domains[i].capacity)
    domain_slots = _slots(narrow, _fill_bins(narrow, _domain_bins(instances, room)), left)
    for item in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        if sizes[item] <= room.size:
            placed[item] = _take_gpus(domain_slots[sizes[item]].pop(0), sizes[item], domains, used)
    return [placed[i] for i in range(len(sizes))]


def _slots(items: Items, filling: Filling | None, bins: Sequence[int]) -> dict[int, list[int]]:
    """Per item size, the bins (`bins[j]` for the filling's j-th) holding one item of it each, in order."""
    if filling is None:
        raise ValueError("instances do not fit the domains")
    slots: dict[int, list[int]] = {size: [] for size, _ in items}
    for where, taken in zip(bins, filling, strict=False):
        for (size, _), count in zip(items, taken, strict=True):
            slots[size] += [where] * count
    return slots


def _by_rack(domains: Sequence[Domain]) -> dict[int, list[int]]:
    by_rack: dict[int, list[int]] = {}
    for index, domain in enumerate(domains):
        by_rack.setdefault(domain.rack, []).append(index)
    return by_rack


def _take_domains(chosen: Sequence[int], need: int, domains: Sequence[Domain], used: list[int]) -> tuple[GpuIndex, ...]:
    for index in chosen:
        used[index] = domains[index].capacity
    return tuple((domains[i].rack, *gpu) for i in chosen for gpu in domains[i].free)[:need]


def _take_gpus(index: int, need: int, domains: Sequence[Domain], used: list[int]) -> tuple[GpuIndex, ...]:
    domain = domains[index]
    gpus = tuple((domain.rack, *gpu) for gpu in domain.free[used[index]:used[index] + need])
    used[index] += need
    return gpus


def layout_gpus(resolved: ResolvedScenario, layout: Layout) -> list[list[tuple[GpuIndex, ...]]]:
    """Each pool's instances' GPUs, placed group by group (`assign`)."""
    result: list[list[tuple[GpuIndex, ...]]] = [[] for _ in layout.pools]
    for group in resolved.groups:
        members = [i for i, pool in enumerate(layout.pools) if resolved.group_named(pool.group) is group]
        sizes = [layout.pools[i].gpus_per_instance for i in members for _ in range(layout.pools[i].replicas)]
        placed = iter(assign(sizes, group))
        for i in members:
            result[i] = [next(placed) for _ in range(layout.pools[i].replicas)]
    return result


def _whole_racks(span: int, per_rack: int, by_rack: dict[int, list[int]], domains: Sequence[Domain],
                 used: list[int]) -> list[int]:
    racks = -(-span // per_rack)
    free = [members for members in by_rack.values()
            if len(members) == per_rack and all(_complete_free(i, domains, used) for i in members)]
    if len(free) < racks:
        raise ValueError("instances do not fit the racks")
    return [i for members in free[:racks] for i in members][:span]


def _domains_in_rack(span: int, by_rack: dict[int, list[int]], domains: Sequence[Domain], used: list[int]) -> list[int]:
    for members in by_rack.values():
        free = [i for i in members if _complete_free(i, domains, used)]
        if len(free) >= span:
            return free[:span]
    raise ValueError("instances do not fit the domains")


def _complete_free(index: int, domains: Sequence[Domain], used: list[int]) -> bool:
    return domains[index].complete and used[index] == 0


def check_layout_fits(resolved: ResolvedScenario, layout: Layout) -> None:
    """Every pool on a group of the cluster, and each group's pools fitting its domains (ScenarioError)."""
    for index, pool in enumerate(layout.pools):
        if resolved.group_named(pool.group) is None:
            names = ", ".join(g.name for g in resolved.groups)
            what = "give the group" if pool.group is None else f"no inventory group is named {pool.group!r}"
            raise ScenarioError(f"{what}: the cluster's groups are {names}", f"pools.{index}.group")
    for group in resolved.groups:
        members = [(p.gpus_per_instance, p.replicas) for p in layout.pools if resolved.group_named(p.group) is group]
        if members and not fits(members, group_domains(group)):
            have = f"{group.gpus} available GPUs" + (f" of {group.installed}" if group.unavailable else "")
            pools = ", ".join(f"{n} x {s} GPUs" for s, n in members)
            raise ScenarioError(f"the pools on {group.name} ({pools}) do not fit its {have} in scale-up domains "
                                f"of {group.system.scaleup_domain_gpus}; "
                                "reduce replicas or instance sizes", "pools")


def check_placement(resolved: ResolvedScenario, layout: Layout, placement: Any) -> None:
    """A plan file's placement (`plan_output.placement`): every instance on GPUs of its pool's group that
    exist, are available and are used once, by the module docstring's rules (one scale-up domain; whole
    complete domains of one rack, no other instance on them; whole racks and the rest in one more), each node's
    GPUs listed together (`_check_node_runs`). Raises
    ScenarioError naming the field and the GPU."""
    pools = placement.get("pools") if isinstance(placement, dict) else None
    if not isinstance(pools, list) or len(pools) != len(layout.pools):
        raise ScenarioError("expected one placed pool per layout pool; re-run `plan solve --out`", "placement.pools")
    used: dict[tuple[str, GpuIndex], str] = {}
    domains: dict[tuple[str, int, int], tuple[str, bool]] = {}  # (group, rack, domain) -> (instance, wide)
    for i, (pool, placed) in enumerate(zip(layout.pools, pools, strict=True)):
        group = resolved.group_named(pool.group)
        instances = placed.get("instances") if isinstance(placed, dict) else None
        if group is None or not isinstance(instances, list) or len(instances) != pool.replicas:
            raise ScenarioError(f"expected {pool.replicas} instances of the pool", f"placement.pools.{i}.instances")
        for j, instance in enumerate(instances):
            where = f"placement.pools.{i}.instances.{j}.gpus"
            gpus = instance.get("gpus") if isinstance(instance, dict) else None
            if not isinstance(gpus, list) or len(gpus) != pool.gpus_per_instance:
                raise ScenarioError(f"expected a list of the instance's {pool.gpus_per_instance} GPU ids", where)
            indices = [_gpu_of(group, gpu, f"{where}.{k}", used) for k, gpu in enumerate(gpus)]
            _check_span(group, indices, where)
            _check_node_runs(gpus, indices, where)
            _check_own_domains(group, indices, where, domains)
        # the stages are the layout's (engines split layers as the cost model does): written for the reader and
        # copied into launch files' comments, so an edited split is refused, not launched as a comment
        stages = placed.get("stages")
        if stages is not None and stages != stage_entries(resolved, pool):
            raise ScenarioError(f"the stages are not the layout's ({_stages_text(stage_entries(resolved, pool))}); "
                                "they follow from the layout's pp and the model's layers: re-run `plan solve --out` "
                                "or restore them", f"placement.pools.{i}.stages")


def stage_entries(resolved: ResolvedScenario, pool: Pool) -> list[dict[str, Any]]:
    """Each pipeline stage of a pool's instance: its layers (first, last) and GPU offsets in the instance (first,
    last), as plan files write them."""
    per_stage, first_layer, stages = pool.tp * pool.dp_attention, 0, []
    for stage, layers in enumerate(pool_context(resolved, pool).stages):
        stages.append({"stage": stage, "layers": [first_layer, first_layer + len(layers) - 1],
                       "gpu_offset": [stage * per_stage, (stage + 1) * per_stage - 1]})
        first_layer += len(layers)
    return stages


def _gpu_of(group: ClusterGroup, gpu: object, where: str, used: dict[tuple[str, GpuIndex], str]) -> GpuIndex:
    text = str(gpu)
    name, _, rest = text.partition("/")
    index = parse_gpu_id(rest)
    if name != group.name or index is None:
        raise ScenarioError(f"{text} is not a GPU of group {group.name} (ids {group.name}/r<rack>/n<node>/g<gpu>)",
                            where)
    system = group.system
    flat = index[0] * system.gpus_per_rack + index[1] * system.gpus_per_node + index[2]
    if index[1] >= system.gpus_per_rack // system.gpus_per_node or index[2] >= system.gpus_per_node \
            or flat >= group.installed:
        raise ScenarioError(f"{text} does not exist: group {group.name} has {group.installed} GPUs", where)
    if index in group.unavailable:
        raise ScenarioError(f"{text} is unavailable (busy or failed in the inventory); place the instance on "
                            "available GPUs", where)
    if (group.name, index) in used:
        raise ScenarioError(f"{text} is used twice (also by {used[group.name, index]})", where)
    used[group.name, index] = where
    return index


def _check_node_runs(ids: list[Any], gpus: list[GpuIndex], where: str) -> None:
    """Each node's GPUs stand together in the instance's list: engines number an instance's ranks node by node
    (NODE_RANK, then the GPUs of each node), and exports take the ranks, banks and stages in the list's order."""
    seen: set[tuple[int, int]] = set()
    for k, gpu in enumerate(gpus):
        node = gpu[:2]
        if node in seen and gpus[k - 1][:2] != node:
            raise ScenarioError(f"{ids[k]} is apart from the other GPUs of its node in this list: engines number an "
                                "instance's ranks node by node, so list each node's GPUs together", f"{where}.{k}")
        seen.add(node)


def _stages_text(stages: list[dict[str, Any]]) -> str:
    return "; ".join(f"stage {s['stage']}: layers {s['layers'][0]}-{s['layers'][1]}, GPUs {s['gpu_offset'][0]}-"
                     f"{s['gpu_offset'][1]}" for s in stages)


def _check_span(group: ClusterGroup, gpus: list[GpuIndex], where: str) -> None:
    system = group.system
    per_domain = system.scaleup_domain_gpus // system.gpus_per_node
    domains = _domains_of(group, gpus)
    size = len(gpus)
    if size <= system.scaleup_domain_gpus:
        if len(domains) > 1:
            raise ScenarioError(f"an instance of {size} GPUs must sit in one scale-up domain; it spans "
                                f"{len(domains)}", where)
        return
    complete = {(d.rack, d.free[0][0] // per_domain) for d in group.domains if d.complete}
    if not domains <= complete or len(domains) != -(-size // system.scaleup_domain_gpus):
        raise ScenarioError(f"an instance of {size} GPUs must take whole complete scale-up domains "
                            f"({-(-size // system.scaleup_domain_gpus)} of {system.scaleup_domain_gpus})", where)
    racks = {rack for rack, _ in domains}
    if size <= system.gpus_per_rack and len(racks) > 1:
        raise ScenarioError(f"an instance of {size} GPUs must sit in one rack; it spans {len(racks)}", where)
    span, per_rack = len(domains), group.domains_per_rack
    whole = sum(1 for rack in racks if sum(1 for r, _ in domains if r == rack) == per_rack)
    if size > system.gpus_per_rack and (len(racks) != -(-span // per_rack) or whole < span // per_rack):
        raise ScenarioError(f"an instance of {size} GPUs must take {span // per_rack} whole racks"
                            + (f" and {span % per_rack} domains of one more" if span % per_rack else "")
                            + f"; it spans {len(racks)} racks", where)


def _domains_of(group: ClusterGroup, gpus: list[GpuIndex]) -> set[tuple[int, int]]:
    """The (rack, domain within the rack) of each of `gpus`."""
    per_domain = group.system.scaleup_domain_gpus // group.system.gpus_per_node
    return {(rack, node // per_domain) for rack, node, _ in gpus}


def _check_own_domains(group: ClusterGroup, gpus: list[GpuIndex], where: str,
                       taken: dict[tuple[str, int, int], tuple[str, bool]]) -> None:
    """An instance wider than a domain has its domains to itself (the cost model gives it their links)."""
    wide = len(gpus) > group.system.scaleup_domain_gpus
    for key in sorted((group.name, rack, domain) for rack, domain in _domains_of(group, gpus)):
        other = taken.get(key)
        if other is not None and other[0] != where and (wide or other[1]):
            raise ScenarioError(f"shares scale-up domain r{key[1]} (domain {key[2]}) with {other[0]}; an instance "
                                f"wider than a domain takes its domains whole", where)
        taken[key] = (where, wide or (other is not None and other[1]))
