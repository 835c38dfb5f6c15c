"""What `plan compare` prints and writes: the fronts table, the best point per TTFT band and system, one
plot of every front (tokens/s per GPU and USD per million tokens against TTFT), and the CSV of every point."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from planner.economics_report import usd_text
from planner.studies import tables

# `cluster_gpus`: the compared cluster's size (the front's `gpus` in compare.json); `gpus`: what a point uses
CSV_COLUMNS = ("system", "grid", "cluster_gpus", "case_status", "point", "serving", *tables.POINT_COLUMNS,
               *tables.ECONOMICS_COLUMNS, "status", "gap", "pools")


def csv_text(data: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for front in data["fronts"]:
        head = [front["system"], _grid_text(front["grid"]), front["gpus"], front["status"]]
        if not front["front"]:
            writer.writerow([*head, *([""] * (len(CSV_COLUMNS) - len(head)))])
        for index, point in enumerate(front["front"]):
            figures = [point[k] for k in tables.POINT_COLUMNS]
            figures += [point["economics"][k] for k in tables.ECONOMICS_COLUMNS]
            writer.writerow([*head, index, point["serving"], *(tables.cell(v) for v in figures), point["status"],
                             tables.cell(point["gap"]), tables.layout_summary(point["layout"])])
    return out.getvalue()


def _grid_text(grid: dict[str, Any]) -> str:
    """A case's values of the study grid's other paths, `path=value` joined by ", " (empty: none)."""
    return ", ".join(f"{path}={value}" for path, value in grid.items())


def _label(entry: dict[str, Any]) -> str:
    """A front's (or band entry's) system, with its other grid values where the study varies more."""
    return f"{entry['system']} ({_grid_text(entry['grid'])})" if entry.get("grid") else entry["system"]


def _price(economics: dict[str, Any]) -> str:
    """USD per GPU-hour: one system's, or each system's of an inventory (joined by "/", in its order)."""
    each = economics.get("by_system") or {}
    if len(each) > 1:
        return "/".join(f"{rate['usd_per_gpu_hour']:.2f}" for rate in each.values())
    return f"{economics['usd_per_gpu_hour']:.2f}"


def _best(front: list[dict[str, Any]], key: str, higher: bool) -> float | None:
    values = [p[key] for p in front]
    return (max(values) if higher else min(values)) if values else None


def print_tables(data: dict[str, Any], console: Console) -> None:
    table = Table(title=f"Fronts of {data['study']} side by side")
    for column in ("system", "GPUs", "status", "points", "TTFT ms", "best tok/s/GPU", "best $/Mtok",
                   "best tok/s/MW", "$/GPU-h"):
        table.add_column(column, justify="left" if column in ("system", "status") else "right")
    for front in data["fronts"]:
        points = front["front"]
        if not points:
            table.add_row(_label(front), str(front["gpus"]), front["status"], "0", "", "", "", "", "")
            continue
        best_usd = _best(points, 'usd_per_million_tokens', False)
        table.add_row(_label(front), str(front["gpus"]), front["status"], str(len(points)),
                      f"{points[0]['ttft_ms']:.0f}-{points[-1]['ttft_ms']:.0f}",
                      f"{_best(points, 'tokens_per_s_per_gpu', True):.1f}",
                      "" if best_usd is None else usd_text(best_usd),
                      f"{_best(points, 'tokens_per_s_per_mw', True):,.0f}", _price(front["economics"]))
    console.print(table)
    for front in data["fronts"]:
        if not front["front"] and front["message"]:
            console.print(f"  {_label(front)} x {front['gpus']}: {front['message'].splitlines()[0]}")
    bands = Table(title=f"Best point per TTFT band and system (by {data['objective']})")
    for column in ("TTFT at most", "system", "GPUs", "TTFT ms", "TPOT ms", "tok/s/GPU", "$/Mtok", "tok/s/MW",
                   "HBM used", "HBM bw", "stranded GB", "pools"):
        bands.add_column(column, justify="left" if column in ("system", "pools") else "right")
    for band in data["bands"]:
        for entry in band["systems"]:
            cap = f"{band['ttft_ms_at_most']:g} ms"
            if entry["point"] is None:
                bands.add_row(cap, entry["system"], "", "no point", "", "", "", "", "", "", "", "")
                continue
            bands.add_row(cap, _label(entry), str(entry["cluster_gpus"]), f"{entry['ttft_ms']:.0f}",
                          f"{entry['tpot_ms']:.1f}", f"{entry['tokens_per_s_per_gpu']:.1f}",
                          usd_text(entry['usd_per_million_tokens']), f"{entry['tokens_per_s_per_mw']:,.0f}",
                          f"{entry['hbm_capacity_utilisation']:.0%}", f"{entry['hbm_bandwidth_utilisation']:.0%}",
                          f"{entry['stranded_hbm_gb']:,.0f}", entry["pools"])
    console.print(bands)


def plot(data: dict[str, Any], path: Path) -> None:
    """One figure: every front's tokens/s per GPU (left) and USD per million tokens (right, log scale)
    against TTFT; a colour per system, a marker per GPU count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (throughput, price) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
    systems = list(dict.fromkeys(f["system"] for f in data["fronts"]))
    sizes = sorted({f["gpus"] for f in data["fronts"]})
    colours = plt.get_cmap("tab10")
    markers = "os^Dvp*hX"
    for front in data["fronts"]:
        points = front["front"]
        if not points:
            continue
        colour = colours(systems.index(front["system"]) % 10)
        marker = markers[sizes.index(front["gpus"]) % len(markers)]
        label = f"{_label(front)} x {front['gpus']}"
        ttft = [p["ttft_ms"] for p in points]
        throughput.plot(ttft, [p["tokens_per_s_per_gpu"] for p in points], marker=marker, ms=3, lw=0.9,
                        color=colour, label=label)
        price.plot(ttft, [p["usd_per_million_tokens"] for p in points], marker=marker, ms=3, lw=0.9,
                   color=colour, label=label)
    for band in data["bands"]:
        for axes in (throughput, price):
            axes.axvline(band["ttft_ms_at_most"], color="grey", ls=":", lw=0.7)
    throughput.set_ylabel("tokens/s per GPU")
    price.set_ylabel("USD per million tokens")
    price.set_yscale("log")
    for axes in (throughput, price):
        axes.set_xlabel("TTFT (ms)")
        axes.grid(alpha=0.3)
    throughput.legend(fontsize=7)
    figure.suptitle(f"{data['study']}: fronts by system and size (dotted: TTFT bands)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)
