"""Any integer batch: the cost model is monotone in the batch for a fixed layout (what the interval bounds
of `planner.batches` rest on), and no deployment at any integer batch beats the exact front."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.calibration import default_calibration
from costmodel.resolve import ResolvedScenario
from planner.deployment import aggregated_point, disaggregated_point
from planner.pareto import FrontPoint
from planner.placement import cluster_domains, fits
from planner.scenario import scenario_from_data
from planner.solve import SolveSettings, solve
from planner.templates import Candidate, CandidateSet, candidate_pools, kind_role, layout_key, planned, timed_plans
from tests.planner.small_scenarios import small_data

NAME = "qwen3-30b-4xh200"  # aggregated and disaggregated, attention DP 1 and 2, batches up to 48


@functools.cache
def scenario() -> ResolvedScenario:
    return scenario_from_data(small_data(NAME))


@functools.cache
def front() -> tuple[FrontPoint, ...]:
    return tuple(s.point for s in solve(scenario(), SolveSettings("cpsat", 120.0, resolution="exact")).front)


def timed(kind: str, pool_index: int, batch: int) -> Candidate | None:
    role, turns = kind_role(kind)  # type: ignore[arg-type]
    layouts = list({layout_key(p): p for p in candidate_pools(scenario(), role)}.values())
    pool = layouts[pool_index % len(layouts)].model_copy(update={"batch": batch})
    plans = planned(scenario(), [pool], turns, CandidateSet())
    return Candidate(pool, timed_plans(plans, scenario(), default_calibration())[0]) if plans else None


@pytest.mark.parametrize("kind", ["mixed", "prefill", "decode"])
def test_figures_are_monotone_in_the_batch(kind: str) -> None:
    """Step time grows and time per sequence does not, so along integer batches TTFT, TPOT and fill
    latency never fall and requests per second per instance never fall."""
    role, turns = kind_role(kind)  # type: ignore[arg-type]
    for pool in {layout_key(p): p for p in candidate_pools(scenario(), role)}.values():
        pools = [pool.model_copy(update={"batch": b}) for b in range(1, 129)]
        timings = timed_plans(planned(scenario(), pools, turns, CandidateSet()), scenario(), default_calibration())
        for name in ("ttft_s", "tpot_s", "requests_per_s"):
            values = np.array([getattr(t, name) for t in timings])
            assert np.all(np.diff(values) >= -1e-12 * np.abs(values[:-1])), (kind, layout_key(pool), name)


def assert_not_beaten(point: FrontPoint) -> None:
    best = max((p.tokens_per_s_per_gpu for p in front() if p.ttft_ms <= point.ttft_ms * (1 + 1e-12)), default=0.0)
    assert best >= point.tokens_per_s_per_gpu * (1 - 1e-9), (point.ttft_ms, point.tokens_per_s_per_gpu)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.integers(0, 50), st.integers(1, 48), st.integers(0, 50), st.integers(1, 16), st.integers(1, 4),
       st.integers(1, 4))  # batches up to the scenario's search.max_batch (48)
def test_no_deployment_at_any_batch_beats_the_front(layout_p: int, batch_d: int, layout_d: int, batch_p: int,
                                                   count_p: int, count_d: int) -> None:
    """Random layouts at random (mostly not powers of two) batches, evaluated exactly: none is better than
    the front at its TTFT."""
    slo = scenario().scenario.slo
    mixed = timed("mixed", layout_d, batch_d)
    if mixed is not None and (slo.tpot_ms is None or mixed.timing.tpot_s * 1e3 <= slo.tpot_ms):
        point = aggregated_point(scenario(), mixed)
        if point is not None:
            assert_not_beaten(point)
    prefill, decode = timed("prefill", layout_p, batch_p), timed("decode", layout_d, batch_d)
    if prefill is None or decode is None or not fits([(prefill.gpus, count_p), (decode.gpus, count_d)],
                                                     cluster_domains(scenario())):
        return
    point = disaggregated_point(scenario(), default_calibration(), [(prefill, count_p)], decode, count_d)
    if point is not None and (slo.tpot_ms is None or point.tpot_ms <= slo.tpot_ms):
        assert_not_beaten(point)


def test_the_front_kept_as_corners_answers_every_lookup_as_the_whole_staircase() -> None:
    """`_front` keeps only the entries where the best throughput rises: `at` is unchanged for any query,
    ties in TTFT and queries below the first entry included."""
    from planner.batches import _Front

    rng = np.random.default_rng(0)
    ttft = np.sort(np.round(rng.uniform(0.0, 1.0, 400), 2))  # rounding makes ties
    best = np.maximum.accumulate(rng.uniform(0.0, 100.0, 400))
    corners = np.concatenate(([True], best[1:] > best[:-1]))
    whole, kept = _Front(ttft, best), _Front(ttft[corners], best[corners])
    queries = np.concatenate([ttft, ttft * (1 + 1e-9), ttft * (1 - 1e-9), [-1.0, 0.0, 2.0], rng.uniform(0, 1, 1000)])
    assert np.array_equal(whole.at(queries), kept.at(queries))


def test_screening_against_the_best_fill_of_each_size_drops_no_unbeaten_row() -> None:
    """The best fill of a size (most instances, largest capacity, shortest fill) bounds every fill of that
    size, so a decode row it cannot lift over the front no real fill lifts either (`_alive`'s screens)."""
    from planner.batches import _best_per_size, _boxes, _Decodes, _front, _optimistic_fills

    result = solve(scenario(), SolveSettings("cpsat", 60.0))
    options = result.options
    assert options is not None
    fills = _optimistic_fills(options, [])
    full = _front(options, scenario())
    weak = type(full)(full.ttft, full.best * 0.8)  # a weaker front leaves rows unbeaten to compare
    checked = 0
    for size in sorted({d.gpus for d in options.decode}):
        rows = _Decodes.of_options([d for d in options.decode if d.gpus == size])
        every, _, _ = _boxes(options, fills, size, rows, float("inf"), weak, 1.0)
        best, _, _ = _boxes(options, _best_per_size(fills), size, rows, float("inf"), weak, 1.0)
        assert not (every & ~best).any()
        checked += int(every.sum())
    assert checked > 0
