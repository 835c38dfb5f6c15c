"""Read YAML/JSON documents while remembering the line of every key, so errors can point at it.

PyYAML's composer gives each node a start mark; we keep the node tree beside the constructed data and
walk it with a pydantic error location to find the line. Two deliberate departures from plain
`yaml.safe_load`:
- `1e12` is read as a float (YAML 1.1 needs `1.0e+12`; users write SI values the short way);
- a key given twice in one mapping is an error, not a silent overwrite.
Input limits (regular UTF-8 files of bounded size, nesting depth, alias expansion, plain keys) are those of
`costmodel.safe_load`; breaking one is an InputError with the line, like any syntax error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from costmodel.safe_load import TOO_LONG_NUMBER, InputLimitError, LimitedSafeLoader, check_node_tree
from costmodel.safe_load import read_text as read_limited_text
from planner.errors import InputError

_FLOAT_PATTERN = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class _Loader(LimitedSafeLoader):
    """Safe loader with short-form floats, duplicate-key detection and the input limits."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_PATTERN, list("-+0123456789."))


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise _DuplicateKey(
                problem=f"key '{key}' appears twice in this mapping; keep one", problem_mark=key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@dataclass(frozen=True)
class SourceDocument:
    """A parsed document, its path, and its node tree for finding lines."""

    path: Path | None
    data: Any
    root: yaml.Node | None

    def line_of(self, loc: tuple[str | int, ...]) -> int | None:
        """1-based line of the deepest node along `loc` that exists in the file."""
        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for part in loc:
            node = _child(node, part)
            if node is None:
                break
            line = node.start_mark.line + 1
        return line

    def sub(self, key: str) -> SourceDocument:
        """The document under top-level `key` (lines still point into the same file)."""
        return SourceDocument(self.path, self.data[key], _child(self.root, key))

    def item(self, index: int) -> SourceDocument:
        """Item `index` of a list document (lines still point into the same file)."""
        return SourceDocument(self.path, self.data[index], _child(self.root, index))


def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                return value_node  # type: ignore[no-any-return]
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part]  # type: ignore[no-any-return]
    return None


# Constructs a YAML error can be about that were opened on an earlier line and never closed (a block mapping's
# context is where the mapping starts, often line 1: there the failing line says more)
_LEFT_OPEN = ("quoted scalar", "flow mapping", "flow sequence")


def _syntax_error(exc: yaml.MarkedYAMLError) -> tuple[int | None, str, str]:
    """(line, field, message) of a YAML syntax error: at the construct left open (an unclosed quote or brace), whose
    line PyYAML keeps as the context, with where parsing failed; else where it failed."""
    problem = exc.problem or str(exc)
    if exc.context and exc.context_mark is not None and any(word in exc.context for word in _LEFT_OPEN):
        failed = f" on line {exc.problem_mark.line + 1}" if exc.problem_mark is not None else ""
        return exc.context_mark.line + 1, "", f"not valid YAML: {problem}{failed}, {exc.context} that starts here"
    mark = exc.problem_mark or exc.context_mark
    return (mark.line + 1 if mark is not None else None), "", f"not valid YAML: {problem}"


def parse_text(text: str, path: Path | None = None) -> SourceDocument:
    """Parse YAML (JSON is a subset) text; syntax errors and broken limits become an InputError with the line."""
    loader = None
    try:
        loader = _Loader(text)  # the reader checks the characters here already
        root = loader.get_single_node()
        if root is not None:
            check_node_tree(root)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        raise InputError.single(path, *_syntax_error(exc)) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other controls)
        line = text.count("\n", 0, exc.position) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise InputError.single(path, line, "", f"not valid YAML: the control character U+{code:04X} is not "
                                "allowed; remove it") from None
    except yaml.YAMLError as exc:
        raise InputError.single(path, None, "", f"not valid YAML: {exc}") from None
    except ValueError:  # an integer of more than 4,300 digits
        raise InputError.single(path, None, "", TOO_LONG_NUMBER) from None
    finally:
        if loader is not None:
            loader.dispose()
    return SourceDocument(path=path, data=data, root=root)


def read_text(path: Path) -> str:
    """A regular UTF-8 file within the size limit; anything else is an InputError naming the file."""
    try:
        return read_limited_text(path)
    except InputLimitError as exc:
        raise InputError.single(path, exc.line, "", str(exc)) from None


def read_document(path: Path) -> SourceDocument:
    """Read and parse a YAML or JSON file; a missing, unreadable or oversized file is an InputError."""
    return parse_text(read_text(path), path)
