"""`plan export`: a plan file from `plan solve --out` as launch commands and configs of a serving engine.

One module per engine (`trtllm`, `sglang`, `vllm`, `dynamo`) over a small `base`; each returns an
`Export` (files by name, the commands, what the engine cannot express, written as comments).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from costmodel.calibration import Calibration
from costmodel.evaluate import evaluate
from costmodel.resolve import ENGINE_VENDORS, runs_on
from planner.calibrate import calibration_mismatch
from planner.errors import InputError
from planner.export import dynamo, sglang, trtllm, vllm
from planner.export.base import (
    ENGINE_VERSIONS,
    ENGINES,
    Export,
    Plan,
    check_fits,
    checkpoint_notes,
    draft_model_notes,
    read_plan,
)
from planner.plan_output import layout_dict
from planner.scenario import is_plan_file, layout_from_document, load_scenario, plan_scenario
from planner.sourcefile import read_document

__all__ = ["ENGINES", "ENGINE_VERSIONS", "Export", "Plan", "export_plan", "load_plan"]

_EXPORTERS: dict[str, Callable[[Plan], Export]] = {
    "trtllm": trtllm.export, "sglang": sglang.export, "vllm": vllm.export, "dynamo": dynamo.export,
}


def load_plan(path: str | Path, scenario: str | Path | None = None) -> Plan:
    """Read a plan file and its scenario: the one it carries (`scenario`, written by `plan solve --out`), or
    the file `scenario` when given; the plan's layout and placement are checked against that scenario's model
    and cluster as `plan evaluate` checks them (a plan for another cluster is refused, not exported)."""
    path = Path(path)
    document = read_document(path)
    if not is_plan_file(document):
        raise InputError.single(path, None, "layout", "not a plan file from `plan solve --out` (no layout)")
    resolved = load_scenario(Path(scenario)) if scenario is not None else plan_scenario(document)
    if resolved is None:
        raise InputError.single(path, None, "scenario", "the plan carries no scenario (written by an older "
                                "`plan solve`); pass --scenario SCENARIO")
    check_fits(path, resolved, layout_from_document(document, resolved))
    return read_plan(path, document.data, resolved)


def export_plan(plan: Plan, engine: str, backend: str | None = None, calibration: Calibration | None = None
                ) -> Export:
    """The export of `plan` for `engine` (`backend`: Dynamo's worker engine, default the scenario's);
    `calibration`: the one the plan was solved with, if not the bundled one (a composite plan's deployments
    are priced again for their shares of the requests)."""
    if engine not in _EXPORTERS:
        raise InputError.single(None, None, "engine", f"unknown engine '{engine}'; use one of {', '.join(ENGINES)}")
    if plan.serving == "composite":
        return _composite(plan, engine, backend, calibration)
    _check_vendor(plan, dynamo.backend_of(plan, backend) if engine == "dynamo" else engine,
                  "--backend vllm or sglang" if engine == "dynamo" else "export for vllm or sglang")
    out = dynamo.export(plan, backend) if engine == "dynamo" else _EXPORTERS[engine](plan)
    out.unexpressed += draft_model_notes(plan) + checkpoint_notes(plan)
    return out


def _check_vendor(plan: Plan, runs: str, instead: str) -> None:
    """The engine that runs the pools (Dynamo's worker backend) runs on their GPUs, as a scenario checks its own
    engine (`costmodel.resolve.check_engine_hardware`): TensorRT-LLM launches on AMD GPUs were written."""
    other = sorted({pool.system.name for pool in plan.pools if not runs_on(runs, pool.system)})
    if other:
        raise InputError.single(plan.path, None, "engine", f"{runs} runs on {ENGINE_VENDORS[runs].upper()} GPUs only "
                                f"and the plan's pools run on {', '.join(other)}: {instead}")


def _composite(plan: Plan, engine: str, backend: str | None, calibration: Calibration | None) -> Export:
    """Several independent deployments: each exported on its own into its folder `deployment<i>/` (its
    scripts find their configs beside them); a router in front sends each its share of the requests."""
    merged = Export(engine=engine)
    for number, part in enumerate(_parts(plan, _same_calibration(plan, calibration))):
        own = export_plan(part, engine, backend)
        prefix = f"deployment{number}/"
        merged.files |= {prefix + name: text for name, text in own.files.items()}
        merged.commands |= {prefix + name: commands for name, commands in own.commands.items()}
        merged.configs |= {prefix + name: config for name, config in own.configs.items()}
        merged.unexpressed += [f"deployment {number}: {line}" for line in own.unexpressed]
    return merged


def _same_calibration(plan: Plan, calibration: Calibration | None) -> Calibration | None:
    """`calibration`, if the plan's figures were priced with it (none recorded: the bundled one); else
    InputError, as the deployments' shares of the requests would be priced otherwise than the plan's figures."""
    document = read_document(plan.path)
    mismatch = calibration_mismatch(document, calibration)
    if mismatch:
        recorded = isinstance(document.data, dict) and "calibration" in document.data
        raise InputError.single(plan.path, document.line_of(("calibration",)) if recorded else None, "calibration",
                                f"a composite plan's deployments are priced again for their shares: {mismatch}")
    return calibration


def _parts(plan: Plan, calibration: Calibration | None) -> list[Plan]:
    """Each deployment of a composite plan as a plan of its own (its pools and their placement)."""
    placed = plan.data["placement"]["pools"]
    whole = layout_from_document(read_document(plan.path))  # validated, errors at the plan file's lines
    deployments = evaluate(plan.resolved, whole, calibration).deployments  # each deployment's own figures
    parts = []
    for number, part in enumerate(whole.parts):
        own = deployments[number]
        figures = {"deployment": f"{number} of {len(deployments)}", "share_of_requests": own["share_of_requests"],
                   "ttft_ms": own["ttft_ms"], "tpot_ms": own["tpot_ms"],
                   "tokens_per_s_per_gpu_used": own["tokens_per_s_per_gpu"], "gpus": own["gpus"]}
        data = {**plan.data, "layout": layout_dict(part), "figures": figures,
                "placement": {**plan.data["placement"], "pools": [placed[i] for i in whole.pool_indices(number)]}}
        parts.append(read_plan(plan.path, data, plan.resolved))
    return parts
