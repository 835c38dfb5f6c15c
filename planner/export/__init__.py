"""`plan export`: a plan file from `plan solve --out` as launch commands and configs of a serving engine.

One module per engine (`trtllm`, `sglang`, `vllm`, `dynamo`) over a small `base`; each returns an
`Export` (files by name, the commands, what the engine cannot express, written as comments).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from planner.errors import InputError
from planner.export import dynamo, sglang, trtllm, vllm
from planner.export.base import ENGINE_VERSIONS, ENGINES, Export, Plan, read_plan
from planner.scenario import load_scenario, scenario_from_data
from planner.sourcefile import read_document

__all__ = ["ENGINES", "ENGINE_VERSIONS", "Export", "Plan", "export_plan", "load_plan"]

_EXPORTERS: dict[str, Callable[[Plan], Export]] = {
    "trtllm": trtllm.export, "sglang": sglang.export, "vllm": vllm.export, "dynamo": dynamo.export,
}


def load_plan(path: str | Path, scenario: str | Path | None = None) -> Plan:
    """Read a plan file and its scenario: the one it carries (`scenario`, written by `plan solve --out`), or
    the file `scenario` when given."""
    path = Path(path)
    data = read_document(path).data
    if scenario is not None:
        return read_plan(path, data, load_scenario(Path(scenario)))
    embedded = data.get("scenario") if isinstance(data, dict) else None
    if not isinstance(embedded, dict):
        raise InputError.single(path, None, "scenario", "the plan carries no scenario (written by an older "
                                "`plan solve`); pass --scenario SCENARIO")
    try:
        resolved = scenario_from_data(embedded, base_dir=path.parent)
    except InputError as exc:  # name the plan file, not "<input>"
        raise InputError([replace(p, path=path, field=f"scenario.{p.field}" if p.field else "scenario")
                          for p in exc.problems]) from None
    return read_plan(path, data, resolved)


def export_plan(plan: Plan, engine: str, backend: str | None = None) -> Export:
    """The export of `plan` for `engine` (`backend`: Dynamo's worker engine, default the scenario's)."""
    if engine not in _EXPORTERS:
        raise InputError.single(None, None, "engine", f"unknown engine '{engine}'; use one of {', '.join(ENGINES)}")
    if engine == "dynamo":
        return dynamo.export(plan, backend)
    return _EXPORTERS[engine](plan)
