"""JSON Schemas of the user-facing file formats (committed under `schemas/`, kept in sync by a test)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from costmodel.layout import Layout
from costmodel.scenario import Scenario
from planner.calibrate import MeasurementsFile

_MODELS: dict[str, type[BaseModel]] = {"scenario": Scenario, "layout": Layout, "measurements": MeasurementsFile}


def json_schema(what: str) -> dict[str, Any]:
    """The JSON Schema of a `scenario`, `layout` or `measurements` (`plan calibrate`) document."""
    schema: dict[str, Any] = _MODELS[what].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
