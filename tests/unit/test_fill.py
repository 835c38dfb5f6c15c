"""`best_fill`: the most value of instances of several sizes the domains hold, against brute force over
every count vector that `planner.placement.fits` accepts, on domains with partial ones, racks of several
domains and instances wider than a rack: equal where sizes divide each other (`divisible`; the mixes the
planner keeps), a real packing and at most the optimum where they do not (an instance wider than a rack
may leave the rest of its last rack to others, which the knapsack does not count)."""

from __future__ import annotations

import itertools
import random

import pytest

from planner.formulation.fill import best_fill
from planner.placement import Domains, divisible, fits

CASES = [
    Domains(8, 2, (5, 3)),  # HGX nodes, two partial (failed GPUs)
    Domains(8, 4, (), (2, 2), 2),  # racks of two nodes
    Domains(4, 5, (2,), (3, 2), 3),  # a rack with a failed GPU's domain left out
    Domains(8, 3, (6,), (3,), 3),  # one rack of three complete domains
    Domains(8, 3, (7,)),  # each domain a rack (NVL72-like, scaled down), one partial
]


def _brute(values: dict[int, float], domains: Domains) -> float:
    sizes = sorted(values)
    ranges = [range(domains.gpus // s + 1) for s in sizes]
    best = 0.0
    for counts in itertools.product(*ranges):
        chosen = list(zip(sizes, counts, strict=True))
        if sum(s * n for s, n in chosen) <= domains.gpus and fits(chosen, domains):
            best = max(best, sum(values[s] * n for s, n in chosen))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_best_fill_is_the_brute_force_optimum(seed: int) -> None:
    rng = random.Random(seed)
    domains = CASES[seed % len(CASES)]
    sizes = rng.sample([1, 2, 4, 8, 16, 32], rng.randint(1, 4))
    values = {s: rng.uniform(0.2, 1.5) * s for s in sizes}
    fill = best_fill(values, domains)
    if divisible(sizes, domains):
        assert fill.value == pytest.approx(_brute(values, domains), rel=1e-12)
    else:
        assert fill.value <= _brute(values, domains) * (1 + 1e-12)
    assert fill.value == pytest.approx(sum(values[s] * n for s, n in fill.counts.items()), rel=1e-12)
    assert fits(list(fill.counts.items()), domains)
