"""Study files: `{study: NAME, base: <scenario mapping or path>, grid: {dotted.path: [values], ...}}`.

The cases are the product of the grid's value lists, in the file's order (the last path varies fastest),
each applied to the base scenario by its dotted path (`cluster.system`, `workload.input_tokens`, `model`,
`search.time_limit_s`, ...). Setting one of `cluster.gpus` / `nodes` / `racks` drops the base's other two,
so a grid over GPU counts works on a base sized in nodes. Every case is validated before anything runs;
a problem is reported at the grid value (or base field) that causes it, as `file:line: field: message`.

A case is known by the content hash of its validated scenario (and the planner's version, and the bytes
of a model file it names): reordering or extending the grid keeps the hash of every case already solved.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field

from costmodel.calibration import default_calibration, fingerprint
from costmodel.expected_error import bundled_figures
from costmodel.scenario import StrictModel
from planner import __version__
from planner.errors import InputError, InputProblem
from planner.scenario import scenario_from_data
from planner.sourcefile import SourceDocument, read_document
from planner.validation import unique_problems, validate_document

MAX_CASES = 10_000
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_COUNTS = ("gpus", "nodes", "racks")


class StudyFile(StrictModel):
    """A fleet study: one base scenario and the grid of values to vary in it."""

    study: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                       description="Study name (letters, digits, '.', '_', '-'), used in outputs.")
    description: str | None = Field(None, max_length=2000, description="What the study asks, for the reports.")
    base: str | dict[str, Any] = Field(
        description="The base scenario: a mapping as in a scenario file, or the path of a scenario file "
        "(relative to the study file)."
    )
    grid: Annotated[dict[str, Annotated[list[Any], Field(min_length=1, max_length=1000)]],
                    Field(min_length=1, max_length=16)] = Field(
        description="Dotted scenario paths and the values each takes, e.g. {cluster.system: [b200-sxm, "
        "gb200-nvl72], cluster.gpus: [16, 32]}; the cases are every combination."
    )


@dataclass(frozen=True)
class Case:
    """One scenario of a study: its place in the grid, its values, its scenario and content hash."""

    index: int
    values: dict[str, Any]  # grid path -> value
    scenario: dict[str, Any]  # the validated scenario, as JSON (defaults filled in)
    base_dir: str | None  # where a relative model path is looked up
    hash: str
    calibration: dict[str, Any] | None = None  # priced with this calibration (`plan calibrate`), else the bundled

    @property
    def label(self) -> str:
        return ", ".join(f"{path}={_short(value)}" for path, value in self.values.items())


@dataclass(frozen=True)
class Study:
    name: str
    description: str | None
    grid: dict[str, list[Any]]
    cases: tuple[Case, ...]
    path: Path | None


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


def load_study(path: Path) -> Study:
    """Read, validate and expand a study file; every case is validated as a scenario."""
    document = read_document(path)
    study = validate_document(StudyFile, document, "study")
    base, base_document, base_dir = study_base(study, document, path)
    return build_study(study.study, study.description, base, study.grid, document, base_document, base_dir)


def study_base(study: StudyFile, document: SourceDocument, path: Path) -> tuple[dict[str, Any], SourceDocument, Path]:
    """The study's base scenario, its document and the folder its relative paths start from."""
    if isinstance(study.base, dict):
        return study.base, document.sub("base"), path.parent
    base_path = (path.parent / study.base) if not Path(study.base).is_absolute() else Path(study.base)
    try:
        base_document = read_document(base_path)
    except InputError as exc:
        problem = InputProblem(path, document.line_of(("base",)), "base", f"cannot read the base scenario: "
                               f"{exc.problems[0].message}")
        raise InputError([problem]) from None
    if not isinstance(base_document.data, dict):
        raise InputError.single(base_path, 1, "", "a scenario must be a YAML mapping of fields")
    return base_document.data, base_document, base_path.parent


def build_study(name: str, description: str | None, base: dict[str, Any], grid: dict[str, list[Any]],
                document: SourceDocument, base_document: SourceDocument, base_dir: Path | None) -> Study:
    """The cases of `grid` over `base`, each validated; problems located in `document` (the grid) or
    `base_document` (the base scenario)."""
    problems: list[InputProblem] = []
    for key in grid:
        if not _PATH.fullmatch(key):
            problems.append(InputProblem(document.path, _key_line(document, key), f"grid.{key}",
                                         "not a dotted scenario path; write it like cluster.system or "
                                         "workload.input_tokens"))
        elif key == "search.objective" or key.startswith("search.objective."):
            problems.append(InputProblem(document.path, _key_line(document, key), f"grid.{key}",
                                         "the objective ranks the cases against each other, so a study has one: "
                                         "set search.objective in the base (a front does not change with it), "
                                         "or run a study per objective"))
    count = 1
    for values in grid.values():
        count *= len(values)
    if count > MAX_CASES:
        problems.append(InputProblem(document.path, document.line_of(("grid",)), "grid",
                                     f"{count:,} cases; a study holds at most {MAX_CASES:,}: split it"))
    if problems:
        raise InputError(problems)
    cases = []
    for index, combination in enumerate(itertools.product(*(enumerate(v) for v in grid.values()))):
        chosen = {key: value for key, (_, value) in zip(grid, combination, strict=True)}
        positions = {key: position for key, (position, _) in zip(grid, combination, strict=True)}
        try:
            cases.append(_case(index, base, chosen, base_dir))
        except _PathError as exc:
            key = exc.key
            problems.append(InputProblem(document.path, _key_line(document, key), f"grid.{key}", str(exc)))
        except InputError as exc:
            problems += [_locate(p, chosen, positions, document, base_document) for p in exc.problems]
    if problems:
        raise InputError(unique_problems(problems))
    return Study(name, description, grid, tuple(cases), document.path)


class _PathError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def apply(base: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """`base` with each dotted path set to its value (intermediate mappings made as needed)."""
    data = copy.deepcopy(base)
    for key, value in values.items():
        parts = key.split(".")
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise _PathError(key, f"{where} is not a mapping in the base scenario, so {key} cannot be set")
            node = child
        if parts[:-1] == ["cluster"] and parts[-1] in _COUNTS:
            for other in _COUNTS:
                node.pop(other, None)
        node[parts[-1]] = copy.deepcopy(value)
    return data


def _case(index: int, base: dict[str, Any], values: dict[str, Any], base_dir: Path | None) -> Case:
    data = apply(base, values)
    resolved = scenario_from_data(data, base_dir)
    scenario = resolved.scenario.model_dump(mode="json")
    return Case(index, values, scenario, None if base_dir is None else str(base_dir),
                case_hash(scenario, base_dir))


def with_calibration(cases: tuple[Case, ...], calibration: dict[str, Any] | None) -> tuple[Case, ...]:
    """The cases priced with `calibration` (a calibration as JSON): their hashes cover it, so that a cached
    result of another calibration is never taken for theirs."""
    if calibration is None:
        return cases
    text = json.dumps(calibration, sort_keys=True)
    return tuple(replace(case, calibration=calibration,
                         hash=hashlib.sha256(f"{case.hash}\n{text}".encode()).hexdigest()[:20]) for case in cases)


def calibration_field(study: Study) -> dict[str, Any]:
    """`{"calibration": ...}` for a study's JSON when its cases are priced with a calibration of their own."""
    priced = next((case.calibration for case in study.cases if case.calibration is not None), None)
    return {} if priced is None else {"calibration": fingerprint(priced)}


def case_hash(scenario: dict[str, Any], base_dir: Path | None) -> str:
    """Content hash of a case: its validated scenario, the planner's version, the bundled calibration and the
    expected-error figures quoted with it (a refit changes every front), and the bytes of a model file it
    names (a catalog model is named by its id alone)."""
    digest = hashlib.sha256()
    bundled = {"calibration": fingerprint(default_calibration())["sha256"],
               "expected_error": bundled_figures()}
    digest.update(json.dumps({"scenario": scenario, "version": __version__, **bundled}, sort_keys=True).encode())
    model = Path(str(scenario["model"]))
    model_file = model if model.is_absolute() else (base_dir or Path.cwd()) / model
    if model_file.is_file():
        digest.update(model_file.read_bytes())
    return digest.hexdigest()[:20]


def _locate(problem: InputProblem, values: dict[str, Any], positions: dict[str, int], document: SourceDocument,
            base_document: SourceDocument) -> InputProblem:
    """A case's scenario problem, at the grid value that causes it or else at the base field."""
    field = problem.field
    for key in values:
        if field and (field == key or field.startswith(key + ".") or key.startswith(field + ".")):
            line = document.line_of(("grid", key, positions[key]))
            return InputProblem(document.path, line, f"grid.{key}[{positions[key]}]",
                                f"{_short(values[key])}: {problem.message}")
    loc = tuple(int(part) if part.isdigit() else part for part in field.split(".")) if field else ()
    label = "base." + field if base_document.path == document.path and field else field
    return InputProblem(base_document.path, base_document.line_of(loc), label, problem.message)


def _key_line(document: SourceDocument, key: str) -> int | None:
    """The line of grid key `key` itself (its values may start below it)."""
    grid = document.root
    for part in ("grid", key):
        if not isinstance(grid, yaml.MappingNode):
            return document.line_of(("grid",))
        for key_node, value_node in grid.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == part:
                line = int(key_node.start_mark.line) + 1
                grid = value_node
                break
        else:
            return document.line_of(("grid",))
    return line
