"""Scenarios of the solver benchmarks: from a few GPUs to 64 GB200 NVL72 racks (4,608 GPUs), models with
8 to 896 experts, dense and hybrid attention, aggregated and disaggregated, short and long contexts, and
multi-turn agent sessions (KV tiers, a shared KV store, a separate midfill pool).

`quick` runs in CI (every backend, 3 seeds, about a minute); `full` adds the large ones.
"""

from __future__ import annotations

from typing import Any

COMMON: dict[str, Any] = {"schema_version": 1}
SHORT = {"input_tokens": 2048, "output_tokens": 256}
CHAT = {"input_tokens": 4096, "output_tokens": 1024, "routing_skew": 0.6}
LONG = {"input_tokens": 65536, "output_tokens": 1024, "routing_skew": 0.6}
SMALL_SEARCH = {"pp": [1], "dp_attention": [1, 2], "max_batch": 128}

SCENARIOS: dict[str, dict[str, Any]] = {
    # quick: small enough for the exhaustive reference
    "mixtral-8x7b-8xh100": {  # 8 experts
        "model": "mixtral-8x7b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h100-sxm", "gpus": 8}, "workload": SHORT, "slo": {"tpot_ms": 60},
        "search": {**SMALL_SEARCH, "tp": [1, 2, 4]}, "engine": "vllm"},
    "qwen3-30b-8xh200": {  # 128 experts
        "model": "qwen3-30b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h200-sxm", "gpus": 8}, "workload": SHORT, "slo": {"tpot_ms": 50},
        "search": SMALL_SEARCH},
    "llama-70b-dense-8xh200-disaggregated": {  # dense
        "model": "llama3.1-70b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h200-sxm", "gpus": 8}, "workload": SHORT, "slo": {"tpot_ms": 60},
        "search": {"serving": ["disaggregated"], "pp": [1], "dp_attention": [1], "max_batch": 256}},
    "gpt-oss-20b-8xb200-sglang": {  # 32 experts, sliding-window hybrid attention
        "model": "gpt-oss-20b", "cluster": {"system": "b200-sxm", "gpus": 8}, "engine": "sglang",
        "workload": {"input_tokens": 8192, "output_tokens": 512}, "slo": {"ttft_ms": 3000},
        "search": SMALL_SEARCH},
    "qwen3-30b-8xh100-agent-sessions": {  # multi-turn sessions: KV tiers, a shared store, a midfill pool
        "model": "qwen3-30b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h100-sxm", "gpus": 8,
                    "overrides": {"host_dram_bytes_per_node": 2.0e11, "ssd_capacity_bytes_per_node": 1.0e11},
                    "kv_store": {"capacity_bytes": 2.0e12, "bandwidth_bytes_per_s": 1.0e11}},
        "workload": {"sessions": {
            "arrival_rate_per_s": 1.0, "turns": 10, "system_prompt_tokens": 8000, "think_time_s": 5.0,
            "pause_probability": 0.3, "pause_s": 600.0,
            "turn_lengths": [{"share": 0.8, "input_tokens": 500, "output_tokens": 200},
                             {"share": 0.2, "input_tokens": 3000, "output_tokens": 600}]}},
        "search": {"serving": ["disaggregated"], "pp": [1], "dp_attention": [1], "tp": [1, 2], "max_batch": 16}},
    # full
    "qwen3-next-80b-8xb200": {  # 512 experts, Gated DeltaNet linear-attention hybrid
        "model": "qwen3-next", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "b200-sxm", "gpus": 8}, "workload": CHAT, "slo": {"tpot_ms": 40}},
    "kimi-linear-48b-16xh200-long": {  # 256 experts, KDA hybrid, long context
        "model": "kimi-linear", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h200-sxm", "gpus": 16}, "workload": LONG, "slo": {"tpot_ms": 60}},
    "llama-70b-dense-16xh100": {  # dense, both modes
        "model": "llama3.1-70b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h100-sxm", "gpus": 16}, "workload": CHAT, "slo": {"tpot_ms": 50}},
    "deepseek-v3-72xgb200": {  # 256 experts, one rack
        "model": "deepseek-v3", "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "racks": 1}, "workload": CHAT,
        "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "engine": "trtllm"},
    "kimi-k2-72xgb200": {  # 384 experts, one rack
        "model": "kimi-k2", "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "racks": 1}, "workload": CHAT,
        "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "engine": "trtllm"},
    "kimi-k3-64xgb200": {  # 896 experts
        "model": "kimi-k3", "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "gpus": 64}, "workload": CHAT, "slo": {"tpot_ms": 60}},
    "deepseek-v32-72xgb200-long": {  # sparse-attention indexer, 64K-token prompts
        "model": "deepseek-v3.2", "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "racks": 1}, "workload": LONG, "slo": {"tpot_ms": 60}},
    "deepseek-v3-72xgb200-agent-sessions": {  # the coding agent: 50K-155K contexts, tiers, midfill pool, one rack
        "model": "deepseek-v3", "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "racks": 1}, "engine": "trtllm",
        "workload": {"routing_skew": 0.6, "sessions": {
            "arrival_rate_per_s": 0.15, "turns": 35, "system_prompt_tokens": 50000, "think_time_s": 20.0,
            "pause_probability": 0.1, "pause_s": 3600.0,
            "turn_lengths": [{"share": 0.75, "input_tokens": 1000, "output_tokens": 600},
                             {"share": 0.25, "input_tokens": 5000, "output_tokens": 2200}]}},
        "slo": {"ttft_ms": 20000, "tpot_ms": 60}},
    "deepseek-v3-288xgb200": {  # 4 racks
        "model": "deepseek-v3", "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "racks": 4}, "workload": CHAT,
        "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "engine": "trtllm"},
    "deepseek-v3-1152xgb200": {  # 16 racks
        "model": "deepseek-v3", "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "racks": 16}, "workload": CHAT,
        "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "engine": "trtllm"},
    "kimi-k2-4608xgb200": {  # 64 racks
        "model": "kimi-k2", "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "racks": 64}, "workload": CHAT,
        "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "engine": "trtllm"},
    "deepseek-v3-4608xgb200": {  # 64 racks
        "model": "deepseek-v3", "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
        "cluster": {"system": "gb200-nvl72", "racks": 64}, "workload": CHAT,
        "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "engine": "trtllm"},
    "deepseek-v3-mixed-fleet-3962": {  # the real fleet: 48 GB200 + 16 H200 racks, 6 failed GPUs, 2:1 uplinks
        "model": "deepseek-v3", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"inventory": [
            {"name": "nvl", "system": "gb200-nvl72", "racks": 48,
             "unavailable": ["r0/n0/g0", "r3/n7/g2", "r11/n17/g3", "r40/n1/g1"]},
            {"name": "hopper", "system": "h200-sxm", "racks": 16, "unavailable": ["r2/n1/g5", "r9/n3/g0"]}],
            "network": {"oversubscription": 2}},
        "workload": {"input_tokens": 4096, "output_tokens": 1024},
        "slo": {"ttft_ms": 2000, "tpot_ms": 50}, "engine": "sglang"},
}

QUICK = ("mixtral-8x7b-8xh100", "qwen3-30b-8xh200", "llama-70b-dense-8xh200-disaggregated",
         "gpt-oss-20b-8xb200-sglang", "qwen3-30b-8xh100-agent-sessions")
FLEET = ("deepseek-v3-72xgb200", "kimi-k2-72xgb200", "deepseek-v3-288xgb200", "deepseek-v3-1152xgb200",
         "kimi-k2-4608xgb200", "deepseek-v3-4608xgb200",  # issue 11's targets: 1, 4, 16 and 64 racks
         "deepseek-v3-mixed-fleet-3962")  # and the mission's: a mixed fleet with failed GPUs and 2:1 uplinks
SUITES = {"quick": QUICK, "fleet": FLEET, "full": tuple(SCENARIOS)}


def scenario_data(name: str) -> dict[str, Any]:
    return {**COMMON, "name": name, **SCENARIOS[name]}


def _scaling() -> list[tuple[str, str, int]]:
    """Scenarios of `python -m benchmarks scaling` (registered here so that worker processes know them):
    DeepSeek-V3 on 8 to 4,608 GB200 GPUs, and models of 8 to 896 experts on one rack."""
    base = SCENARIOS["deepseek-v3-72xgb200"]
    rows: list[tuple[str, str, int]] = []
    for gpus in (8, 72, 288, 1152, 4608):
        name = f"scaling-deepseek-v3-{gpus}xgb200"
        SCENARIOS[name] = {**base, "cluster": {"system": "gb200-nvl72", "gpus": gpus}}
        rows.append(("gpus", name, gpus))
    experts = {"mixtral-8x22b": 8, "gpt-oss-20b": 32, "qwen3-235b": 128, "deepseek-v3": 256, "kimi-k2": 384,
               "qwen3.5": 512, "kimi-k3": 896}
    for model, count in experts.items():
        name = f"scaling-{model}-72xgb200"
        SCENARIOS[name] = {**base, "model": model}
        rows.append(("experts", name, count))
    return rows


SCALING = _scaling()
