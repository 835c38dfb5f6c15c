"""Packing instances of sizes that do not divide each other: `fits` against an exhaustive placement by the
rules (`planner.placement`), the placer realising every packing `fits` accepts, and the packing rows a
relaxation (never refusing what the exhaustive placement makes)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import pytest

from costmodel.hardware import load_system
from costmodel.inventory import ClusterGroup
from planner.placement import assign, fits, group_domains, packing_rows

Racks = tuple[tuple[tuple[int, bool], ...], ...]  # per rack, each domain's (free GPUs, untouched complete)


def _racks(group: ClusterGroup) -> Racks:
    by_rack: dict[int, list[tuple[int, bool]]] = {}
    for domain in group.domains:
        by_rack.setdefault(domain.rack, []).append((domain.capacity, domain.complete))
    return tuple(tuple(sorted(members, reverse=True)) for _, members in sorted(by_rack.items()))


def _placeable_by_rules(sizes: Sequence[int], group: ClusterGroup) -> bool:
    """Exhaustive search written from the rules alone: an instance up to a domain on free GPUs of one
    domain; a wider one on `span` untouched complete domains of one rack; one wider than a rack on whole
    racks (every domain complete and untouched) and the rest of its domains in one more rack."""
    domain, per_rack = group.system.scaleup_domain_gpus, group.domains_per_rack

    @functools.cache
    def search(left: tuple[int, ...], racks: Racks) -> bool:
        if not left:
            return True
        need, rest = left[0], left[1:]
        span = -(-need // domain)
        if need <= domain:
            return any(search(rest, _use_gpus(racks, r, d, need))
                       for r, members in enumerate(racks) for d, (free, _) in enumerate(members) if free >= need)
        whole, extra = divmod(span, per_rack) if span > per_rack else (0, span)
        complete = [sum(untouched for _, untouched in members) for members in racks]
        full = [r for r, members in enumerate(racks) if len(members) == per_rack and complete[r] == per_rack]
        for chosen in itertools.combinations(full, whole):
            after = functools.reduce(lambda rs, r: _take_complete(rs, r, per_rack), chosen, racks)
            if not extra:
                if search(rest, after):
                    return True
                continue
            for r, members in enumerate(after):
                room = sum(untouched for _, untouched in members)
                if room >= extra and search(rest, _take_complete(after, r, extra)):
                    return True
        return False

    return search(tuple(sorted(sizes, reverse=True)), _racks(group))


def _use_gpus(racks: Racks, r: int, d: int, need: int) -> Racks:
    members = list(racks[r])
    members[d] = (members[d][0] - need, False)
    return (*racks[:r], tuple(sorted(members, reverse=True)), *racks[r + 1:])


def _take_complete(racks: Racks, r: int, count: int) -> Racks:
    members = list(racks[r])
    for _ in range(count):
        members[members.index(next(m for m in members if m[1]))] = (0, False)
    return (*racks[:r], tuple(sorted(members, reverse=True)), *racks[r + 1:])


def _check_assignment(sizes: Sequence[int], group: ClusterGroup) -> None:
    """The placer's GPUs: each instance its size, no GPU twice, every GPU available and within the rules."""
    placed = assign(sizes, group)
    domain, per_rack = group.system.scaleup_domain_gpus, group.domains_per_rack
    per_node = domain // group.system.gpus_per_node
    seen: set[tuple[int, int, int]] = set()
    for need, gpus in zip(sizes, placed, strict=True):
        assert len(gpus) == need and not seen & set(gpus) and not set(gpus) & group.unavailable
        seen |= set(gpus)
        where = {(rack, node // per_node) for rack, node, _ in gpus}
        span = -(-need // domain)
        assert len(where) == (1 if need <= domain else span)
        if span > per_rack:  # whole racks and the rest in one more
            racks = sorted({rack for rack, _ in where})
            assert len(racks) == -(-span // per_rack)
            assert sum(1 for rack in racks if sum(1 for r, _ in where if r == rack) == per_rack) == span // per_rack
        elif need > domain:
            assert len({rack for rack, _ in where}) == 1


CASES = [
    ("h200-sxm", 96, (), (24, 16, 8)),  # three racks of four 8-GPU domains
    ("h200-sxm", 128, (), (40, 24, 16)),
    ("h200-sxm", 96, ((0, 1, 3), (2, 3, 0)), (24, 12, 6)),
    ("h200-sxm", 88, ((1, 0, 0),), (48, 24, 8)),
    ("gb200-nvl72", 216, (), (72, 48, 24)),
    ("gb200-nvl72", 144, ((1, 5, 0),), (72, 48, 16)),
    ("mi355x", 160, (), (40, 24, 16)),  # 16-domain racks and a partial one
]


@pytest.mark.parametrize(("system", "gpus", "unavailable", "sizes"), CASES)
def test_fits_is_the_rules_exhaustive_placement(system: str, gpus: int, unavailable: tuple[tuple[int, int, int], ...],
                                               sizes: tuple[int, ...]) -> None:
    group = ClusterGroup("g", load_system(system), gpus, frozenset(unavailable))
    domains = group_domains(group)
    limits = [gpus // size + 1 for size in sizes]
    checked = 0
    for counts in itertools.product(*(range(limit + 1) for limit in limits)):
        items = [(size, count) for size, count in zip(sizes, counts, strict=True) if count]
        if sum(size * count for size, count in items) > gpus + max(sizes):
            continue
        instances = [size for size, count in items for _ in range(count)]
        truth = _placeable_by_rules(instances, group)
        assert fits(items, domains) == truth, (items, truth)
        rows = packing_rows(domains, [size for size, _ in items])
        if truth:  # a relaxation: every row holds for a real packing
            assert all(sum(row.weight(s) * n for s, n in items) <= row.rhs for row in rows), items
            _check_assignment(instances, group)
        else:
            with pytest.raises(ValueError):
                assign(instances, group)
        checked += 1
    assert checked > 20


def test_the_session_28_counterexamples() -> None:
    """Refused though placeable, and accepted though not (benchmarks/README.md, session 28)."""
    gb200 = ClusterGroup("g", load_system("gb200-nvl72"), 144)
    assert fits([(48, 1), (72, 1)], group_domains(gb200)) and fits([(72, 1), (16, 4)], group_domains(gb200))
    h200 = ClusterGroup("g", load_system("h200-sxm"), 128)
    assert not fits([(24, 4), (16, 1)], group_domains(h200))
    three = ClusterGroup("g", load_system("gb200-nvl72"), 216)
    assert fits([(16, 6), (24, 5)], group_domains(three))
    _check_assignment([16] * 6 + [24] * 5, three)


def test_a_plan_files_placement_keeps_the_rules() -> None:
    """Plan files are checked by the rules `fits` packs by: an instance wider than a rack on whole racks and
    the rest in one more (not 2 + 2 + 2 domains of three racks), a wider-than-domain instance's domains its
    own (found in review: both passed)."""
    from costmodel.errors import ScenarioError
    from planner.placement import _check_own_domains, _check_span

    group = ClusterGroup("g", load_system("h200-sxm"), 128)
    spread = [(r, n, k) for r in range(3) for n in range(2) for k in range(8)]
    with pytest.raises(ScenarioError, match="1 whole racks and 2 domains of one more; it spans 3 racks"):
        _check_span(group, spread, "x")
    _check_span(group, [(r, n, k) for r, nodes in ((0, range(4)), (1, range(2))) for n in nodes for k in range(8)],
                "x")
    taken: dict[tuple[str, int, int], tuple[str, bool]] = {}
    wide = [(0, 0, k) for k in range(8)] + [(0, 1, k) for k in range(4)]
    _check_span(group, wide, "a")
    _check_own_domains(group, wide, "a", taken)
    with pytest.raises(ScenarioError, match=r"shares scale-up domain r0 \(domain 1\) with a"):
        _check_own_domains(group, [(0, 1, k) for k in range(4, 8)], "b", taken)
    _check_own_domains(group, [(0, 2, k) for k in range(4)], "c", taken)
    _check_own_domains(group, [(0, 2, k) for k in range(4, 8)], "d", taken)  # narrow instances share domains


def _brute_packs(items: tuple[tuple[int, int], ...], bins: tuple[int, ...]) -> bool:
    """Every way to put the items into the bins, one bin at a time (small cases only)."""
    if not bins:
        return all(count == 0 for _, count in items)
    capacity, rest = bins[0], bins[1:]
    ranges = [range(min(count, capacity // size) + 1) for size, count in items]
    return any(_brute_packs(tuple((size, count - take) for (size, count), take in zip(items, takes, strict=True)),
                            rest)
               for takes in itertools.product(*ranges)
               if sum(size * take for (size, _), take in zip(items, takes, strict=True)) <= capacity)


def test_two_sizes_pack_exactly_as_every_way_to_place_them() -> None:
    """The two-size program (`fits`' look-up, the placer's packing) against every placement: the same answer,
    and a packing that holds every item within each bin's capacity, on bins such as partial domains leave
    (odd capacities where even sizes leave a GPU idle, empty racks)."""
    import random

    from planner.placement import _packs, _two_size_fill

    rng = random.Random(5)
    packed = 0
    for _ in range(1500):
        large, small = sorted(rng.sample(range(1, 13), 2), reverse=True)
        bins = tuple(rng.choice([0, 3, 5, 7, 8, 11, 12, 16]) for _ in range(rng.randint(1, 4)))
        items = ((large, rng.randint(1, 5)), (small, rng.randint(1, 7)))
        brute = _brute_packs(items, bins)
        filling = _two_size_fill(items, bins)
        assert _packs(items, bins) == brute == (filling is not None), (items, bins)
        if filling is not None:
            packed += 1
            assert [sum(column) for column in zip(*filling, strict=True)] == [count for _, count in items]
            assert all(large * x + small * y <= c for (x, y), c in zip(filling, bins, strict=True))
    assert packed > 200
