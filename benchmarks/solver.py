"""`python -m benchmarks solver`: front quality and solve time per scenario, backend and seed.

Each case runs in a fresh process (its peak resident memory is the process's). Per scenario and backend,
over the seeds: front points; hypervolume against a fixed reference point (the TTFT SLO, else 1.1 x the
reference front's largest TTFT; throughput 0) as a ratio to the reference front's; additive epsilon
against the reference front; the largest gap; time to the first front point and to the final front
(medians over the seeds); peak memory. The reference front is the exhaustive enumerator's where it
finishes (`planner.reference`), otherwise the best front ever found, committed in
`benchmarks/reference_fronts/`. Shifted geometric
means (time shift 1 s) summarise each backend.

A committed baseline (`benchmarks/baseline.json`) makes this a regression check: the command exits 1 when
a scenario's hypervolume ratio falls below 0.99 of the baseline's or its time passes 2x the baseline's
(times under 1 s count as 1 s: noise), and prints which.
"""

from __future__ import annotations

import json
import math
import resource
import signal
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.suite import SCENARIOS, SUITES, scenario_data

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "baseline.json"
REFERENCES = HERE / "reference_fronts"
BACKENDS = ("cpsat", "highs", "cbc")
EXHAUSTIVE_LIMIT = 300_000  # deployments the reference enumerates before giving up for a committed front
EVERY_BATCH_LIMIT = 20_000  # candidates an every-batch reference may time (else the best front found so far)
HV_TOLERANCE = 0.99
TIME_FACTOR = 2.0
TIME_FLOOR_S = 1.0
TIME_SHIFT_S = 1.0
SUBSET_LIMIT = 3_000  # reference points the best-subset programme takes (n^2 per point kept)
WATCHDOG_FACTOR, WATCHDOG_SLACK_S = 2.0, 120.0

Front = list[tuple[float, float]]  # (TTFT ms, tokens/s per GPU), TTFT ascending


@dataclass
class Case:
    scenario: str
    backend: str
    seed: int
    time_limit_s: float
    search: dict[str, Any] = field(default_factory=dict)  # overrides of the scenario's `search` (--points, ...)
    status: str = ""
    points: int = 0
    front: Front | None = None
    gap: float | None = None
    first_s: float | None = None
    time_s: float = 0.0
    peak_mb: float = 0.0
    error: str = ""


def _watchdog(signum: int, frame: object) -> None:
    raise TimeoutError("the case overran its time limit by far (watchdog)")


def run_case(case: Case) -> Case:
    """In a fresh process: solve and measure; a watchdog ends a case that ignores its time limit."""
    from planner.errors import PlannerError
    from planner.scenario import scenario_from_data
    from planner.solve import settings_for, solve

    signal.signal(signal.SIGALRM, _watchdog)
    signal.alarm(int(WATCHDOG_FACTOR * case.time_limit_s + WATCHDOG_SLACK_S))
    start = time.perf_counter()
    data = scenario_data(case.scenario)
    data["search"] = {**data.get("search", {}), **case.search}
    try:
        resolved = scenario_from_data(data)
        result = solve(resolved, settings_for(resolved.scenario.search, solver=case.backend,
                                              time_limit_s=case.time_limit_s, threads=1, seed=case.seed))
        case.front = [(s.point.ttft_ms, s.point.tokens_per_s_per_gpu) for s in result.front]
        case.status, case.points = result.status, len(result.front)
        case.gap = None if math.isinf(result.gap) else result.gap
        case.first_s = result.first_feasible_s
    except PlannerError as exc:
        case.status, case.error = "error", str(exc)
    except Exception as exc:  # a benchmark reports a crash as a result, and goes on
        case.status, case.error = "crash", f"{type(exc).__name__}: {exc}"
    signal.alarm(0)
    case.time_s = time.perf_counter() - start
    case.peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return case


def hypervolume(front: Front, ttft_ref: float) -> float:
    """Area dominated by the front up to TTFT `ttft_ref` and throughput 0 (a staircase)."""
    area, best = 0.0, 0.0
    points = sorted(p for p in front if p[0] < ttft_ref)
    for index, (ttft, throughput) in enumerate(points):
        best = max(best, throughput)
        following = points[index + 1][0] if index + 1 < len(points) else ttft_ref
        area += (following - ttft) * best
    return area


def best_subset_hypervolume(front: Front, points: int, ttft_ref: float) -> float:
    """The most hypervolume any `points` points of `front` (a non-dominated staircase) reach: what a front
    of that many points can at best show of the whole. Dynamic programme over the points in TTFT order:
    best[j][i], the most area of j points of which point i is the fastest, is v_i (t_m - t_i) + best[j-1][m]
    maximised over the next point m (the last one's step runs to `ttft_ref`). Nan above SUBSET_LIMIT points."""
    pts = sorted(p for p in front if p[0] < ttft_ref)
    if not pts or points < 1:
        return 0.0
    if points >= len(pts):  # every point: the whole front (and no n^3 programme for an exact front)
        return hypervolume(pts, ttft_ref)
    if len(pts) > SUBSET_LIMIT:
        return math.nan
    t = np.array([p[0] for p in pts])
    v = np.array([p[1] for p in pts])
    later = np.triu(np.ones((t.size, t.size), dtype=bool), k=1)  # m after i
    best = (ttft_ref - t) * v
    most = float(best.max())
    for _ in range(min(points, t.size) - 1):
        step = np.where(later, (t[None, :] - t[:, None]) * v[:, None] + best[None, :], -np.inf)
        best = step.max(axis=1)
        most = max(most, float(best.max()))
    return most


def additive_epsilon(front: Front, reference: Front) -> float:
    """Smallest shift (in units of the reference's largest TTFT and throughput) after which every
    reference point is weakly dominated by a front point."""
    if not reference:
        return 0.0
    if not front:
        return math.inf
    ttft_scale = max(r[0] for r in reference)
    thr_scale = max(r[1] for r in reference)
    return max(0.0, max(min(max((f[0] - r[0]) / ttft_scale, (r[1] - f[1]) / thr_scale) for f in front)
                        for r in reference))


def reference_front(name: str) -> tuple[Front, str]:
    """The exhaustive front where it is small enough, else the committed best-known front (or none)."""
    from costmodel.calibration import default_calibration
    from planner.reference import TooLargeForReference, exhaustive_front
    from planner.scenario import scenario_from_data
    from planner.templates import generate

    resolved = scenario_from_data(scenario_data(name))
    calibration = default_calibration()
    # the space the planner certifies: every integer batch (cluster accounting, no sessions), else the grid
    every = resolved.scenario.search.gpu_accounting == "cluster" and resolved.scenario.workload.sessions is None
    if every:  # timing every integer batch of every layout is only affordable on small clusters
        grid = generate(resolved, calibration)
        every = sum(rungs[-1].pool.batch for rungs in grid.ladders.values()) <= EVERY_BATCH_LIMIT
        if not every:
            return _best_found(name)
    try:
        candidates = generate(resolved, calibration, every_batch=every)
        if every:  # every integer batch: too many deployments to evaluate one by one
            return closed_form_front(resolved, candidates, calibration), "exhaustive (closed form)"
        front = exhaustive_front(resolved, candidates, calibration, EXHAUSTIVE_LIMIT)
        return [(p.ttft_ms, p.tokens_per_s_per_gpu) for p in front], "exhaustive"
    except TooLargeForReference:
        return _best_found(name)


def _best_found(name: str) -> tuple[Front, str]:
    path = REFERENCES / f"{name}.json"
    if path.exists():
        return [(float(p[0]), float(p[1])) for p in json.loads(path.read_text())["front"]], "best found"
    return [], "none"


def closed_form_front(resolved: Any, candidates: Any, calibration: Any) -> Front:
    """Cluster accounting: every aggregated deployment and every (prefill layout, decode layout, D) at the
    most prefill instances that fit (`planner.formulation.units`, which dominate every smaller count), by
    the cost model's closed form, without the MILP: the exhaustive front over every integer batch."""
    from planner.formulation.options import deployment_options
    from planner.formulation.units import unit_table

    options = deployment_options(resolved, candidates, calibration)
    slo = resolved.scenario.slo.ttft_ms
    points = [(m.point.ttft_ms, m.point.tokens_per_s_per_gpu) for m in options.mixed
              if slo is None or m.point.ttft_ms <= slo]
    table = unit_table(options, None if slo is None else slo / 1e3)
    if table is not None:
        per_gpu = options.output_tokens / resolved.gpus
        points += [(float(t) * 1e3, float(r) * per_gpu) for t, r in zip(table.ttft, table.rate, strict=True)]
    front: Front = []
    for ttft, value in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or value > front[-1][1]:
            front.append((ttft, value))
    return front


def ttft_reference(name: str, reference: Front, cases: list[Case]) -> float:
    slo = SCENARIOS[name].get("slo", {}).get("ttft_ms")
    if slo is not None:
        return float(slo)
    largest = max([p[0] for p in reference] + [p[0] for c in cases for p in c.front or []], default=1.0)
    return 1.1 * largest


def summarise(name: str, backend: str, cases: list[Case], reference: Front, ttft_ref: float) -> dict[str, Any]:
    reference_hv = hypervolume(reference, ttft_ref)
    ratios = [hypervolume(c.front or [], ttft_ref) / reference_hv if reference_hv else math.nan for c in cases]
    # against the best front of as many points: how well the points were chosen, apart from how many
    of_best = [hypervolume(c.front, ttft_ref) / best_subset_hypervolume(reference, len(c.front), ttft_ref)
               if c.front and reference_hv else math.nan for c in cases]
    gaps = [c.gap for c in cases if c.gap is not None]
    firsts = [c.first_s for c in cases if c.first_s is not None]
    return {
        "scenario": name, "backend": backend, "seeds": len(cases),
        "status": sorted({c.status for c in cases}), "points": statistics.mean(c.points for c in cases),
        "hv_ratio": statistics.mean(ratios), "hv_of_best_subset": statistics.mean(of_best),
        "epsilon": max(additive_epsilon(c.front or [], reference) for c in cases),
        "gap": max(gaps) if len(gaps) == len(cases) else None,
        # medians over seeds: one stalled subprocess (seen once with CBC: 10 s on a 12-variable model that
        # solves in 5 ms when repeated) must not read as a regression
        "first_s": statistics.median(firsts) if firsts else None, "time_s": statistics.median(c.time_s for c in cases),
        "peak_mb": max(c.peak_mb for c in cases), "errors": [c.error for c in cases if c.error],
    }


def shifted_geomean(values: list[float], shift: float) -> float:
    return math.exp(statistics.mean(math.log(v + shift) for v in values)) - shift


def suite_means(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    means = {}
    for backend in sorted({r["backend"] for r in rows}):
        mine = [r for r in rows if r["backend"] == backend]
        ratios = [r["hv_ratio"] for r in mine if r["hv_ratio"] > 0 and not math.isnan(r["hv_ratio"])]
        means[backend] = {"time_s": shifted_geomean([r["time_s"] for r in mine], TIME_SHIFT_S),
                          "hv_ratio": math.exp(statistics.mean(math.log(v) for v in ratios)) if ratios else math.nan}
    return means


def regressions(rows: list[dict[str, Any]], baseline: dict[str, Any]) -> list[str]:
    found = []
    for row in rows:
        base = baseline.get("results", {}).get(f"{row['scenario']}/{row['backend']}")
        if base is None:
            continue
        if row["hv_ratio"] < HV_TOLERANCE * base["hv_ratio"]:
            found.append(f"{row['scenario']} on {row['backend']}: hypervolume ratio {row['hv_ratio']:.4f} "
                         f"below {HV_TOLERANCE} x baseline {base['hv_ratio']:.4f}")
        if row["time_s"] > TIME_FACTOR * max(base["time_s"], TIME_FLOOR_S):
            found.append(f"{row['scenario']} on {row['backend']}: {row['time_s']:.1f} s, over {TIME_FACTOR} x "
                         f"baseline {base['time_s']:.1f} s")
    return found


def update_references(name: str, cases: list[Case], reference: Front, kind: str, ttft_ref: float) -> None:
    """Commit a better front for scenarios without an exhaustive one."""
    if kind == "exhaustive":
        return
    best = max(cases, key=lambda c: hypervolume(c.front or [], ttft_ref))
    if best.front and hypervolume(best.front, ttft_ref) > hypervolume(reference, ttft_ref) * (1 + 1e-12):
        REFERENCES.mkdir(exist_ok=True)
        record = {"scenario": name, "source": f"{best.backend}, seed {best.seed}", "front": best.front}
        (REFERENCES / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")


def _load_log(log: Path | None) -> dict[tuple[str, str, int], Case]:
    if log is None or not log.exists():
        return {}
    cases = [Case(**json.loads(line)) for line in log.read_text().splitlines() if line.strip()]
    for case in cases:
        case.front = [(float(a), float(b)) for a, b in case.front or []]
    return {(c.scenario, c.backend, c.seed): c for c in cases}


def run_cases(cases: list[Case], jobs: int, log: Path | None) -> list[Case]:
    """Each case in a fresh process; with `log`, results are appended as they come and cases already in
    the log are not run again (a long run can resume)."""
    known = _load_log(log)
    todo = [c for c in cases if (c.scenario, c.backend, c.seed) not in known]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"), max_tasks_per_child=1) as pool:
        for future in as_completed([pool.submit(run_case, c) for c in todo]):
            case = future.result()
            known[(case.scenario, case.backend, case.seed)] = case
            if log is not None:
                with log.open("a") as out:
                    out.write(json.dumps(asdict(case)) + "\n")
    return [known[(c.scenario, c.backend, c.seed)] for c in cases]


def run(suite: str, backends: tuple[str, ...], seeds: int, time_limit_s: float, jobs: int,
        log: Path | None = None, search: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    names = SUITES[suite]
    done = run_cases([Case(n, b, s, time_limit_s, dict(search or {})) for n in names for b in backends
                      for s in range(seeds)], jobs, log)
    rows = []
    for name in names:
        reference, kind = reference_front(name)
        mine = [c for c in done if c.scenario == name]
        ttft_ref = ttft_reference(name, reference, mine)
        if kind != "exhaustive":
            update_references(name, mine, reference, kind, ttft_ref)
            reference, kind = reference_front(name)
        for backend in backends:
            row = summarise(name, backend, [c for c in mine if c.backend == backend], reference, ttft_ref)
            rows.append({**row, "reference": kind})
            print(_line(row, kind), flush=True)
    return rows


def _line(row: dict[str, Any], kind: str) -> str:
    gap = "-" if row["gap"] is None else f"{row['gap']:.2%}"
    first = "-" if row["first_s"] is None else f"{row['first_s']:.1f}"
    return (f"{row['scenario']:<38} {row['backend']:<6} pts {row['points']:>7.1f}  HV {row['hv_ratio']:.4f} "
            f"(of best {row.get('hv_of_best_subset', math.nan):.4f}) "
            f"eps {row['epsilon']:.2e}  gap {gap:>6}  first {first:>5} s  final {row['time_s']:>6.1f} s  "
            f"{row['peak_mb']:>6.0f} MB  ref {kind}" + (f"  errors: {row['errors'][0][:80]}" if row["errors"] else ""))


def markdown(rows: list[dict[str, Any]], means: dict[str, dict[str, float]]) -> str:
    lines = ["| scenario | backend | points | HV ratio | of best subset | epsilon | largest gap | first (s) "
             "| final (s) | peak MB | reference |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        gap = "-" if r["gap"] is None else f"{r['gap']:.2%}"
        first = "-" if r["first_s"] is None else f"{r['first_s']:.1f}"
        lines.append(f"| {r['scenario']} | {r['backend']} | {r['points']:.0f} | {r['hv_ratio']:.4f} | "
                     f"{r.get('hv_of_best_subset', math.nan):.4f} | "
                     f"{r['epsilon']:.1e} | {gap} | {first} | {r['time_s']:.1f} | {r['peak_mb']:.0f} | "
                     f"{r['reference']} |")
    lines += ["", "| backend | shifted geometric mean time (s) | geometric mean HV ratio |", "|---|---:|---:|"]
    lines += [f"| {b} | {m['time_s']:.2f} | {m['hv_ratio']:.4f} |" for b, m in means.items()]
    return "\n".join(lines)


def main(suite: str, json_out: Path | None, write_baseline: bool, backends: tuple[str, ...], seeds: int,
         time_limit_s: float, jobs: int, show_markdown: bool, log: Path | None = None,
         search: dict[str, Any] | None = None) -> int:
    """`search`: overrides of every scenario's `search` (front_points, batch_tolerance): such a run is neither
    checked against the baseline nor may it write one (the baseline is of the defaults)."""
    overrides = f", search {search}" if search else ""
    print(f"solver benchmark, suite {suite}: {', '.join(backends)}, {seeds} seed(s), {time_limit_s:g} s limit"
          f"{overrides}", flush=True)
    if search and write_baseline:
        print("the baseline records the default settings: drop --points/--batch-tolerance to write it")
        return 2
    rows = run(suite, backends, seeds, time_limit_s, jobs, log, search)
    means = suite_means(rows)
    for backend, m in means.items():
        print(f"{backend}: shifted geometric mean time {m['time_s']:.2f} s, "
              f"geometric mean HV ratio {m['hv_ratio']:.4f}")
    record = {"suite": suite, "seeds": seeds, "time_limit_s": time_limit_s, "machine": _machine(), "results": {
        f"{r['scenario']}/{r['backend']}": r for r in rows}, "means": means}
    if json_out is not None:
        json_out.write_text(json.dumps(record, indent=1) + "\n")
    if show_markdown:
        print(markdown(rows, means))
    if write_baseline:
        merged = json.loads(BASELINE.read_text()) if BASELINE.exists() else {"results": {}}
        merged["results"].update(record["results"])
        merged["machine"], merged[f"means_{suite}"] = record["machine"], means
        BASELINE.write_text(json.dumps(merged, indent=1) + "\n")
        return 0
    if not BASELINE.exists() or search:
        return 0
    found = regressions(rows, json.loads(BASELINE.read_text()))
    for line in found:
        print(f"REGRESSION: {line}")
    return 1 if found else 0


def _machine() -> str:
    import os
    import platform

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"

