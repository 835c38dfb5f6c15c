"""Worker counts for disaggregated measurements that do not record them, bounded by what a deployer must do.

The loader assumes one prefill and one decode worker when `*_num_workers` is empty, which puts the whole
concurrency on one decode instance. Two rules, both independent of the measured latencies (so no row is
fitted to itself):
- decode workers: the fewest whose HBM holds the concurrency (each at the largest batch that fits; the
  engine cannot hold more, so fewer workers cannot have run it);
- prefill workers: the fewest whose fill rate keeps up with the rate the decode workers complete requests
  (a deployer sizes the prefill pool so that it does not starve decode; more would sit idle), at most
  `MAX_PREFILL_WORKERS`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from benchmarks.measurements import Measurement
from costmodel.calibration import Calibration
from costmodel.evaluate import plan_layout
from costmodel.layout import Layout
from costmodel.pricing import DirectPricer
from costmodel.resolve import ResolvedScenario, resolve
from costmodel.scenario import Scenario
from costmodel.serving import time_pool

# InferenceMAX-style disaggregated sweeps run up to 8 prefill workers per deployment (GB200 NVL72 racks:
# 72 GPUs, prefill workers of 4-8 GPUs beside the decode pool); assumption: never more than that.
MAX_PREFILL_WORKERS = 8


def bounded(measurement: Measurement, calibration: Calibration) -> Measurement:
    """`measurement` with its guessed worker counts replaced by the bounds above (other rows unchanged)."""
    if not any("num_workers missing" in note for note in measurement.assumptions):
        return measurement
    resolved = resolve(Scenario.model_validate(measurement.scenario))
    prefill, decode = (dict(pool) for pool in measurement.layout["pools"])
    plan = plan_layout(resolved, Layout.model_validate(measurement.layout)).pools[1]
    workers = max(1, math.ceil(measurement.concurrency / max(plan.max_batch, 1)))
    decode |= {"replicas": workers, "batch": max(decode["dp_attention"], math.ceil(measurement.concurrency / workers))}
    prefill["replicas"] = _prefill_workers(resolved, prefill, decode, measurement.osl, calibration)
    layout: dict[str, Any] = {**measurement.layout, "pools": [prefill, decode]}
    scenario = {**measurement.scenario, "cluster": {**measurement.scenario["cluster"],
                                                    "gpus": _gpus(Layout.model_validate(layout), resolved)}}
    notes = tuple(n for n in measurement.assumptions if "num_workers missing" not in n and "decode_batch" not in n)
    notes += (f"decode_num_workers missing: {workers}, the fewest whose HBM holds the concurrency",
              f"prefill_num_workers missing: {prefill['replicas']}, the fewest that keep up with decode")
    return replace(measurement, layout=layout, scenario=scenario, assumptions=notes)


def _prefill_workers(resolved: ResolvedScenario, prefill: dict[str, Any], decode: dict[str, Any], osl: int,
                     calibration: Calibration) -> int:
    layout = Layout.model_validate({"serving": "disaggregated", "pools": [prefill | {"replicas": 1}, decode]})
    pricer = DirectPricer(resolved.system, calibration, resolved.scenario.engine)
    fill, dec = (time_pool(plan, pricer) for plan in plan_layout(resolved, layout).pools)
    completions = float(decode["replicas"] * decode["batch"]) / (osl * dec.tpot_s)  # requests/s leaving decode
    return min(MAX_PREFILL_WORKERS, max(1, math.ceil(completions / fill.requests_per_s)))


def _gpus(layout: Layout, resolved: ResolvedScenario) -> int:
    per_node = resolved.system.gpus_per_node
    return layout.gpus if layout.gpus < per_node else -(-layout.gpus // per_node) * per_node
