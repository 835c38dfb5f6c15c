"""Fitting instances into the cluster's scale-up domains.

An instance no larger than a domain must sit inside one domain (the cost model prices its collectives
on the scale-up fabric); a larger one takes whole domains (ceil(size / domain) of them). A cluster of G
GPUs with domains of S GPUs has G // S full domains and, when S does not divide G, one partial domain.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from costmodel.resolve import ResolvedScenario


def domain_bins(resolved: ResolvedScenario) -> tuple[int, ...]:
    """GPU capacity of each scale-up domain of the cluster, largest first."""
    domain = resolved.system.scaleup_domain_gpus
    full, rest = divmod(resolved.gpus, domain)
    return (domain,) * full + ((rest,) if rest else ())


def fits(instances: Sequence[tuple[int, int]], bins: tuple[int, ...]) -> bool:
    """Whether `count` instances of each `size` in `instances` fit the domains `bins`."""
    domain = bins[0]
    wide = [(size, count) for size, count in instances if size > domain and count]
    narrow = tuple(sorted(((size, count) for size, count in instances if size <= domain and count), reverse=True))
    whole_domains = sum(-(-size // domain) * count for size, count in wide)
    full_bins = sum(1 for b in bins if b == domain)
    if whole_domains > full_bins:
        return False
    remaining = tuple(sorted(bins, reverse=True)[whole_domains:])
    return _pack(narrow, remaining)


def _pack(items: tuple[tuple[int, int], ...], bins: tuple[int, ...]) -> bool:
    if sum(size * count for size, count in items) > sum(bins):
        return False
    sizes = [size for size, _ in items]
    if all(big % small == 0 for big in sizes for small in sizes if small <= big):
        return _divisible_fit(items, bins)
    return _pack_exact(items, bins)


def _divisible_fit(items: tuple[tuple[int, int], ...], bins: tuple[int, ...]) -> bool:
    """Sizes that divide each other fit iff, for every size s, the items of size >= s fit in the bins'
    multiples of s: placing the largest first leaves each bin's room for size s reduced by exactly the
    s-units it used, whichever bins they went to (the same rows the MILP uses)."""
    return all(sum(size * count for size, count in items if size >= s) <= sum(s * (b // s) for b in bins)
               for s, _ in items)


@functools.lru_cache(maxsize=65536)
def _pack_exact(items: tuple[tuple[int, int], ...], bins: tuple[int, ...]) -> bool:
    """Exact search: fill the first bin with every feasible pattern, recurse on the rest."""
    if not any(count for _, count in items):
        return True
    if not bins:
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


def max_replicas(size: int, bins: tuple[int, ...]) -> int:
    """Most instances of one size the domains hold."""
    domain = bins[0]
    if size > domain:
        return sum(1 for b in bins if b == domain) // -(-size // domain)
    return sum(b // size for b in bins)


@dataclass(frozen=True)
class Slot:
    """Where one instance sits: its first domain, its first GPU in that domain, and its GPU count."""

    domain: int
    first_gpu: int
    gpus: int


def assign(sizes: Sequence[int], bins: tuple[int, ...]) -> list[Slot]:
    """GPUs for instances of `sizes` (in order), first-fit decreasing: wide instances take whole domains
    first, then each instance goes to the first domain with room. Raises ValueError if they do not fit."""
    domain = bins[0]
    free = list(bins)
    slots: dict[int, Slot] = {}
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    next_whole = 0
    for index in order:
        size = sizes[index]
        if size > domain:
            span = -(-size // domain)
            start = next_whole
            if start + span > sum(1 for b in bins if b == domain):
                raise ValueError("instances do not fit the domains")
            for d in range(start, start + span):
                free[d] = 0
            slots[index] = Slot(start, 0, size)
            next_whole += span
            continue
        target = next((d for d in range(len(bins)) if free[d] >= size), None)
        if target is None:
            raise ValueError("instances do not fit the domains")
        slots[index] = Slot(target, bins[target] - free[target], size)
        free[target] -= size
    return [slots[i] for i in range(len(sizes))]
