"""The solver benchmark's front metrics: the staircase hypervolume and the best hypervolume any k points of a
front reach (the yardstick for a front of at most 60 points), against brute force."""

from __future__ import annotations

import itertools
import random

import pytest

from benchmarks.solver import best_subset_hypervolume, hypervolume


def _staircase(count: int, seed: int) -> list[tuple[float, float]]:
    """A non-dominated front: TTFT and throughput both increasing."""
    rng = random.Random(seed)
    ttft = sorted(rng.uniform(10.0, 1000.0) for _ in range(count))
    value = sorted(rng.uniform(1.0, 500.0) for _ in range(count))
    return list(zip(ttft, value, strict=True))


def test_hypervolume_of_one_point_is_its_rectangle() -> None:
    assert hypervolume([(100.0, 5.0)], 300.0) == pytest.approx(200.0 * 5.0)
    assert hypervolume([(400.0, 5.0)], 300.0) == 0.0  # past the reference TTFT: nothing


@pytest.mark.parametrize("seed", range(4))
def test_best_subset_equals_brute_force(seed: int) -> None:
    front = _staircase(9, seed)
    ref = 1100.0
    for k in range(1, 6):
        brute = max(hypervolume(list(subset), ref) for subset in itertools.combinations(front, k))
        assert best_subset_hypervolume(front, k, ref) == pytest.approx(brute, rel=1e-12)


def test_every_point_gives_the_whole_hypervolume() -> None:
    front = _staircase(30, 7)
    assert best_subset_hypervolume(front, 30, 1100.0) == pytest.approx(hypervolume(front, 1100.0), rel=1e-12)
    assert best_subset_hypervolume(front, 100, 1100.0) == pytest.approx(hypervolume(front, 1100.0), rel=1e-12)
