"""Candidate generation under a deadline (`planner.templates.generate`): without one it times the grid's
batches and each layout's range ends, as the grid path does; with one it times every layout's ends first
and states the grid batches it left untimed, which the batch bounds then cover soundly."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from costmodel.calibration import default_calibration
from costmodel.resolve import ResolvedScenario
from planner.batches import _front, refine
from planner.deployment import aggregated_point, disaggregated_point
from planner.placement import cluster_domains, fits
from planner.scenario import scenario_from_data
from planner.templates import (
    Candidate,
    CandidateSet,
    _ladder_extras,
    _slo_breach,
    candidate_pools,
    generate,
    kind_role,
    kinds_for,
    ladder_ends,
    layout_key,
    planned,
    timed_plans,
)
from tests.planner.small_scenarios import small_data

NAMES = ["qwen3-30b-4xh200", "llama-8b-dense-6xh100-disaggregated"]


@functools.cache
def scenario(name: str) -> ResolvedScenario:
    return scenario_from_data(small_data(name))


def figures(candidate: Candidate) -> tuple[object, ...]:
    t = candidate.timing
    return candidate.pool.model_dump_json(), t.ttft_s, t.tpot_s, t.cycle_s, t.plan.memory.total


@pytest.mark.parametrize("name", NAMES)
def test_without_a_deadline_the_candidates_are_the_grids(name: str) -> None:
    """Every grid batch that fits and each range's ends, timed, in the grid path's order, with the same
    pruned counts (the batches beyond an SLO breach counted, not timed)."""
    resolved, calibration = scenario(name), default_calibration()
    got = generate(resolved, calibration)
    assert got.untimed == 0
    want = CandidateSet()
    for kind in kinds_for(resolved):
        role, turns = kind_role(kind)
        plans = planned(resolved, candidate_pools(resolved, role), turns, want)
        plans += planned(resolved, _ladder_extras(resolved, plans), turns, want)
        want.by_role[kind] = []
        for timing in timed_plans(plans, resolved, calibration):
            want.add(resolved, kind, Candidate(timing.plan.pool, timing), ladder=True)
    assert {k: [figures(c) for c in v] for k, v in got.by_role.items()} == \
        {k: [figures(c) for c in v] for k, v in want.by_role.items()}
    assert got.pruned == want.pruned and got.fastest_ms == want.fastest_ms
    assert got.instance_gpus == want.instance_gpus
    for key, rungs in want.ladders.items():  # the same rungs up to the first that breaks an SLO for good
        mine = {c.pool.batch: figures(c) for c in got.ladders[key]}
        for rung in rungs:
            if rung.pool.batch in mine:
                assert mine[rung.pool.batch] == figures(rung)
            else:
                assert _slo_breach(resolved, rung) is not None


@pytest.mark.parametrize("name", NAMES)
def test_a_deadline_times_every_layouts_ends_and_names_what_it_left(name: str) -> None:
    resolved, calibration = scenario(name), default_calibration()
    full, cut = generate(resolved, calibration), generate(resolved, calibration, deadline=0.0)
    assert cut.untimed > 0
    for (kind, key), rungs in full.ladders.items():
        role, _ = kind_role(kind)
        ends = ladder_ends(resolved, role, key[1], rungs[0].timing.plan.max_batch)
        assert ends <= {c.pool.batch for c in cut.ladders[(kind, key)]}
    timed = {(k, figures(c)) for k, v in full.by_role.items() for c in v}
    assert {(k, figures(c)) for k, v in cut.by_role.items() for c in v} <= timed
    untimed = {(kind, key, b) for (kind, key), batches in cut.untimed_batches.items() for b in batches}
    missing = {(k, key, c.pool.batch) for (k, key), rungs in full.ladders.items() for c in rungs
               if c.pool.batch not in {x.pool.batch for x in cut.ladders[(k, key)]}}
    assert missing <= untimed


@pytest.mark.parametrize("name", NAMES)
def test_untimed_grid_batches_are_within_the_stated_bounds(name: str) -> None:
    """Every deployment with an untimed grid batch (aggregated; disaggregated with any timed fill or
    decode option at every count that fits) is beaten by the timed front or inside one of the open boxes
    refine states (TTFT at least the box's, tokens/s at most its)."""
    resolved, calibration = scenario(name), default_calibration()
    full, cut = generate(resolved, calibration), generate(resolved, calibration, deadline=0.0)
    options, coverage = refine(resolved, calibration, cut, deadline=0.0)
    assert not coverage.certified and coverage.untimed == cut.untimed
    front = _front(options, resolved)  # the timed deployments' front (aggregated and the unit table)
    bins, slo = cluster_domains(resolved), resolved.scenario.slo

    def covered(ttft_ms: float, per_gpu: float) -> bool:
        value = per_gpu * resolved.gpus * (1 - 1e-9)  # cluster accounting: tokens/s over the cluster's GPUs
        if front.at(np.array([ttft_ms / 1e3]))[0] >= value:
            return True
        return bool(((coverage.open_ttft <= ttft_ms / 1e3 * (1 + 1e-9)) & (coverage.open_value >= value)).any())

    untimed = {(kind, key, b) for (kind, key), batches in cut.untimed_batches.items() for b in batches}
    extra = [c for kind, cs in full.by_role.items() for c in cs
             if (kind, layout_key(c.pool), c.pool.batch) in untimed]
    assert extra, "the deadline left no candidate untimed"
    fills = [c for c in full.by_role.get("prefill", [])]
    decodes = [c for c in full.by_role.get("decode", [])]
    for candidate in extra:
        if candidate.pool.role == "mixed":
            point = aggregated_point(resolved, candidate)
            if point is not None:
                assert covered(point.ttft_ms, point.tokens_per_s_per_gpu)
            continue
        pairs = [(candidate, d) for d in decodes] if candidate.pool.role == "prefill" else \
            [(p, candidate) for p in fills]
        for prefill, decode in pairs:
            for count_p, count_d in itertools.product(range(1, 5), range(1, 5)):
                if not fits([(prefill.gpus, count_p), (decode.gpus, count_d)], bins):
                    continue
                point = disaggregated_point(resolved, calibration, [(prefill, count_p)], decode, count_d)
                if point is None or (slo.tpot_ms is not None and point.tpot_ms > slo.tpot_ms) or \
                        (slo.ttft_ms is not None and point.ttft_ms > slo.ttft_ms):
                    continue
                assert covered(point.ttft_ms, point.tokens_per_s_per_gpu), (prefill.pool, decode.pool)



def test_a_layout_whose_only_fitting_batches_are_range_ends_is_left_out_of_the_waves() -> None:
    """Llama-3.1-70B in fp8 on 8 H100s, disaggregated: a decode pool at tp 1 fits only batch 1 (at tp 2 only
    1 and 2), which the range ends already timed, so the layout has no grid batch left for the waves (it ended
    `plan solve` with IndexError: pop from an empty list)."""
    resolved = scenario_from_data({
        "schema_version": 1, "name": "llama-70b-fp8-8xh100", "model": "meta-llama/Meta-Llama-3.1-70B",
        "precision": {"weights": "fp8", "experts": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h100-sxm", "gpus": 8}, "engine": "vllm",
        "workload": {"input_tokens": 1024, "output_tokens": 1024, "concurrency": 16}})
    found = generate(resolved, default_calibration(), deadline=float("inf"))
    tps = {candidate.pool.tp for candidates in found.by_role.values() for candidate in candidates}
    assert 1 in tps and 8 in tps


def test_fill_bounds_need_no_timed_prefill_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch search can bound fill layouts' untimed ranges while no prefill option is timed, so that the
    KV transfer table (by prefill and decode size) is empty (DeepSeek-V3.2 with 32K-token prompts on two H200
    nodes ended `plan solve` with ValueError: min() arg is an empty sequence). Every bounding call is made
    again with the table emptied: no transfer is the optimistic bound, so it raises nothing and leaves open
    every decode row and fill option the timed transfers leave open."""
    from dataclasses import replace

    import planner.batches as batches
    from planner.api import solve

    calls = 0

    def with_empty_table(options, fills, size, rows, *rest, **named):  # type: ignore[no-untyped-def]
        nonlocal calls
        real = bounding(options, fills, size, rows, *rest, **named)
        empty = bounding(replace(options, kv_transfer_s={}), fills, size, rows, *rest, **named)
        assert np.all(empty[0] >= real[0]) and np.all(empty[1] >= real[1])
        calls += 1
        return real

    bounding = batches._boxes
    monkeypatch.setattr(batches, "_boxes", with_empty_table)
    front = solve(scenario_from_data({
        "schema_version": 1, "name": "v32-long-prompts", "model": "deepseek-ai/DeepSeek-V3.2",
        "precision": {"weights": "int4", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "h200-sxm", "nodes": 2}, "engine": "vllm",
        "workload": {"input_tokens": {"mean": 16384, "range_ratio": 0.25},
                     "output_tokens": {"mean": 16, "range_ratio": 0.25}},
        "slo": {"ttft_ms": 3000, "tpot_ms": 200},
        "search": {"serving": ["aggregated", "disaggregated"], "time_limit_s": 6, "seed": 0}}))
    assert calls and front.points
    assert all(p.ttft_ms <= 3000 and p.tpot_ms <= 200 for p in front.points)


@pytest.mark.parametrize(("model", "asked", "expected"), [
    ("llama3.1-70b", None, {1}),  # dense: attention-DP ranks would be replicas
    ("llama3.1-70b", [1, 2], {1, 2}),  # unless the scenario asks for them
    ("qwen3-30b", None, {1, 2, 4, 8}),  # MoE: ranks share the experts
])
def test_dense_models_get_attention_dp_only_when_asked(model: str, asked: list[int] | None,
                                                       expected: set[int]) -> None:
    search = {"dp_attention": asked} if asked else {}
    resolved = scenario_from_data({
        "schema_version": 1, "name": "t", "model": model, "cluster": {"system": "h100-sxm", "gpus": 8},
        "workload": {"input_tokens": 1024, "output_tokens": 256}, "search": search})
    assert {pool.dp_attention for pool in candidate_pools(resolved, "mixed")} == expected


def test_batches_stay_within_what_a_layout_states() -> None:
    """A one-token workload lets millions of sequences fit (32 million on 72 GB200 GPUs for GLM-5, found by
    fuzzing): the search stops at MAX_BATCH, so every front point is a valid layout (`planner.solve` builds
    each one from the output and raised a validation error)."""
    from costmodel.scenario import MAX_BATCH
    from planner import solve

    data = small_data("qwen3-30b-4xh200")
    data["workload"] = {"input_tokens": 1, "output_tokens": 1}
    data["search"] = {"pp": [1], "dp_attention": [1], "serving": ["aggregated"], "time_limit_s": 5}
    resolved = scenario_from_data(data)
    assert ladder_ends(resolved, "mixed", 1, 32_190_794) == {1, MAX_BATCH}
    front = solve(resolved)
    assert max(pool.batch for point in front.points for pool in point.layout.pools) <= MAX_BATCH
