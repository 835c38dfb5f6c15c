"""Disaggregated serving with a separate midfill pool: the fill stations' closed form by hand, the split
of one pool into two that reproduces it, and the checks on layouts with a midfill pool."""

from __future__ import annotations

import functools

import pytest

from costmodel.calibration import default_calibration
from costmodel.errors import ScenarioError
from costmodel.evaluate import evaluate
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from costmodel.serving import FillStation, closed_loop_wait_s, disaggregated_serving, kv_transfer_s, split_serving
from planner.scenario import scenario_from_data
from planner.templates import Candidate, generate
from tests.planner.small_scenarios import small_data

NAME = "qwen3-30b-8xh100-agent-midfill-pool"


@functools.cache
def resolved() -> ResolvedScenario:
    return scenario_from_data(small_data(NAME))


@functools.cache
def candidates() -> dict[str, list[Candidate]]:
    return dict(generate(resolved(), default_calibration()).by_role)


def test_two_fill_stations_by_hand() -> None:
    calibration, engine = default_calibration(), resolved().scenario.engine
    first, midfill, decode = candidates()["first"][0], candidates()["midfill"][0], candidates()["decode"][-1]
    f1 = 1.0 / 10  # ten turns per session: one in ten fills is a first turn
    ttft, tpot, rate, parts = split_serving(
        [FillStation(first.timing, 1, f1), FillStation(midfill.timing, 3, 1 - f1)], decode.timing, 2,
        calibration, engine)
    # by hand: share-weighted fill and transfer, capacity of the pool that saturates first
    transfer = sum(share * kv_transfer_s(c.timing.plan.ctx, decode.timing.plan.ctx, c.timing.plan.request,
                                         calibration) for c, share in ((first, f1), (midfill, 1 - f1)))
    fill = f1 * first.timing.ttft_s + (1 - f1) * midfill.timing.ttft_s
    capacity = min(1 * first.requests_per_s / f1, 3 * midfill.requests_per_s / (1 - f1))
    concurrency = 2 * decode.pool.batch
    elsewhere = transfer + (decode.timing.plan.request.output - 1) * decode.timing.tpot_s
    cohort = calibration.engine(engine).cohort_fraction
    at_fill = closed_loop_wait_s(concurrency, capacity, fill, elsewhere, cohort)
    assert ttft == pytest.approx(at_fill + transfer, rel=1e-12)
    assert rate == pytest.approx(concurrency / (at_fill + elsewhere), rel=1e-12)
    assert tpot == decode.timing.tpot_s
    assert parts == pytest.approx({"fill": fill, "queue": at_fill - fill, "kv_transfer": transfer}, rel=1e-12)


def test_one_pool_split_in_proportion_is_the_same_pool() -> None:
    calibration, engine = default_calibration(), resolved().scenario.engine
    prefill, decode = candidates()["prefill"][0], candidates()["decode"][-1]
    whole = disaggregated_serving(prefill.timing, decode.timing, 4, 2, calibration, engine)
    halves = split_serving([FillStation(prefill.timing, 1, 0.25), FillStation(prefill.timing, 3, 0.75)],
                           decode.timing, 2, calibration, engine)
    assert halves[:3] == pytest.approx(whole[:3], rel=1e-12)


LAYOUT = {"serving": "disaggregated", "pools": [
    {"role": "prefill", "replicas": 1, "tp": 2, "moe_ep": 2, "batch": 1},
    {"role": "midfill", "replicas": 1, "tp": 1, "batch": 1, "kv_store": True},
    {"role": "decode", "replicas": 1, "tp": 2, "moe_tp": 2, "batch": 1}]}


def test_a_midfill_layout_evaluates_and_its_pools_serve_their_turns() -> None:
    prediction = evaluate(resolved(), Layout.model_validate(LAYOUT))
    assert prediction.feasible and prediction.kv_tiers is not None
    fills = {pool["role"]: pool["fill"]["step_ms"] for pool in prediction.pools if "fill" in pool}
    assert set(fills) == {"prefill", "midfill"}
    assert prediction.kv_tiers["hit_rates"]["store"] > 0.0  # the midfill pool holds the sessions' contexts


def test_midfill_pools_need_sessions_and_a_store_needs_one() -> None:
    with pytest.raises(ValueError, match="roles"):
        Layout.model_validate({"serving": "disaggregated", "pools": [LAYOUT["pools"][1], LAYOUT["pools"][2]]})
    data = small_data(NAME)
    no_sessions = scenario_from_data({**data, "workload": {"input_tokens": 500, "output_tokens": 200}})
    with pytest.raises(ScenarioError, match="midfill pool runs the turns after"):
        evaluate(no_sessions, Layout.model_validate(LAYOUT))
    no_store = scenario_from_data({**data, "cluster": {"system": "h100-sxm", "gpus": 8}})
    with pytest.raises(ScenarioError, match=r"cluster\.kv_store"):
        evaluate(no_store, Layout.model_validate(LAYOUT))
