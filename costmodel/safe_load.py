"""Limits on what an input file may hold, so that a broken or hostile file is a clear error instead of a
hang, a crash or exhausted memory.

- Regular files only (`/dev/zero`, a FIFO or a directory would block or never end), at most
  `MAX_FILE_BYTES`, decoded as UTF-8 with the line and column of the first bad byte.
- YAML: nesting at most `MAX_DEPTH` levels (the composer recurses: 3,000 levels overflow Python's stack),
  aliases adding at most `MAX_ALIAS_NODES` nodes when expanded (a "billion laughs" document is a few
  hundred bytes that expand to 10^9 nodes), no alias inside its own anchor, and mapping keys that are plain
  scalars (`? [a, b]: 1` cannot name a field).
- JSON: no NaN or Infinity, no number that overflows a float, the same depth.

Used by the planner's scenario and layout reader and by the model catalog for user-given model files.
"""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_FILE_BYTES = 16 * 2**20  # bundled configs are ~10 kB; a plan file with every expert bank ~1 MB
MAX_DEPTH = 64  # the deepest real document (a plan file's placement) nests 6 levels
MAX_ALIAS_NODES = 10_000  # nodes that aliases may add once expanded; real files use a handful
TOO_LONG_NUMBER = "a number has more digits than Python reads (4,300); give a realistic value"


class InputLimitError(ValueError):
    """An input that breaks one of the limits, or cannot be read; `line` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def read_bytes(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise InputLimitError(f"{kind}; give the path of a YAML or JSON file")
        if info.st_size > MAX_FILE_BYTES:
            raise InputLimitError(f"{info.st_size:,} bytes, larger than the {MAX_FILE_BYTES:,} an input may be")
        with path.open("rb") as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InputLimitError("file not found; check the path") from None
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL in the path
        if isinstance(exc, InputLimitError):
            raise
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputLimitError(f"cannot read the file: {reason}") from None
    if len(data) > MAX_FILE_BYTES:
        raise InputLimitError(f"larger than the {MAX_FILE_BYTES:,} bytes an input may be")
    return data


def read_text(path: Path) -> str:
    """The UTF-8 text of a regular file of at most MAX_FILE_BYTES."""
    return decode_utf8(read_bytes(path))


def decode_utf8(data: bytes) -> str:
    """`data` as UTF-8; a bad byte is reported with its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputLimitError(
            f"byte 0x{data[exc.start]:02x} at column {column} is not UTF-8; save the file as UTF-8", line
        ) from None


class LimitedSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader whose composer refuses nesting deeper than MAX_DEPTH (checked while composing, before
    the recursion gets deep)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels; flatten the document",
                self.peek_event().start_mark,  # type: ignore[no-untyped-call]
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def check_node_tree(root: yaml.Node) -> None:
    """Refuse complex keys, self-containing aliases, and documents that aliases expand beyond the budgets
    (as a yaml.MarkedYAMLError at the offending node)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def fail(node: yaml.Node, problem: str) -> yaml.MarkedYAMLError:
        return yaml.composer.ComposerError(None, None, problem, node.start_mark)

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if depth > MAX_DEPTH:
            raise fail(node, f"nested deeper than {MAX_DEPTH} levels once aliases are expanded; flatten the document")
        if key in sizes:
            return sizes[key]
        if key in active:
            raise fail(node, "an alias refers to a node that contains it; remove the alias")
        active.add(key)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise fail(key_node, "a mapping key must be a plain name or number, not a list or mapping")
                children += [key_node, value_node]
        total = 1 + sum(size(child, depth + 1) for child in children)
        active.discard(key)
        sizes[key] = total
        return total

    expanded = size(root, 1)
    if expanded - len(sizes) > MAX_ALIAS_NODES:
        raise fail(root, f"aliases expand the document by {expanded - len(sizes):,} nodes, more than the "
                         f"{MAX_ALIAS_NODES:,} allowed; write the values out or use fewer aliases")


def load_yaml(text: str) -> Any:
    """yaml.safe_load within the limits; errors are yaml.YAMLError or InputLimitError."""
    loader = None
    try:
        loader = LimitedSafeLoader(text)  # the reader checks the characters here already
        root = loader.get_single_node()
        if root is None:
            return None
        check_node_tree(root)
        return loader.construct_document(root)
    except ValueError:  # an integer of more than 4,300 digits
        raise InputLimitError(TOO_LONG_NUMBER) from None
    finally:
        if loader is not None:
            loader.dispose()


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputLimitError(f"the number {text[:40]} is too large for a float")
    return value


def _no_constant(name: str) -> Any:
    raise InputLimitError(f"{name} is not a number JSON allows; give a finite value")


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members, each key once: JSON readers keep the last of a repeated key, silently (a config with
    num_attention_heads 32 and then 16 read as 16); YAML documents refuse it here, and so do JSON ones."""
    members = dict(pairs)
    if len(members) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return members


def _node_tree(text: str) -> yaml.Node | None:
    """A JSON or YAML text's node tree, for lines (JSON read as YAML, tabs as spaces: `key_line`); None where YAML
    cannot compose it."""
    loader = LimitedSafeLoader(text.replace("\t", " "))
    try:
        return loader.get_single_node()
    except (yaml.YAMLError, ValueError):
        return None
    finally:
        loader.dispose()


def _repeated_key_line(text: str, key: str) -> int | None:
    """1-based line of the second `key` in one mapping of a JSON text (read as YAML, as `key_line` reads it);
    None where YAML cannot compose it."""
    root = _node_tree(text)
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            repeats = [k for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
            if len(repeats) > 1:
                return int(repeats[1].start_mark.line) + 1
            stack.extend(value for _, value in node.value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None


def load_json(text: str) -> Any:
    """json.loads without NaN, Infinity, float overflow or a key twice in one object; deep nesting is an
    InputLimitError."""
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise InputLimitError(f"the key {json.dumps(exc.key, ensure_ascii=False)} appears twice in one object; keep "
                              "one", _repeated_key_line(text, exc.key)) from None
    except RecursionError:
        raise InputLimitError("nested too deeply to read; flatten the document") from None
    except InputLimitError:
        raise
    except json.JSONDecodeError as exc:
        raise InputLimitError(f"not valid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except ValueError:  # an integer of more than 4,300 digits
        raise InputLimitError(TOO_LONG_NUMBER) from None


def key_line(text: str, field: str | None) -> int | None:
    """1-based line of the key `field` (nested keys and list indices joined by dots, as `ConfigError.field`
    names them) in a JSON or YAML text already read within the limits: the line of the deepest part the text
    has (a missing key: its parent's, the first line for a top-level one). None for no field, or a text YAML
    cannot compose. JSON is read as YAML; its tabs are whitespace (JSON strings escape theirs), which YAML
    refuses to indent with, so they are read as spaces: the lines stay where they are."""
    if not field:
        return None
    node = _node_tree(text)
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in field.split("."):
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
            child, line = (pair[1], pair[0].start_mark.line + 1) if pair else (None, line)
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            child = node.value[int(part)]
            line = child.start_mark.line + 1
        if child is None:
            break
        node = child
    return line
