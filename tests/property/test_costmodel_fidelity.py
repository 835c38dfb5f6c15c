"""Properties the cost model owes its users beyond sanity: the largest-batch hint is exact, and a GPU with
more of every resource is never predicted slower (issue 13)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.evaluate import evaluate, plan_layout
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from planner.scenario import scenario_from_data

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
