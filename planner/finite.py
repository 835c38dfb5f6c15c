"""Finite figures only: every JSON the planner prints or writes is strict (no NaN or Infinity, which
strict parsers refuse), and a figure that an input made non-finite is reported as that input's fault.

Bounded inputs (`costmodel.scenario`) keep figures finite; this is the last line of defence, so that a
case the bounds miss is a clear exit 2 naming the figure rather than invalid JSON or `TTFT nan ms (fits)`.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeVar

from planner.errors import InputError

T = TypeVar("T")


def non_finite(data: Any, where: str = "") -> str | None:
    """Dotted path of the first NaN or infinite float in `data` (dicts, lists, tuples), or None."""
    if isinstance(data, float):
        return None if math.isfinite(data) else where or "value"
    if isinstance(data, dict):
        items: list[tuple[str, Any]] = [(str(key), value) for key, value in data.items()]
    elif isinstance(data, list | tuple):
        items = [(str(index), value) for index, value in enumerate(data)]
    else:
        return None
    for key, value in items:
        found = non_finite(value, f"{where}.{key}" if where else key)
        if found is not None:
            return found
    return None


def finite_or_error(data: T) -> T:
    """`data` unchanged, or an InputError (exit 2) naming the figure that is not finite."""
    where = non_finite(data)
    if where is not None:
        raise InputError.single(None, None, where, "the inputs make this figure infinite or NaN; check the "
                                "scenario's rates, times and system overrides for extreme values")
    return data


def dumps(data: Any, indent: int | None = None) -> str:
    """Strict JSON: finite figures only (where the encoder meets one that is not, the walk names it: 2 s of a
    256-rack front's 7 s of writing when it walked every figure first)."""
    try:
        return json.dumps(data, indent=indent, sort_keys=False, allow_nan=False)
    except ValueError:
        finite_or_error(data)
        raise
