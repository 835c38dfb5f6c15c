"""Request-length distributions (issue 13, item 1), each figure by hand: the forms and their moments, the
workload schema, and what the spread does to decode context, fill attention, the slowest attention-DP
rank, KV memory and TTFT. Equal lengths stay exactly as they were (the integer form is the same object
path; a one-point histogram agrees to rounding)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from costmodel.calibration import default_calibration
from costmodel.evaluate import evaluate, plan_layout, pool_context
from costmodel.layout import Layout, Pool
from costmodel.lengths import Lengths, expected_max_normal, parse_spec, slowest_of
from costmodel.modes import decode_work, midfill_work
from costmodel.pricing import DirectPricer
from costmodel.resolve import ResolvedScenario
from costmodel.scenario import Workload
from costmodel.serving import RequestShape, plan_pool, time_pool
from planner.errors import InputError
from planner.scenario import load_scenario, scenario_from_data

UNIFORM_VLLM = {"mean": 1024, "range_ratio": 0.5}  # integers 512..1536
HISTOGRAM = [{"share": 0.25, "tokens": 100}, {"share": 0.75, "tokens": 300}]


def test_forms_and_moments_by_hand() -> None:
    vllm = Lengths.of(parse_spec(UNIFORM_VLLM))
    assert (vllm.low, vllm.high) == (512, 1536)
    assert vllm.mean == 1024.0
    assert vllm.variance == pytest.approx((1025**2 - 1) / 12)  # discrete uniform of 1,025 values
    sglang = Lengths.of(parse_spec({"max": 1000, "range_ratio": 0.5}))  # randint(500, 1001)
    assert (sglang.low, sglang.high, sglang.mean) == (500, 1000, 750.0)
    assert Lengths.of(parse_spec({"max": 1000, "range_ratio": 1.0})).is_fixed
    assert Lengths.of(parse_spec({"max": 10, "range_ratio": 0.0})).low == 1  # SGLang's default: 1..L
    # vLLM keeps output lengths at least 1
    assert Lengths.of(parse_spec({"mean": 2, "range_ratio": 0.9}), output=True).low == 1
    hist = Lengths.of(parse_spec(HISTOGRAM))
    assert hist.mean == 250.0  # 25 + 225
    assert hist.variance == pytest.approx(70_000 - 250**2)  # E[X^2] = 2,500 + 67,500
    biased_mean, biased_var = hist.length_biased()
    assert biased_mean == pytest.approx(280.0)  # 70,000 / 250
    assert biased_var == pytest.approx(20_500_000 / 250 - 280**2)  # E[X^3] = 250,000 + 20,250,000
    assert hist.shortfall(200) == pytest.approx(0.25 * 100)
    # E[max(0, 515 - X)] over 512..1536: (3 + 2 + 1 + 0) / 1,025
    assert vllm.shortfall(515) == pytest.approx(6 / 1025)


def test_expected_maximum_of_normals() -> None:
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-9)
    assert slowest_of(2, 4, 1000.0, 1e4, 2000.0) == pytest.approx(4000 + math.sqrt(4e4) / math.sqrt(math.pi))
    assert slowest_of(64, 1, 1000.0, 1e6, 1500.0) == 1500.0  # never beyond every length at its largest
    assert slowest_of(8, 3, 1000.0, 0.0, 1000.0) == 3000.0


def test_workload_takes_a_distribution_and_keeps_its_mean() -> None:
    workload = Workload.model_validate({"input_tokens": UNIFORM_VLLM, "output_tokens": HISTOGRAM})
    assert (workload.input_tokens, workload.output_tokens) == (1024, 250)
    assert workload.mean_output_tokens == 250.0
    assert workload.longest_request_tokens == 1536 + 300
    assert Workload.model_validate(workload.model_dump()) == workload  # round trip
    plain = Workload.model_validate({"input_tokens": 1000, "output_tokens": 10})
    assert plain.input_lengths is None and plain.mean_output_tokens == 10.0
    with pytest.raises(ValidationError, match=r"add up to 0\.5"):
        Workload.model_validate({"input_tokens": [{"share": 0.5, "tokens": 10}], "output_tokens": 3})
    with pytest.raises(ValidationError, match="mean of input_lengths is 1024"):
        Workload.model_validate({"input_tokens": 1000, "input_lengths": UNIFORM_VLLM, "output_tokens": 3})
    with pytest.raises(ValidationError, match="below 1 with mean"):
        Workload.model_validate({"input_tokens": {"mean": 100, "range_ratio": 1.0}, "output_tokens": 3})
    with pytest.raises(ValidationError, match="turn_lengths"):
        Workload.model_validate({"input_tokens": UNIFORM_VLLM, "output_tokens": 10,
                                 "sessions": {"arrival_rate_per_s": 1.0, "turns": 3}})


def _resolved(input_tokens: Any, output_tokens: Any, **workload: Any) -> ResolvedScenario:
    return scenario_from_data({
        "schema_version": 1, "name": "t", "model": "deepseek-v3", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h200-sxm", "gpus": 8}, "engine": "trtllm",
        "workload": {"input_tokens": input_tokens, "output_tokens": output_tokens, **workload}})


def _pool(batch: int, dp: int, role: str = "mixed") -> dict[str, Any]:
    return {"role": role, "tp": 8 // dp, "dp_attention": dp, "moe_ep": 8, "batch": batch}


def _layout(batch: int, dp: int) -> Layout:
    return Layout.model_validate({"serving": "aggregated", "pools": [_pool(batch, dp)]})


def test_a_malformed_distribution_is_one_problem_at_the_key_written(tmp_path: Path) -> None:
    """A mapping is checked as uniform lengths and a list as a histogram: one message each, at the line and
    under the name the file uses (not also "not a valid list", not under input_lengths)."""
    path = tmp_path / "s.yaml"
    path.write_text("schema_version: 1\nname: t\nmodel: Qwen/Qwen3-32B\ncluster: {system: h100-sxm, gpus: 8}\n"
                    "workload:\n  input_tokens: {mean: 1024, range_ratio: 1.0}\n"
                    "  output_tokens: [{share: 1.0, tokens: 0}]\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_scenario(path)
    problems = [str(p) for p in caught.value.problems]
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"{path}:6: workload.input_tokens: range_ratio must be below 1 with mean")
    assert problems[1].startswith(f"{path}:7: workload.output_tokens.0.tokens: Input should be greater than 0")


def test_longest_request_is_checked_against_the_model_context() -> None:
    with pytest.raises(InputError, match="longest request"):
        _resolved({"mean": 100_000, "range_ratio": 0.9}, 10)  # mean 100,000 fits 163,840; 190,000 does not
    _resolved(100_000, 10)  # one length that fits


def test_one_point_histogram_is_the_integer() -> None:
    plain = evaluate(_resolved(2048, 512), _layout(64, 8))
    point = evaluate(_resolved([{"share": 1.0, "tokens": 2048}], [{"share": 1.0, "tokens": 512}]), _layout(64, 8))
    for key in ("ttft_ms", "tpot_ms", "tokens_per_s_per_gpu", "memory_per_gpu_gb"):
        assert getattr(point, key) == pytest.approx(getattr(plain, key), rel=1e-12)


def test_decode_batch_holds_length_biased_outputs() -> None:
    """One rank (dp 1): outputs 100 or 300 with shares 1/2 keep E[O^2]/E[O] = 250 tokens in service, so the
    decode step reads the KV of 1,000 + 125 tokens per sequence and memory reserves 1,000 + 250: the same
    work and memory as every request with 250 output tokens."""
    spread = _resolved(1000, [{"share": 0.5, "tokens": 100}, {"share": 0.5, "tokens": 300}])
    fixed = _resolved(1000, 250)
    layout = _layout(32, 1)
    varied, same = plan_layout(spread, layout).pools[0], plan_layout(fixed, layout).pools[0]
    assert varied.request.output == 200.0  # the mean, for steps per request and throughput
    assert varied.request.mid_context == 1125.0
    assert varied.decode == same.decode
    assert varied.memory == same.memory


def test_fill_attends_to_length_biased_prompts() -> None:
    """Prompts of 1,000 or 3,000 tokens (shares 1/2): a prompt token belongs to a prompt of E[I^2]/E[I] =
    5e6 / 2,000 = 2,500 tokens, so causal fill attends to 1,250 keys per token on average, not 1,000."""
    layout = Layout.model_validate({"serving": "disaggregated",
                                    "pools": [_pool(8, 1, "prefill"), _pool(8, 1, "decode")]})
    pool = plan_layout(_resolved([{"share": 0.5, "tokens": 1000}, {"share": 0.5, "tokens": 3000}], 4),
                       layout).pools[0]
    assert pool.request.new == 2000.0
    assert pool.request.fill_new == 2500.0
    assert pool.fill_chunks == 8 * 2000 / 8192  # one rank: the mean tokens, no slowest-of
    # each chunk of 8,192 tokens is priced as prompts of 2,500 tokens
    assert pool.fill == [midfill_work(pool.ctx, 0, 8192 / 2500, 2500.0, 0.0, (), 1.0)]


def test_slowest_attention_dp_rank_by_hand() -> None:
    """Two attention-DP ranks of 16 sequences, prompts 1,000 or 3,000 tokens (variance 1e6), outputs 2: the
    rank with more KV reads 16 x 2,001 + sqrt(16 x 1e6) / sqrt(pi) tokens per step (decode context var =
    Var(I) + Var(O_b)/3 = 1e6), and the fullest rank reserves 16 x 2,002 + the same spread."""
    resolved = _resolved([{"share": 0.5, "tokens": 1000}, {"share": 0.5, "tokens": 3000}], 2)
    plan = plan_layout(resolved, _layout(32, 2)).pools[0]
    spread_term = math.sqrt(16 * 1e6) / math.sqrt(math.pi)
    context = (16 * 2001 + spread_term) / 16
    assert plan.request.slowest_context(16, 2) == pytest.approx(context)
    assert plan.decode == [decode_work(plan.ctx, 0, 16.0, plan.request.slowest_context(16, 2), 1.0, 2.0)]
    # prompt tokens of the busiest rank per round: 16 x 2,000 + the spread; mixed steps of 8,192 - 16 tokens
    prompts = 16 * 2000 + spread_term
    assert plan.mixed_steps == pytest.approx(prompts / (8192 - 16))
    # a prefill pool's ranks pull the next prompt when done: the mean tokens per rank, no slowest-of
    split = Layout.model_validate({"serving": "disaggregated",
                                   "pools": [_pool(32, 2, "prefill"), _pool(32, 2, "decode")]})
    assert plan_layout(resolved, split).pools[0].fill_chunks == 16 * 2000 / 8192
    fixed_context = _resolved(2000, 2)  # the same figures on one rank hold no spread
    assert plan_layout(fixed_context, _layout(32, 2)).pools[0].request.slowest_context(16, 2) == 2001.0


def test_memory_holds_the_fullest_rank() -> None:
    varied = plan_layout(_resolved([{"share": 0.5, "tokens": 1000}, {"share": 0.5, "tokens": 3000}], 2),
                         _layout(32, 2)).pools[0]
    fixed = plan_layout(_resolved(2000, 2), _layout(32, 2)).pools[0]
    per_token = (varied.memory.kv_cache - fixed.memory.kv_cache) / (math.sqrt(16 * 1e6) / math.sqrt(math.pi))
    # the extra KV is exactly the spread term's tokens at the per-token KV of the fixed case
    assert per_token == pytest.approx(fixed.memory.kv_cache / (16 * 2002))
    assert varied.max_batch <= fixed.max_batch
    assert varied.memory.weights == fixed.memory.weights


def test_own_prefill_steps_average_over_lengths() -> None:
    """Prompts of 1,000 or 20,000 tokens in chunks of c: E[max(1, I/c)] = (1 + 20,000/c) / 2."""
    shape = RequestShape.of(Workload.model_validate({
        "input_tokens": [{"share": 0.5, "tokens": 1000}, {"share": 0.5, "tokens": 20000}], "output_tokens": 8}))
    assert shape.own_steps(8000.0) == pytest.approx((1 + 20000 / 8000) / 2)
    assert RequestShape.of(Workload.model_validate({"input_tokens": 10500, "output_tokens": 8})).own_steps(
        8000.0) == 10500 / 8000
    # prefix hits scale the new tokens: half of each prompt cached
    hit = RequestShape.of(Workload.model_validate({
        "input_tokens": [{"share": 0.5, "tokens": 1000}, {"share": 0.5, "tokens": 20000}], "output_tokens": 8,
        "prefix_hit_rate": 0.5}))
    assert hit.new == 5250.0 and hit.own_steps(8000.0) == pytest.approx((1 + 10000 / 8000) / 2)


def test_spread_slows_tpot_and_the_monotone_batch_rules_hold() -> None:
    """More spread at the same means never speeds a deployment up; per layout, along integer batches TTFT,
    TPOT and fill latency never fall and requests per second never fall (what the planner's batch search
    rests on, `planner.batches`), for mixed, prefill and decode pools, attention DP 1 and 8."""
    narrow = _resolved({"mean": 2048, "range_ratio": 0.1}, {"mean": 512, "range_ratio": 0.1})
    wide = _resolved({"mean": 2048, "range_ratio": 0.9}, {"mean": 512, "range_ratio": 0.9})
    a, b = evaluate(narrow, _layout(64, 8)), evaluate(wide, _layout(64, 8))
    assert b.tpot_ms > a.tpot_ms and b.memory_per_gpu_gb > a.memory_per_gpu_gb
    pricer = DirectPricer(wide.system, default_calibration(), wide.scenario.engine)
    for role in ("mixed", "prefill", "decode"):
        for dp in (1, 8):
            pools = [Pool.model_validate(_pool(batch, dp, role)) for batch in range(1, 97)]
            timings = [time_pool(plan_pool(pool_context(wide, pool), pool, wide.scenario.workload), pricer)
                       for pool in pools]
            for name in ("ttft_s", "tpot_s", "requests_per_s"):
                values = np.array([getattr(t, name) for t in timings])
                assert np.all(np.diff(values) >= -1e-12 * np.abs(values[:-1])), (role, dp, name)
