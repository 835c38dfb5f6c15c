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
from typing import Any

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
    row's right-hand side sums over the racks: 256 of them on 256 GB200 racks)."""
    narrow = [s for s in distinct if s <= domains.size]
    wide = [s for s in distinct if s > domains.size]
    in_rack = sorted({domains.span(s) for s in wide if domains.span(s) <= domains.per_rack})
    multi_rack = [s for s in wide if domains.span(s) > domains.per_rack]
    rows = []
    for t in narrow:
        weights = [(s, s) for s in narrow if s >= t] + [(s, domains.span(s) * (domains.size // t * t)) for s in wide]
        rows.append(PackingRow(f"size{t}", domains.room(t), dict(weights)))
    for w in in_rack:
        weights = [(s, domains.span(s)) for s in wide if w <= domains.span(s) <= domains.per_rack]
        weights += [(s, domains.racks_taken(s) * (domains.per_rack // w * w)) for s in multi_rack]
        rows.append(PackingRow(f"wide{w}", sum(w * (c // w) for c in domains.rack_counts), dict(weights)))
    if multi_rack:
        whole = sum(1 for c in domains.rack_counts if c == domains.per_rack)
        rows.append(PackingRow("racks", whole, {s: domains.racks_taken(s) for s in multi_rack}))
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
    return _fits(tuple((size, count) for size, count in instances if count), domains)


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


@functools.lru_cache(maxsize=1 << 12)
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
    first_room: dict[int, int] = {}  # per size, no domain before this one has room (rooms only shrink)
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
        target = first_room.get(need, 0)
        while target < len(domains) and domains[target].capacity - used[target] < need:
            target += 1
        if target == len(domains):
            raise ValueError("instances do not fit the domains")
        first_room[need] = target
        domain = domains[target]
        placed[item] = tuple((domain.rack, *gpu) for gpu in domain.free[used[target]:used[target] + need])
        used[target] += need
    return [placed[i] for i in range(len(sizes))]


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
    exist, are available and are used once, within one scale-up domain (or whole complete domains of one
    rack, or whole racks, for wider instances). Raises ScenarioError naming the field and the GPU."""
    pools = placement.get("pools") if isinstance(placement, dict) else None
    if not isinstance(pools, list) or len(pools) != len(layout.pools):
        raise ScenarioError("expected one placed pool per layout pool; re-run `plan solve --out`", "placement.pools")
    used: dict[tuple[str, GpuIndex], str] = {}
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


def _stages_text(stages: list[dict[str, Any]]) -> str:
    return "; ".join(f"stage {s['stage']}: layers {s['layers'][0]}-{s['layers'][1]}, GPUs {s['gpu_offset'][0]}-"
                     f"{s['gpu_offset'][1]}" for s in stages)


def _check_span(group: ClusterGroup, gpus: list[GpuIndex], where: str) -> None:
    system = group.system
    per_domain = system.scaleup_domain_gpus // system.gpus_per_node
    domains = {(rack, node // per_domain) for rack, node, _ in gpus}
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
