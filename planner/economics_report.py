"""Economics of front points as the outputs show them (JSON keys, table cells, the objective's ranking).

The arithmetic is the cost model's (`costmodel.economics`); this module only picks the GPUs paid for
(the scenario's GPU accounting), names the figures and orders points by `search.objective`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from costmodel.calibration import Calibration, default_calibration
from costmodel.economics import Paid, PointEconomics, point_economics, rates
from costmodel.hardware import SystemSpec
from costmodel.resolve import ResolvedScenario
from planner.pareto import FrontPoint

Objective = Literal["tokens_per_gpu", "usd_per_million_tokens"]
T = TypeVar("T")

# What each objective ranks by, in a point's JSON, and whether higher is better.
OBJECTIVE_KEYS: dict[str, tuple[str, bool]] = {
    "tokens_per_gpu": ("tokens_per_s_per_gpu", True),
    "usd_per_million_tokens": ("usd_per_million_tokens", False),
}


def paid(resolved: ResolvedScenario, point: FrontPoint) -> Paid:
    """The GPUs the ranked tokens/s per GPU divides by, by system: every available GPU of the cluster under
    `cluster` accounting, the deployment's (each pool's on its group's system) under `used`."""
    if point.accounting == "cluster":
        return tuple((group.system, group.gpus) for group in resolved.groups)
    counts: dict[str, int] = {}
    systems: dict[str, SystemSpec] = {}
    for pool in point.layout.pools:
        group = resolved.group_named(pool.group)
        if group is None:
            raise ValueError(f"no inventory group named {pool.group!r}")
        counts[group.name] = counts.get(group.name, 0) + pool.gpus
        systems[group.name] = group.system
    return tuple((systems[name], count) for name, count in counts.items())


def economics_of(resolved: ResolvedScenario, point: FrontPoint,
                 calibration: Calibration | None = None) -> PointEconomics:
    return point_economics(resolved, point.layout, point.tokens_per_s_per_gpu, paid(resolved, point),
                           calibration or default_calibration())


def point_fields(resolved: ResolvedScenario, point: FrontPoint,
                 calibration: Calibration | None = None) -> dict[str, Any]:
    """The economics keys of a front point's JSON (`calibration`: the front's, None for the bundled one)."""
    economics = economics_of(resolved, point, calibration)
    return {"usd_per_million_tokens": economics.usd_per_million_tokens,
            "tokens_per_s_per_mw": economics.tokens_per_s_per_mw, "economics": economics.to_dict()}


def result_fields(resolved: ResolvedScenario) -> dict[str, Any]:
    """The front's objective and the rates its economics use, with their sources: those of the cluster's
    system (of its first inventory group), and under `by_system` those of every system of an inventory."""
    economics = resolved.scenario.economics
    systems = {group.system.name: group.system for group in resolved.groups}
    data = rates(resolved.system, economics).to_dict()
    if len(systems) > 1:
        data["by_system"] = {name: rates(system, economics).to_dict() for name, system in systems.items()}
    return {"objective": resolved.scenario.search.objective, "economics": data}


def best(items: Sequence[T], objective: str, figures: Callable[[T], dict[str, Any]]) -> T | None:
    """The item whose point figures rank first by `objective` (ties: the first given)."""
    key, higher = OBJECTIVE_KEYS[objective]
    ranked = [item for item in items if figures(item).get(key) is not None]
    if not ranked:
        return None
    return max(ranked, key=lambda item: figures(item)[key]) if higher else min(
        ranked, key=lambda item: figures(item)[key])


def rates_line(resolved: ResolvedScenario) -> str:
    """One line on the rates behind $/Mtok and tok/s/MW, for tables (an inventory: each system's price)."""
    systems = {group.system.name: group.system for group in resolved.groups}
    if len(systems) > 1:
        each = [rates(system, resolved.scenario.economics) for system in systems.values()]
        return "$/Mtok and tok/s/MW at each group's rates: " + "; ".join(
            f"{r.system} ${r.usd_per_gpu_hour:.2f}/GPU-hour, {r.facility_w_per_gpu:,.0f} W/GPU" for r in each)
    rate = rates(resolved.system, resolved.scenario.economics)
    return (f"$/Mtok at ${rate.usd_per_gpu_hour:.2f} per {rate.system} GPU-hour ({rate.usd_source}); tok/s/MW at "
            f"{rate.facility_w_per_gpu:,.0f} W per GPU (TDP {rate.gpu_w:,.0f} + node {rate.node_w_per_gpu:,.0f} W, "
            f"PUE {rate.pue:g})")


def usd_text(value: float) -> str:
    """USD per million tokens for tables: cents to tens of thousands, never an exponent (".3g" printed 3.05e+03)."""
    return f"{value:,.3f}" if value < 10 else f"{value:,.2f}" if value < 1000 else f"{value:,.0f}"
