"""`plan compare SCENARIO --systems a,b --gpus 16,32`: one scenario's fronts on several systems and sizes.

The cases are the study `{base: SCENARIO, grid: {cluster.system: systems, cluster.gpus: gpus}}` (or a
study file's own grid), run as `plan sweep` runs them. The answer sets the fronts side by side and, for
each TTFT band (a cap: "TTFT at most X ms"), each system's best point over its sizes by the scenario's
`search.objective` (tokens/s per GPU, or USD per million tokens, which differ between systems).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.economics_report import best
from planner.errors import InputError, InputProblem
from planner.sourcefile import SourceDocument, read_document
from planner.studies import tables
from planner.studies.runner import CaseResult
from planner.studies.study import Study, StudyFile, build_study, calibration_field, load_study, study_base
from planner.validation import validate_document

BAND_SHARES = (0.125, 0.25, 0.5, 1.0)  # of the TTFT SLO (else of the slowest point of any front)
_OPTION = {"cluster.system": "--systems", "cluster.gpus": "--gpus"}


def comparison_study(path: Path, systems: list[str] | None, gpus: list[int] | None) -> Study:
    """The study of `path`: a study file (its grid, with --systems / --gpus replacing those paths), or a
    scenario file with the grid of --systems and --gpus (both needed)."""
    document = read_document(path)
    if isinstance(document.data, dict) and "study" in document.data:
        if not systems and not gpus:
            return load_study(path)
        study = validate_document(StudyFile, document, "study")
        given = {key: list(values) for key, values in (("cluster.system", systems), ("cluster.gpus", gpus)) if values}
        base, base_document, base_dir = study_base(study, document, path)
        return _built(study.study, study.description, base, {**study.grid, **given}, document, base_document,
                      base_dir, set(given))
    if not systems or not gpus:
        raise InputError.single(None, None, "--systems" if not systems else "--gpus",
                                "give the systems and GPU counts to compare, e.g. --systems b200-sxm,gb200-nvl72 "
                                "--gpus 16,32 (or a study file whose grid names them)")
    if not isinstance(document.data, dict):
        raise InputError.single(path, 1, "", "a scenario must be a YAML mapping of fields")
    grid: dict[str, list[Any]] = {"cluster.system": list(systems), "cluster.gpus": list(gpus)}
    name = str(document.data.get("name", path.stem))
    return _built(_study_name(name), None, document.data, grid, SourceDocument(None, {"grid": grid}, None), document,
                  path.parent, set(grid))


def _study_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip("-_.") or "compare"


def _built(name: str, description: str | None, base: dict[str, Any], grid: dict[str, list[Any]],
           document: SourceDocument, base_document: SourceDocument, base_dir: Path, given: set[str]) -> Study:
    """The study; a problem with a grid value `given` on the command line is the option's, not the file's."""
    try:
        return build_study(name, description, base, grid, document, base_document, base_dir)
    except InputError as exc:
        problems = []
        for problem in exc.problems:
            option = next((o for key, o in _OPTION.items() if key in given and problem.field.startswith(f"grid.{key}")),
                          None)
            if option is not None:
                problem = InputProblem(None, None, option, problem.message)
            problems.append(problem)
        raise InputError(problems) from None


@dataclass(frozen=True)
class Front:
    system: str  # the cluster's system; an inventory's systems joined by "+"
    gpus: int
    result: CaseResult
    grid: dict[str, Any]  # the case's values of a study grid's other paths (workload, precision, ...)

    @property
    def points(self) -> list[dict[str, Any]]:
        return list(self.result.result["front"]) if self.result.result else []


def fronts(results: list[CaseResult]) -> list[Front]:
    """Each case as (system, GPUs of the cluster, its result, its other grid values), in case order."""
    out = []
    for result in results:
        scenario = result.case.scenario
        gpus = result.result["cluster_gpus"] if result.result else _stated_gpus(scenario)
        grid = {path: value for path, value in result.case.values.items() if path not in _OPTION}
        out.append(Front(_system_label(scenario["cluster"]), int(gpus), result, grid))
    return out


def _system_label(cluster: dict[str, Any]) -> str:
    """The cluster's system, or an inventory's group systems joined by "+" (in order, each once)."""
    if cluster.get("system"):
        return str(cluster["system"])
    return "+".join(dict.fromkeys(str(group["system"]) for group in cluster.get("inventory") or [])) or "inventory"


def _stated_gpus(scenario: dict[str, Any]) -> int:
    """GPUs a case's cluster states (for a case without a front, which has no `cluster_gpus`)."""
    from costmodel.hardware import load_system

    cluster = scenario["cluster"]
    if cluster.get("inventory"):  # an inventory: its groups' GPUs
        return sum(_stated_gpus({"cluster": group}) for group in cluster["inventory"])
    if cluster.get("gpus"):
        return int(cluster["gpus"])
    system = load_system(str(cluster["system"]))
    per = system.gpus_per_node if cluster.get("nodes") else system.gpus_per_rack
    return int(cluster.get("nodes") or cluster.get("racks") or 0) * per


def band_caps(study: Study, found: list[Front], bands: list[float] | None) -> list[float]:
    """TTFT caps in ms: given, or shares of the SLO (the largest of the cases' where a study varies it; else of
    the slowest point of any front)."""
    if bands:
        return sorted(set(bands))
    slos = [case.scenario["slo"].get("ttft_ms") for case in study.cases]
    slo = None if None in slos else max(slos, default=None)
    top = slo or max((p["ttft_ms"] for f in found for p in f.points), default=0.0)
    # rounded up to the us: the widest band holds the slowest point (rounded to nearest, a TTFT of 196.13313 ms
    # fell outside a 196.133 ms cap, with the front's best throughput)
    return [math.ceil(top * share * 1e3 - 1e-6) / 1e3 for share in BAND_SHARES] if top else []


def _point_summary(front: Front, index: int, point: dict[str, Any]) -> dict[str, Any]:
    """A front's point in a band: `cluster_gpus` the compared size, `gpus` (of the point's columns) what it uses."""
    return {"system": front.system, "grid": front.grid, "cluster_gpus": front.gpus, "point": index,
            "serving": point["serving"],
            **{key: point[key] for key in tables.POINT_COLUMNS},
            **{key: point["economics"][key] for key in tables.ECONOMICS_COLUMNS},
            "pools": tables.layout_summary(point["layout"])}


def best_by_band(found: list[Front], caps: list[float], objective: str) -> list[dict[str, Any]]:
    """Per TTFT cap: each system's best point over its sizes, and each front's best point."""
    bands = []
    systems = list(dict.fromkeys(f.system for f in found))
    for cap in caps:
        per_front = []
        for front in found:
            within = [(index, p) for index, p in enumerate(front.points) if p["ttft_ms"] <= cap]
            chosen = best(within, objective, lambda item: item[1])
            per_front.append(None if chosen is None else _point_summary(front, *chosen))
        per_system = []
        for system in systems:
            entries = [e for e in per_front if e is not None and e["system"] == system]
            chosen_entry = best(entries, objective, lambda entry: entry)
            per_system.append(chosen_entry if chosen_entry is not None else {"system": system, "point": None})
        bands.append({"ttft_ms_at_most": cap, "systems": per_system,
                      "fronts": [e if e is not None else {"system": f.system, "grid": f.grid, "cluster_gpus": f.gpus,
                                                          "point": None}
                                 for e, f in zip(per_front, found, strict=True)]})
    return bands


def compare_dict(study: Study, results: list[CaseResult], objective: str, bands: list[float] | None) -> dict[str, Any]:
    found = fronts(results)
    caps = band_caps(study, found, bands)
    return {
        "study": study.name, "objective": objective, **calibration_field(study),
        "fronts": [{"system": f.system, "grid": f.grid, "gpus": f.gpus, "status": f.result.status,
                    "message": f.result.message,
                    "case_hash": f.result.case.hash,
                    "economics": f.result.result["economics"] if f.result.result else None,
                    "coverage": f.result.result["coverage"] if f.result.result else None,
                    "expected_error": f.result.result.get("expected_error") if f.result.result else None,
                    "front": f.points} for f in found],
        "bands": best_by_band(found, caps, objective),
    }
