"""Benchmark result files of any shape (the keys vLLM, SGLang, genai-perf and AIPerf write, with values of any
JSON type): `plan calibrate` reads each as a run or refuses it with a message at the entry's `result` line,
never with an internal error."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.calibrate import load_runs
from planner.errors import InputError

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "calibration" / "llama-70b-h200-vllm.yaml"
KEYS = ("mean_ttft_ms", "mean_tpot_ms", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "max_concurrency", "request_rate", "ramp_up_strategy", "time_to_first_token", "inter_token_latency",
        "input_sequence_length", "output_sequence_length", "error_request_count", "input_config")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**12), st.floats(allow_nan=True),
                    st.sampled_from(["inf", "trace", "ms", "tokens", "concurrency", "profiling"]), st.text(max_size=6))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["unit", "avg", "phases", "perf_analyzer", "stimulus", "concurrency", "request_rate", "type",
                     "kind", "rate", "name"]), inner, max_size=4), max_leaves=8)
VLLM = {"completed": 320, "failed": 0, "total_input_tokens": 327680, "total_output_tokens": 320000,
        "max_concurrency": 32, "request_rate": "inf", "mean_ttft_ms": 271.5, "mean_tpot_ms": 20.3}
GENAI_PERF = {"time_to_first_token": {"unit": "ms", "avg": 271.5}, "inter_token_latency": {"unit": "ms", "avg": 20.3},
              "input_sequence_length": {"unit": "tokens", "avg": 1024},
              "output_sequence_length": {"unit": "tokens", "avg": 1000},
              "input_config": {"phases": [{"kind": "profiling", "type": "concurrency", "concurrency": 32}]}}


def _mutated(base: dict[str, Any], changes: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """A valid run with some keys replaced by anything and some left out."""
    return {k: v for k, v in (base | changes).items() if k not in dropped}


# mostly valid runs (so that every check is reached) and wholly random ones
runs = st.one_of(
    st.builds(_mutated, st.sampled_from([VLLM, GENAI_PERF]), st.dictionaries(st.sampled_from(KEYS), values,
                                                                             max_size=2),
              st.lists(st.sampled_from(KEYS), max_size=2)),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=len(KEYS)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs)
def test_any_result_file_is_a_run_or_a_message(run: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        shutil.copy(SCENARIO, base / "scenario.yaml")
        (base / "r.json").write_text(json.dumps(run), encoding="utf-8")  # NaN and Infinity as Python writes them
        layout = {"serving": "aggregated", "pools": [{"role": "mixed", "tp": 2, "moe_tp": 2, "batch": 32}]}
        entry = {"scenario": "scenario.yaml", "layout": layout, "result": "r.json"}
        path = base / "runs.yaml"
        path.write_text(yaml.safe_dump({"schema_version": 1, "measurements": [entry]}), encoding="utf-8")
        try:
            load_runs(path)
        except InputError as error:
            assert error.problems[0].field in ("result", "workload") or error.problems[0].field.startswith(
                "workload."), str(error)
