"""Measured runs read from serving-benchmark result files, for `plan calibrate`.

The benchmark clients engines ship write one JSON object per run:
- vLLM `vllm bench serve --save-result` (`vllm/benchmarks/serve.py`; `--append-result` adds one object per
  line), and TensorRT-LLM's `benchmark_serving` (`tensorrt_llm/serve/scripts`), adapted from vLLM's with its
  keys (assumed: not checked, TensorRT-LLM's wheel is not on PyPI);
- SGLang `python -m sglang.bench_serving --output-file` (`sglang/benchmark/serving.py`), one line per run,
  appended.
All of them name what a measured run needs alike: `mean_ttft_ms`, `mean_tpot_ms` (TPOT over each request's
tokens after the first), `completed`, `total_input_tokens`, `total_output_tokens` (over the completed
requests), `max_concurrency` (null without `--max-concurrency`) and `request_rate` (`"inf"` or Infinity
without `--request-rate`). Checked against vLLM 0.34.0's and SGLang 0.5.23's sources.

What a run gives the fit (`RunFromResult`): the mean TTFT and TPOT; the workload's mean input and output
lengths (totals over the completed requests); a closed loop of `max_concurrency` requests, or an open loop at
`request_rate` per second. A run with neither (every prompt sent at once) is refused: one burst has no steady
state for the model to describe. Assumed: the lengths as their means (a spread, e.g. the random dataset's
range ratio, is not in vLLM's file: give it under the entry's `workload` to price it); the engine, model and
layout as the entry's scenario and layout say (the files name the client's backend, not the server's).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costmodel.safe_load import InputLimitError, read_text


@dataclass(frozen=True)
class RunFromResult:
    """What one result-file run measured, and the workload it ran."""

    ttft_ms: float
    tpot_ms: float
    workload: dict[str, Any]  # input_tokens, output_tokens, and concurrency or arrival_rate_per_s
    failed: int  # requests that failed (not in the means)


class ResultError(ValueError):
    """A result file that cannot be read as a run: the message names the file (and its line) and says what to
    change."""


def read_result(path: Path, run: int | None) -> RunFromResult:
    """Run `run` (1-based; None: the file's only run) of benchmark result file `path`; ResultError otherwise."""
    runs = _objects(path)
    if run is None and len(runs) > 1:
        raise ResultError(f"{path} holds {len(runs)} runs ({_describe(runs)}); pick one with "
                          f"`result: {{file: {path.name}, run: N}}` (N from 1)")
    if run is not None and not 1 <= run <= len(runs):
        raise ResultError(f"{path} holds {len(runs)} run{'s' if len(runs) > 1 else ''}; give a run from 1 to "
                          f"{len(runs)}")
    line, data = runs[(run or 1) - 1]
    try:
        return _measured(data)
    except ResultError as exc:
        raise ResultError(f"{path}, line {line}: {exc}") from None


def _objects(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line, object) of each run: a JSON document of one object, or one object per line (appended runs)."""
    try:
        text = read_text(path)
    except InputLimitError as exc:
        hint = ("; save the result without per-request details (vLLM: no --save-detailed; SGLang: no "
                "--output-details)" if "larger than" in str(exc) else "")
        raise ResultError(f"{path}: {exc}{hint}") from None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        return [(1, whole)]
    runs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ResultError(f"{path}, line {number}: not JSON ({exc.msg}); give a benchmark result file "
                              "(vLLM --save-result, SGLang --output-file)") from None
        if not isinstance(data, dict):
            raise ResultError(f"{path}, line {number}: not a JSON object of one run")
        runs.append((number, data))
    if not runs:
        raise ResultError(f"{path} holds no run")
    return runs


def _describe(runs: list[tuple[int, dict[str, Any]]]) -> str:
    return "max_concurrency " + ", ".join(str(data.get("max_concurrency")) for _, data in runs)


def _measured(data: dict[str, Any]) -> RunFromResult:
    completed = _count(data, "completed")
    if completed == 0:
        raise ResultError("no request completed (completed: 0); rerun the benchmark")
    lengths = {"input_tokens": _mean_length(data, "total_input_tokens", completed),
               "output_tokens": _mean_length(data, "total_output_tokens", completed)}
    failed = data.get("failed")
    return RunFromResult(_time(data, "mean_ttft_ms"), _time(data, "mean_tpot_ms"), lengths | _load(data),
                         failed if isinstance(failed, int) and not isinstance(failed, bool) and failed > 0 else 0)


def _load(data: dict[str, Any]) -> dict[str, Any]:
    """Closed loop at `max_concurrency`, else open loop at `request_rate`."""
    concurrency = data.get("max_concurrency")
    if concurrency is not None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ResultError(f"max_concurrency is {concurrency!r}; expected a whole number of at least 1")
        return {"concurrency": concurrency}
    rate = data.get("request_rate")
    if isinstance(rate, int | float) and not isinstance(rate, bool) and math.isfinite(rate) and rate > 0:
        return {"arrival_rate_per_s": float(rate)}
    raise ResultError(f"the run had no max_concurrency and request_rate {rate!r}: every prompt was sent at once, a "
                      "burst with no steady state to calibrate on; rerun with --max-concurrency (closed loop) or "
                      "--request-rate (open loop)")


def _time(data: dict[str, Any], key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        found = "missing" if value is None else f"{value!r}"
        raise ResultError(f"{key} is {found}; expected a positive time in ms (vLLM writes it when "
                          "--percentile-metrics includes ttft and tpot, its default)")
    return float(value)


def _count(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        found = "missing" if value is None else f"{value!r}"
        raise ResultError(f"{key} is {found}; expected a whole number of requests or tokens")
    return value


def _mean_length(data: dict[str, Any], key: str, completed: int) -> int:
    total = _count(data, key)
    if total < completed:
        raise ResultError(f"{key} is {total} over {completed} completed requests: under one token each")
    return round(total / completed)
