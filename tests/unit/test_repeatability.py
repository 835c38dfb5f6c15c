"""`benchmarks.repeatability` by hand: each run against the mean of the others, copies apart, versions apart."""

from __future__ import annotations

import pytest

from benchmarks.measurements import Measurement
from benchmarks.repeatability import output_pairs, repeatability


def _run(ttft: float, tpot: float, version: str = "1.0", concurrency: int = 8, name: str = "a",
         osl: int = 128) -> Measurement:
    return Measurement(id=f"{name}-{ttft}-{version}", model="m", system="h200-sxm", engine="vllm",
                       engine_version=version, serving="aggregated", isl=1024, osl=osl, concurrency=concurrency,
                       scenario={"name": name, "engine": "vllm",
                                 "workload": {"input_tokens": 1024, "output_tokens": osl}},
                       layout={"pools": [{"tp": 8}]}, ttft_ms=ttft, tpot_ms=tpot, assumptions=())


def test_each_run_is_compared_with_the_mean_of_the_others() -> None:
    rows = [_run(100.0, 10.0, name="a"), _run(200.0, 10.0, name="b"), _run(300.0, 13.0, name="c")]
    found = repeatability(rows, by_version=False)
    assert (found.configurations, found.runs, found.copies) == (1, 3, 0)
    # 100 against (200 + 300) / 2 = 250: 0.6; 200 against 200: 0; 300 against 150: 1.0
    assert found.ttft_ape.tolist() == pytest.approx([0.6, 0.0, 1.0])
    assert found.tpot_ape.tolist() == pytest.approx([1 - 10 / 11.5, 1 - 10 / 11.5, 13 / 10 - 1])


def test_copies_other_loads_and_other_versions_are_kept_apart() -> None:
    copies = [_run(100.0, 10.0, name="a"), _run(100.0 * (1 + 1e-9), 10.0, name="b")]
    other_load = [_run(150.0, 12.0, concurrency=16)]
    versions = [_run(120.0, 11.0, version="2.0", name="c"), _run(180.0, 11.0, version="2.0", name="d")]
    across = repeatability(copies + other_load + versions, by_version=False)
    assert (across.configurations, across.runs, across.copies) == (1, 3, 0)  # a's copy b counts once
    within = repeatability(copies + other_load + versions, by_version=True)
    assert (within.configurations, within.runs, within.copies) == (1, 2, 1)
    assert within.ttft_ape.tolist() == pytest.approx([1 - 120 / 180, 180 / 120 - 1])


def test_output_pairs_are_runs_of_one_build_alike_but_for_output_length() -> None:
    rows = [_run(100.0, 10.0, osl=128), _run(150.0, 12.0, osl=256, name="b"), _run(80.0, 14.0, osl=512, name="c"),
            _run(300.0, 12.0, osl=256, concurrency=16), _run(200.0, 12.0, osl=256, version="2.0"),
            _run(90.0, 10.0, osl=128, name="d"), _run(150.0 * (1 + 1e-9), 12.0, osl=256, name="e")]
    found = output_pairs(rows)  # e, a copy of b, pairs with none
    # one build, concurrency 8: 128 (100, 90), 256 (150) and 512 (80) out; the other load and build pair with none
    assert sorted(found.pairs) == [(0, 1), (0, 2), (1, 2), (5, 1), (5, 2)]
    spreads = [0.5, 0.25, 150 / 80 - 1, 150 / 90 - 1, 90 / 80 - 1]
    assert sorted(found.measured.tolist()) == pytest.approx(sorted(spreads))
