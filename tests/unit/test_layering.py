"""The layering rule of the architecture guide, enforced by parsing imports.

- `costmodel` imports nothing from `planner`;
- neither `costmodel` nor the planner core imports `click` (only `planner/cli.py` may);
- solver backends (ortools, pulp, highspy) are imported only by their adapter modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BACKENDS = {"ortools", "pulp", "highspy"}
CLI_MODULES = {"planner/cli.py", "planner/cli_studies.py"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_costmodel_does_not_import_planner_or_click() -> None:
    offenders = [(_rel(p), sorted(_imports(p) & {"planner", "click"})) for p in _modules("costmodel")]
    assert [o for o in offenders if o[1]] == []


def test_only_the_cli_imports_click() -> None:
    offenders = [_rel(p) for p in _modules("planner") if "click" in _imports(p) and _rel(p) not in CLI_MODULES]
    assert offenders == []


def test_backends_are_imported_only_by_their_adapters() -> None:
    offenders = []
    for path in _modules("planner") + _modules("costmodel"):
        used = _imports(path) & BACKENDS
        if used and "solvers" not in path.relative_to(REPO).parts:
            offenders.append((_rel(path), sorted(used)))
    assert offenders == []


def test_the_rule_itself_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import click\nfrom planner.cli import cli\n", encoding="utf-8")
    assert _imports(bad) >= {"click", "planner"}
