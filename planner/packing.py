"""Which blocks of an inventory run side by side: blocks on pairwise disjoint groups (`best_packing`), used by
the sweep's composites and by the bound on what untimed batches could add beside them."""

from __future__ import annotations

import functools


def best_packing(groups: list[frozenset[str]], values: list[float]) -> tuple[float, tuple[int, ...]]:
    """The blocks on pairwise disjoint groups with the most value in all (their indices, ascending; the
    first found among equals). A block on several groups that is worth no more than its groups' own best
    blocks together never helps and is left out; the rest by recursion on the first free group (taken by
    one of its blocks, or left idle), memoised on the free groups."""
    alone: dict[str, float] = {}
    for g, v in zip(groups, values, strict=True):
        if len(g) == 1:
            (name,) = g
            alone[name] = max(alone.get(name, 0.0), v)
    useful = [i for i, (g, v) in enumerate(zip(groups, values, strict=True))
              if v > 0 and (len(g) == 1 or v > sum(alone.get(name, 0.0) for name in g))]
    names = sorted({name for i in useful for name in groups[i]})
    by_group = {name: [i for i in useful if min(groups[i]) == name] for name in names}

    @functools.cache
    def best(free: frozenset[str]) -> tuple[float, tuple[int, ...]]:
        if not free:
            return 0.0, ()
        first = min(free)
        found = best(free - {first})
        for i in by_group[first]:
            if groups[i] <= free:
                value, rest = best(free - groups[i])
                if values[i] + value > found[0]:
                    found = (values[i] + value, tuple(sorted((i, *rest))))
        return found

    return best(frozenset(names))
