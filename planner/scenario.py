"""Load scenario and layout files: parse, validate structure, resolve and check semantics.

Every failure becomes an `InputError` naming the file, the line and the field, with what to change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from costmodel.economics import check_economics
from costmodel.errors import ConfigError, ScenarioError
from costmodel.evaluate import check_offload
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario, check_layout, resolve
from costmodel.scenario import Scenario
from planner.errors import InputError
from planner.placement import check_layout_fits, check_placement
from planner.sourcefile import SourceDocument, parse_text, read_document
from planner.validation import validate_document

__all__ = ["Layout", "ResolvedScenario", "Scenario", "load_layout", "load_scenario", "scenario_from_data"]


def load_scenario(path: Path) -> ResolvedScenario:
    """Read, validate and resolve a scenario file."""
    return _resolve_document(read_document(path))


def load_scenario_document(document: SourceDocument, base_dir: Path | None = None) -> ResolvedScenario:
    """Validate and resolve a scenario document already read (paths in it relative to `base_dir`, by
    default its file's folder)."""
    return _resolve_document(document, base_dir)


def scenario_from_data(data: dict[str, Any], base_dir: Path | None = None) -> ResolvedScenario:
    """Validate and resolve a scenario given as a mapping (e.g. one line of a JSONL file)."""
    document = SourceDocument(path=None, data=data, root=None)
    return _resolve_document(document, base_dir)


def _resolve_document(document: SourceDocument, base_dir: Path | None = None) -> ResolvedScenario:
    scenario = validate_document(Scenario, document, "scenario")
    if base_dir is None and document.path is not None:
        base_dir = document.path.parent
    try:
        check_economics(scenario)
        return resolve(scenario, base_dir)
    except ScenarioError as exc:
        raise _located(document, exc.field, str(exc)) from None
    except ConfigError as exc:
        where = exc.located()
        detail = f" ({where})" if where else ""
        raise _located(document, "model", f"{exc}{detail}") from None


def load_layout(path: Path, resolved: ResolvedScenario | None = None) -> Layout:
    """Read and validate a layout file; with a scenario, also check that it fits its model and cluster."""
    return layout_from_document(read_document(path), resolved)


def layout_from_text(text: str, resolved: ResolvedScenario | None = None) -> Layout:
    return layout_from_document(parse_text(text), resolved)


def plan_scenario(document: SourceDocument) -> ResolvedScenario | None:
    """The scenario a plan file carries (`plan solve --out` writes it under `scenario`), resolved with paths
    relative to the plan's folder; None when it carries none (written by an older `plan solve`)."""
    embedded = document.data.get("scenario") if isinstance(document.data, dict) else None
    if not isinstance(embedded, dict):
        return None
    try:  # its problems at their lines in the plan file
        return _resolve_document(document.sub("scenario"), document.path.parent if document.path else None)
    except InputError as exc:  # named under the plan's `scenario`
        raise exc.under("scenario", document.path) from None


def is_plan_file(document: SourceDocument) -> bool:
    """A `plan-<i>.yaml` written by `plan solve --out`: its layout sits under `layout`."""
    return isinstance(document.data, dict) and "layout" in document.data and "pools" not in document.data


def layout_from_document(document: SourceDocument, resolved: ResolvedScenario | None = None) -> Layout:
    """Validate a layout document, or the layout inside a plan file (its problems named by their place in the
    plan: `layout.pools.0.tp`, `placement.pools.0...`)."""
    if not is_plan_file(document):
        return _checked_layout(document, resolved)
    try:
        layout = _checked_layout(document.sub("layout"), resolved)
    except InputError as exc:
        raise exc.under("layout") from None
    if resolved is not None and isinstance(document.data, dict) and "placement" in document.data:
        try:
            check_placement(resolved, layout, document.data["placement"])
        except ScenarioError as exc:
            raise _located(document, exc.field, str(exc)) from None
    return layout


def _checked_layout(document: SourceDocument, resolved: ResolvedScenario | None) -> Layout:
    layout = validate_document(Layout, document, "layout")
    if resolved is not None:
        try:
            check_layout(resolved, layout)
            check_layout_fits(resolved, layout)
            check_offload(resolved, layout)
        except ScenarioError as exc:
            raise _located(document, exc.field, str(exc)) from None
    return layout


def _located(document: SourceDocument, field: str, message: str) -> InputError:
    loc = tuple(int(part) if part.isdigit() else part for part in field.split("."))
    return InputError.single(document.path, document.line_of(loc), field, message)
