"""Typed, expected failures of the cost-model layer.

They carry a message meant for the user; callers (the CLI) print it without a traceback.
"""

from __future__ import annotations


class CostModelError(Exception):
    """Base class of expected cost-model failures."""


class CatalogError(CostModelError):
    """A model or system name that the catalog does not know, or a config it cannot read."""


class ConfigError(CostModelError):
    """A Hugging Face config.json that lacks a field the architecture needs, or has a bad value.

    `field` names the offending key (dotted for nested keys) so the CLI can point at it.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ScenarioError(CostModelError):
    """A scenario or layout that is well-formed but cannot be used: names the field to change."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field
