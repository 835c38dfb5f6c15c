"""Fitting instances into one group's scale-up domains and racks.

Rules (`costmodel.inventory` numbers the GPUs):
- an instance no larger than a domain sits inside one domain, on any of its free GPUs (the cost model
  prices its collectives on the scale-up fabric);
- a larger one takes whole complete domains (every GPU installed and available), ceil(size / domain) of
  them, inside one rack when it fits a rack (its traffic then stays under the rack's switches);
- one larger than a rack takes whole complete racks, and its traffic crosses the rack uplinks.

Packing rows. With sizes that divide each other (powers of two) first-fit decreasing is optimal, so the
instances fit iff, for every size s up to a domain, the GPUs of instances of size >= s fit the domains'
multiples of s (a complete domain taken by a wider instance removes all of its room); the same one level
up for instances wider than a domain, counted in domains, against each rack's complete domains; and the
racks taken whole. The MILP states these rows (`planner.formulation.model`), the unit table solves them in
closed form (`planner.formulation.units`); other sizes are checked exactly here after the solve.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from costmodel.inventory import ClusterGroup, Domain, GpuIndex
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
    weights: tuple[tuple[int, int], ...]  # (instance size, weight per instance)

    def weight(self, size: int) -> int:
        return dict(self.weights).get(size, 0)


def packing_rows(domains: Domains, sizes: Sequence[int]) -> list[PackingRow]:
    """The rows of the module docstring for instances of `sizes`."""
    distinct = sorted(set(sizes))
    narrow = [s for s in distinct if s <= domains.size]
    wide = [s for s in distinct if s > domains.size]
    in_rack = sorted({domains.span(s) for s in wide if domains.span(s) <= domains.per_rack})
    multi_rack = [s for s in wide if domains.span(s) > domains.per_rack]
    rows = []
    for t in narrow:
        weights = [(s, s) for s in narrow if s >= t] + [(s, domains.span(s) * (domains.size // t * t)) for s in wide]
        rows.append(PackingRow(f"size{t}", domains.room(t), tuple(weights)))
    for w in in_rack:
        weights = [(s, domains.span(s)) for s in wide if w <= domains.span(s) <= domains.per_rack]
        weights += [(s, domains.racks_taken(s) * (domains.per_rack // w * w)) for s in multi_rack]
        rows.append(PackingRow(f"wide{w}", sum(w * (c // w) for c in domains.rack_counts), tuple(weights)))
    if multi_rack:
        whole = sum(1 for c in domains.rack_counts if c == domains.per_rack)
        rows.append(PackingRow("racks", whole, tuple((s, domains.racks_taken(s)) for s in multi_rack)))
    return rows


def divisible(sizes: Sequence[int], domains: Domains) -> bool:
    """Whether the packing rows are exact: sizes within a domain divide each other, and so do the wider
    ones' domain spans (within a rack), powers of two as tp, dp and pp give."""
    narrow = sorted({s for s in sizes if s <= domains.size})
    spans = sorted({domains.span(s) for s in sizes if s > domains.size} | {domains.per_rack})
    return all(b % a == 0 for i, a in enumerate(narrow) for b in narrow[i:]) and all(
        b % a == 0 for i, a in enumerate(spans) for b in spans[i:])


def fits(instances: Sequence[tuple[int, int]], domains: Domains) -> bool:
    """Whether `count` instances of each `size` fit the domains."""
    instances = [(size, count) for size, count in instances if count]
    sizes = [size for size, _ in instances]
    if not all(sum(row.weight(size) * count for size, count in instances) <= row.rhs
               for row in packing_rows(domains, sizes)):
        return False
    if divisible(sizes, domains):
        return True
    taken = sum(domains.span(size) * count for size, count in instances if size > domains.size)
    narrow = tuple(sorted(((size, count) for size, count in instances if size <= domains.size), reverse=True))
    bins = (domains.size,) * (domains.full - taken) + tuple(sorted(domains.partial, reverse=True))
    return _pack_exact(narrow, bins)


@functools.lru_cache(maxsize=65536)
def _pack_exact(items: tuple[tuple[int, int], ...], bins: tuple[int, ...]) -> bool:
    """Exact search: fill the first bin with every feasible pattern, recurse on the rest."""
    if not any(count for _, count in items):
        return True
    if not bins or sum(size * count for size, count in items) > sum(bins):
        return False
    return any(_pack_exact(rest, bins[1:]) for rest in _after_one_bin(items, bins[0]))


def _after_one_bin(items: tuple[tuple[int, int], ...], capacity: int) -> set[tuple[tuple[int, int], ...]]:
    """Every remainder of `items` after putting some of them into one bin of `capacity`."""
    states: set[tuple[tuple[int, int], ...]] = {items}
    for index, (size, count) in enumerate(items):
        next_states = set()
        for state in states:
            used = sum(s * (c0 - c) for (s, c0), (_, c) in zip(items, state, strict=True))
            for take in range(0, min(count, (capacity - used) // size) + 1):
                updated = list(state)
                updated[index] = (size, state[index][1] - take)
                next_states.add(tuple(updated))
        states = next_states
    return states


def max_replicas(size: int, domains: Domains) -> int:
    """Most instances of one size the domains hold."""
    rows = [row for row in packing_rows(domains, [size]) if row.weight(size) > 0]
    most = min((row.rhs // row.weight(size) for row in rows), default=0)
    while most > 0 and not fits([(size, most)], domains):  # sizes the rows do not cover exactly
        most -= 1
    return max(0, most)


def assign(sizes: Sequence[int], group: ClusterGroup) -> list[tuple[GpuIndex, ...]]:
    """GPUs for instances of `sizes` (in order), first-fit decreasing by level: instances wider than a rack
    take whole complete racks, then those wider than a domain complete domains within one rack, then the
    rest any free GPUs of one domain. Raises ValueError if they do not fit."""
    domains, size = group.domains, group.system.scaleup_domain_gpus
    per_rack = group.domains_per_rack
    used = [0] * len(domains)  # GPUs taken in each domain (wide instances take all)
    by_rack: dict[int, list[int]] = {}
    for index, domain in enumerate(domains):
        by_rack.setdefault(domain.rack, []).append(index)
    placed: dict[int, tuple[GpuIndex, ...]] = {}
    for item in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        need = sizes[item]
        if need > size:
            span = -(-need // size)
            chosen = _whole_racks(span, per_rack, by_rack, domains, used) if span > per_rack else \
                _domains_in_rack(span, by_rack, domains, used)
            for index in chosen:
                used[index] = domains[index].capacity
            gpus = [(domains[i].rack, *gpu) for i in chosen for gpu in domains[i].free]
            placed[item] = tuple(gpus[:need])
            continue
        target = next((i for i, d in enumerate(domains) if d.capacity - used[i] >= need), None)
        if target is None:
            raise ValueError("instances do not fit the domains")
        domain = domains[target]
        placed[item] = tuple((domain.rack, *gpu) for gpu in domain.free[used[target]:used[target] + need])
        used[target] += need
    return [placed[i] for i in range(len(sizes))]


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
