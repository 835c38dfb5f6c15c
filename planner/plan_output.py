"""What `plan solve` prints and writes: JSON (stable keys), CSV, a table, the front plot, plan files.

Figures are the cost model's (exact re-evaluation); timing fields (`time_s`, `first_feasible_s`) are
the only ones that change between runs of the same scenario and seed.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import yaml

from costmodel.calibration import default_calibration, fingerprint
from costmodel.evaluate import evaluate, layout_systems
from costmodel.expected_error import (
    ExpectedError,
    decode_batch_per_rank,
    expected_error,
    held_out_error,
    is_bundled,
    noted,
)
from costmodel.hardware import SystemSpec
from costmodel.kv_tiers import FETCHED_TIERS, TIERS
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from planner import economics_report, report_html
from planner.binding import binding
from planner.experts import ExpertPlacement, bank_name, pool_bank
from planner.finite import dumps
from planner.midfill import midfill_choice
from planner.out_dir import OutputFolder
from planner.placement import layout_gpus, stage_entries
from planner.solve import SolveResult
from planner.sweep import AUTO_HV_TOL
from planner.sweep_result import SolvedPoint

CSV_COLUMNS = ("index", "serving", "ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_gpu_used",
               "tokens_per_s_per_cluster_gpu", "tokens_per_s_per_user", "gpus", "idle_gpus", "usd_per_million_tokens",
               "tokens_per_s_per_mw", "status", "gap", "pools")


def _gap(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 9)


def batches_dict(result: SolveResult) -> dict[str, Any]:
    """Which batches the front is certified over: every integer batch of each layout (within `tolerance`,
    relative tokens/s), or only the grid's (multi-turn sessions, used accounting) and the batches timed
    before the time limit (each point's gap then counts what the untimed ones could add)."""
    batches = result.batches
    scope = "every_integer_batch" if batches.certified else "batch_grid"
    why = None
    if not batches.certified:
        search, workload = result.resolved.scenario.search, result.resolved.scenario.workload
        unbounded = "; the batches between the grid's are neither timed nor bounded, so every point's gap is 1"
        why = ("multi-turn sessions: KV tiers are sized per batch" + unbounded if workload.sessions is not None
               else "used GPU accounting" + unbounded if search.gpu_accounting != "cluster"
               else f"nothing timed deploys in {batches.unsearched}: its untimed batches are bounded, not searched "
               "(each point's gap counts what they could add)" if batches.unsearched and not batches.cut_by_time
               else "the time limit ended the batch rounds (each point's gap counts what untimed batches could add)")
    return {"scope": scope, "tolerance": batches.tolerance, "rounds": batches.rounds, "timed": batches.timed,
            "why_grid": why}


def coverage_dict(result: SolveResult) -> dict[str, Any] | None:
    """The front's certified resolution: every exact front point lies within `certified_ttft_ms` of TTFT of
    a returned point with at least its throughput; `uncovered` are the TTFT ranges a longer solve could
    still add points in, each with the most tokens/s per GPU a point there could have."""
    coverage = result.coverage
    if coverage is None:
        return None
    auto = result.settings.resolution == "auto"
    return {"resolution": result.settings.resolution, "points_limit": result.settings.points if auto else None,
            "ttft_range_ms": [round(coverage.low_ms, 6), round(coverage.top_ms, 6)],
            "step_ms": round(coverage.step_ms, 6), "certified_ttft_ms": round(coverage.certified_ms, 6),
            "hypervolume_ratio_at_least": round(coverage.hypervolume_ratio_at_least, 9),
            "batches": batches_dict(result),
            "uncovered": [{"ttft_ms": [round(a, 6), round(b, 6)],
                           "tokens_per_s_per_gpu_at_most": None if not math.isfinite(v) else v}
                          for a, b, v in coverage.uncovered_ms]}


def _points_note(result: SolveResult) -> str:
    """Where the `auto` front stopped at its point limit before its hypervolume tolerance: how to refine it."""
    limit, coverage = result.settings.points, result.coverage
    if (result.settings.resolution != "auto" or limit is None or len(result.front) < limit or coverage is None
            or coverage.hypervolume_ratio_at_least >= 1 - AUTO_HV_TOL):
        return ""
    return f", at most {limit} points: --points all refines it to within {AUTO_HV_TOL:.2%}"


def layout_dict(layout: Layout) -> dict[str, Any]:
    """The layout as `plan evaluate --layout` reads it (`deployment`, `kv_store` and `tier_load` only where
    they are not their defaults)."""
    data = layout.model_dump(mode="json")
    for pool in data["pools"]:
        if layout.serving != "composite":
            del pool["deployment"]
        if pool["group"] is None:
            del pool["group"]
        if not pool["kv_store"]:
            del pool["kv_store"]
        if pool["tier_load"] == 1.0:
            del pool["tier_load"]
    return data


def placement(result: SolveResult, point: SolvedPoint) -> dict[str, Any]:
    """Per pool: its inventory group, each instance's GPUs (`<group>/r<rack>/n<node>/g<gpu>`, in the order of
    the instance's ranks), each pipeline stage's layer range and rank offsets within an instance (stage s runs
    on gpus[gpu_offset[0]..gpu_offset[1]]), and the expert banks' balance (the banks themselves, per
    expert-parallel degree, are in the plan files and under `expert_banks` of the JSON)."""
    return layout_placement(result.resolved, point.point.layout, result.experts)


def layout_placement(resolved: ResolvedScenario, layout: Layout,
                     experts: dict[str, ExpertPlacement] | None = None) -> dict[str, Any]:
    """`placement` of any layout that fits (ValueError if it does not)."""
    gpus = layout_gpus(resolved, layout)
    pools: list[dict[str, Any]] = []
    domains: set[tuple[str, int, int]] = set()
    for index, pool in enumerate(layout.pools):
        group = resolved.group_named(pool.group)
        assert group is not None
        instances = []
        for placed in gpus[index]:
            domains.update((group.name, r, n // (group.system.scaleup_domain_gpus // group.system.gpus_per_node))
                           for r, n, _ in placed)
            instances.append({"gpus": [group.gpu_id(g) for g in placed]})
        entry: dict[str, Any] = {"role": pool.role, "group": group.name, "gpus_per_instance": pool.gpus_per_instance,
                                 "instances": instances, "stages": stage_entries(resolved, pool)}
        name = bank_name(*pool_bank(resolved, pool))
        if experts and name in experts:
            banks = experts[name]
            entry["experts"] = {"moe_ep": pool.moe_ep, "banks": name, "imbalance": banks.imbalance,
                                "greedy_imbalance": banks.greedy_imbalance,
                                "lower_bound_imbalance": banks.lower_bound_imbalance, "status": banks.status,
                                "gap": banks.gap}
        pools.append(entry)
    groups = {g.name: {"system": g.system.name, "gpus_per_node": g.system.gpus_per_node,
                       "domain_gpus": g.system.scaleup_domain_gpus, "gpus_per_rack": g.system.gpus_per_rack}
              for g in resolved.groups}
    return {"domain_gpus": resolved.groups[0].system.scaleup_domain_gpus, "domains_used": len(domains),
            "groups": groups, "pools": pools}


def expert_banks(result: SolveResult, names: set[str] | None = None) -> dict[str, Any]:
    """Experts per GPU and hot-expert replicas, per expert-parallel degree (busiest GPU first) and, for pools
    placed group by group, per degree and domains (domain by domain: `planner.experts.place_experts`)."""
    ordered = sorted(result.experts.items(), key=lambda item: _bank_order(item[0]))
    return {name: banks.to_dict() for name, banks in ordered if names is None or name in names}


def _bank_order(name: str) -> tuple[int, str]:
    return int(name.split("-", 1)[0]), name


def kv_tiers(result: SolveResult, point: SolvedPoint) -> dict[str, Any] | None:
    """Multi-turn scenarios: the KV tiers of this point's deployment (`costmodel.kv_report`)."""
    if result.resolved.scenario.workload.sessions is None:
        return None
    return evaluate(result.resolved, point.point.layout, result.calibration).kv_tiers


def point_dict(result: SolveResult, point: SolvedPoint) -> dict[str, Any]:
    p = point.point
    tiers, midfill = kv_tiers(result, point), midfill_choice(result, point)
    extra = ({} if tiers is None else {"kv_tiers": tiers}) | ({} if midfill is None else {"midfill": midfill})
    placed = placement(result, point)
    return {
        "ttft_ms": p.ttft_ms, "tpot_ms": p.tpot_ms, "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "tokens_per_s_per_gpu_used": p.tokens_per_s_per_gpu_used,
        "tokens_per_s_per_cluster_gpu": p.tokens_per_s_per_cluster_gpu,
        "tokens_per_s_per_user": p.tokens_per_s_per_user, "gpus": p.gpus, "idle_gpus": p.idle_gpus,
        **economics_report.point_fields(result.resolved, p, result.calibration), "serving": p.layout.serving,
        "status": point.status.value, "gap": _gap(point.gap), "proof": point.proof,
        "binding": binding(result.resolved, p.layout, p.tokens_per_s / result.resolved.scenario.workload.output_tokens,
                           result.calibration or default_calibration(),
                           [pool["instances"][0]["gpus"][0] for pool in placed["pools"]]),
        "layout": layout_dict(p.layout), "placement": placed, **extra,
    }


def result_dict(result: SolveResult) -> dict[str, Any]:
    sweep = result.sweep
    return {
        "status": result.status,
        "termination": result.termination,
        "scenario": result.resolved.scenario.name,
        "gpu_accounting": result.resolved.scenario.search.gpu_accounting,
        "cluster_gpus": result.resolved.gpus,
        **({"calibration": fingerprint(result.calibration)} if result.calibration is not None else {}),
        "expected_error": front_expected_error(result).to_dict(),
        **economics_report.result_fields(result.resolved),
        "coverage": coverage_dict(result),
        "front": [point_dict(result, p) for p in result.front],
        "expert_banks": expert_banks(result),
        "solver": {"backend": result.settings.backend, "time_s": round(result.time_s, 3), "gap": _gap(result.gap),
                   "first_feasible_s": None if result.first_feasible_s is None else round(result.first_feasible_s, 3),
                   "milp_solves": len(sweep.reports),
                   "largest_milp": None if sweep.largest_model is None else {
                       "variables": len(sweep.largest_model.variables),
                       "constraints": len(sweep.largest_model.constraints)},
                   "threads": result.settings.threads, "seed": result.settings.seed,
                   "timed_out": result.timed_out, "termination": result.termination, "errors": sweep.errors},
        "candidates": result.candidates,
    }


def front_expected_error(result: SolveResult) -> ExpectedError:
    """The error to expect of the front's predictions: that of its least surely predicted point (a point on
    systems the calibration's rows lack, or on several at once), `plan evaluate` giving each point's own."""
    resolved, calibration = result.resolved, result.calibration
    by_systems: dict[tuple[str, ...], ExpectedError] = {}
    on_front: list[SystemSpec] = []
    for solved in result.front:
        systems = layout_systems(resolved, solved.point.layout)
        on_front += [system for system in systems if system not in on_front]
        key = tuple(system.name for system in systems)
        if key not in by_systems:
            by_systems[key] = held_out_error(resolved, calibration, systems)
    if not by_systems:
        return expected_error(resolved, calibration)
    least = max(by_systems.values(), key=lambda e: (e.figures is None, (e.figures or {}).get("ttft_median_pct", 0.0)))
    # what any point's systems or batches leave uncovered (a point's batches fit: each runs what it asks)
    batches = [decode_batch_per_rank(solved.point.layout) for solved in result.front] if is_bundled(calibration) else []
    return noted(least, resolved, on_front, batches)


def pools_summary(layout: Layout) -> str:
    """Each pool's instances, group, parallelism and batch, e.g. `9 x mixed tp1 dp8 ep8 b512`, or
    `4 x prefill@hopper tp8 dp1 ep8 b4` on an inventory group (`pp`, and `moetp` for the experts' tensor
    parallelism, shown above 1); a composite's deployments joined by ` | `."""
    if layout.serving == "composite":
        return " | ".join(pools_summary(part) for part in layout.parts)
    return " + ".join(f"{p.replicas} x {p.role}" + (f"@{p.group}" if p.group else "") + f" tp{p.tp} dp{p.dp_attention}"
                      + (f" pp{p.pp}" if p.pp > 1 else "") + (f" moetp{p.moe_tp}" if p.moe_tp > 1 else "")
                      + f" ep{p.moe_ep} b{p.batch}" for p in layout.pools)


def _six(value: float) -> str:
    """Six significant digits without an exponent (".6g" wrote tokens/s per MW as 1.03293e+06): whole numbers
    from 999,999.5 up, ten decimals below 1e-4 (trailing zeros dropped)."""
    if abs(value) >= 999_999.5:
        return f"{value:.0f}"
    if value and abs(value) < 1e-4:
        return f"{value:.10f}".rstrip("0").rstrip(".")
    return f"{value:.6g}"


def csv_text(result: SolveResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for index, solved in enumerate(result.front):
        p = solved.point
        economics = economics_report.economics_of(result.resolved, p, result.calibration)
        writer.writerow([index, p.layout.serving, _six(p.ttft_ms), _six(p.tpot_ms), _six(p.tokens_per_s_per_gpu),
                         _six(p.tokens_per_s_per_gpu_used), _six(p.tokens_per_s_per_cluster_gpu),
                         _six(p.tokens_per_s_per_user), p.gpus, p.idle_gpus, _six(economics.usd_per_million_tokens),
                         _six(economics.tokens_per_s_per_mw), solved.status.value,
                         "" if math.isinf(solved.gap) else f"{solved.gap:.3g}", pools_summary(p.layout)])
    return out.getvalue()


def plan_yaml(result: SolveResult, index: int, point: SolvedPoint, data: dict[str, Any] | None = None) -> str:
    """The plan file of one point; `data`: its `point_dict` when already built (evaluations are not free)."""
    data = data if data is not None else point_dict(result, point)
    head = (f"# Plan {index} of scenario '{result.resolved.scenario.name}' from `plan solve`.\n"
            f"# `plan evaluate SCENARIO --layout` reads this file (the layout below).\n")
    figures = {k: data[k] for k in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "tokens_per_s_per_gpu_used",
                                    "tokens_per_s_per_cluster_gpu", "tokens_per_s_per_user", "gpus", "idle_gpus",
                                    "usd_per_million_tokens", "tokens_per_s_per_mw", "status", "gap")}
    names = {bank_name(*pool_bank(result.resolved, pool)) for pool in point.point.layout.pools}
    body = {"figures": figures, "binding": data["binding"], "layout": data["layout"], "placement": data["placement"],
            "expert_banks": expert_banks(result, names)}
    body.update({key: data[key] for key in ("kv_tiers", "midfill") if key in data})  # multi-turn sessions
    if result.calibration is not None:  # `plan export` prices a composite plan's deployments with it again
        body["calibration"] = fingerprint(result.calibration)
    body["scenario"] = scenario_dict(result)  # `plan export` reads the plan alone
    return head + yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=120)


def scenario_dict(result: SolveResult) -> dict[str, Any]:
    """The scenario as given (fields left out stay out), so a plan file carries what it was solved for."""
    return result.resolved.scenario.model_dump(mode="json", exclude_unset=True)


def write_outputs(result: SolveResult, folder: Path | OutputFolder, data: dict[str, Any] | None = None) -> list[Path]:
    """front.json/csv/png, report.html and a plan file per point, all moved into the folder at once
    (`planner.out_dir`: the earlier front's plan files removed); `data`: the `result_dict` when already built."""
    data = data if data is not None else result_dict(result)
    out = folder if isinstance(folder, OutputFolder) else OutputFolder.prepare(folder)
    try:
        out.path("front.json").write_text(dumps(data, indent=2) + "\n", encoding="utf-8")
        out.path("front.csv").write_text(csv_text(result), encoding="utf-8")
        plot_front(result, out.path("front.png"))
        out.path("report.html").write_text(report_html.render(data, result.resolved), encoding="utf-8")
        for index, point in enumerate(result.front):
            text = plan_yaml(result, index, point, data["front"][index])
            out.path(f"plan-{index}.yaml").write_text(text, encoding="utf-8")
        return out.commit()
    finally:
        out.discard()


def plot_front(result: SolveResult, path: Path) -> None:
    """TTFT against tokens/s per GPU, aggregated, disaggregated and composite points marked, SLO line drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    for serving, marker in (("aggregated", "o"), ("disaggregated", "s"), ("composite", "D")):
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

    table = Table(title=f"Pareto front: {result.resolved.scenario.name} ({result.resolved.cluster_text})")
    for column in ("#", "serving", "TTFT ms", "TPOT ms", "tok/s/GPU cluster", "tok/s/GPU used", "tok/s/user",
                   "$/Mtok", "tok/s/MW", "GPUs", "gap", "pools"):
        table.add_column(column, justify="left" if column in ("serving", "pools") else "right")
    for index, solved in enumerate(result.front):
        p = solved.point
        gap = "-" if math.isinf(solved.gap) else f"{solved.gap:.2%}"
        gpus = f"{p.gpus}" + (f" ({p.idle_gpus} idle)" if p.idle_gpus else "")
        economics = economics_report.economics_of(result.resolved, p, result.calibration)
        table.add_row(str(index), p.layout.serving, f"{p.ttft_ms:.1f}", f"{p.tpot_ms:.2f}",
                      f"{p.tokens_per_s_per_cluster_gpu:.1f}", f"{p.tokens_per_s_per_gpu_used:.1f}",
                      f"{p.tokens_per_s_per_user:.1f}", economics_report.usd_text(economics.usd_per_million_tokens),
                      f"{economics.tokens_per_s_per_mw:,.0f}", gpus, gap, pools_summary(p.layout))
    console.print(table)
    sweep = result.sweep
    accounting = result.resolved.scenario.search.gpu_accounting
    console.print(f"ranked by tokens/s per {'cluster GPU' if accounting == 'cluster' else 'GPU used'} "
                  f"(search.gpu_accounting: {accounting}); {economics_report.rates_line(result.resolved)}")
    proofs = (f"{result.settings.backend}, {len(sweep.reports)} MILP solves" if sweep.reports
              else "each TTFT cap proven by enumeration, no MILP needed")
    console.print(f"status {result.status} ({result.termination}); largest gap {result.gap:.2%}; "
                  f"{proofs}; {result.time_s:.1f} s")
    console.print(front_expected_error(result).text())
    coverage = result.coverage
    if coverage is not None:
        uncovered = "".join(f"; not yet searched: TTFT {a:.1f}-{b:.1f} ms" for a, b, _ in coverage.uncovered_ms[:3])
        grid = "over the grid's batches, " if result.batches.off_grid else ""
        console.print(f"certified: {grid}every deployment of the exact front is within {coverage.certified_ms:.1f} ms "
                      f"TTFT of a point above with at least its throughput; hypervolume within "
                      f"{1 - coverage.hypervolume_ratio_at_least:.2%} of the exact front's "
                      f"(resolution {result.settings.resolution}{_points_note(result)}){uncovered}")
        batches = batches_dict(result)
        console.print("batches: every integer batch of each layout" + (
            f" (an untimed batch gains at most {batches['tolerance']:.1%})" if batches["tolerance"] else "")
            if batches["scope"] == "every_integer_batch" else f"batches: the grid's only ({batches['why_grid']})")
    for error in sweep.errors:
        console.print(f"[yellow]backend error, front cut short: {error}[/yellow]")
    if result.resolved.scenario.workload.sessions is not None:
        print_kv_tiers(result, console)
    if model_stats:
        print_model_stats(result, console)


def print_kv_tiers(result: SolveResult, console: Any) -> None:
    from rich.table import Table

    table = Table(title="KV tiers of each point (fill pool totals, sized for its full rate)")
    for column in ("#", "hit % HBM/DRAM/SSD/store/recompute", "held TB HBM/DRAM/SSD/store",
                   "fetch GB/s DRAM/SSD/store", "TTFT fetching", "copies for arrival rate"):
        table.add_column(column, justify="right")
    for index, solved in enumerate(result.front):
        tiers = kv_tiers(result, solved)
        if tiers is None:
            continue
        hits, held, fetch = tiers["hit_rates"], tiers["stored_gb"], tiers["fetch_gb_per_s"]
        table.add_row(str(index), "/".join(f"{100 * hits[t]:.0f}" for t in TIERS),
                      "/".join(f"{held[t] / 1e3:.1f}" for t in TIERS[:-1]),
                      "/".join(f"{fetch[t]:.1f}" for t in FETCHED_TIERS),
                      f"{tiers['fetch_share_of_ttft']:.0%}", f"{tiers['deployments_for_arrival_rate']:.2f}")
    console.print(table)
    for index, solved in enumerate(result.front):
        choice = midfill_choice(result, solved)
        if choice is not None:
            console.print(f"  {index}: midfill {choice['why']}")


def print_model_stats(result: SolveResult, console: Any) -> None:
    from rich.table import Table

    table = Table(title="Full MILP at the first TTFT cap, before screening")
    for column in ("family", "variables", "constraints"):
        table.add_column(column, justify="left" if column == "family" else "right")
    for family, counts in result.model_statistics().items():
        table.add_row(family, str(counts["variables"]), str(counts["constraints"]))
    console.print(table)
