"""Random valid layouts through the cost model: it never crashes, figures are finite and positive, GPU
accounting adds up, and no step beats its roofline floor."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.evaluate import evaluate
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from planner.scenario import scenario_from_data

MODELS = ["deepseek-v3", "qwen3-30b", "gpt-oss-120b", "kimi-linear", "llama4-scout", "llama3.1-8b", "qwen3-next"]
_CACHE: dict[tuple[str, str, int, int], ResolvedScenario] = {}


def _scenario(model: str, system: str, input_tokens: int, cached: int) -> ResolvedScenario:
    key = (model, system, input_tokens, cached)
    if key not in _CACHE:
        _CACHE[key] = scenario_from_data({
            "schema_version": 1, "name": "p", "model": model, "precision": {"weights": "fp8", "kv_cache": "fp8"},
            "cluster": {"system": system, "gpus": 64},
            "workload": {"input_tokens": input_tokens, "output_tokens": 256, "cached_tokens": cached,
                         "cached_tier": "host_dram"},
        })
    return _CACHE[key]


@st.composite
def pools(draw: st.DrawFn, role: str, dense: bool) -> dict[str, object]:
    tp, dp, pp = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2]))
    group = tp * dp
    moe_ep = 1 if dense else draw(st.sampled_from([e for e in (1, 2, 4, 8, 16) if group % e == 0]))
    return {"role": role, "replicas": draw(st.integers(1, 2)), "tp": tp, "dp_attention": dp, "pp": pp,
            "moe_tp": group // moe_ep, "moe_ep": moe_ep, "batch": dp * draw(st.integers(1, 64))}


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.data())
def test_random_layouts_give_sane_predictions(data: st.DataObject) -> None:
    model = data.draw(st.sampled_from(MODELS))
    resolved = _scenario(model, data.draw(st.sampled_from(["h200-sxm", "gb200-nvl72"])),
                         data.draw(st.sampled_from([128, 2048, 16384])), data.draw(st.sampled_from([0, 30000])))
    dense = resolved.architecture.num_experts is None
    if data.draw(st.booleans()):
        document = {"serving": "aggregated", "pools": [data.draw(pools("mixed", dense))]}
    else:
        document = {"serving": "disaggregated",
                    "pools": [data.draw(pools("prefill", dense)), data.draw(pools("decode", dense))]}
    layout = Layout.model_validate(document)
    prediction = evaluate(resolved, layout)
    figures = (prediction.ttft_ms, prediction.tpot_ms, prediction.tokens_per_s_per_gpu, prediction.memory_per_gpu_gb)
    assert all(math.isfinite(x) and x > 0 for x in figures)
    assert prediction.gpus == layout.gpus == sum(p["gpus"] for p in prediction.pools)
    assert prediction.feasible == (not prediction.reasons)
    for pool in prediction.pools:
        for phase in ("fill", "mixed", "decode"):
            if phase in pool:
                assert pool[phase]["step_ms"] >= pool[phase]["roofline_floor_ms"] * (1 - 1e-9)
