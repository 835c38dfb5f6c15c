"""`python -m benchmarks speed`: cost-model evaluations per second on varied layouts (one core).

Layouts of DeepSeek-V3 on a GB200 NVL72 rack: attention tp x dp, expert ep x tp, pp and batch varied over
a grid, aggregated. Work is planned per layout and priced in bulk, the path the planner uses.
"""

from __future__ import annotations

import itertools
import time

from costmodel.calibration import default_calibration
from costmodel.evaluate import plan_layout, serving_latencies
from costmodel.layout import Layout
from costmodel.pricing import TablePricer, WorkTable
from costmodel.resolve import resolve
from costmodel.scenario import Scenario

SCENARIO = {
    "schema_version": 1, "name": "speed", "model": "deepseek-v3", "precision": {"weights": "fp8", "experts": "fp4"},
    "cluster": {"system": "gb200-nvl72", "racks": 1}, "workload": {"input_tokens": 4096, "output_tokens": 1024},
}


def layouts(count: int) -> list[Layout]:
    grid = itertools.product((1, 2, 4, 8), (1, 2, 4, 8, 16), (1, 2, 4), (1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
    found: list[Layout] = []
    for tp, dp, pp, per_rank in itertools.cycle(grid):
        group = tp * dp
        found.append(Layout.model_validate({"serving": "aggregated", "pools": [{
            "role": "mixed", "tp": tp, "dp_attention": dp, "pp": pp, "moe_tp": 1, "moe_ep": group,
            "batch": per_rank * dp}]}))
        if len(found) == count:
            return found
    return found


def main(count: int = 10_000) -> int:
    resolved = resolve(Scenario.model_validate(SCENARIO))
    candidates = layouts(count)
    calibration = default_calibration()
    start = time.perf_counter()
    plans = [plan_layout(resolved, layout) for layout in candidates]
    planned = time.perf_counter()
    works = [w for p in plans for pool in p.pools for w in pool.works()]
    table = WorkTable(works, [resolved.system] * len(works), ["generic"] * len(works))
    terms = table.price(calibration)
    for plan in plans:
        serving_latencies(plan, TablePricer(table, terms, calibration, "generic"))
    done = time.perf_counter()
    print(f"{count} evaluations: {done - start:.2f} s ({(planned - start):.2f} s planning work, "
          f"{done - planned:.2f} s pricing and serving); {count / (done - start):,.0f} per second")
    return 0
