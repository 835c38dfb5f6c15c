"""Small scenarios with exhaustively known fronts: the catalogue every backend is tested against."""

from __future__ import annotations

import copy
from typing import Any

BASE: dict[str, Any] = {"schema_version": 1, "precision": {"weights": "fp8", "kv_cache": "fp8"}}

# Agent sessions on H100s with small host tiers and a 2 TB shared KV store (benchmarks/suite.py keeps its
# own copy: a benchmark scenario must not move when a test changes).
AGENT_CLUSTER: dict[str, Any] = {
    "system": "h100-sxm",
    "overrides": {"host_dram_bytes_per_node": 2.0e11, "ssd_capacity_bytes_per_node": 1.0e11},
    "kv_store": {"capacity_bytes": 2.0e12, "bandwidth_bytes_per_s": 1.0e11},
}
AGENT_WORKLOAD: dict[str, Any] = {"sessions": {
    "arrival_rate_per_s": 1.0, "turns": 10, "system_prompt_tokens": 8000, "think_time_s": 5.0,
    "pause_probability": 0.3, "pause_s": 600.0,
    "turn_lengths": [{"share": 0.8, "input_tokens": 500, "output_tokens": 200},
                     {"share": 0.2, "input_tokens": 3000, "output_tokens": 600}]}}
AGENT_SEARCH: dict[str, Any] = {"serving": ["disaggregated"], "pp": [1], "dp_attention": [1]}

SMALL: dict[str, dict[str, Any]] = {
    "qwen3-30b-4xh200": {
        "model": "qwen3-30b", "cluster": {"system": "h200-sxm", "gpus": 4},
        "workload": {"input_tokens": 2048, "output_tokens": 256}, "slo": {"tpot_ms": 50},
        "search": {"pp": [1], "dp_attention": [1, 2], "max_batch": 48},
    },
    "gpt-oss-20b-4xb200-sglang": {
        "model": "gpt-oss-20b", "cluster": {"system": "b200-sxm", "gpus": 4}, "engine": "sglang",
        "workload": {"input_tokens": 4096, "output_tokens": 512}, "slo": {"ttft_ms": 3000},
        "search": {"pp": [1], "dp_attention": [1], "max_batch": 48},
    },
    "llama-8b-dense-6xh100-disaggregated": {
        "model": "llama3.1-8b", "cluster": {"system": "h100-sxm", "gpus": 6},
        "workload": {"input_tokens": 1024, "output_tokens": 128}, "slo": {"tpot_ms": 30},
        "search": {"serving": ["disaggregated"], "pp": [1], "dp_attention": [1], "max_batch": 48},
    },
    "mixtral-8x7b-8xgb200-vllm": {
        "model": "mixtral-8x7b", "cluster": {"system": "gb200-nvl72", "gpus": 8}, "engine": "vllm",
        "workload": {"input_tokens": 8192, "output_tokens": 256}, "slo": {"ttft_ms": 2000, "tpot_ms": 60},
        "search": {"pp": [1, 2], "dp_attention": [1], "tp": [1, 2, 4], "max_batch": 32},
    },
    "qwen3-30b-16xh100-prefix-cache": {
        "model": "qwen3-30b", "cluster": {"system": "h100-sxm", "gpus": 16},
        "workload": {"input_tokens": 4096, "output_tokens": 256, "prefix_hit_rate": 0.5},
        "search": {"serving": ["disaggregated"], "pp": [1], "dp_attention": [1], "tp": [1, 2, 4], "max_batch": 24},
    },
    # Agent sessions whose paused contexts overflow small host tiers into a shared store too small for the
    # largest prefill pools: the store's capacity row decides how many prefill instances park there.
    "qwen3-30b-16xh100-agent-sessions-store": {
        "model": "qwen3-30b", "cluster": {**AGENT_CLUSTER, "gpus": 16}, "workload": AGENT_WORKLOAD,
        "search": {**AGENT_SEARCH, "tp": [1, 2, 4], "max_batch": 64, "separate_midfill": False},
    },
    # The agent sessions on 8 GPUs, a separate midfill pool allowed: at the fastest end the front holds
    # deployments with a first-turn prefill pool beside a midfill pool (the first turns fetch nothing).
    "qwen3-30b-8xh100-agent-midfill-pool": {
        "model": "qwen3-30b", "cluster": {**AGENT_CLUSTER, "gpus": 8}, "workload": AGENT_WORKLOAD,
        "search": {**AGENT_SEARCH, "tp": [1, 2], "max_batch": 8},
    },
}


def small_data(name: str) -> dict[str, Any]:
    """A fresh copy: callers may change it (the scenarios share their nested parts)."""
    return copy.deepcopy({**BASE, "name": name, **SMALL[name]})
