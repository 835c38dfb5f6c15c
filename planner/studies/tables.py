"""A study's results as tables: one row per case and front point (CSV, Parquet), a JSON summary, plots.

Rows are in case order, then front order; figures are the front's JSON values as `plan solve` gives them,
so the same cases give the same bytes whichever executor ran them (timing fields aside, which only the
summary carries).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planner.economics_report import OBJECTIVE_KEYS, best
from planner.plan_output import pools_summary
from planner.studies.runner import CaseResult
from planner.studies.study import Study, calibration_field

POINT_COLUMNS = ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_gpu_used",
                 "tokens_per_s_per_cluster_gpu", "tokens_per_s_per_user", "gpus", "idle_gpus",
                 "usd_per_million_tokens", "tokens_per_s_per_mw")
ECONOMICS_COLUMNS = ("hbm_capacity_utilisation", "hbm_bandwidth_utilisation", "stranded_hbm_gb")
INT_COLUMNS = frozenset({"case", "point", "gpus", "idle_gpus"})
FLOAT_COLUMNS = frozenset(POINT_COLUMNS + ECONOMICS_COLUMNS + ("gap",)) - INT_COLUMNS


def columns(grid: Sequence[str]) -> list[str]:
    return ["case", *grid, "case_status", "point", "serving", *POINT_COLUMNS, *ECONOMICS_COLUMNS, "status", "gap",
            "pools", "message", "case_hash"]


def layout_summary(layout: dict[str, Any]) -> str:
    from costmodel.layout import Layout

    return pools_summary(Layout.model_validate(layout))


def rows(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    """One row per case and front point (one row with empty figures for a case without a front)."""
    table = []
    for result in results:
        head: dict[str, Any] = {"case": result.case.index, **result.case.values, "case_status": result.status}
        tail = {"message": (result.message or "").splitlines()[0] if result.message else None,
                "case_hash": result.case.hash}
        front = result.result["front"] if result.result else []
        if not front:
            table.append({**head, "point": None, **tail})
        for index, point in enumerate(front):
            figures = {key: point[key] for key in POINT_COLUMNS}
            figures.update({key: point["economics"][key] for key in ECONOMICS_COLUMNS})
            table.append({**head, "point": index, "serving": point["serving"], **figures, "status": point["status"],
                          "gap": point["gap"], "pools": layout_summary(point["layout"]), **tail})
    return table


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same float
    if isinstance(value, str | int | bool):
        return str(value)
    return json.dumps(value, sort_keys=True)


def csv_text(study: Study, table: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    names = columns(list(study.grid))
    writer.writerow(names)
    for row in table:
        writer.writerow([cell(row.get(name)) for name in names])
    return out.getvalue()


def write_parquet(study: Study, table: list[dict[str, Any]], path: Path) -> None:
    """The rows with typed columns: integers, floats, and grid values typed by what they hold (JSON text
    where a grid path takes mappings or mixed kinds)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays, names = [], columns(list(study.grid))
    for name in names:
        values = [row.get(name) for row in table]
        if name in INT_COLUMNS:
            arrays.append(pa.array(values, type=pa.int64()))
        elif name in FLOAT_COLUMNS:
            arrays.append(pa.array([None if v is None else float(v) for v in values], type=pa.float64()))
        elif name in study.grid:
            arrays.append(_grid_array(values))
        else:
            arrays.append(pa.array([None if v is None else str(v) for v in values], type=pa.string()))
    pq.write_table(pa.table(arrays, names=names), path)


def _grid_array(values: list[Any]) -> Any:
    import pyarrow as pa

    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int}:
        return pa.array(values, type=pa.int64())
    if kinds <= {int, float}:
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    if kinds <= {bool}:
        return pa.array(values, type=pa.bool_())
    return pa.array([None if v is None else v if isinstance(v, str) else json.dumps(v, sort_keys=True)
                     for v in values], type=pa.string())


def best_point(result: CaseResult, objective: str) -> dict[str, Any] | None:
    """The case's front point that ranks first by `objective` (with its index and layout summary)."""
    front = result.result["front"] if result.result else []
    indexed = list(enumerate(front))
    chosen = best(indexed, objective, lambda item: item[1])
    if chosen is None:
        return None
    index, point = chosen
    return {"point": index, "serving": point["serving"], **{key: point[key] for key in POINT_COLUMNS},
            **{key: point["economics"][key] for key in ECONOMICS_COLUMNS}, "pools": layout_summary(point["layout"])}


def summary(study: Study, results: Sequence[CaseResult], objective: str, run: dict[str, Any]) -> dict[str, Any]:
    """The study's JSON summary: each case's status, front size and best point by `objective`; totals; and
    how this run went (`run`: executor, cases cached and computed, wall time)."""
    counts: dict[str, int] = {}
    cases = []
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
        cases.append({"case": result.case.index, "hash": result.case.hash, "values": result.case.values,
                      "status": result.status, "message": result.message,
                      "points": len(result.result["front"]) if result.result else 0,
                      "best": best_point(result, objective), "time_s": round(result.time_s, 3)})
    return {"study": study.name, "description": study.description, "grid": study.grid, "objective": objective,
            **calibration_field(study), "cases": cases,
            "totals": {"cases": len(results), **dict(sorted(counts.items()))}, "run": run}


def plot(study: Study, results: Sequence[CaseResult], objective: str, path: Path) -> None:
    """Left: every case's front (TTFT against tokens/s per GPU); right: each case's best point by the
    objective. Up to 12 cases are named in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (fronts, bests) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
    colours = plt.get_cmap("tab20" if len(results) > 10 else "tab10")
    key, _ = OBJECTIVE_KEYS[objective]
    xs, ys, labels = [], [], []
    for number, result in enumerate(results):
        front = result.result["front"] if result.result else []
        if not front:
            continue
        colour = colours(number % colours.N)
        label = result.case.label if len(results) <= 12 else None
        fronts.step([p["tokens_per_s_per_gpu"] for p in front], [p["ttft_ms"] for p in front], where="post",
                    color=colour, lw=1.0, alpha=0.9, label=label)
        chosen = best_point(result, objective)
        if chosen is not None and chosen.get(key) is not None and math.isfinite(chosen[key]):
            xs.append(result.case.index)
            ys.append(chosen[key])
            labels.append(result.case.label)
    fronts.set_xlabel("tokens/s per GPU")
    fronts.set_ylabel("TTFT (ms)")
    fronts.set_title(f"{study.name}: fronts of {len(results)} cases", fontsize=9)
    fronts.grid(alpha=0.3)
    if len(results) <= 12:
        fronts.legend(fontsize=6)
    bests.plot(xs, ys, "o", ms=3)
    bests.set_xlabel("case")
    bests.set_ylabel(key.replace("_", " "))
    bests.set_title(f"best point per case by {objective}", fontsize=9)
    bests.grid(alpha=0.3)
    if len(xs) <= 24:
        bests.set_xticks(xs, labels=[str(x) for x in xs], fontsize=7)
    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)
