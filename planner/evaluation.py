"""`plan evaluate`: one prediction as a table, or a JSONL batch of cases with per-line errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from costmodel.calibration import Calibration
from costmodel.errors import CostModelError
from costmodel.evaluate import Prediction, evaluate
from costmodel.safe_load import InputLimitError, decode_utf8, load_json, read_bytes
from planner.errors import InputError
from planner.finite import finite_or_error
from planner.report import console as report_console
from planner.scenario import layout_from_document, scenario_from_data
from planner.sourcefile import SourceDocument


def evaluate_cases(path: Path, calibration: Calibration | None = None) -> Iterator[dict[str, Any]]:
    """One result per non-empty line, in order; a bad line yields an error object, never a crash. Lines are
    decoded one by one, so a stray non-UTF-8 byte spoils only its own line."""
    try:
        data = read_bytes(path)
    except InputLimitError as exc:
        raise InputError.single(path, exc.line, "", str(exc)) from None
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if raw.strip():
            yield evaluate_line(path, number, raw, calibration)


def evaluate_line(path: Path, number: int, raw: bytes, calibration: Calibration | None = None) -> dict[str, Any]:
    """The prediction of one `{"scenario": ..., "layout": ...}` line, or `{"line": n, "error": ...}`.

    Expected failures say what to change; anything else (a bug) is reported on its line too, so that one
    poison line never ends the batch."""
    try:
        return {"line": number, **_evaluate_case(path, number, raw, calibration)}
    except InputLimitError as exc:
        return {"line": number, "error": str(exc)}
    except InputError as exc:
        return {"line": number, "error": "; ".join(p.field + ": " + p.message if p.field else p.message
                                                   for p in exc.problems)}
    except CostModelError as exc:
        return {"line": number, "error": str(exc)}
    except (RecursionError, MemoryError, ValueError, ArithmeticError) as exc:
        return {"line": number, "error": f"cannot evaluate this case ({type(exc).__name__}: {exc})"}


def _evaluate_case(path: Path, number: int, raw: bytes, calibration: Calibration | None) -> dict[str, Any]:
    case = load_json(decode_utf8(raw))
    if not isinstance(case, dict) or set(case) != {"scenario", "layout"}:
        raise InputError.single(path, number, "", 'each line must be {"scenario": {...}, "layout": {...}}')
    resolved = scenario_from_data(case["scenario"], base_dir=path.parent)
    layout = layout_from_document(SourceDocument(None, case["layout"], None), resolved)
    return finite_or_error(evaluate(resolved, layout, calibration).to_dict())


def print_prediction(prediction: Prediction) -> None:
    console = report_console(width=160)
    status = "fits" if prediction.feasible else "DOES NOT FIT"
    console.print(
        f"TTFT {prediction.ttft_ms:,.1f} ms   TPOT {prediction.tpot_ms:,.2f} ms   "
        f"{prediction.tokens_per_s_per_gpu:,.1f} tokens/s/GPU   "
        f"{prediction.tokens_per_s_per_user:,.1f} tokens/s/user   "
        f"{prediction.gpus} GPUs   {prediction.memory_per_gpu_gb:,.1f} GB/GPU ({status})"
    )
    if prediction.expected_error is not None:
        console.print(prediction.expected_error.text())
    used = prediction.utilisation
    console.print(f"bottleneck: {prediction.bottleneck}   utilisation: HBM capacity {used['hbm_capacity']:.0%}, "
                  f"HBM bandwidth {used['hbm_bandwidth']:.0%}, compute {used['compute']:.0%}")
    for part in prediction.deployments:  # a composite layout: each deployment's own figures
        console.print(f"deployment {part['deployment']}: TTFT {part['ttft_ms']:,.1f} ms   "
                      f"TPOT {part['tpot_ms']:,.2f} ms   {part['tokens_per_s_per_gpu']:,.1f} tokens/s/GPU   "
                      f"{part['gpus']} GPUs   {part['share_of_requests']:.1%} of the requests")
    for reason in prediction.reasons:
        console.print(f"[red]{reason}[/red]")
    for warning in prediction.warnings:
        console.print(f"[yellow]warning: {warning}[/yellow]")
    if prediction.kv_tiers is not None:
        _print_kv_tiers(console, prediction.kv_tiers)
    for pool in prediction.pools:
        _print_pool(console, pool)


def _print_kv_tiers(console: Console, tiers: dict[str, Any]) -> None:
    """Multi-turn sessions: where the idle contexts wait and what fetching them costs."""
    table = Table(title=f"KV tiers at {tiers['turns_per_s']:,.2f} turns/s (sized for "
                        f"{tiers['sized_for_turns_per_s']:,.2f}); mean context {tiers['context_tokens']:,.0f} tokens")
    for column in ("tier", "capacity GB", "holds GB", "hit rate", "fetch GB/s"):
        table.add_column(column, justify="left" if column == "tier" else "right")
    for tier, hit in tiers["hit_rates"].items():
        capacity, held = tiers["capacity_gb"].get(tier), tiers["stored_gb"].get(tier)
        fetch = tiers["fetch_gb_per_s"].get(tier)
        table.add_row(tier, "-" if capacity is None else f"{capacity:,.1f}", "-" if held is None else f"{held:,.1f}",
                      f"{hit:.1%}", "-" if fetch is None else f"{fetch:,.2f}")
    console.print(table)
    console.print(f"TTFT spent fetching contexts: {tiers['fetch_share_of_ttft']:.1%}; the arrival rate "
                  f"({tiers['arrival_turns_per_s']:,.1f} turns/s) needs {tiers['deployments_for_arrival_rate']:,.2f} "
                  "such deployments")


def _print_pool(console: Console, pool: dict[str, Any]) -> None:
    memory = pool["memory_per_gpu_gb"]
    deployment = f" of deployment {pool['deployment']}" if "deployment" in pool else ""
    console.print(
        f"\n[bold]{pool['role']} pool{deployment}[/bold]: {pool['gpus']} GPUs, "
        f"batch {pool['batch']} (max {pool['max_batch']}); "
        f"GB per GPU: weights {memory['weights']:.1f}, KV {memory['kv_cache']:.1f}, states {memory['states']:.1f}, "
        f"workspace {memory['workspace']:.1f}, reserve {memory['reserve']:.1f} of {memory['capacity']:.1f}"
    )
    table = Table()
    table.add_column("step time (ms)")
    phases = [name for name in ("fill", "mixed", "decode") if name in pool]
    for name in phases:
        table.add_column(f"{name} ({pool[name]['bottleneck']})", justify="right")
    names = sorted({op for name in phases for op in pool[name]["by_operator_ms"]})
    for op in names:
        table.add_row(op, *(f"{pool[name]['by_operator_ms'].get(op, 0.0):.3f}" for name in phases))
    table.add_row("[bold]total[/bold]", *(f"{pool[name]['step_ms']:.3f}" for name in phases))
    table.add_row("roofline floor", *(f"{pool[name]['roofline_floor_ms']:.3f}" for name in phases))
    console.print(table)
