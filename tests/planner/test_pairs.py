"""The pair tables' shortcuts give what the plain computation gives: `PairColumns` (figures kept across a
sweep's screens) keeps what a `PairTable` of the same configurations keeps, and `PairTable.best_ratio`
answers by its staircase as by the argmax over the table."""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

from costmodel.calibration import default_calibration
from planner.formulation.options import DecodeOption, DeploymentOptions, PrefillOption, deployment_options
from planner.formulation.pairs import ConfigArrays, PairColumns, PairTable
from planner.scenario import scenario_from_data
from planner.templates import generate
from tests.planner.small_scenarios import small_data


@functools.cache
def options() -> DeploymentOptions:
    data = small_data("gpt-oss-20b-4xb200-sglang")
    data["search"] = {**data.get("search", {}), "gpu_accounting": "used"}
    scenario = scenario_from_data(data)
    calibration = default_calibration()
    return deployment_options(scenario, generate(scenario, calibration), calibration)


def _configs() -> tuple[list[tuple[PrefillOption, int]], list[tuple[DecodeOption, int]]]:
    opts = options()
    prefill = [(p, n) for p in opts.prefill for n in (1, 2, 3)]
    decode = [(d, n) for d in opts.decode for n in (1, 2)]
    return prefill, decode


@pytest.mark.parametrize("limit", [10**9, 40])  # 40 pairs: the columns are overwritten between questions
def test_pair_columns_keep_what_a_pair_table_of_the_same_configurations_keeps(limit: int) -> None:
    prefill, decode = _configs()
    columns = PairColumns.of(options(), ConfigArrays.of(prefill, []), max(limit, len(prefill)))
    assert columns is not None
    rng = random.Random(3)
    for _ in range(25):
        rows = np.array(sorted(rng.sample(range(len(prefill)), rng.randint(1, len(prefill)))), dtype=np.intp)
        asked = rng.sample(decode, rng.randint(1, min(len(decode), max(1, columns.limit // len(prefill)))))
        eps, q = rng.choice([None, 0.05, 0.2, 1.0]), rng.choice([0.0, 10.0, 100.0, 400.0])
        held = columns.keep(rows, asked, eps, q, 1e-6)
        assert held is not None
        want = PairTable(options(), [prefill[i] for i in rows], asked).keep(eps, q, 1e-6)
        assert np.array_equal(held[0], want[0]) and np.array_equal(held[1], want[1])


def test_best_ratio_by_its_staircase_is_the_argmax() -> None:
    prefill, decode = _configs()
    caps = [None, 0.0, *np.linspace(0.01, 2.0, 40).tolist()]
    table = PairTable(options(), prefill, decode)
    first = [table.best_ratio(eps) for eps in caps]  # the first question by argmax, the others by staircase
    fresh = [PairTable(options(), prefill, decode).best_ratio(eps) for eps in caps]  # each by argmax
    assert first == fresh and any(pick is not None for pick in fresh) and None in fresh
    tied = PairTable(options(), prefill + prefill, decode)  # every pair twice: the first in row order wins
    assert [tied.best_ratio(eps) for eps in caps] == fresh
