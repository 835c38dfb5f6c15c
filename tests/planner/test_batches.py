"""Any integer batch: the cost model is monotone in the batch for a fixed layout (what the interval bounds
of `planner.batches` rest on), and no deployment at any integer batch beats the exact front."""

from __future__ import annotations

import functools
import math
from typing import Any

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
from planner.sweep import AUTO_HV_TOL
from planner.sweep_result import GRID_S
from planner.templates import Candidate, CandidateSet, candidate_pools, kind_role, layout_key, planned, timed_plans
from tests.planner.small_scenarios import small_data

NAME = "qwen3-30b-4xh200"  # aggregated and disaggregated, attention DP 1 and 2, batches up to 48
# The TTFT grid `exact` certifies the front on (`planner.sweep`): a deployment less than a step faster than a front
# point may be covered by that point alone.
GRID_MS = GRID_S * 1e3


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


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
@pytest.mark.parametrize(("input_tokens", "output_tokens"), [(8192, 2), (2048, 16), (2048, 1024)])
def test_the_rate_falls_only_where_prompts_outpace_decode(engine: str, input_tokens: int, output_tokens: int) -> None:
    """What `batches._mixed_rate_bound` rests on, along integer batches 1-256 of every mixed layout (attention DP
    1 and 2, pipeline depth 1 and 2) of prefill-heavy workloads: the round and the sequences in service never
    fall; once prompts outpace decode they do at every larger batch; requests per second fall only at batches
    where prompts outpace decode, and do there for piggyback engines on the prefill-heavy workloads (the bound
    would be needlessly loose otherwise); prefill-first SGLang never flags it. The long-output workload checks
    that the rate does not fall before prompts outpace decode (the formulas allow it there only if a step's
    prompt tokens cost more than as many decode sequences would, which the bundled calibration does not give)."""
    data = small_data(NAME) | {"engine": engine,
                               "workload": {"input_tokens": input_tokens, "output_tokens": output_tokens}}
    data["slo"] = {}
    data["search"] = data["search"] | {"max_batch": 256, "pp": [1, 2]}
    resolved = scenario_from_data(data)
    falls = 0
    for pool in {layout_key(p): p for p in candidate_pools(resolved, "mixed")}.values():
        pools = [pool.model_copy(update={"batch": b}) for b in range(1, 257)]
        timings = timed_plans(planned(resolved, pools, "all", CandidateSet()), resolved, default_calibration())
        cycle, rate = (np.array([getattr(t, name) for t in timings]) for name in ("cycle_s", "requests_per_s"))
        in_service = np.array([t.plan.in_service for t in timings])
        outpace = np.array([t.prompts_outpace_decode for t in timings])
        assert np.all(np.diff(cycle) >= -1e-12 * cycle[:-1]) and np.all(np.diff(in_service) >= 0)
        assert not np.any(outpace[:-1] & ~outpace[1:]), layout_key(pool)
        fall = np.diff(rate) < -1e-12 * rate[:-1]
        assert not np.any(fall & ~outpace[1:]), (layout_key(pool), np.flatnonzero(fall & ~outpace[1:]))
        falls += int(fall.sum())
    if output_tokens <= 16:
        assert (falls > 0) == (engine != "sglang")


@pytest.mark.parametrize(("engine", "input_tokens", "output_tokens"), [("trtllm", 8192, 2), ("vllm", 2048, 1)])
def test_without_tolerance_the_front_holds_every_batch_where_prompts_outpace_decode(
        engine: str, input_tokens: int, output_tokens: int) -> None:
    """At `exact` resolution (batch tolerance 0, TTFT steps of 1 us) the certified front is the every-batch
    reference's, also where the rate falls with the batch (the high end's rate alone missed a batch by 5e-4 in
    the TRT-LLM case). `auto` may leave out a point whose window hides less hypervolume than its certificate's
    0.05% (vLLM's batch 11 here: 0.02% above batch 10's rate, 2.7 ms slower)."""
    from benchmarks.solver import closed_form_front
    from planner.templates import generate

    data = small_data(NAME) | {"engine": engine,
                               "workload": {"input_tokens": input_tokens, "output_tokens": output_tokens}}
    data["slo"] = {}
    data["search"] = data["search"] | {"max_batch": 64, "serving": ["aggregated"]}
    resolved, calibration = scenario_from_data(data), default_calibration()
    front = [s.point for s in solve(resolved, SolveSettings("cpsat", 120.0, resolution="exact")).front]
    reference = closed_form_front(resolved, generate(resolved, calibration, every_batch=True), calibration)
    assert reference
    for ttft_ms, value in reference:
        best = max((p.tokens_per_s_per_gpu for p in front if p.ttft_ms <= ttft_ms + GRID_MS), default=0.0)
        assert best >= value * (1 - 1e-9), (ttft_ms, value, best)
    # `auto` at batch tolerance 0, every point it needs: the hypervolume certificate it states holds against the
    # every-batch reference
    auto = solve(resolved, SolveSettings("cpsat", 120.0, batch_tolerance=0.0, points=None))
    top, coverage = auto.sweep.top_s * 1e3, auto.coverage
    ratio = _staircase([(s.point.ttft_ms, s.point.tokens_per_s_per_gpu) for s in auto.front], top) \
        / _staircase(reference, top)
    assert coverage is not None and 1 - AUTO_HV_TOL <= coverage.hypervolume_ratio_at_least <= ratio * (1 + 1e-9)


def _staircase(front: list[tuple[float, float]], top_ms: float) -> float:
    """Hypervolume (ms x tokens/s per GPU) of a front of (TTFT, rate) points rising with TTFT, up to `top_ms`."""
    points = sorted(p for p in front if p[0] < top_ms)
    ends = [t for t, _ in points[1:]] + [top_ms]
    return sum(rate * (end - ttft) for (ttft, rate), end in zip(points, ends, strict=True))


def assert_not_beaten(point: FrontPoint) -> None:
    best = max((p.tokens_per_s_per_gpu for p in front() if p.ttft_ms <= point.ttft_ms + GRID_MS), default=0.0)
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
    weak = type(full)(full.ttft, full.best * 0.3)  # a weaker front leaves rows unbeaten to compare
    checked = 0
    for size in sorted({d.gpus for d in options.decode}):
        rows = _Decodes.of_options([d for d in options.decode if d.gpus == size])
        every, _, _ = _boxes(options, fills, size, rows, float("inf"), weak, 1.0)
        best, _, _ = _boxes(options, _best_per_size(fills), size, rows, float("inf"), weak, 1.0)
        assert not (every & ~best).any()
        checked += int(every.sum())
    assert checked > 0


def test_reach_answers_as_the_front_lookup() -> None:
    """`_Front.reach(v)` is where the staircase first reaches v: at(t) < v exactly when t x (1 + 1e-12) is
    below it (ties, values between and beyond the corners, an empty front)."""
    from planner.batches import _Front

    rng = np.random.default_rng(1)
    ttft = np.sort(np.round(rng.uniform(0.0, 1.0, 300), 2))
    best = np.maximum.accumulate(np.round(rng.uniform(0.0, 100.0, 300), 1))
    corners = np.concatenate(([True], best[1:] > best[:-1]))
    for front in (_Front(ttft[corners], best[corners]), _Front(np.zeros(0), np.zeros(0))):
        times = np.concatenate([ttft, ttft * (1 + 1e-12), ttft * (1 - 1e-12), rng.uniform(-0.1, 1.1, 500)])
        values = np.concatenate([best, best * (1 + 1e-12), rng.uniform(1e-3, 120.0, len(times) - len(best) * 2)])
        assert np.array_equal(front.at(times) < values, times * (1 + 1e-12) < front.reach(values))


def _boxes_unscreened(options, fills, size, rows, cap, front, factor, beside=None):  # type: ignore[no-untyped-def]
    """`_boxes` as it was before its screens: every (fill, row, count) entry evaluated (`beside`: the fill
    instances beside each decode count, fills x counts; None: the exact packer's)."""
    from planner.formulation.pairs import pair_figures
    from planner.formulation.units import most_beside

    per_row, per_fill = np.zeros(len(rows.most), dtype=bool), np.zeros(fills.gpus.size, dtype=bool)
    counts = np.arange(1, int(rows.most.max()) + 1)
    beside = most_beside(fills.gpus, size, counts, options.domains) if beside is None else beside[:, :counts.size]
    most = np.minimum(fills.most[:, None], beside)
    capacity = np.where(most >= 1, fills.capacity[:, None] * most, np.nan)[None]
    fallback = min(options.kv_transfer_s.values())
    transfer = np.array([options.kv_transfer_s.get((int(g), size), fallback) for g in fills.gpus])[None, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ttft, _ = pair_figures(capacity, fills.fill[None, :, None], transfer, rows.slots_ttft[:, None, None] * counts,
                               rows.away_ttft[:, None, None], options.cohort_fraction)
    ok = ((most >= 1)[None] & (counts[None, None, :] <= rows.most[:, None, None]) & np.isfinite(ttft)
          & (ttft <= cap * (1 + 1e-12)))
    r, f, c = np.nonzero(ok)
    with np.errstate(divide="ignore", invalid="ignore"):
        _, rate = pair_figures(capacity[0, f, c], fills.fill[f], transfer[0, f, 0], rows.slots_rate[r] * counts[c],
                               rows.away_rate[r], options.cohort_fraction)
    value = options.output_tokens * rate
    unbeaten = front.at(ttft[r, f, c]) < value * factor
    per_row[r[unbeaten]] = True
    per_fill[f[unbeaten]] = True
    return per_row, per_fill, (ttft[r, f, c][unbeaten], value[unbeaten])


@pytest.mark.parametrize("count_run", [1.25, 3.0])
def test_the_screens_of_the_pair_bounds_change_no_answer(count_run: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_boxes` skips (fill, count) columns whose fill plus transfer is past the cap or whose capacity the
    front beats there, entries whose capacity the front beats at their TTFT bound, and runs of decode counts
    whose bound the front beats (at COUNT_RUN 3, runs 1-3 and 4-12): the
    rows, fills and bounds it returns are those of evaluating every entry, bit for bit, at several fronts
    and caps."""
    import planner.batches
    from planner.batches import _boxes, _Decodes, _front, _optimistic_fills

    monkeypatch.setattr(planner.batches, "COUNT_RUN", count_run)

    result = solve(scenario(), SolveSettings("cpsat", 60.0))
    options = result.options
    assert options is not None
    fills = _optimistic_fills(options, [])
    full = _front(options, scenario())
    found = 0
    median = float(np.median(full.ttft))
    for scale, cap in ((0.3, float("inf")), (0.8, float("inf")), (1.0, float("inf")), (0.5, median), (0.9, 1e-3)):
        front = type(full)(full.ttft, full.best * scale)
        for size in sorted({d.gpus for d in options.decode}):
            rows = _Decodes.of_options([d for d in options.decode if d.gpus == size])
            got, want = _boxes(options, fills, size, rows, cap, front, 0.99), \
                _boxes_unscreened(options, fills, size, rows, cap, front, 0.99)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            assert got[2][0].tobytes() == want[2][0].tobytes() and got[2][1].tobytes() == want[2][1].tobytes()
            found += got[2][0].size
    assert found > 0


def test_the_cheap_bounds_alone_certify_the_same_front(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rounds past the time for the full bounds take the cheap ones (sound, looser) and split more intervals:
    the front is the same, certified over every integer batch (it was left on the grid's batches, labelled
    optimal, where batches beyond the grid beat it by up to 39% on 48 GB200 racks)."""
    import planner.batches

    full = planner.batches._alive
    monkeypatch.setattr(planner.batches, "_alive",
                        lambda *args, **kwargs: full(*args, **{**kwargs, "full_until": -math.inf}))
    cheap = solve(scenario(), SolveSettings("cpsat", 120.0, resolution="exact"))
    assert cheap.batches.certified
    got = [value for s in cheap.front for value in (s.point.ttft_ms, s.point.tokens_per_s)]
    assert got == pytest.approx([value for p in front() for value in (p.ttft_ms, p.tokens_per_s)])


def test_a_scenario_nothing_timed_deploys_in_is_certified_when_no_bound_is_left() -> None:
    """No timed batch meets a 10 us TTFT SLO, so nothing untimed can (the smallest batches are timed): the
    search certifies that without a round (it returned 'not certified' with no bound, which read as the grid
    only, cut by the time limit)."""
    import time

    from planner.batches import refine
    from planner.templates import generate

    data = small_data(NAME)
    data["slo"] = {"ttft_ms": 0.01}
    resolved = scenario_from_data(data)
    _, coverage = refine(resolved, default_calibration(), generate(resolved, default_calibration()),
                         time.perf_counter() + 60.0)
    assert coverage.certified and not coverage.open_ttft.size and coverage.rounds == 0


def test_the_cheap_bounds_of_no_fill_option_are_none() -> None:
    from planner.batches import _bucketed, _Fills

    empty = _Fills(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))
    assert _bucketed(empty, 16).gpus.size == 0  # it raised in the unpacking of no runs


class _FixedPacking:
    """Fill instances beside each decode count, given (a stand-in for the exact packer)."""

    def __init__(self, beside: np.ndarray) -> None:
        self.beside = beside

    def most_beside(self, size_p: np.ndarray, size_d: int, counts: np.ndarray, domains: object) -> np.ndarray:
        return self.beside[:, :counts.size]


def _random_bounds_case(rng: np.random.Generator, fills: Any, n_rows: int, n: int, sizes: tuple[int, ...],
                        full_row: bool) -> tuple[Any, Any, np.ndarray, Any, float] | None:
    """Random decode rows of one size (pieces: fewer sequences for TTFT than for the rate; rows allowing fewer
    instances than a run's top; `full_row`: the first allows n), a packing (no fill instance beside many decode
    ones), options with a KV transfer per fill size, a front drawn from the unscreened bounds and a TTFT cap:
    a case for `_boxes` (None: no bound to draw a front from)."""
    from types import SimpleNamespace

    from planner.batches import _Decodes, _Front

    slots = rng.integers(1, 64, n_rows).astype(float)
    away = rng.uniform(1, 40, n_rows)
    rows = _Decodes(slots, away, slots + rng.integers(0, 64, n_rows), away * rng.uniform(0.5, 1, n_rows),
                    rng.integers(1, n + 1, n_rows))
    if full_row:
        rows.most[0] = n
    beside = np.maximum(0, rng.integers(3, 8, (fills.gpus.size, 1))
                        - (np.arange(1, n + 1)[None, :] * rng.uniform(0.001, 0.1, (fills.gpus.size, 1))).astype(int))
    options = SimpleNamespace(shared_domains=True, domains=None,
                              kv_transfer_s={(size, 1): rng.uniform(0, 0.05) for size in sizes},
                              output_tokens=int(rng.integers(16, 2048)), cohort_fraction=float(rng.uniform(0, 1)))
    _, _, (ttft, value) = _boxes_unscreened(options, fills, 1, rows, np.inf, _Front(np.zeros(0), np.zeros(0)), 1.0,
                                            beside)
    if not ttft.size:
        return None
    pick = rng.choice(ttft.size, min(20, ttft.size), replace=False)
    order = np.argsort(ttft[pick])
    front = _Front(ttft[pick][order] * rng.uniform(0.8, 1.2),
                   np.maximum.accumulate(value[pick][order] * rng.uniform(0.9, 1.1)))
    return options, rows, beside, front, float(rng.choice([np.inf, np.median(ttft)]))


def test_count_runs_change_no_answer_on_random_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_boxes` with decode counts in runs (1.25x to 3x, chunks of 50 entries to 2M) against every count
    evaluated, bit for bit, on random fills, decode rows and packings (`_random_bounds_case`)."""
    import planner.batches
    from planner.batches import _boxes, _Fills

    rng = np.random.default_rng(7)
    found = 0
    for _ in range(150):
        monkeypatch.setattr(planner.batches, "CHUNK", int(rng.choice([50, 200, 2_000_000])))
        monkeypatch.setattr(planner.batches, "COUNT_RUN", float(rng.choice([1.25, 2.0, 3.0])))
        n_fills, n_rows, n = int(rng.integers(1, 6)), int(rng.integers(1, 8)), int(rng.integers(1, 300))
        fills = _Fills(np.ones(n_fills, dtype=np.int64), rng.integers(0, 5, n_fills), rng.uniform(1, 300, n_fills),
                       rng.uniform(0.05, 2, n_fills))
        case = _random_bounds_case(rng, fills, n_rows, n, (1,), full_row=True)
        if case is None:
            continue
        options, rows, beside, front, cap = case
        got = _boxes(options, fills, 1, rows, cap, front, 0.99, _FixedPacking(beside))  # type: ignore[arg-type]
        want = _boxes_unscreened(options, fills, 1, rows, cap, front, 0.99, beside)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert got[2][0].tobytes() == want[2][0].tobytes() and got[2][1].tobytes() == want[2][1].tobytes()
        found += want[2][0].size
    assert found > 0


def test_leaving_out_dominated_fills_changes_no_row_and_no_bound_reach() -> None:
    """`_boxes(rows_only=True)` leaves out, at each count, the fills another dominates (two sizes with their
    own transfers here): the same decode rows stay open, and each bound it drops is matched by one it keeps
    (no more TTFT, no less tokens/s), so what the open intervals could reach is the same."""
    from planner.batches import _boxes, _Fills

    rng = np.random.default_rng(17)
    dropped = 0
    for _ in range(150):
        n_fills, n_rows, n = int(rng.integers(2, 12)), int(rng.integers(1, 8)), int(rng.integers(1, 200))
        fills = _Fills(rng.choice([1, 2], n_fills).astype(np.int64), rng.integers(0, 5, n_fills),
                       rng.uniform(1, 300, n_fills), rng.uniform(0.05, 2, n_fills))
        case = _random_bounds_case(rng, fills, n_rows, n, (1, 2), full_row=False)
        if case is None:
            continue
        options, rows, beside, front, cap = case
        every = _boxes(options, fills, 1, rows, cap, front, 0.99, _FixedPacking(beside))  # type: ignore[arg-type]
        kept = _boxes(options, fills, 1, rows, cap, front, 0.99, _FixedPacking(beside),  # type: ignore[arg-type]
                      rows_only=True)
        assert np.array_equal(every[0], kept[0])
        (t_all, v_all), (t_kept, v_kept) = every[2], kept[2]
        for t, v in zip(t_all.tolist(), v_all.tolist(), strict=True):
            assert np.any((t_kept <= t * (1 + 1e-12)) & (v_kept >= v * (1 - 1e-12))), (t, v)
        dropped += t_all.size - t_kept.size
    assert dropped > 0


def test_a_run_is_not_closed_by_its_top_rounding_below_its_other_counts() -> None:
    """Where fill capacity binds, the computed rate wobbles by an ulp as the sequences grow (here count 11 or
    12 computes above 13), and a front at count 13's tokens/s closed the run 11-13 though a count of it is
    unbeaten (found by a helper's review; the run's bound now carries SCREEN_SLACK)."""
    from types import SimpleNamespace

    from planner.batches import _boxes, _Decodes, _Fills, _Front
    from planner.formulation.pairs import pair_figures

    cap, fill, transfer, away, cohort, slots, n, tokens = 345.977, 0.365, 0.02, 0.79, 0.26, 284.0, 15, 1734
    options = SimpleNamespace(shared_domains=False, kv_transfer_s={(1, 1): transfer}, output_tokens=tokens,
                              cohort_fraction=cohort)
    counts = np.arange(1, n + 1)
    _, rate = pair_figures(np.full(n, cap), fill, transfer, slots * counts, away, cohort)
    value = rate * tokens
    fills = _Fills(np.array([1]), np.array([1]), np.array([cap]), np.array([fill]))
    rows = _Decodes(np.array([slots]), np.array([away]), np.array([slots]), np.array([away]), np.array([n]))
    for top in range(2, n + 1):  # a front at each count's tokens/s: exactly the counts computed above it stay open
        front = _Front(np.array([0.0]), np.array([value[top - 1] * 0.99]))
        _, _, (_, found) = _boxes(options, fills, 1, rows, np.inf, front, 0.99)  # type: ignore[arg-type]
        assert found.tobytes() == value[value * 0.99 > value[top - 1] * 0.99].tobytes()


@pytest.mark.parametrize("ticks", [1, 4, 6, 8, 9, 10])  # 6, 8, 10: cut after a split, before the next front
def test_a_cut_search_resumed_ends_where_an_uncut_one_does(ticks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut by its deadline (a clock that ticks once a reading) and run again with no deadline, the search goes
    on from the intervals it left open and certifies the same front (tolerance 0: every interval closed)."""
    import itertools

    import planner.batches as batches
    from planner.batches import _front, batch_search
    from planner.formulation.units import first_cap
    from planner.templates import generate

    resolved, calibration = scenario(), default_calibration()
    whole = batch_search(resolved, calibration, generate(resolved, calibration))
    options, coverage = whole.run(math.inf)
    assert coverage.certified and coverage.rounds >= 2
    search = batch_search(resolved, calibration, generate(resolved, calibration))
    clock = itertools.count()
    monkeypatch.setattr(batches.time, "perf_counter", lambda: float(next(clock)))
    _, cut = search.run(float(ticks))
    monkeypatch.undo()
    assert cut.cut_by_time and not cut.certified and cut.open_ttft.size and search.resumable
    # the front the resumed rounds start from holds every deployment timed so far (those of a split after the
    # last front included, whose tables the cut search built for its options)
    search.front = _front(search.options, resolved, search.front, search.tables)
    everything = _front(search.options, resolved)
    assert search.front.ttft.tolist() == everything.ttft.tolist()
    assert search.front.best.tolist() == everything.best.tolist()
    resumed, again = search.run(math.inf)
    assert again is cut and again.certified and not again.cut_by_time and not again.open_ttft.size
    assert not search.resumable
    exact, again_exact = _front(options, resolved), _front(resumed, resolved)  # every timed deployment's staircase
    assert again_exact.ttft.tolist() == pytest.approx(exact.ttft.tolist(), rel=1e-9)
    assert again_exact.best.tolist() == pytest.approx(exact.best.tolist(), rel=1e-9)
    # no more batches timed than uncut: the resumed rounds start from a front with every timed deployment
    assert again.timed == coverage.timed
    cap = first_cap(resolved)
    assert resumed.unit_tables[cap] is not None and options.unit_tables[cap] is not None


def test_a_solve_whose_batch_search_is_cut_at_once_resumes_it_after_the_sweep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With no share of the limit for the batch search, it is cut before its first split, the sweep takes well
    under the time left, and the search goes on after it: certified, the exact front."""
    import importlib

    monkeypatch.setattr(importlib.import_module("planner.solve"), "BATCH_SHARE", 0.0)
    result = solve(scenario(), SolveSettings("cpsat", 120.0, resolution="exact"))
    assert result.batches.certified and not result.timed_out and result.batches.rounds >= 1
    assert [x for p in result.front for x in (p.point.ttft_ms, p.point.tokens_per_s_per_gpu)] == pytest.approx(
        [x for p in front() for x in (p.ttft_ms, p.tokens_per_s_per_gpu)], rel=1e-9)


def test_a_resumed_solve_keeps_the_first_sweep_where_the_second_does_not_finish(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep run again after a resumed search stopped by its time limit: the first sweep's front, options
    and cut coverage come back together (the first finished)."""
    import importlib
    from dataclasses import replace

    solve_module = importlib.import_module("planner.solve")
    monkeypatch.setattr(solve_module, "BATCH_SHARE", 0.0)
    sweeps: list[object] = []
    real = solve_module._sweep

    def cut_second(*args: object) -> object:
        result = real(*args)
        sweeps.append(result)
        return result if len(sweeps) == 1 else replace(result, termination="time_limit")

    monkeypatch.setattr(solve_module, "_sweep", cut_second)
    result = solve(scenario(), SolveSettings("cpsat", 120.0, resolution="exact"))
    assert len(sweeps) == 2 and result.sweep is sweeps[0]
    assert result.batches.cut_by_time and not result.batches.certified and result.termination == "time_limit"
    assert result.batches.open_ttft.size  # the cut's open bounds, in the points' gaps


def test_a_cut_search_resumes_from_a_front_of_every_deployment_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut at each point of its rounds (a clock that ticks once a reading), a search whose cut came after a
    split has built its options' tables for the sweep (`TableParts.leave_on`); the front it resumes from takes
    them (it missed them, and timed batches the whole front would have closed)."""
    import itertools

    import planner.batches as batches
    from planner.batches import _front, batch_search
    from planner.templates import generate

    resolved = scenario_from_data(small_data("llama-8b-dense-6xh100-disaggregated"))
    calibration = default_calibration()
    after_split = 0
    for ticks in range(1, 40):
        search = batch_search(resolved, calibration, generate(resolved, calibration))
        clock = itertools.count()
        monkeypatch.setattr(batches.time, "perf_counter", lambda clock=clock: float(next(clock)))
        search.run(float(ticks))
        monkeypatch.undo()
        if not search.resumable:
            continue
        after_split += bool(search.tables.pending)
        resumed = _front(search.options, resolved, search.front, search.tables)
        everything = _front(search.options, resolved)
        at = np.union1d(resumed.ttft, everything.ttft)
        assert resumed.at(at).tolist() == pytest.approx(everything.at(at).tolist(), rel=1e-6), ticks
    assert after_split


@pytest.mark.slow  # every integer batch of every layout timed for the reference: about a minute on 2 cores
@pytest.mark.parametrize(("engine", "input_tokens", "output_tokens"), [("trtllm", 8192, 2), ("vllm", 2048, 1)])
def test_prefill_bound_rounds_stay_within_the_tolerance(engine: str, input_tokens: int, output_tokens: int) -> None:
    """Where prompts outpace decode (long prompts, a token or two out), a mixed pool's requests per second fall
    slowly as the batch grows past saturation (each mixed step carries more decode work; 1e-4 per sequence of
    batch, session 31), which the interval bounds allow for (`batches._mixed_rate_bound`, session 33). The
    certified front holds every integer batch of the every-batch reference within the batch tolerance."""
    from benchmarks.solver import closed_form_front
    from planner.solve import BATCH_TOLERANCE
    from planner.templates import generate

    resolved = scenario_from_data({
        "schema_version": 1, "name": "prefill-bound", "model": "qwen3-30b", "engine": engine,
        "cluster": {"system": "h200-sxm", "gpus": 8},
        "workload": {"input_tokens": input_tokens, "output_tokens": output_tokens}})
    calibration = default_calibration()
    front = [s.point for s in solve(resolved, SolveSettings("cpsat", 120.0)).front]
    reference = closed_form_front(resolved, generate(resolved, calibration, every_batch=True), calibration)
    assert reference
    for ttft_ms, value in reference:
        best = max((p.tokens_per_s_per_gpu for p in front if p.ttft_ms <= ttft_ms * (1 + 1e-9)), default=0.0)
        assert best * (1 + BATCH_TOLERANCE) >= value * (1 - 1e-9), (ttft_ms, value, best)
