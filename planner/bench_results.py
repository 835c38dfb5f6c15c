"""Measured runs read from serving-benchmark result files, for `plan calibrate`.

The benchmark clients engines ship write one JSON object per run:
- vLLM `vllm bench serve --save-result` (`vllm/benchmarks/serve.py`; `--append-result` adds one object per
  line), and TensorRT-LLM's `benchmark_serving` (`tensorrt_llm/serve/scripts`), adapted from vLLM's with its
  keys (assumed: not checked, TensorRT-LLM's wheel is not on PyPI);
- SGLang `python -m sglang.bench_serving --output-file` (`sglang/benchmark/serving.py`), one line per run,
  appended.
- NVIDIA's genai-perf (`profile_export_genai_perf.json`) and its successor AIPerf (`profile_export_aiperf.json`),
  which Dynamo's guides use: each metric as {unit, avg, p50, ...} (`_measured_by_genai_perf`; checked against
  genai_perf 0.0.16's and aiperf 0.13.0's sources).
The first three name what a measured run needs alike: `mean_ttft_ms`, `mean_tpot_ms` (TPOT over each request's
tokens after the first), `completed`, `total_input_tokens`, `total_output_tokens` (over the completed
requests), `max_concurrency` (null without `--max-concurrency`) and `request_rate` (`"inf"` or Infinity
without `--request-rate`). Checked against vLLM 0.34.0's and SGLang 0.5.23's sources.

What a run gives the fit (`RunFromResult`): the mean TTFT and TPOT; the workload's mean input and output
lengths (totals over the completed requests); a closed loop of `max_concurrency` requests, or an open loop at
`request_rate` per second. Where the file cannot say which load ran, the entry's `workload` must (its
`concurrency` or `arrival_rate_per_s`; `load_problem` says why): a burst (neither: every prompt sent at once,
no steady state), both a concurrency cap and a finite rate (which one limited the run is not recorded), a
trace replay (`request_rate: "trace"`) or a ramp-up (`ramp_up_strategy`: the rate changes over the run).
Assumed: the lengths as their means (a spread, e.g. the random dataset's range ratio, is not in vLLM's file:
give it under the entry's `workload` to price it); the engine, model and layout as the entry's scenario and
layout say (the files name the client's backend, not the server's).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costmodel.lengths import MAX_TOKENS
from costmodel.safe_load import InputLimitError, read_text


@dataclass(frozen=True)
class RunFromResult:
    """What one result-file run measured, and the workload it ran."""

    ttft_ms: float
    tpot_ms: float
    workload: dict[str, Any]  # input_tokens, output_tokens, and concurrency or arrival_rate_per_s where known
    failed: int  # requests that failed (not in the means)
    source: str  # the file and line of the run, for messages
    load_problem: str | None = None  # why the file cannot say the load (the entry's workload must)


class ResultError(ValueError):
    """A result file that cannot be read as a run: the message names the file (and its line) and says what to
    change."""


# A measured mean time in ms, as a measurements file may give it: positive, under a day (more is a unit slip)
MAX_TIME_MS = 86_400_000.0
LOADS = frozenset({"concurrency", "arrival_rate_per_s"})  # the workload fields that say the load


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
        return _measured(data, f"{path}, line {line}")
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
        whole = _json(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return [(1, whole)]
    if whole is not None:
        raise ResultError(f"{path}: a JSON {type(whole).__name__}, not an object of one run (or one per line); give "
                          "a benchmark result file (vLLM --save-result, SGLang --output-file)")
    runs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = _json(line)
        except ValueError as exc:
            raise ResultError(f"{path}, line {number}: not JSON ({exc}); give a benchmark result file (vLLM "
                              "--save-result, SGLang --output-file)") from None
        if not isinstance(data, dict):
            raise ResultError(f"{path}, line {number}: not a JSON object of one run")
        runs.append((number, data))
    if not runs:
        raise ResultError(f"{path} holds no run")
    return runs


def _json(text: str) -> Any:
    """JSON as the benchmark clients write it (Infinity and NaN included); ValueError for what is not, or what
    Python cannot hold (a number of thousands of digits, nesting past the recursion limit)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(exc.msg) from None
    except (ValueError, RecursionError) as exc:
        raise ValueError("a number too long or nesting too deep" if isinstance(exc, RecursionError) or
                         "digits" in str(exc) else str(exc)) from None


def _describe(runs: list[tuple[int, dict[str, Any]]]) -> str:
    return "; ".join(f"max_concurrency {data.get('max_concurrency')}, request_rate {data.get('request_rate')}"
                     for _, data in runs[:8]) + ("; ..." if len(runs) > 8 else "")


def _measured(data: dict[str, Any], source: str) -> RunFromResult:
    if _is_genai_perf(data):
        return _measured_by_genai_perf(data, source)
    completed = _count(data, "completed")
    if completed == 0:
        raise ResultError("no request completed (completed: 0); rerun the benchmark")
    lengths = {"input_tokens": _mean_length(data, "total_input_tokens", completed),
               "output_tokens": _mean_length(data, "total_output_tokens", completed)}
    failed = 0 if data.get("failed") is None else _count(data, "failed")
    load, problem = _load(data)
    return RunFromResult(_time(data, "mean_ttft_ms"), _time(data, "mean_tpot_ms"), lengths | load, failed, source,
                         problem)


def _load(data: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Closed loop at `max_concurrency`, or open loop at `request_rate`; else why the file cannot say."""
    concurrency, rate = data.get("max_concurrency"), _rate(data.get("request_rate"))
    if data.get("ramp_up_strategy") is not None:
        return {}, (f"a ramp-up run (ramp_up_strategy {data['ramp_up_strategy']!r}): its rate changes over the run, "
                    "with no one load to calibrate on")
    if data.get("request_rate") == "trace":
        return {}, "a trace replay (request_rate 'trace'): its arrivals follow the trace's timestamps"
    if concurrency is not None:
        if _whole(concurrency) is None or concurrency < 1:
            raise ResultError(f"max_concurrency is {concurrency!r}; expected a whole number of at least 1")
        if rate is not None:
            return {}, (f"both max_concurrency {concurrency} and request_rate {rate:g}: which one limited the run is "
                        "not recorded")
        prompts = _whole(data.get("num_prompts"))
        if prompts is not None and prompts <= concurrency:  # the semaphore never held one back
            return {}, (f"max_concurrency {concurrency} with {prompts} prompts: every prompt was sent at once, a burst "
                        "with no steady state; run more prompts than the concurrency (vLLM's guides: 10x)")
        return {"concurrency": concurrency}, None
    if rate is not None:
        return {"arrival_rate_per_s": rate}, None
    return {}, (f"no max_concurrency and request_rate {data.get('request_rate')!r}: every prompt was sent at once, "
                "a burst with no steady state")


def _number(value: object) -> float | None:
    """`value` if a JSON number (not a boolean)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _rate(value: object) -> float | None:
    """`value` if a positive, finite JSON number: a request rate that paces a run."""
    rate = _number(value)
    return rate if rate is not None and math.isfinite(rate) and rate > 0 else None


def _whole(value: object) -> int | None:
    """`value` if a JSON whole number (not a boolean)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(data: dict[str, Any], key: str) -> float:
    value = _number(data.get(key))
    if value is None or not 0 < value <= MAX_TIME_MS:
        found = "missing" if data.get(key) is None else f"{data.get(key)!r}"
        raise ResultError(f"{key} is {found}; expected a positive time in ms, under a day (vLLM writes it when "
                          "--percentile-metrics includes ttft and tpot, its default)")
    return value


def _count(data: dict[str, Any], key: str) -> int:
    value = _whole(data.get(key))
    if value is None or value < 0:
        found = "missing" if data.get(key) is None else f"{data.get(key)!r}"
        raise ResultError(f"{key} is {found}; expected a whole number of requests or tokens")
    return value


def _mean_length(data: dict[str, Any], key: str, completed: int) -> int:
    """Tokens per completed request, rounded (in integers: totals may exceed a float)."""
    total = _count(data, key)
    if total < completed:
        raise ResultError(f"{key} is {total} over {completed} completed requests: under one token each")
    mean = (2 * total + completed) // (2 * completed)
    if mean > MAX_TOKENS:
        raise ResultError(f"{key} over {completed} completed requests is more than {MAX_TOKENS:,} tokens each, the "
                          "most a request may have")
    return mean


# genai-perf and AIPerf (NVIDIA's clients, which Dynamo's guides use) export each metric as {unit, avg, p50, ...}
_TO_MS = {"ms": 1.0, "s": 1e3, "sec": 1e3, "us": 1e-3, "ns": 1e-6}
_RATE_PHASES = frozenset({"poisson", "gamma", "constant"})
_RAMPS = ("concurrency_ramp", "prefill_ramp", "rate_ramp", "rate_series")  # AIPerf phase fields that vary the load
_MAX_COUNT = 10**9  # requests


def _is_genai_perf(data: dict[str, Any]) -> bool:
    """A genai-perf or AIPerf export: its command under `input_config`, or any metric as {unit, avg, ...}."""
    return "mean_ttft_ms" not in data and (isinstance(data.get("input_config"), dict) or any(
        isinstance(value, dict) and "unit" in value for value in data.values()))


def _measured_by_genai_perf(data: dict[str, Any], source: str) -> RunFromResult:
    """A genai-perf `profile_export_genai_perf.json` or AIPerf `profile_export_aiperf.json`: TTFT and inter-token
    latency (per request: (latency - TTFT) / (output tokens - 1), TPOT as vLLM counts it) by their `avg`, the
    lengths by the average input and output sequence lengths, the load from `input_config`."""
    for key in ("time_to_first_token", "inter_token_latency"):
        if key not in data:
            raise ResultError(f"no {key}: the run did not stream its tokens, so neither tool measured TTFT and "
                              "TPOT; rerun streaming (genai-perf --streaming; AIPerf with a streaming endpoint)")
    if data.get("was_cancelled") is True or data.get("is_complete") is False:  # AIPerf's export says so
        why = data.get("incomplete_reason") or ("cancelled" if data.get("was_cancelled") else "not complete")
        raise ResultError(f"the run did not complete ({_short(why)}): its figures cover part of it; rerun to the end")
    lengths = {"input_tokens": _average_length(data, "input_sequence_length"),
               "output_tokens": _average_length(data, "output_sequence_length")}
    load, problem = _genai_perf_load(data.get("input_config"))
    return RunFromResult(_average_ms(data, "time_to_first_token"), _average_ms(data, "inter_token_latency"),
                         lengths | load, _errors(data), source, problem)


def _average(data: dict[str, Any], key: str, units: tuple[str, ...]) -> tuple[float, str]:
    """A metric's `avg` and its `unit` (one of `units`)."""
    metric = data.get(key)
    value = _number(metric.get("avg")) if isinstance(metric, dict) else None
    unit = metric.get("unit") if isinstance(metric, dict) else None
    if value is None or not math.isfinite(value) or value < 0 or unit not in units:
        raise ResultError(f"{key} is {_short(metric)}; expected {{unit: {' | '.join(units)}, avg: a number}}")
    return value, str(unit)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _errors(data: dict[str, Any]) -> int:
    """Failed requests (AIPerf's `error_request_count`, present only when some failed)."""
    if "error_request_count" not in data:
        return 0
    count, _ = _average(data, "error_request_count", ("count", "requests"))
    if not count.is_integer() or count > _MAX_COUNT:
        raise ResultError(f"error_request_count averages {count:g}; expected a whole number of requests")
    return int(count)


def _average_ms(data: dict[str, Any], key: str) -> float:
    value, unit = _average(data, key, tuple(_TO_MS))
    value *= _TO_MS[unit]
    if not 0 < value <= MAX_TIME_MS:
        raise ResultError(f"{key} averages {value:g} ms; expected a positive time, under a day")
    return value


def _average_length(data: dict[str, Any], key: str) -> int:
    mean = round(_average(data, key, ("tokens",))[0])
    if not 1 <= mean <= MAX_TOKENS:
        raise ResultError(f"{key} averages {mean} tokens; expected 1 to {MAX_TOKENS:,}")
    return mean


# genai-perf 0.0.16 subcommands whose files carry another load than the run's (subcommand/analyze.py and
# process_export_files.py pass the command's config to every file they write)
_NOT_THIS_RUN = {"analyze": "a sweep writes the command's default stimulus, concurrency 1, into every point's file",
                 "process": "process-export-files pools every client's requests but keeps the first client's load"}


def _genai_perf_load(config: object) -> tuple[dict[str, Any], str | None]:
    """The load of genai-perf's `input_config` (`perf_analyzer.stimulus`: {concurrency} or {request_rate}; before
    0.0.13 top-level `concurrency` / `request_rate`) or AIPerf's (`phases`: the profiling phase's type, concurrency
    and rate)."""
    if not isinstance(config, dict):
        return {}, "the file records no input_config, hence no load"
    if isinstance(config.get("phases"), list):
        return _aiperf_load(config["phases"])
    if config.get("subcommand") in _NOT_THIS_RUN:
        return {}, (f"a genai-perf `{config['subcommand']}` file: its input_config is the command's, not this run's "
                    f"load ({_NOT_THIS_RUN[config['subcommand']]})")
    analyzer = config.get("perf_analyzer")
    stimulus = analyzer.get("stimulus") if isinstance(analyzer, dict) else config
    stimulus = stimulus if isinstance(stimulus, dict) else {}
    concurrency, rate = _whole(stimulus.get("concurrency")), _rate(stimulus.get("request_rate"))
    if concurrency is not None and concurrency >= 1 and "request_rate" not in stimulus:
        return {"concurrency": concurrency}, None
    if rate is not None and "concurrency" not in stimulus:
        return {"arrival_rate_per_s": rate}, None
    given = {key: stimulus[key] for key in ("concurrency", "request_rate") if key in stimulus}
    return {}, f"its load {_short(given or 'neither concurrency nor request_rate')} is not one concurrency or one rate"


def _aiperf_load(phases: list[Any]) -> tuple[dict[str, Any], str | None]:
    """The profiling phase's load: a concurrency phase's `concurrency` (1 where left out, AIPerf's default), a rate
    phase's `rate`; a load that varies (ramps, adaptive scaling, several profiling phases pooled) is no one load."""
    profiling = [p for p in phases if isinstance(p, dict) and "profiling" in (p.get("kind"), p.get("name"))]
    if len(profiling) > 1:
        return {}, f"its {len(profiling)} profiling phases are pooled into one result, at different loads"
    phase = profiling[0] if profiling else phases[-1] if phases and isinstance(phases[-1], dict) else {}
    kind = phase.get("type") if isinstance(phase.get("type"), str) else None
    varying = [key for key in _RAMPS if phase.get(key) is not None] + (["adaptive_scale"] if phase.get(
        "adaptive_scale") else [])
    if varying:
        return {}, f"its profiling phase varies its load ({', '.join(varying)}), with no one load to calibrate on"
    if phase.get("prefill_concurrency") is not None:  # credit/issuer.py: a request waits for a prefill slot
        raise ResultError(f"its profiling phase caps prompts in flight (prefill_concurrency "
                          f"{_short(phase['prefill_concurrency'])}), which the cost model's closed loop does not, and "
                          "its TTFT leaves out the wait for a slot; rerun without --prefill-concurrency")
    concurrency = _whole(phase.get("concurrency", 1))
    if "concurrency" in phase and (concurrency is None or concurrency < 1):
        return {}, f"its profiling phase's concurrency is {_short(phase['concurrency'])}, not a whole number >= 1"
    rate = _rate(phase.get("rate"))
    if kind == "concurrency":
        return {"concurrency": concurrency}, None
    if kind in _RATE_PHASES and rate is not None:
        if "concurrency" in phase:
            return {}, (f"both concurrency {concurrency} and rate {rate:g}: which one limited the run is not "
                        "recorded")
        return {"arrival_rate_per_s": rate}, None
    return {}, f"its profiling phase ({_short(kind)}) is neither a concurrency nor a rate phase"
