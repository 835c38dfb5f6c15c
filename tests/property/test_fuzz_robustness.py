"""Hypothesis fuzzing of every input `plan` reads (issue 14): scenario and layout files (`plan validate`),
Hugging Face configs (`plan import-hf`) and `--cases` lines (`plan evaluate --cases`), mutated with extreme
numbers (huge, tiny, negative, NaN, infinite), wrong types, unknown keys and raw text edits (anchors, aliases,
brackets, bad bytes). Every document must give exit 0 or 2 (a case line: a result or its own error line),
never a traceback, an internal error or a hang past 10 s; every JSON printed is strict; and no input that
passes validation makes a figure infinite or NaN.

1,000 documents in the normal run; 10,000 in the test marked slow (`pytest -m slow`).
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.evaluation import evaluate_line
from planner.finite import dumps
from tests.helpers import field_paths, run_cli

MODELS = Path(__file__).resolve().parents[2] / "costmodel" / "data" / "models"
SCENARIO: dict[str, Any] = {
    "schema_version": 1, "name": "fuzz", "model": "deepseek-v3", "precision": {"weights": "fp8", "kv_cache": "fp8"},
    "cluster": {"system": "h200-sxm", "gpus": 8, "overrides": {"hbm_bandwidth_bytes_per_s": 4.8e12,
                                                               "peak_flops_per_s": {"fp8": 2.0e15}}},
    "workload": {"input_tokens": 1024, "output_tokens": 256, "routing_skew": 0.5, "prefix_hit_rate": 0.25,
                 "speculative": {"method": "draft", "draft_tokens": 2, "acceptance_rate": 0.7},
                 "sessions": {"arrival_rate_per_s": 2.0, "turns": 4, "think_time_s": 5.0, "pause_probability": 0.1,
                              "pause_s": 600.0}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 50},
    "search": {"serving": ["aggregated"], "tp": [1, 2], "seed": 0, "threads": 1, "redundant_experts": 8},
}
LAYOUT: dict[str, Any] = {
    "serving": "aggregated",
    "pools": [{"role": "mixed", "replicas": 1, "tp": 1, "dp_attention": 8, "pp": 1, "moe_tp": 1, "moe_ep": 8,
               "batch": 64}],
}
HF_BASES = [json.loads((MODELS / name).read_text(encoding="utf-8")) for name in (
    "deepseek-ai--DeepSeek-V3.config.json", "Qwen--Qwen3-30B-A3B.config.json", "openai--gpt-oss-20b.config.json")]

extreme = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2, 3, 5, 2**31, 2**63, 10**30, 10**400, 10**6, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-300, 5e-324, 1e308, -0.0, 0.5, 1e-9, 1e12, 1e18]),
)
# Values at the edges of the documented bounds (costmodel.scenario, system ranges): accepted, so the figures
# they lead to must stay finite.
edges = st.sampled_from([1, 2, 4, 8, 32_768, 10_000_000, 3.2e7, 1e-6, 1e9, 1e15, 1e16, 1e6, 1e17, 1e18, 1e-9, 1.0,
                         2**31 - 1, 256, 1_048_576, 4096, 0.499, 0.999, 3.0, 100_000])
plausible = st.one_of(st.integers(0, 4096), st.floats(0, 1e4), edges)
numbers = st.one_of(plausible, plausible, extreme)
int_like = st.one_of(st.integers(0, 4096), edges.filter(lambda v: isinstance(v, int)))
float_like = st.one_of(st.floats(0, 1e4), edges.map(float))
scalars = st.one_of(extreme, st.none(), st.booleans(), st.text(max_size=12),
                    st.sampled_from(["fp8", "fp4", "h200-sxm", "mixed", "aggregated", "1e9", "~x/config.json", ""]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=8), inner, max_size=3), max_leaves=6)
TEXT_EDITS = [*"[]{}&*!?:-,#'\"|>\n\t ", "&a ", "*a", "? ", "\x00", "\ufeff", "\udcff", ".inf", ".nan", "1e999"]


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """`base` with one to four fields replaced (mostly by numbers: plausible, at the bounds, or extreme),
    deleted or added."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.sampled_from([1, 1, 2, 3, 4]))):
        paths = field_paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["number", "number", "number", "value", "delete", "insert"]))
        if action in ("number", "value"):
            parent[path[-1]] = draw(numbers if action == "number" else values)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
    return doc


@st.composite
def numbers_changed(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """`base` with one to three of its numbers replaced: mostly accepted values, so the cost model runs on them."""
    doc = copy.deepcopy(base)
    paths = [p for p in field_paths(doc) if _is_number(_at(doc, p)) and p != ("schema_version",)]
    for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3, unique=True)):
        kept = int_like if isinstance(_at(doc, path), int) else float_like  # mostly of the field's own type
        _at(doc, path[:-1])[path[-1]] = draw(st.one_of(kept, kept, kept, extreme))
    return doc


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@st.composite
def text_edits(draw: st.DrawFn, text: str) -> str:
    """Raw edits of a serialised document: YAML syntax, anchors and aliases, control and surrogate characters."""
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(TEXT_EDITS)) + text[at:]
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    return text


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, bytes]:
    """(kind, bytes) of one fuzzed input."""
    kind = draw(st.sampled_from(["scenario", "layout", "hf", "case", "case", "numbers"]))
    if kind == "scenario":
        text = draw(text_edits(_yaml(draw(mutated(SCENARIO)))))
    elif kind == "layout":
        text = draw(text_edits(_yaml(draw(mutated(LAYOUT)))))
    elif kind == "hf":
        text = draw(text_edits(json.dumps(draw(mutated(draw(st.sampled_from(HF_BASES)))))))
    elif kind == "case":
        case = {"scenario": draw(mutated(SCENARIO)), "layout": draw(mutated(LAYOUT))}
        case = draw(st.sampled_from([case, {**case, "layout": LAYOUT}, {**case, "scenario": SCENARIO}]))
        text = draw(text_edits(json.dumps(case)))
    else:  # a case whose scenario and layout differ from valid ones only in their numbers
        kind = "case"
        case = {"scenario": draw(numbers_changed(SCENARIO)), "layout": draw(numbers_changed(LAYOUT))}
        text = json.dumps(draw(st.sampled_from([case, {**case, "layout": LAYOUT}, {**case, "layout": LAYOUT},
                                                {**case, "scenario": SCENARIO}])))
    return kind, text.encode("utf-8", "surrogatepass")


def _strict(text: str) -> None:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output: {text[:200]}")

    json.loads(text, parse_constant=refuse)


def _check(kind: str, data: bytes) -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("config.json" if kind == "hf" else "input.yaml")
        path.write_bytes(data)
        if kind == "case":
            line = evaluate_line(path, 1, data.replace(b"\n", b" "))
            assert line["line"] == 1 and ("error" in line) != ("ttft_ms" in line), line
            assert "infinite or NaN" not in line.get("error", ""), line  # bounds, not the last guard, must catch it
            assert "cannot evaluate this case" not in line.get("error", ""), line  # an unexpected exception
            _strict(dumps(line))
        else:
            result = run_cli("import-hf" if kind == "hf" else "validate", str(path))
            assert "Traceback" not in result.err and "internal error" not in result.err, result.err
            assert result.code in (0, 2), result.err
            if result.code == 2:
                assert result.err.startswith(f"error: {path}"), result.err
    assert time.perf_counter() - started < 10.0, f"{kind} took {time.perf_counter() - started:.1f} s"


def _fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck),
                    derandomize=True, database=None)


@_fuzz(1000)
@given(documents())
def test_fuzzed_inputs_exit_0_or_2_with_strict_json(document: tuple[str, bytes]) -> None:
    _check(*document)


@pytest.mark.slow
@_fuzz(10_000)
@given(documents())
def test_ten_thousand_fuzzed_inputs(document: tuple[str, bytes]) -> None:
    _check(*document)
