"""Disaggregated serving with a separate midfill pool: the fill stations' closed form by hand, the split
of one pool into two that reproduces it, and the checks on layouts with a midfill pool."""

from __future__ import annotations

import copy
import functools
from dataclasses import replace

import numpy as np
import pytest

from costmodel.calibration import default_calibration
from costmodel.disaggregated import FillStation, closed_loop_wait_s, disaggregated_serving, kv_transfer_s, split_serving
from costmodel.errors import ScenarioError
from costmodel.evaluate import evaluate
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from costmodel.serving import with_session_tiers
from planner.formulation.pairs import pair_figures
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
    latency = f1 * first.timing.first_token_s + (1 - f1) * midfill.timing.first_token_s  # the engine's, per layer
    assert latency > 0
    assert parts == pytest.approx({"fill": fill - latency, "first_token_latency": latency, "queue": at_fill - fill,
                                   "kv_transfer": transfer}, rel=1e-12)


def test_one_pool_split_in_proportion_is_the_same_pool() -> None:
    calibration, engine = default_calibration(), resolved().scenario.engine
    prefill, decode = candidates()["prefill"][0], candidates()["decode"][-1]
    whole = disaggregated_serving(prefill.timing, decode.timing, 4, 2, calibration, engine)
    halves = split_serving([FillStation(prefill.timing, 1, 0.25), FillStation(prefill.timing, 3, 0.75)],
                           decode.timing, 2, calibration, engine)
    assert halves[:3] == pytest.approx(whole[:3], rel=1e-12)


LAYOUT = {"serving": "disaggregated", "pools": [
    {"role": "prefill", "replicas": 1, "tp": 2, "moe_ep": 2, "batch": 1},
    # tiers sized for 60% of the midfill rate, so the 2 TB store holds the idle contexts whatever the calibration's
    # pace (at its full rate they needed 2.2 TB under one of session 12's refits; at 80%, 2.25 TB under session
    # 37's, whose faster Hopper attention raised the pace)
    {"role": "midfill", "replicas": 1, "tp": 1, "batch": 1, "kv_store": True, "tier_load": 0.6},
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


def test_tiers_sized_for_part_of_the_rate_cap_it_and_hold_less() -> None:
    calibration, engine = default_calibration(), resolved().scenario.engine
    prefill = next(c for c in candidates()["prefill"] if c.pool.tier_load == 1.0)
    decode = max(candidates()["decode"], key=lambda c: c.pool.batch)
    full = split_serving([FillStation(prefill.timing, 1)], decode.timing, 4, calibration, engine)
    cap = prefill.requests_per_s
    assert full[2] > 0.25 * cap  # the decode pool would drive the prefill pool past a quarter of its rate
    quarter = prefill.timing.plan.pool.model_copy(update={"tier_load": 0.25})
    timing = replace(prefill.timing, plan=replace(prefill.timing.plan, pool=quarter))
    ttft, _, rate, parts = split_serving([FillStation(timing, 1)], decode.timing, 4, calibration, engine)
    away = (decode.timing.plan.request.output - 1) * decode.timing.tpot_s
    assert rate == pytest.approx(0.25 * cap, rel=1e-12)
    assert ttft == pytest.approx(4 * decode.pool.batch / rate - away, rel=1e-12)  # Little's law on the loop
    assert parts["queue"] > full[3]["queue"]  # the wait for admission
    # the tiers themselves: a quarter of the idle sessions per GPU
    workload = resolved().scenario.workload
    base = prefill.timing.plan
    sized = [with_session_tiers(replace(base, pool=base.pool.model_copy(update={"tier_load": load})), prefill.timing,
                                workload).request.tiers for load in (1.0, 0.25)]
    assert sized[0] is not None and sized[1] is not None
    assert sized[1].turns_per_s_per_gpu == pytest.approx(0.25 * sized[0].turns_per_s_per_gpu, rel=1e-12)


def test_pair_closed_form_caps_the_rate_like_the_cost_model() -> None:
    calibration = default_calibration()
    prefill = next(c for c in candidates()["prefill"] if c.pool.tier_load < 1.0)
    decode = max(candidates()["decode"], key=lambda c: c.pool.batch)
    transfer = kv_transfer_s(prefill.timing.plan.ctx, decode.timing.plan.ctx, prefill.timing.plan.request,
                             calibration)
    away = (decode.timing.plan.request.output - 1) * decode.timing.tpot_s
    for count_p, count_d in ((1, 1), (1, 4), (2, 3)):
        ttft, rate = pair_figures(np.array([count_p * prefill.requests_per_s]), np.array([prefill.timing.ttft_s]),
                                  np.array([transfer]), np.array([count_d * decode.pool.batch]), np.array([away]),
                                  calibration.engine(resolved().scenario.engine).cohort_fraction,
                                  np.array([prefill.pool.tier_load]))
        want = disaggregated_serving(prefill.timing, decode.timing, count_p, count_d, calibration,
                                     resolved().scenario.engine)
        assert (float(ttft[0]), float(rate[0])) == pytest.approx((want[0], want[2]), rel=1e-12)


def test_a_first_turn_pool_holds_no_contexts_to_park_or_size() -> None:
    for field, value in (("kv_store", True), ("tier_load", 0.5)):
        data = copy.deepcopy(LAYOUT)
        data["pools"][0][field] = value
        with pytest.raises(ScenarioError, match=f"set {field} on the midfill pool"):
            evaluate(resolved(), Layout.model_validate(data))
