"""What `plan solve` prints and writes: JSON (stable keys), CSV, a table, the front plot, plan files.

Figures are the cost model's (exact re-evaluation); timing fields (`time_s`, `first_feasible_s`) are
the only ones that change between runs of the same scenario and seed.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import yaml

from costmodel.evaluate import pool_context
from costmodel.layout import Layout
from planner.placement import assign, domain_bins
from planner.solve import SolveResult
from planner.sweep import SolvedPoint

CSV_COLUMNS = ("index", "serving", "ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "gpus",
               "status", "gap", "pools")


def _gap(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 9)


def layout_dict(layout: Layout) -> dict[str, Any]:
    """The layout as `plan evaluate --layout` reads it."""
    return layout.model_dump(mode="json")


def placement(result: SolveResult, point: SolvedPoint) -> dict[str, Any]:
    """Which GPUs of which scale-up domain each instance holds, its pipeline stages' layers, and the
    expert banks of each expert-parallel degree used."""
    bins, layout = domain_bins(result.resolved), point.point.layout
    ids, sizes = [], []
    for index, pool in enumerate(layout.pools):
        for replica in range(pool.replicas):
            ids.append((index, pool, f"{pool.role}-{replica}"))
            sizes.append(pool.gpus_per_instance)
    slots = assign(sizes, bins)
    instances = []
    for (index, pool, name), slot in zip(ids, slots, strict=True):
        ctx = pool_context(result.resolved, pool)
        per_stage, first_layer, stages = pool.tp * pool.dp_attention, 0, []
        for stage, layers in enumerate(ctx.stages):
            first_gpu = slot.first_gpu + stage * per_stage
            stages.append({"stage": stage, "layers": [first_layer, first_layer + len(layers) - 1],
                           "gpus": [first_gpu, first_gpu + per_stage - 1]})
            first_layer += len(layers)
        instances.append({"id": name, "pool": index, "domain": slot.domain, "stages": stages})
    experts = {str(pool.moe_ep): result.experts[pool.moe_ep].to_dict()
               for pool in layout.pools if pool.moe_ep in result.experts}
    return {"domain_gpus": bins[0], "domains_used": len({s.domain for s in slots}), "instances": instances,
            "experts": experts}


def point_dict(result: SolveResult, point: SolvedPoint) -> dict[str, Any]:
    p = point.point
    return {
        "ttft_ms": p.ttft_ms, "tpot_ms": p.tpot_ms, "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "tokens_per_s_per_user": p.tokens_per_s_per_user, "gpus": p.gpus, "serving": p.layout.serving,
        "status": point.status.value, "gap": _gap(point.gap), "layout": layout_dict(p.layout),
        "placement": placement(result, point),
    }


def result_dict(result: SolveResult) -> dict[str, Any]:
    sweep = result.sweep
    return {
        "status": result.status,
        "scenario": result.resolved.scenario.name,
        "front": [point_dict(result, p) for p in result.front],
        "solver": {"backend": result.settings.backend, "time_s": round(result.time_s, 3), "gap": _gap(result.gap),
                   "first_feasible_s": None if result.first_feasible_s is None else round(result.first_feasible_s, 3),
                   "milp_solves": len(sweep.reports),
                   "largest_milp": None if sweep.largest_model is None else {
                       "variables": len(sweep.largest_model.variables),
                       "constraints": len(sweep.largest_model.constraints)},
                   "threads": result.settings.threads, "seed": result.settings.seed,
                   "timed_out": sweep.timed_out},
        "candidates": result.candidates,
    }


def pools_summary(layout: Layout) -> str:
    return " + ".join(f"{p.replicas}x {p.role}[tp{p.tp} dp{p.dp_attention} pp{p.pp} ep{p.moe_ep} b{p.batch}]"
                      for p in layout.pools)


def csv_text(result: SolveResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for index, solved in enumerate(result.front):
        p = solved.point
        writer.writerow([index, p.layout.serving, f"{p.ttft_ms:.6g}", f"{p.tpot_ms:.6g}",
                         f"{p.tokens_per_s_per_gpu:.6g}", f"{p.tokens_per_s_per_user:.6g}", p.gpus, solved.status.value,
                         "" if math.isinf(solved.gap) else f"{solved.gap:.3g}", pools_summary(p.layout)])
    return out.getvalue()


def plan_yaml(result: SolveResult, index: int, point: SolvedPoint) -> str:
    data = point_dict(result, point)
    head = (f"# Plan {index} of scenario '{result.resolved.scenario.name}' from `plan solve`.\n"
            f"# `plan evaluate SCENARIO --layout` reads this file (the layout below).\n")
    figures = {k: data[k] for k in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "gpus",
                                    "status", "gap")}
    body = {"figures": figures, "layout": data["layout"], "placement": data["placement"]}
    return head + yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=120)


def write_outputs(result: SolveResult, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "front.json", folder / "front.csv", folder / "front.png"]
    written[0].write_text(json.dumps(result_dict(result), indent=2) + "\n", encoding="utf-8")
    written[1].write_text(csv_text(result), encoding="utf-8")
    plot_front(result, written[2])
    for index, point in enumerate(result.front):
        path = folder / f"plan-{index}.yaml"
        path.write_text(plan_yaml(result, index, point), encoding="utf-8")
        written.append(path)
    return written


def plot_front(result: SolveResult, path: Path) -> None:
    """TTFT against tokens/s per GPU, aggregated and disaggregated points marked, SLO line drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    for serving, marker in (("aggregated", "o"), ("disaggregated", "s")):
        pts = [s.point for s in result.front if s.point.layout.serving == serving]
        if pts:
            axes.plot([p.tokens_per_s_per_gpu for p in pts], [p.ttft_ms for p in pts], marker, label=serving)
    line = [s.point for s in result.front]
    axes.step([p.tokens_per_s_per_gpu for p in line], [p.ttft_ms for p in line], where="post", color="grey", lw=0.8)
    slo = result.resolved.scenario.slo
    if slo.ttft_ms is not None:
        axes.axhline(slo.ttft_ms, color="red", ls="--", lw=1, label=f"TTFT SLO {slo.ttft_ms:g} ms")
    axes.set_xlabel("tokens/s per GPU")
    axes.set_ylabel("TTFT (ms)")
    tpot = f", TPOT SLO {slo.tpot_ms:g} ms (every point meets it)" if slo.tpot_ms is not None else ""
    axes.set_title(f"{result.resolved.scenario.name}: Pareto front{tpot}", fontsize=9)
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def print_table(result: SolveResult, console: Any, model_stats: bool) -> None:
    from rich.table import Table

    table = Table(title=f"Pareto front: {result.resolved.scenario.name} ({result.resolved.gpus} x "
                        f"{result.resolved.system.name})")
    for column in ("#", "serving", "TTFT ms", "TPOT ms", "tok/s/GPU", "tok/s/user", "GPUs", "gap", "pools"):
        table.add_column(column, justify="left" if column in ("serving", "pools") else "right")
    for index, solved in enumerate(result.front):
        p = solved.point
        gap = "-" if math.isinf(solved.gap) else f"{solved.gap:.2%}"
        table.add_row(str(index), p.layout.serving, f"{p.ttft_ms:.1f}", f"{p.tpot_ms:.2f}",
                      f"{p.tokens_per_s_per_gpu:.1f}", f"{p.tokens_per_s_per_user:.1f}", str(p.gpus), gap,
                      pools_summary(p.layout))
    console.print(table)
    sweep = result.sweep
    console.print(f"status {result.status}; largest gap {result.gap:.2%}; {result.settings.backend}, "
                  f"{len(sweep.reports)} MILP solves in {result.time_s:.1f} s"
                  + ("; stopped at the time limit" if sweep.timed_out else ""))
    if model_stats:
        print_model_stats(result, console)


def print_model_stats(result: SolveResult, console: Any) -> None:
    from rich.table import Table

    table = Table(title="Full MILP at the first TTFT cap, before screening")
    for column in ("family", "variables", "constraints"):
        table.add_column(column, justify="left" if column == "family" else "right")
    for family, counts in result.model_statistics().items():
        table.add_row(family, str(counts["variables"]), str(counts["constraints"]))
    console.print(table)
