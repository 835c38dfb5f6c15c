"""Valid but unusual scenarios, drawn at random from the catalogs (any model on any system, odd cluster sizes,
inventories of several systems with busy GPUs or nodes, length distributions, prefix hits, fixed loads, SLOs,
both serving modes, every backend, attention-DP or pipeline degrees of 3 or 6), through `solve`, `evaluate`
of the front's points and `plan export` of its first plan: each ends in a front or in one of the documented
errors (exit 2, 3 or 4), never in an internal error. Fuzzing this way found two crashes in session 20 (an
empty KV-transfer table in the batch search, `tests/planner/test_generate_deadline.py`; the diagnosis of an
infeasible inventory, `tests/planner/test_inventory.py`) and one in session 29 (a one-token workload's batches
beyond what a layout states, `tests/planner/test_generate_deadline.py`). Marked slow (about a minute on 2
cores): `pytest -m slow tests/property/test_fuzz_solve.py`."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import pytest

from costmodel.hardware import system_names
from costmodel.models import model_ids
from planner import evaluate, solve
from planner.errors import PlannerError
from planner.export import export_plan, load_plan
from planner.scenario import scenario_from_data

pytestmark = pytest.mark.slow

CASES = 40  # scenarios, each solved within TIME_LIMIT_S
TIME_LIMIT_S = 3.0


def _length(rng: random.Random, mean: int) -> Any:
    form = rng.random()
    if form < 0.6:
        return mean
    if form < 0.8:
        return {"mean": mean, "range_ratio": rng.choice([0.0, 0.25, 0.5, 0.9])}
    return [{"share": 0.7, "tokens": max(1, mean // 4)}, {"share": 0.3, "tokens": mean * 2}]


def _group(rng: random.Random, index: int) -> dict[str, Any]:
    nodes = rng.choice([1, 2])
    busy = rng.choice([[], ["r0/n0/g1"]] + ([["r0/n0"]] if nodes == 2 else []))
    return {"name": f"g{index}", "system": rng.choice(system_names()), "nodes": nodes, "unavailable": busy}


def _scenario(rng: random.Random, index: int) -> dict[str, Any]:
    count = rng.choice([("gpus", rng.choice([1, 2, 4, 6, 8, 12, 16, 72])), ("nodes", rng.choice([1, 2, 3])),
                        ("racks", 1)])
    workload: dict[str, Any] = {"input_tokens": _length(rng, rng.choice([1, 128, 1024, 4096, 32768])),
                                "output_tokens": _length(rng, rng.choice([1, 16, 256, 1024, 8192]))}
    if rng.random() < 0.2:
        workload["prefix_hit_rate"] = rng.choice([0.0, 0.5])
    if rng.random() < 0.3:
        workload["concurrency"] = rng.choice([1, 7, 64, 1000])
    if rng.random() < 0.2:
        workload["routing_skew"] = rng.choice([0.8, 1.5])
    cluster: dict[str, Any] = {"system": rng.choice(system_names()), count[0]: count[1]}
    if rng.random() < 0.3:  # an inventory of two or three systems, some GPUs (or a whole node of two) busy
        cluster = {"inventory": [_group(rng, g) for g in range(rng.choice([2, 3]))]}
    doc: dict[str, Any] = {
        "schema_version": 1, "name": f"fuzz-{index}", "model": rng.choice(model_ids()),
        "cluster": cluster, "workload": workload,
        "engine": rng.choice(["trtllm", "vllm", "sglang", "generic"]),
        "search": {"serving": rng.choice([["aggregated"], ["disaggregated"], ["aggregated", "disaggregated"]]),
                   "solver": rng.choice(["cpsat", "cpsat", "highs", "cbc"]), "time_limit_s": TIME_LIMIT_S}}
    if rng.random() < 0.6:
        doc["precision"] = {"weights": rng.choice(["bf16", "fp8", "fp4", "int4"]),
                            "kv_cache": rng.choice(["bf16", "fp8"])}
    if rng.random() < 0.5:
        doc["slo"] = {"ttft_ms": rng.choice([200, 2000, 20000]), "tpot_ms": rng.choice([10, 50, 200])}
    if rng.random() < 0.3:  # degrees that are not powers of two: sizes that do not divide each other
        doc["search"][rng.choice(["dp_attention", "pp"])] = [1, rng.choice([3, 6])]
    return doc


@pytest.mark.parametrize("index", range(CASES))
def test_random_scenarios_end_in_a_front_or_a_documented_error(index: int, tmp_path: Path) -> None:
    doc = _scenario(random.Random(1000 + index), index)
    try:
        resolved = scenario_from_data(doc)
        front = solve(resolved)
    except PlannerError as error:  # bad input, infeasible or out of time: each says why, with its exit code
        assert error.exit_code in (2, 3, 4), error
        return
    assert front.points
    for point in front.points[:2]:
        figures = evaluate(resolved, point).to_dict()
        assert figures["ttft_ms"] > 0 and figures["tokens_per_s_per_gpu"] > 0
    if front.points:
        front.write(tmp_path)
        plan = load_plan(tmp_path / "plan-0.yaml")
        for engine in ("vllm", "sglang", "trtllm", "dynamo"):
            with contextlib.suppress(PlannerError):  # an engine that cannot run this plan says so
                export_plan(plan, engine)
