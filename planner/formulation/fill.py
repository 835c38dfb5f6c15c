"""Aggregated instances of several sizes side by side on one group: the most tokens/s its domains hold.

Within a TTFT cap, any aggregated instance of a size can stand for any other of that size (the packing only
sees sizes), so the best mix holds, per size, only the best instance within the cap (`values`: size ->
tokens/s of one instance). The group's room is three levels (`planner.placement`): an instance within a
domain's size sits in one domain on any of its free GPUs, a wider one takes whole complete domains of one
rack, one wider than a rack whole complete racks (the rules let others use the rest of its last rack; this
knapsack leaves it idle, as where the rack's domains divide its span there is none). So the best mix is,
exactly:
- K(b): an unbounded knapsack of the narrow sizes into b free GPUs (one domain);
- R(c) for a rack with c complete domains: max over k <= c of W(k) + (c - k) K(domain), W an unbounded
  knapsack of the in-rack wide instances' spans (in domains) into k domains;
- the racks taken whole by instances wider than a rack: M(m), an unbounded knapsack of their rack counts
  into m whole racks, the other whole racks at R(per rack);
total = sum over partial domains K(b) + sum over racks not whole R(c) + max over m of M(m) + (whole - m)
R(per rack). Each level's choice is a placement (instances of a domain use its free GPUs; complete domains
of a rack are interchangeable; so are whole racks), so the optimum is over real packings. It is the optimum
of every packing where the sizes divide each other (`placeable`); with an instance wider than a rack whose
span the rack's domains do not divide, the rules let others use the rest of its last rack, which M does
not count (a real packing, perhaps not the best: such mixes are not kept).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from planner.placement import Domains, divisible, fits


@dataclass(frozen=True)
class Fill:
    value: float
    counts: Counter[int]  # instances per size

    def plus(self, other: Fill, times: int = 1) -> Fill:
        counts = Counter(self.counts)
        for size, count in other.counts.items():
            counts[size] += count * times
        return Fill(self.value + other.value * times, counts)


EMPTY = Fill(0.0, Counter())


def _knapsack(items: dict[int, tuple[int, float]], capacity: int) -> list[Fill]:
    """Best fill of each capacity 0..capacity by items (weight -> (size, value)), each usable any number of
    times; the first found among equal values (fewer, larger instances first: weights tried descending)."""
    best = [EMPTY]
    for room in range(1, capacity + 1):
        found = best[room - 1]
        for weight in sorted(items, reverse=True):
            if weight <= room:
                size, value = items[weight]
                candidate = best[room - weight].plus(Fill(value, Counter({size: 1})))
                if candidate.value > found.value:
                    found = candidate
        best.append(found)
    return best


def _best_per(key: dict[int, int], values: dict[int, float]) -> dict[int, tuple[int, float]]:
    """Per weight (key of a size), the size with the most value (the first size among equals)."""
    chosen: dict[int, tuple[int, float]] = {}
    for size in sorted(key):
        weight = key[size]
        if weight not in chosen or values[size] > chosen[weight][1]:
            chosen[weight] = (size, values[size])
    return chosen


def best_fill(values: dict[int, float], domains: Domains) -> Fill:
    """The most tokens/s of aggregated instances (size -> one instance's tokens/s) the domains hold, and the
    instances per size (see the module docstring)."""
    values = {s: v for s, v in values.items() if v > 0}
    narrow = {s: s for s in values if s <= domains.size}
    wide = [s for s in values if s > domains.size]
    in_rack = {s: domains.span(s) for s in wide if domains.span(s) <= domains.per_rack}
    multi = {s: domains.racks_taken(s) for s in wide if domains.span(s) > domains.per_rack}
    per_domain = _knapsack(_best_per(narrow, values), domains.size)
    spans = _knapsack(_best_per(in_rack, values), domains.per_rack)
    total = EMPTY
    for free in domains.partial:
        total = total.plus(per_domain[min(free, domains.size)])
    rack = [_rack(c, spans, per_domain[domains.size]) for c in range(domains.per_rack + 1)]
    counts = domains.rack_counts
    whole = sum(1 for c in counts if c == domains.per_rack)
    for c in counts:
        if c < domains.per_rack:
            total = total.plus(rack[c])
    racks = _knapsack(_best_per(multi, values), whole)
    best_whole = max((racks[m].plus(rack[domains.per_rack], whole - m) for m in range(whole + 1)),
                     key=lambda f: f.value, default=EMPTY)
    return total.plus(best_whole)


def _rack(complete: int, spans: list[Fill], domain: Fill) -> Fill:
    """R(c): the best of k complete domains to instances wider than a domain and the rest to narrow ones."""
    return max((spans[k].plus(domain, complete - k) for k in range(complete + 1)), key=lambda f: f.value)


def placeable(counts: list[tuple[int, int]], domains: Domains) -> bool:
    """A mix the planner may return: its sizes divide each other (then `best_fill` is the best of every
    packing, the packing rows are exact and first-fit decreasing places it) and it fits. With other sizes
    (an attention-DP degree of 3, say) the knapsack's mix is real but may not be the best there is."""
    return divisible([size for size, _ in counts], domains) and fits(counts, domains)
