"""Thousands of malformed scenario and layout documents: `plan validate` must exit 2 with a message
naming where the problem is, and never print a traceback or exit with an internal error."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import field_paths, run_cli

VALID_SCENARIO: dict[str, Any] = {
    "schema_version": 1,
    "name": "fuzz",
    "model": "deepseek-v3",
    "precision": {"weights": "fp8", "kv_cache": "fp8"},
    "cluster": {"system": "h200-sxm", "gpus": 8},
    "workload": {"input_tokens": 1024, "output_tokens": 256, "routing_skew": 0.5},
    "slo": {"ttft_ms": 1000, "tpot_ms": 50},
    "search": {"serving": ["aggregated"], "tp": [1, 2]},
}
VALID_LAYOUT: dict[str, Any] = {
    "serving": "aggregated",
    "pools": [{"role": "mixed", "replicas": 1, "tp": 1, "dp_attention": 8, "pp": 1, "moe_tp": 1,
               "moe_ep": 8, "batch": 64}],
}

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12), st.floats(allow_nan=True),
    st.text(max_size=12), st.sampled_from(["fp8", "fp4", "h200-sxm", "mixed", "aggregated", "1e9", "-"]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=8), inner, max_size=3), max_leaves=6)


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = field_paths(doc)
        if not paths or not isinstance(doc, dict):
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "insert"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
    if draw(st.integers(0, 20)) == 0:
        return draw(values)  # sometimes not a mapping at all
    return doc


def _check(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "input.yaml"
        path.write_text(text, encoding="utf-8")
        result = run_cli("validate", str(path))
    assert "Traceback" not in result.err
    assert result.code in (0, 2), result.err
    if result.code == 2:
        assert result.err.startswith("error: ") and str(path) in result.err


FUZZ = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@FUZZ
@given(mutated(VALID_SCENARIO))
def test_malformed_scenarios_exit_2_with_a_message(doc: Any) -> None:
    _check(yaml.safe_dump(doc, allow_unicode=True))


@FUZZ
@given(mutated(VALID_LAYOUT))
def test_malformed_layouts_exit_2_with_a_message(doc: Any) -> None:
    _check(yaml.safe_dump(doc, allow_unicode=True))


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}\n #'\"!&*%@`|>1.e\t,?")), max_size=60))
def test_garbage_text_exits_2_or_validates(text: str) -> None:
    _check(text)
