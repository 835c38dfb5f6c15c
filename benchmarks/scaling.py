"""`python -m benchmarks scaling`: solve time and peak memory against cluster size and expert count.

Cluster sizes: DeepSeek-V3 (256 experts) on 8, 72, 288, 1,152 and 4,608 GB200 GPUs (partial rack, 1, 4, 16,
64 NVL72 racks); expert counts: models with 8 to 896 experts on one rack. CP-SAT, one thread, each run in a
fresh process; every run uses the default (`auto`) front resolution and a
time limit, so a run that stops on it is marked. Prints the least-squares growth exponent of time against
GPUs (log-log).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from benchmarks import suite
from benchmarks.solver import Case, run_cases

ROWS = suite.SCALING


def growth_exponent(points: list[tuple[int, float]]) -> float:
    x = np.log([p[0] for p in points])
    y = np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def main(time_limit_s: float = 300.0, jobs: int = 1) -> int:
    done = {c.scenario: c for c in run_cases([Case(name, "cpsat", 0, time_limit_s) for _, name, _ in ROWS], jobs, None)}
    results: list[dict[str, Any]] = []
    print(f"{'axis':<8} {'scenario':<34} {'size':>6} {'points':>7} {'status':>9} {'time s':>8} {'peak MB':>8}")
    for axis, name, size in ROWS:
        case = done[name]
        results.append({"axis": axis, "scenario": name, "size": size, "points": case.points, "status": case.status,
                        "time_s": case.time_s, "peak_mb": case.peak_mb, "error": case.error})
        print(f"{axis:<8} {name:<34} {size:>6} {case.points:>7} {case.status:>9} {case.time_s:>8.1f} "
              f"{case.peak_mb:>8.0f}" + (f"  {case.error[:60]}" if case.error else ""))
    timed = [(r["size"], r["time_s"]) for r in results if r["axis"] == "gpus" and r["status"] != "error"]
    if len(timed) >= 2 and all(t > 0 and not math.isnan(t) for _, t in timed):
        print(f"time grows as GPUs^{growth_exponent(timed):.2f} (least squares on log-log, {len(timed)} sizes)")
    return 0
