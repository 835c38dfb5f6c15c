"""`python -m benchmarks scaling`: solve time and peak memory against cluster size and expert count.

Cluster sizes: DeepSeek-V3 (256 experts) on 8, 72, 288, 1,152 and 4,608 GB200 GPUs (partial rack, 1, 4, 16,
64 NVL72 racks); expert counts: models with 8 to 896 experts on one rack. CP-SAT, one thread, each run in a
fresh process; the largest clusters use a 1% front resolution (`search.front_resolution`) and every run a
time limit, so a run that stops on it is marked. Prints the least-squares growth exponent of time against
GPUs (log-log).
"""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import numpy as np

from benchmarks import suite
from benchmarks.solver import Case, run_case

CLUSTER = {"deepseek-v3-8xgb200": 8, "deepseek-v3-72xgb200": 72, "deepseek-v3-288xgb200": 288,
           "deepseek-v3-1152xgb200": 1152, "deepseek-v3-4608xgb200": 4608}
EXPERTS = {"mixtral-8x22b": 8, "gpt-oss-20b": 32, "qwen3-235b": 128, "deepseek-v3": 256, "kimi-k2": 384,
           "qwen3.5-397b": 512, "kimi-k3": 896}


def _register() -> list[tuple[str, str, int]]:
    """Adds the scaling scenarios to the suite's table (child processes re-register on import)."""
    base = suite.SCENARIOS["deepseek-v3-72xgb200"]
    rows: list[tuple[str, str, int]] = []
    for name, gpus in CLUSTER.items():
        search = {"front_resolution": 0.01} if gpus >= 1152 else {}
        suite.SCENARIOS.setdefault(name, {**base, "cluster": {"system": "gb200-nvl72", "gpus": gpus}, "search": search})
        rows.append(("gpus", name, gpus))
    for model, experts in EXPERTS.items():
        name = f"{model}-72xgb200-experts"
        suite.SCENARIOS.setdefault(name, {**base, "model": model})
        rows.append(("experts", name, experts))
    return rows


ROWS = _register()


def growth_exponent(points: list[tuple[int, float]]) -> float:
    x = np.log([p[0] for p in points])
    y = np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def main(time_limit_s: float = 300.0, jobs: int = 1) -> int:
    cases = [Case(name, "cpsat", 0, time_limit_s) for _, name, _ in ROWS]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"), max_tasks_per_child=1) as pool:
        done = {c.scenario: c for c in pool.map(run_case, cases)}
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
