"""Properties the cost model owes its users beyond sanity: the largest-batch hint is exact, and a GPU with
more of every resource is never predicted slower (issue 13)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.evaluate import evaluate, plan_layout
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from planner.errors import InputError
from planner.scenario import layout_from_text, scenario_from_data

_CACHE: dict[tuple[object, ...], ResolvedScenario] = {}


def _scenario(model: str, system: str, weights: str, input_tokens: int, output_tokens: int) -> ResolvedScenario:
    key = (model, system, weights, input_tokens, output_tokens)
    if key not in _CACHE:
        kv = "bf16" if weights == "bf16" else "fp8"
        _CACHE[key] = scenario_from_data({
            "schema_version": 1, "name": "p", "model": model,
            "precision": {"weights": weights, "kv_cache": kv},
            "cluster": {"system": system, "gpus": 64},
            "workload": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        })
    return _CACHE[key]


def _layout(role: str, tp: int, dp: int, pp: int, moe_ep: int, batch: int) -> Layout:
    pool = {"role": role, "tp": tp, "dp_attention": dp, "pp": pp, "moe_tp": tp * dp // moe_ep, "moe_ep": moe_ep,
            "batch": batch}
    if role == "mixed":
        return Layout.model_validate({"serving": "aggregated", "pools": [pool]})
    other = {"role": "prefill" if role == "decode" else "decode", "tp": 8, "batch": 1, "moe_tp": 8}
    return Layout.model_validate({"serving": "disaggregated", "pools": [pool, other]})


def _pool_fits(resolved: ResolvedScenario, layout: Layout) -> bool:
    return plan_layout(resolved, layout).pools[0].memory.fits


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.data())
def test_largest_batch_hint_fits_and_one_more_does_not(data: st.DataObject) -> None:
    model = data.draw(st.sampled_from(["deepseek-v3", "qwen3-30b", "gpt-oss-120b", "llama3.1-70b", "kimi-linear"]))
    system = data.draw(st.sampled_from(["h100-sxm", "h200-sxm", "b200-sxm"]))
    resolved = _scenario(model, system, "fp8", data.draw(st.sampled_from([1024, 8192, 30000])),
                         data.draw(st.sampled_from([128, 2048])))
    dense = resolved.architecture.num_experts is None
    role = data.draw(st.sampled_from(["mixed", "decode", "prefill"]))
    tp, dp = data.draw(st.sampled_from([1, 2, 4, 8])), data.draw(st.sampled_from([1, 2, 4]))
    moe_ep = 1 if dense else data.draw(st.sampled_from([e for e in (1, 2, 4, 8) if tp * dp % e == 0]))
    pp = data.draw(st.sampled_from([1, 2]))
    probe = _layout(role, tp, dp, pp, moe_ep, data.draw(st.integers(dp, 50_000)))
    hint = plan_layout(resolved, probe).pools[0].max_batch
    if hint >= dp:  # smaller batches leave attention-DP ranks of a decoding pool idle
        assert _pool_fits(resolved, _layout(role, tp, dp, pp, moe_ep, hint))
    if hint + 1 >= dp:
        assert not _pool_fits(resolved, _layout(role, tp, dp, pp, moe_ep, hint + 1))


def test_evaluate_names_a_batch_that_fits() -> None:
    """The report from the issue: a batch that does not fit names the largest that does, and it fits."""
    resolved = _scenario("deepseek-v3", "h200-sxm", "fp8", 8192, 2048)
    layout = _layout("mixed", 1, 8, 1, 8, 1718 * 8)
    prediction = evaluate(resolved, layout)
    assert not prediction.feasible
    hint = prediction.pools[0]["max_batch"]
    assert f"the largest batch that fits is {hint}" in prediction.reasons[0]
    assert evaluate(resolved, _layout("mixed", 1, 8, 1, 8, hint)).feasible


def _disaggregated(prefill: dict[str, int], decode_batch: int = 64) -> Layout:
    return Layout.model_validate({"serving": "disaggregated", "pools": [
        {"role": "prefill", **prefill},
        {"role": "decode", "tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": decode_batch}]})


def test_prefill_pool_with_fewer_requests_than_ranks_runs_one_per_rank() -> None:
    """An attention-DP prefill worker with one request: its fill takes one request's time on one rank, the
    expert layer sees one request's tokens, and the idle ranks are reported."""
    resolved = _scenario("deepseek-v3", "h200-sxm", "fp8", 4096, 512)
    one = evaluate(resolved, _disaggregated({"tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": 1}))
    eight = evaluate(resolved, _disaggregated({"tp": 1, "dp_attention": 8, "moe_ep": 8, "batch": 8}))
    fill_one, fill_eight = one.pools[0]["fill"]["step_ms"], eight.pools[0]["fill"]["step_ms"]
    assert fill_one <= fill_eight  # same attention work per busy rank, fewer expert tokens
    assert fill_one / 1 >= fill_eight / 8  # but less throughput per request
    assert any("7 of the 8 attention-DP ranks" in w for w in one.warnings)
    assert not eight.warnings


def test_tp_beyond_the_head_count_replicates_heads() -> None:
    """Llama-3.1-8B has 32 query and 8 KV heads: tp 64 computes each head on two ranks, so attention
    weights per GPU stop shrinking at tp 32; tp 48 splits no engine can make is refused."""
    resolved = scenario_from_data({
        "schema_version": 1, "name": "p", "model": "llama3.1-8b", "precision": {"weights": "bf16"},
        "cluster": {"system": "gb200-nvl72", "gpus": 72}, "workload": {"input_tokens": 2048, "output_tokens": 128}})

    def attention_ms(tp: int) -> float:
        layout = Layout.model_validate({"serving": "aggregated", "pools": [
            {"role": "mixed", "tp": tp, "moe_tp": tp, "batch": 16}]})
        prediction = evaluate(resolved, layout)
        assert prediction.feasible
        return float(prediction.pools[0]["decode"]["by_operator_ms"]["attention_projections"])

    assert attention_ms(64) == attention_ms(32) < attention_ms(16)
    layout = Layout.model_validate({"serving": "aggregated", "pools": [{"role": "mixed", "tp": 64, "moe_tp": 64,
                                                                       "batch": 16}]})
    assert any("tp 64 exceeds the 32 attention heads" in w for w in evaluate(resolved, layout).warnings)
    with pytest.raises(InputError, match="tp 48 does not divide the 32 attention heads"):
        layout_from_text("serving: aggregated\npools:\n  - {role: mixed, tp: 48, moe_tp: 48, batch: 16}\n", resolved)


# (smaller, larger): the second has at least as much of every resource (FLOP/s in every format, HBM
# capacity and bandwidth, scale-up and scale-out bandwidth, host link) as the first.
BIGGER = [("h100-sxm", "b200-sxm"), ("h200-sxm", "b200-sxm"), ("b200-sxm", "b300-sxm"), ("b200-sxm", "gb200-nvl72")]


def _generation_cases() -> list[tuple[str, str, str, int, str, int]]:
    """(model, weights, role, layout degree, input tokens, batch): dense and MoE models, every compute
    format, each pool role, light and heavy batches (the issue's case: Llama-3.1-8B bf16 prefill, batch 16)."""
    cases = []
    for model, degree in (("llama3.1-8b", 1), ("gpt-oss-20b", 1), ("mixtral-8x7b", 2), ("qwen3-30b", 2),
                          ("deepseek-v3", 8)):
        for weights in ("bf16", "fp8", "fp4"):
            if model == "deepseek-v3" and weights == "bf16":
                continue  # 1.3 TB of bf16 weights fit no 8-GPU board
            for role in ("mixed", "prefill", "decode"):
                for tokens, batch in ((1024, 16), (8192, 1), (1024, 256)):
                    cases.append((model, weights, role, degree, tokens, batch))
    return cases


@pytest.mark.parametrize("small, large", BIGGER)
def test_a_bigger_gpu_is_never_slower(small: str, large: str) -> None:
    """Same layout, precision and workload: TTFT and TPOT no longer, tokens/s per GPU no lower."""
    slower = []
    for model, weights, role, degree, tokens, batch in _generation_cases():
        dense = _scenario(model, small, weights, tokens, 512).architecture.num_experts is None
        tp, dp = (degree, 1) if dense else (1, degree)
        layout = _layout(role, tp, dp, 1, 1 if dense else degree, batch * dp)
        before = evaluate(_scenario(model, small, weights, tokens, 512), layout)
        after = evaluate(_scenario(model, large, weights, tokens, 512), layout)
        if not before.feasible:
            continue
        ours = (after.ttft_ms, after.tpot_ms, 1.0 / after.tokens_per_s_per_gpu)
        theirs = (before.ttft_ms, before.tpot_ms, 1.0 / before.tokens_per_s_per_gpu)
        if not after.feasible or any(a > b * (1 + 1e-9) for a, b in zip(ours, theirs, strict=True)):
            slower.append((model, weights, role, tokens, batch, [round(b / a, 3) for a, b in zip(ours, theirs,
                                                                                               strict=True)]))
    assert not slower, f"{large} predicted slower than {small} (speed-ups TTFT, TPOT, 1/throughput): {slower}"
