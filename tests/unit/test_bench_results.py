"""`plan calibrate` reading serving-benchmark result files (vLLM / TensorRT-LLM `benchmark_serving` JSON, SGLang
`bench_serving` JSONL): the same runs as written out by hand, the workload they ran, and clear errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.calibrate import calibrate, calibration_summary, load_runs
from planner.cli import main
from planner.errors import InputError

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "calibration" / "llama-70b-h200-vllm.yaml"
LAYOUT = {"serving": "aggregated", "pools": [{"role": "mixed", "tp": 2, "moe_tp": 2, "batch": 32}]}


def _vllm(**changes: Any) -> dict[str, Any]:
    """A `vllm bench serve --save-result` object (keys as vllm/benchmarks/serve.py writes them), 320 prompts of
    1,024 + 1,000 tokens at concurrency 32."""
    return {"date": "20261201-120000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
            "model_id": "meta-llama/Llama-3.1-70B", "num_prompts": 320, "request_rate": "inf", "burstiness": 1.0,
            "max_concurrency": 32, "duration": 120.5, "completed": 320, "failed": 0,
            "total_input_tokens": 320 * 1024, "total_output_tokens": 320 * 1000, "mean_ttft_ms": 271.56,
            "median_ttft_ms": 250.0, "mean_tpot_ms": 20.346, "median_tpot_ms": 20.1, "mean_itl_ms": 20.3} | changes


def _sglang(concurrency: int, ttft: float, tpot: float) -> dict[str, Any]:
    """One line of `python -m sglang.bench_serving --output-file` (sglang/benchmark/serving.py)."""
    return {"tag": None, "backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
            "max_concurrency": concurrency, "random_input_len": 2048, "random_output_len": 512,
            "random_range_ratio": 1.0, "duration": 60.0, "completed": 10 * concurrency,
            "total_input_tokens": 10 * concurrency * 2048, "total_output_tokens": 10 * concurrency * 512,
            "mean_ttft_ms": ttft, "mean_tpot_ms": tpot, "concurrency": concurrency * 0.97}


def _measurements(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    shutil.copy(SCENARIO, tmp_path / "scenario.yaml")
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "measurements": entries}, sort_keys=False),
                    encoding="utf-8")
    return path


def _entry(**fields: Any) -> dict[str, Any]:
    return {"scenario": "scenario.yaml", "layout": LAYOUT} | fields


def test_a_result_file_gives_the_run_written_out_by_hand(tmp_path: Path) -> None:
    (tmp_path / "vllm.json").write_text(json.dumps(_vllm()), encoding="utf-8")
    (tmp_path / "sglang.jsonl").write_text("".join(json.dumps(_sglang(c, t, p)) + "\n"
                                                   for c, t, p in ((4, 150.0, 14.0), (32, 300.0, 21.0))),
                                           encoding="utf-8")
    from_files = load_runs(_measurements(tmp_path, [
        _entry(result="vllm.json"), _entry(result={"file": "sglang.jsonl", "run": 2})]))[0]
    by_hand = load_runs(_measurements(tmp_path, [
        _entry(workload={"input_tokens": 1024, "output_tokens": 1000, "concurrency": 32}, ttft_ms=271.56,
               tpot_ms=20.346),
        _entry(workload={"input_tokens": 2048, "output_tokens": 512, "concurrency": 32}, ttft_ms=300.0,
               tpot_ms=21.0)]))[0]
    for read, written in zip(from_files, by_hand, strict=True):
        assert (read.scenario, read.layout, read.ttft_ms, read.tpot_ms) == \
            (written.scenario, written.layout, written.ttft_ms, written.tpot_ms)
    assert [run.name for run in from_files] == ["vllm.json", "sglang.jsonl#2"]


def test_an_open_loop_run_replaces_the_scenarios_concurrency(tmp_path: Path) -> None:
    """No --max-concurrency, a finite --request-rate: requests arrive at that rate (the example scenario's own
    concurrency of 16 would contradict it and goes)."""
    (tmp_path / "r.json").write_text(json.dumps(_vllm(max_concurrency=None, request_rate=4.0)), encoding="utf-8")
    run = load_runs(_measurements(tmp_path, [_entry(result="r.json")]))[0][0]
    assert run.scenario["workload"]["arrival_rate_per_s"] == 4.0
    assert run.scenario["workload"]["concurrency"] is None


def test_the_entrys_workload_wins_over_the_result_file(tmp_path: Path) -> None:
    """The file's lengths are means; the spread the benchmark drew is the entry's to give."""
    (tmp_path / "r.json").write_text(json.dumps(_vllm()), encoding="utf-8")
    spread = {"mean": 1024, "range_ratio": 0.5}
    run = load_runs(_measurements(tmp_path, [_entry(result="r.json", workload={"input_tokens": spread})]))[0][0]
    assert run.scenario["workload"]["input_lengths"].items() >= spread.items()
    assert run.scenario["workload"]["output_tokens"] == 1000 and run.scenario["workload"]["concurrency"] == 32


@pytest.mark.parametrize(("file", "workload", "expected"), [
    (_vllm(), {"arrival_rate_per_s": 3.0}, {"arrival_rate_per_s": 3.0, "concurrency": None}),
    (_vllm(max_concurrency=64, request_rate=2.0), {"concurrency": 64}, {"concurrency": 64}),
    (_vllm(), {"input_lengths": {"mean": 1000, "range_ratio": 0.5}}, {"input_tokens": 1000}),
])
def test_the_entrys_load_and_lengths_replace_the_files(tmp_path: Path, file: dict[str, Any],
                                                        workload: dict[str, Any], expected: dict[str, Any]) -> None:
    """An open loop written in the entry replaces the file's closed one; a run whose file cannot say which load
    ran (a concurrency cap and a rate) takes the entry's; a length distribution replaces the file's mean."""
    (tmp_path / "r.json").write_text(json.dumps(file), encoding="utf-8")
    run = load_runs(_measurements(tmp_path, [_entry(result="r.json", workload=workload)]))[0][0]
    assert run.scenario["workload"].items() >= expected.items()


@pytest.mark.parametrize(("result", "content", "message"), [
    ("r.json", json.dumps(_vllm(max_concurrency=None)), "every prompt was sent at once"),
    ("r.json", json.dumps({k: v for k, v in _vllm().items() if k != "mean_tpot_ms"}),
     "r.json, line 1: mean_tpot_ms is missing; expected a positive time in ms"),
    ("r.json", json.dumps(_vllm(completed=0)), "no request completed"),
    ("r.json", json.dumps(_vllm(mean_ttft_ms=True)), "mean_ttft_ms is True"),
    ("r.jsonl", json.dumps(_sglang(4, 1.0, 1.0)) + "\n{not json\n", "r.jsonl, line 2: not JSON"),
    ("r.jsonl", json.dumps(_sglang(4, 1.0, 1.0)) + "\n" + json.dumps(_sglang(8, 1.0, 1.0)) + "\n",
     "r.jsonl holds 2 runs (max_concurrency 4, request_rate inf; max_concurrency 8, request_rate inf); pick one "
     "with `result: {file: r.jsonl, run: N}`"),
    ("r.json", json.dumps(_vllm(max_concurrency=64, request_rate=2.0)),
     "both max_concurrency 64 and request_rate 2: which one limited the run is not recorded; give the load"),
    ("r.json", json.dumps(_vllm(max_concurrency=None, request_rate="trace")), "a trace replay"),
    ("r.json", json.dumps(_vllm(ramp_up_strategy="linear")), "a ramp-up run"),
    ("r.json", json.dumps(_vllm(num_prompts=32)), "max_concurrency 32 with 32 prompts: every prompt was sent at once"),
    ("r.json", json.dumps(_vllm(mean_ttft_ms=1e12)), "mean_ttft_ms is 1000000000000.0; expected a positive time"),
    ("r.json", json.dumps(_vllm(failed=-1)), "failed is -1; expected a whole number"),
    ("r.json", json.dumps(_vllm(total_input_tokens=10**400)), "more than 10,000,000 tokens each"),
    ("r.json", '{"completed": 1' + "0" * 5000 + "}", "not JSON (a number too long or nesting too deep)"),
    ("r.json", "[" * 100_000 + "]" * 100_000, "not JSON (a number too long or nesting too deep)"),
    ("r.json", "[1, 2]", "a JSON list, not an object of one run"),
    ("r.json", json.dumps(_vllm(total_input_tokens=320 * 200_000)),
     "r.json, line 1 gives input_tokens 200000, output_tokens 1000, concurrency 32: cached + input + output"),
    ({"file": "r.jsonl", "run": 3}, json.dumps(_sglang(4, 1.0, 1.0)) + "\n", "holds 1 run; give a run from 1 to 1"),
    ("missing.json", None, "missing.json: file not found"),
])
def test_a_result_file_that_cannot_be_a_run_is_exit_2_at_the_entry(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], result: Any, content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / ("r.jsonl" if isinstance(result, dict) else result)).write_text(content, encoding="utf-8")
    path = _measurements(tmp_path, [_entry(result=result)])
    with pytest.raises(InputError) as caught:
        load_runs(path)
    problem = caught.value.problems[0]
    lines = path.read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.lstrip(" -").startswith("result"))
    line += isinstance(result, dict)  # a block mapping's line is its first key's, `file:`
    assert (problem.path, problem.line, problem.field) == (path, line, "result"), str(problem)
    assert message in problem.message
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", str(path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("fields", "message"), [
    ({"result": "r.json", "ttft_ms": 5.0}, "give the measured times once"),
    ({"ttft_ms": 5.0}, "give the measured ttft_ms and tpot_ms (ms), or a benchmark result file"),
])
def test_times_come_from_the_entry_or_a_result_file_not_both(tmp_path: Path, fields: dict[str, Any],
                                                             message: str) -> None:
    (tmp_path / "r.json").write_text(json.dumps(_vllm()), encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(message)):
        load_runs(_measurements(tmp_path, [_entry(**fields)]))


def test_failed_requests_are_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").write_text(json.dumps(_vllm(failed=3)), encoding="utf-8")
    path = _measurements(tmp_path, [_entry(result="r.json")])
    main(["calibrate", str(path), "-o", str(tmp_path / "cal.yaml")])
    assert "note: run r.json: 3 requests failed" in capsys.readouterr().err
    assert calibration_summary(calibrate(path))["failed_requests"] == [{"run": "r.json", "failed": 3}]


def test_a_result_of_other_lengths_than_its_scenario_is_noted(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The scenario says 1,024 + 1,000 tokens: a file of 8,192-token prompts is used but named (the entry may pair
    the wrong files); a mean within 10% (drawn lengths, early EOS), or a length the entry gives itself, is not."""
    (tmp_path / "long.json").write_text(json.dumps(_vllm(total_input_tokens=320 * 8192)), encoding="utf-8")
    (tmp_path / "near.json").write_text(json.dumps(_vllm(total_output_tokens=320 * 950)), encoding="utf-8")
    path = _measurements(tmp_path, [_entry(result="long.json"), _entry(result="near.json"),
                                    _entry(result="long.json", workload={"input_tokens": 8192})])
    runs = load_runs(path)[0]
    assert runs[0].scenario["workload"]["input_tokens"] == 8192  # the file's
    assert [len(run.notes) for run in runs] == [1, 0, 0]
    assert "mean input_tokens of 8192 where the scenario says 1024" in runs[0].notes[0]
    main(["calibrate", str(path), "-o", str(tmp_path / "cal.yaml")])
    assert "note: run long.json: " in capsys.readouterr().err
    assert [n["run"] for n in calibration_summary(calibrate(path))["notes"]] == ["long.json"]


def test_one_fold_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").write_text(json.dumps(_vllm()), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["calibrate", str(_measurements(tmp_path, [_entry(result="r.json")])), "--folds", "1"])
    assert exit_info.value.code == 2 and "--folds 1 holds nothing out" in capsys.readouterr().err


def test_a_run_of_a_file_is_named_by_its_field(tmp_path: Path) -> None:
    """`result: {file, run: 0}` is reported at result.run (no model class in the path)."""
    (tmp_path / "r.json").write_text(json.dumps(_vllm()), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_runs(_measurements(tmp_path, [_entry(result={"file": "r.json", "run": 0})]))
    assert caught.value.problems[0].field == "measurements.0.result.run"


def _genai_perf(**changes: Any) -> dict[str, Any]:
    """A genai-perf `profile_export_genai_perf.json` (genai_perf 0.0.16: each metric {unit, avg, p..}, the
    command's settings under input_config, the load as perf_analyzer.stimulus)."""
    return {"request_throughput": {"unit": "requests/sec", "avg": 2.6},
            "time_to_first_token": {"unit": "ms", "avg": 271.56, "p50": 250.0},
            "inter_token_latency": {"unit": "ms", "avg": 20.346},
            "input_sequence_length": {"unit": "tokens", "avg": 1024.2},
            "output_sequence_length": {"unit": "tokens", "avg": 999.6},
            "request_count": {"unit": "count", "avg": 320},
            "input_config": {"model_names": ["meta-llama/Llama-3.1-70B"],
                             "perf_analyzer": {"stimulus": {"concurrency": 32}}}} | changes


def _aiperf(phase: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """An AIPerf `profile_export_aiperf.json` (aiperf 0.13: genai-perf's metric shape, times in display units,
    the load as the profiling phase of input_config.phases)."""
    warmup = {"name": "warmup", "kind": "warmup", "type": "concurrency", "concurrency": 4}
    phases = [warmup, {"name": "profiling", "kind": "profiling"} | phase]
    return _genai_perf(input_config={"phases": phases}, error_request_count={"unit": "requests", "avg": 2}) | changes


@pytest.mark.parametrize(("content", "workload", "failed"), [
    (_genai_perf(), {"concurrency": 32}, 0),
    (_genai_perf(input_config={"concurrency": 32}), {"concurrency": 32}, 0),  # before genai-perf 0.0.13
    (_genai_perf(time_to_first_token={"unit": "ns", "avg": 271.56e6}), {"concurrency": 32}, 0),
    (_aiperf({"type": "concurrency", "concurrency": 32}), {"concurrency": 32}, 2),
    (_aiperf({"type": "poisson", "rate": 4.0}), {"arrival_rate_per_s": 4.0}, 2),
    (_aiperf({"type": "concurrency"}), {"concurrency": 1}, 2),  # AIPerf leaves its default out of the export
    (_genai_perf(input_config={"perf_analyzer": {"stimulus": {"request_rate": 4.0}}}), {"arrival_rate_per_s": 4.0}, 0),
    (_genai_perf(time_to_first_token={"unit": "sec", "avg": 0.27156}), {"concurrency": 32}, 0),
])
def test_genai_perf_and_aiperf_exports_are_runs(tmp_path: Path, content: dict[str, Any], workload: dict[str, Any],
                                                failed: int) -> None:
    """NVIDIA's clients (Dynamo's guides use them): TTFT and inter-token latency by their averages, lengths by the
    average sequence lengths (rounded), the load from the command's settings (the warm-up phase's left out)."""
    (tmp_path / "p.json").write_text(json.dumps(content), encoding="utf-8")
    run = load_runs(_measurements(tmp_path, [_entry(result="p.json")]))[0][0]
    assert (run.ttft_ms, run.tpot_ms, run.failed) == (pytest.approx(271.56), 20.346, failed)
    assert run.scenario["workload"].items() >= ({"input_tokens": 1024, "output_tokens": 1000} | workload).items()


@pytest.mark.parametrize(("content", "message"), [
    (_genai_perf(inter_token_latency={"unit": "tokens", "avg": 20.0}), "inter_token_latency is"),
    (_genai_perf(input_config={"perf_analyzer": {"stimulus": {"concurrency": 8, "request_rate": 2.0}}}),
     "its load {'concurrency': 8, 'request_rate': 2.0} is not one concurrency or one rate"),
    (_aiperf({"type": "concurrency", "concurrency": 32, "concurrency_ramp": 30}),
     "its profiling phase varies its load (concurrency_ramp)"),
    (_aiperf({"type": "concurrency", "concurrency": 32, "prefill_ramp": 10}), "varies its load (prefill_ramp)"),
    (_aiperf({"type": "concurrency", "concurrency": 32, "adaptive_scale": True}), "varies its load (adaptive_scale)"),
    (_aiperf({"type": "concurrency", "concurrency": 8.0}), "concurrency is 8.0, not a whole number >= 1"),
    (_aiperf({"type": ["concurrency"]}), "(None) is neither a concurrency nor a rate phase"),
    (_genai_perf(input_config={"phases": [{"kind": "profiling", "type": "concurrency", "concurrency": 8},
                                          {"kind": "profiling", "type": "concurrency", "concurrency": 64}]}),
     "its 2 profiling phases are pooled"),
    (_aiperf({"type": "fixed_schedule"}), "'fixed_schedule') is neither a concurrency nor a rate phase"),
    (_aiperf({"type": "poisson", "rate": 4.0, "concurrency": 64}), "both concurrency 64 and rate 4"),
    ({k: v for k, v in _genai_perf().items() if k != "input_config"}, "records no input_config"),
    # genai-perf 0.0.16 analyze sweeps write the command's default stimulus into every point's file
    (_genai_perf(input_config={"subcommand": "analyze", "perf_analyzer": {"stimulus": {"concurrency": 1}}}),
     "a genai-perf `analyze` file: its input_config is the command's, not this run's load"),
    (_genai_perf(input_config={"subcommand": "process", "perf_analyzer": {"stimulus": {"concurrency": 16}}}),
     "a genai-perf `process` file"),
])
def test_a_genai_perf_export_without_one_load_needs_the_entrys(tmp_path: Path, content: dict[str, Any],
                                                               message: str) -> None:
    (tmp_path / "p.json").write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(message)):
        load_runs(_measurements(tmp_path, [_entry(result="p.json")]))
    if "inter_token_latency" not in message:  # the load given by the entry settles it
        run = load_runs(_measurements(tmp_path, [_entry(result="p.json", workload={"concurrency": 16})]))[0][0]
        assert run.scenario["workload"]["concurrency"] == 16



@pytest.mark.parametrize(("content", "message"), [
    ({k: v for k, v in _genai_perf().items() if k != "inter_token_latency"}, "no inter_token_latency: the run did not"),
    ({k: v for k, v in _genai_perf().items() if k not in ("time_to_first_token", "inter_token_latency")},
     "no time_to_first_token: the run did not stream"),
    (_aiperf({"type": "concurrency"}, error_request_count={"unit": "requests", "avg": 2.5}),
     "error_request_count averages 2.5; expected a whole number"),
    (_aiperf({"type": "concurrency"}, error_request_count={"unit": "requests", "avg": 1e308}),
     "expected a whole number of requests"),
    (_aiperf({"type": "concurrency"}, was_cancelled=True, is_complete=False, incomplete_reason="cancelled by user"),
     "the run did not complete ('cancelled by user')"),
    (_aiperf({"type": "concurrency"}, is_complete=False), "the run did not complete ('not complete')"),
    (_aiperf({"type": "concurrency", "concurrency": 64, "prefill_concurrency": 4}),
     "caps prompts in flight (prefill_concurrency 4)"),
])
def test_a_genai_perf_export_that_cannot_be_a_run_says_why(tmp_path: Path, content: dict[str, Any],
                                                           message: str) -> None:
    (tmp_path / "p.json").write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(message)):
        load_runs(_measurements(tmp_path, [_entry(result="p.json", workload={"concurrency": 8})]))
