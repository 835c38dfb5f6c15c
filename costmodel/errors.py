"""Typed, expected failures of the cost-model layer.

They carry a message meant for the user; callers (the CLI) print it without a traceback.
"""

from __future__ import annotations

from pathlib import Path


class CostModelError(Exception):
    """Base class of expected cost-model failures."""


class CatalogError(CostModelError):
    """A model or system name that the catalog does not know, or a config it cannot read; `field`: the key of
    the entry or override at fault, where one is."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ConfigError(CostModelError):
    """A Hugging Face config.json that lacks a field the architecture needs, or has a bad value.

    `field` names the offending key (dotted for nested keys) so the CLI can point at it; `path` and `line`, the
    file and the key's line in it, when the config came from a file (`costmodel.models`).
    """

    def __init__(self, message: str, field: str | None = None, path: Path | None = None,
                 line: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.path = path
        self.line = line

    def located(self) -> str:
        """`file:line, field key` of the offending key, `config field key` without a file, "" without either."""
        if self.path is None:
            return f"config field {self.field}" if self.field else ""
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}, field {self.field}" if self.field else where


class ScenarioError(CostModelError):
    """A scenario or layout that is well-formed but cannot be used: names the field to change."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field
