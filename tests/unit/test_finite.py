"""Strict JSON: a figure that is not finite is an input error naming it, never NaN in the output."""

from __future__ import annotations

import json
import math

import pytest

from planner.errors import InputError
from planner.finite import dumps


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_figure_that_is_not_finite_is_named(bad: float) -> None:
    with pytest.raises(InputError, match=r"front\.2\.ttft_ms"):
        dumps({"front": [{"ttft_ms": 1.0}, {"ttft_ms": 2.0}, {"ttft_ms": bad}]}, indent=2)


def test_finite_figures_are_written_as_json_writes_them() -> None:
    data = {"front": [{"ttft_ms": 1.5, "gpus": [1, 2]}], "name": "x"}
    assert dumps(data, indent=2) == json.dumps(data, indent=2) and dumps(data) == json.dumps(data)
