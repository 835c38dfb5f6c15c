"""`python -m benchmarks published`: the committed calibration against published serving figures that are
not in the fitting data (../shared/calibration/published_measurements.csv). A second check, never fitted.

- Rows E18-E22: B200 and H200, DeepSeek-R1, aggregated TRT-LLM runs whose layout and load the source states;
  predicted against published tokens/s per GPU and per user.
- Rows E24-E27 and the figures their notes give: TRT-LLM's performance overview (v1.0-era), the offline
  throughput of `trtllm-bench` on one node (Qwen3-235B-A22B, Qwen3-30B-A3B, Llama-4 Maverick on B200, GB200,
  H200, H100; 1,000 or 5,000 tokens in); predicted as the most output tokens/s per GPU the layout reaches at
  any batch that fits (the benchmark submits every request at once, so the engine runs as full as its KV cache
  lets it: assumption, the batch is not capped below that).

Each case maps its row by hand (the CSV's layouts are free text); what the row leaves open is an assumption
beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel.evaluate import Prediction, evaluate
from costmodel.layout import Layout
from planner.scenario import scenario_from_data

# DeepSeek-V3 report (arXiv 2412.19437, section 5.4.3): the second token's acceptance is 85-90%; TRT-LLM's
# MTP3 runs accept about 2.7 tokens per step at 0.75 per draft (1 + 0.75 + 0.56 + 0.42). Assumption: 0.75 for
# these three-draft runs; the calibration rows that ran MTP take one draft at 0.85 (`speculative_runs`).
MTP_ACCEPTANCE = 0.75
# A batch no case fits (per instance), asked once to learn the largest that fits.
OVERSIZED_BATCH = 1 << 20


@dataclass(frozen=True)
class PublishedCase:
    row: str
    system: str
    precision: dict[str, str]
    workload: dict[str, Any]
    pool: dict[str, int]
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float


def _mtp3(isl: int, osl: int) -> dict[str, Any]:
    return {"input_tokens": isl, "output_tokens": osl, "concurrency": 1,
            "speculative": {"method": "mtp", "draft_tokens": 3, "acceptance_rate": MTP_ACCEPTANCE}}


CASES = (
    # NVFP4 MoE with bf16 attention: weights bf16, experts fp4; TP8 attention, MoE TP4 x EP2; batch 1, MTP3.
    PublishedCase("E18", "b200-sxm", {"weights": "bf16", "experts": "fp4", "kv_cache": "bf16"}, _mtp3(1024, 2048),
                  {"tp": 8, "moe_tp": 4, "moe_ep": 2, "batch": 1}, 34.3, 274.7),
    # NVFP4 + FP8 KV, attention DP 8 + EP 8, 896 per rank (assumption: attention GEMMs in fp8).
    PublishedCase("E19", "b200-sxm", {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
                  {"input_tokens": 1024, "output_tokens": 2048, "concurrency": 7168},
                  {"dp_attention": 8, "moe_ep": 8, "batch": 7168}, 5393.0, 6.18),
    PublishedCase("E20", "b200-sxm", {"weights": "fp8", "experts": "fp4", "kv_cache": "bf16"},
                  {"input_tokens": 1024, "output_tokens": 2048, "concurrency": 3072},
                  {"dp_attention": 8, "moe_ep": 8, "batch": 3072}, 4548.0, 11.93),
    # FP8, TP8 attention, MoE EP4 (x moe_tp 2), batch 1, MTP3.
    PublishedCase("E21", "h200-sxm", {"weights": "fp8", "kv_cache": "fp8"}, _mtp3(1024, 2048),
                  {"tp": 8, "moe_tp": 2, "moe_ep": 4, "batch": 1}, 19.8, 158.1),
    PublishedCase("E22", "h200-sxm", {"weights": "fp8", "kv_cache": "fp8"},
                  {"input_tokens": 1024, "output_tokens": 2048, "concurrency": 1024},
                  {"dp_attention": 8, "moe_ep": 8, "batch": 1024}, 1436.0, 11.35),
)


# NVIDIA's NVFP4 checkpoints of these models (ModelOpt) quantise the linear layers to NVFP4 and the KV cache to
# FP8; the FP8 runs (Qwen's block-FP8 and ModelOpt's FP8 checkpoints) keep an FP8 KV cache too. Assumption: every
# linear layer in the named format (the overview names one format per run) and an FP8 KV cache throughout.
FP4_RUN = {"weights": "fp4", "experts": "fp4", "kv_cache": "fp8"}
FP8_RUN = {"weights": "fp8", "experts": "fp8", "kv_cache": "fp8"}
EXPERT_PARALLEL_TP8 = {"tp": 8, "moe_ep": 8}  # "TP8 (MoE with --ep)": attention TP 8, experts EP 8
QWEN3_235B = "Qwen/Qwen3-235B-A22B"
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"


@dataclass(frozen=True)
class ThroughputCase:
    """One offline-throughput figure: output tokens/s of the whole run (`gpus` GPUs of `system`)."""

    row: str
    model: str
    system: str
    gpus: int
    precision: dict[str, str]
    isl: int
    osl: int
    pool: dict[str, int]
    output_tokens_per_s: float

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.gpus


THROUGHPUT_CASES = (
    ThroughputCase("E24", QWEN3_235B, "b200-sxm", 8, FP4_RUN, 1000, 1000, EXPERT_PARALLEL_TP8, 42_391.0),
    # E24's note: "H100 TP8 FP8: 14,898" (layout as E24's, assumption)
    ThroughputCase("E24", QWEN3_235B, "h100-sxm", 8, FP8_RUN, 1000, 1000, EXPERT_PARALLEL_TP8, 14_898.0),
    # E25 says "TP8"; assumption: experts EP 8 as in E24, the overview's runs of one model alike
    ThroughputCase("E25", QWEN3_235B, "h200-sxm", 8, FP8_RUN, 1000, 1000, EXPERT_PARALLEL_TP8, 23_789.0),
    # E25's note: "5000/500: 3,623 (B200 FP4: 8,190)"
    ThroughputCase("E25", QWEN3_235B, "h200-sxm", 8, FP8_RUN, 5000, 500, EXPERT_PARALLEL_TP8, 3_623.0),
    ThroughputCase("E25", QWEN3_235B, "b200-sxm", 8, FP4_RUN, 5000, 500, EXPERT_PARALLEL_TP8, 8_190.0),
    ThroughputCase("E26", "Qwen/Qwen3-30B-A3B", "b200-sxm", 1, FP4_RUN, 1000, 1000, {"tp": 1}, 25_828.0),
    # E26's note: "GB200 TP1: 17,481", below B200's on a GPU with as much of everything
    ThroughputCase("E26", "Qwen/Qwen3-30B-A3B", "gb200-nvl72", 1, FP4_RUN, 1000, 1000, {"tp": 1}, 17_481.0),
    # E27 says "TP8"; assumption: experts EP 8 (TRT-LLM's Llama-4 recipes run them expert-parallel)
    ThroughputCase("E27", MAVERICK, "b200-sxm", 8, FP4_RUN, 1000, 1000, EXPERT_PARALLEL_TP8, 79_617.0),
    # E27's note: "H200 TP8 FP8: 31,782; H100 TP8 FP8: 9,677"
    ThroughputCase("E27", MAVERICK, "h200-sxm", 8, FP8_RUN, 1000, 1000, EXPERT_PARALLEL_TP8, 31_782.0),
    ThroughputCase("E27", MAVERICK, "h100-sxm", 8, FP8_RUN, 1000, 1000, EXPERT_PARALLEL_TP8, 9_677.0),
)


def predict(case: PublishedCase) -> tuple[float, float]:
    """(tokens/s per GPU, tokens/s per user) the committed calibration predicts for `case`."""
    resolved = scenario_from_data({
        "schema_version": 1, "name": case.row, "model": "deepseek-ai/DeepSeek-R1", "precision": case.precision,
        "cluster": {"system": case.system, "gpus": 8}, "workload": case.workload, "engine": "trtllm"})
    layout = Layout.model_validate({"serving": "aggregated", "pools": [{"role": "mixed", **case.pool}]})
    prediction = evaluate(resolved, layout)
    return prediction.tokens_per_s_per_gpu, prediction.tokens_per_s_per_user


def _evaluate_at(case: ThroughputCase, batch: int) -> Prediction:
    resolved = scenario_from_data({
        "schema_version": 1, "name": case.row, "model": case.model, "precision": case.precision,
        "cluster": {"system": case.system, "gpus": case.gpus},
        "workload": {"input_tokens": case.isl, "output_tokens": case.osl, "concurrency": batch}, "engine": "trtllm"})
    layout = Layout.model_validate({"serving": "aggregated", "pools": [{"role": "mixed", **case.pool, "batch": batch}]})
    return evaluate(resolved, layout)


def predict_throughput(case: ThroughputCase) -> tuple[float, int]:
    """(the most tokens/s per GPU the case's layout reaches, the batch it reaches it at) over the batches that fit:
    the powers of two below the largest that fits, and that one (an instance asked for more runs the largest that
    fits and queues the rest, `costmodel.serving`; its rate is the same)."""
    largest = int(_evaluate_at(case, OVERSIZED_BATCH).pools[0]["max_batch"])
    if largest < 1:
        raise ValueError(f"{case.row}: not one sequence fits {case.model} on {case.gpus} x {case.system}")
    batches = sorted({2 ** k for k in range(largest.bit_length()) if 2 ** k <= largest} | {largest})
    rates = [(_evaluate_at(case, batch).tokens_per_s_per_gpu, batch) for batch in batches]
    return max(rates)


def _versus(predicted: float, published: float, width: int, decimals: int) -> str:
    """`predicted / published (ratio x)`, each figure `width` wide."""
    return f"{predicted:{width}.{decimals}f} / {published:<{width}.{decimals}f} ({predicted / published:4.2f}x)"


def main() -> int:
    print("row  system     tok/s/GPU pred / published   tok/s/user pred / published")
    for case in CASES:
        per_gpu, per_user = predict(case)
        print(f"{case.row}  {case.system:9}  {_versus(per_gpu, case.tokens_per_s_per_gpu, 8, 1)}   "
              f"{_versus(per_user, case.tokens_per_s_per_user, 6, 1)}")
    print("\nOffline throughput (trtllm-bench): the most output tokens/s per GPU at any batch that fits")
    print("row  model                    system       GPUs  in/out      tok/s/GPU pred / published    at batch")
    for run in THROUGHPUT_CASES:
        rate, batch = predict_throughput(run)
        model = run.model.split("/")[1][:23]
        print(f"{run.row}  {model:23}  {run.system:11}  {run.gpus:4}  {run.isl:>4}/{run.osl:<5}  "
              f"{_versus(rate, run.tokens_per_s_per_gpu, 8, 0)}  {batch:6}")
    return 0
