"""Calibration: achievable fractions of peak, collective efficiencies and fixed overheads.

Physics gives the work (FLOPs, bytes, messages); calibration says how fast real kernels do it. Factors
are per GPU generation (not per system: a held-out system of a known generation is predicted from its
siblings) and per engine for the fixed overheads. No per-model or per-row factors exist. The committed
file `data/calibration/default.yaml` is written by `python -m benchmarks fit`; each factor's comment
there says which data it came from.
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources
from typing import Annotated, Any, Literal, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field

from costmodel.hardware import SystemSpec
from costmodel.precision import Dtype

Generation = Literal["hopper", "blackwell", "cdna3", "cdna4"]
EngineName = Literal["trtllm", "vllm", "sglang", "generic"]  # a scenario's `engine`, and a calibration's keys

# Catalog system -> GPU generation. A system override keeps its generation.
_GENERATIONS: dict[str, Generation] = {
    "h100-sxm": "hopper",
    "h200-sxm": "hopper",
    "b200-sxm": "blackwell",
    "b300-sxm": "blackwell",
    "gb200-nvl72": "blackwell",
    "gb300-nvl72": "blackwell",
    "mi300x": "cdna3",
    "mi355x": "cdna4",
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)  # a calibration file's too


class GenerationFactors(_Frozen):
    gemm_efficiency: dict[Dtype, Annotated[float, Field(gt=0, le=1)]] = Field(
        description="Fraction of the format's dense peak reached by GEMMs, per compute format; for a storage "
        "format the GPU cannot compute in (weight-only kernels, e.g. fp4 on Hopper), the fraction of the peak of "
        "the format they dequantise to."
    )
    attention_efficiency: float = Field(gt=0, le=1, description="Fraction of bf16 peak reached by attention kernels.")
    hbm_efficiency: float = Field(gt=0, le=1, description="Fraction of HBM bandwidth reached when streaming.")

    def gemm(self, dtype: Dtype) -> float:
        """Efficiency of GEMMs computing in `dtype` (bf16's figure for a format never calibrated)."""
        return self.gemm_efficiency.get(dtype, self.gemm_efficiency[Dtype.BF16])


class CollectiveFactors(_Frozen):
    efficiency: float = Field(gt=0, le=1, description="Fraction of scale-up bandwidth the collective reaches.")
    latency_s: float = Field(ge=0, description="Fixed time of one call, s.")


class EngineFactors(_Frozen):
    layer_overhead_s: float = Field(ge=0, description="Fixed time per layer per step (launches, syncs), s.")
    moe_layer_overhead_s: float = Field(
        0.0, ge=0, description="Fixed time per routed-expert layer per step beyond `layer_overhead_s` (routing, "
        "token permutation and the MoE's other small kernels), s.",
    )
    mla_layer_overhead_s: float = Field(
        0.0, ge=0, description="Fixed time per multi-head-latent-attention layer per step beyond `layer_overhead_s` "
        "(MLA's low-rank query and key-value projections with their norms, the decoupled rotary key and the "
        "absorbed up-projections run as kernels of their own), s.",
    )
    weight_only_layer_overhead_s: float = Field(
        0.0, ge=0, description="Fixed time per routed-expert layer per step beyond `moe_layer_overhead_s` when the "
        "experts are stored in a format the GPU dequantises (weight-only MoE kernels: Marlin, Triton matmul_ogs), s.",
    )
    step_overhead_s: float = Field(ge=0, description="Fixed time per step (scheduling, sampling), s.")
    seq_overhead_s: float = Field(
        0.0, ge=0, description="CPU time per sequence per step (scheduling, input preparation, sampling), s."
    )
    alltoall_overlap: float = Field(
        0.0, ge=0, le=0.95,
        description="Share of a step's expert all-to-all hidden behind its compute (two-batch overlap).",
    )
    prefill_layer_latency_s: float = Field(
        0.0, ge=0,
        description="Latency per model layer each request's first token waits beyond its prefill kernels, paid once "
        "per request (`costmodel.serving`), s.",
    )
    dp_wait_steps: float = Field(
        0.0, ge=0,
        description="Decode steps a prompt waits before its first step when the pool runs attention data "
        "parallelism (TRT-LLM holds context requests back to balance them across attention-DP ranks), paid once "
        "per request in TTFT and in the round (`costmodel.serving`).",
    )
    cohort_fraction: float = Field(
        ge=0, le=1,
        description="How bunched closed-loop arrivals stay: 0 = fully staggered (a request waits only for its "
        "own prefill), 1 = one cohort (it also waits for half of everyone else's).",
    )


# Engines that hold a prompt back under attention data parallelism to balance context requests across the
# ranks: TensorRT-LLM (`attention_dp_config`: enable_balance, timeout_iters, batching_wait_iters; NVIDIA's
# DeepSeek throughput configurations enable it). vLLM and SGLang dispatch each request to a DP rank at once
# (their DP load balancing picks the rank, it does not wait). Only these engines' `dp_wait_steps` is fitted;
# the others' is 0. Measured: TRT-LLM's 43 aggregated attention-DP rows were TTFT under-predicted 3.2x (log
# bias -1.17) without it; SGLang's five, fitted freely, would take 93 steps (they miss TPOT as much: not
# this term).
HOLDS_PROMPTS_UNDER_DP: frozenset[str] = frozenset({"trtllm"})


# How each engine schedules waiting prompts by default, which sets how bunched closed-loop arrivals stay (the
# cohort fraction): an engine without fitted factors (held out, or too few rows) takes the cohort fraction of
# the fitted engines that schedule as it does (`costmodel.fitting`).
# - piggyback: prompts ride on decode steps in chunks, decodes first. vLLM V1 (every vLLM row: 0.11-0.19) always
#   enables chunked prefill and "batches all pending decode requests before scheduling any prefill operations"
#   (vLLM docs, Optimization and Tuning, Chunked Prefill); TensorRT-LLM's in-flight batching runs context and
#   generation requests in the same iteration (TensorRT-LLM docs, In-flight Batching);
# - prefill_first: waiting prompts run as a prefill batch of their own while decodes wait; SGLang mixes them
#   only with `--enable-mixed-chunk`, off by default (SGLang server arguments).
# The fitted values agree (default.yaml: TRT-LLM 0.16, vLLM 0.19, SGLang 0.85).
SCHEDULING: dict[str, Literal["piggyback", "prefill_first"]] = {
    "trtllm": "piggyback", "vllm": "piggyback", "sglang": "prefill_first",
}
# Where no fitted engine schedules alike, the cohort fraction a policy implies on its own. Prefill first: every
# prompt batch stalls every decode, so requests that start together stay in step to the end: one cohort (1).
# Piggyback has no such limit (how staggered arrivals become depends on the run), so it takes the mean.
# Measured: SGLang held out (fitted on TRT-LLM and vLLM rows) TTFT 58.6% at the mean (0.19, log bias -0.88)
# against 45.3% at 1 (bias -0.09); its own fitted value was 0.73 (0.85 in session 13's fit).
POLICY_COHORT: dict[str, float] = {"prefill_first": 1.0}


# How each engine runs a prefill by default, which sets how much host time a request's first token waits
# beyond its kernels (the first-token latency per layer): an engine without fitted factors takes the
# first-token latency of the fitted engines that run prefills as it does (`costmodel.fitting`).
# - compiled: vLLM V1 compiles every forward pass with torch.compile by default (fused kernels, few launches)
#   and replays piecewise CUDA graphs for small batches (vLLM docs, torch.compile integration);
# - eager: SGLang captures CUDA graphs for decode batches only (`cuda_graph_max_bs`) and leaves torch.compile
#   off (`--enable-torch-compile`); TensorRT-LLM's PyTorch backend captures generation-only batches
#   (`cuda_graph_config`) and runs context phases eagerly (`torch_compile_config` off by default).
# The fitted values agree (default.yaml: vLLM 0.83 ms per layer, TRT-LLM 1.90, SGLang 1.75). Measured (session
# 14): TRT-LLM held out took the mean with vLLM's (1.31 ms) and its TTFT held out was 34.4% (30.1% with SGLang's);
# `python -m benchmarks ceiling` gives the figures with each engine's own value, for reference (README).
PREFILL_EXECUTION: dict[str, Literal["compiled", "eager"]] = {
    "vllm": "compiled", "sglang": "eager", "trtllm": "eager",
}

# The activations each engine pairs with microscaled experts (`ResolvedScenario.microscaled_experts`: MXFP4,
# gpt-oss and Kimi K3) by default on NVIDIA GPUs with fp4 tensor cores. Their grouped GEMMs then run at that
# format's rate: tcgen05.mma's kind::f8f6f4 takes e2m1 beside e4m3 at the fp8 rate; only kind::mxf4, with both
# operands fp4, doubles it (PTX ISA, tcgen05.mma kinds); MXFP4 x BF16 kernels dequantise the weights to bf16 and
# run kind::f16, the bf16 rate.
# - vllm: bf16. vLLM 0.34 `fused_moe/oracle/mxfp4.py`: gpt-oss names no activation format, so only the bf16
#   backends are kept, FlashInfer's TRT-LLM-gen MXFP4 x BF16 MoE first on SM100. `--quantization-config
#   '{"moe": {"activation": "mxfp8"}}'` requests MXFP8 (`_resolve_activation_key`): 0.31 keeps only MXFP8 backends,
#   0.34 falls back to a bf16 one with a warning where none fits; neither MXFP8 kernel takes DeepEP low-latency's
#   batched input. The oracle's `flashinfer_trtllm_afp8` alias is not among `--moe-backend`'s choices
#   (`config/kernel.py` MoEBackend).
# - sglang: fp8. SGLang 0.5.23 runs the `flashinfer_mxfp4` runner on SM100, whose
#   `--flashinfer-mxfp4-moe-precision default` quantises activations to MXFP8 (`bf16` keeps them).
# - trtllm: fp8, an assumption (W4A8_MXFP4_MXFP8 for its TRTLLM MoE backend on Blackwell): its wheel could not be
#   read here.
# Read for gpt-oss. Kimi K3's compressed-tensors MXFP4 experts take the same MoE method in SGLang 0.5.23
# (`compressed_tensors.py`: `Mxfp4MoEMethod` off NPUs); assumption: alike in vLLM.
# The cost model prices these experts at the fp4 rate unless `precision.expert_activations` names the format: priced
# at these formats, refitted, the calibration's gpt-oss rows fit worse (session 35, with 128-row tiles: held out by
# model TTFT 24.2% -> 27.2%, TPOT 12.1% -> 13.2%; session 36 with their kernels' token tiles: docs/calibration-log.md).
# `costmodel.expected_error` names the gap in the error it quotes.
MX_EXPERT_ACTIVATIONS: dict[str, Dtype] = {"vllm": Dtype.BF16, "sglang": Dtype.FP8, "trtllm": Dtype.FP8}
MX_EXPERT_ACTIVATIONS_ASSUMED = frozenset({"trtllm"})  # not read in the engine's source
# How activations of MXFP4 experts are named (the scales go with the format: MX blocks of 32).
MX_ACTIVATION_NAMES: dict[Dtype, str] = {Dtype.FP4: "MXFP4", Dtype.FP8: "MXFP8", Dtype.BF16: "bf16"}


def mx_rate_gap(system: SystemSpec, engine: str) -> float | None:
    """How many times the fp4 rate at which the cost model prices MXFP4 experts on `system` exceeds the rate
    `engine` computes them at by default (`MX_EXPERT_ACTIVATIONS`; an engine not in it: the slowest of
    theirs); None where there is no such gap: GPUs without fp4 tensor cores (Hopper runs the experts
    weight-only, and is priced so) and AMD's (assumption: CDNA4 pairs MXFP4 with MXFP4 activations natively).
    A format without tensor cores of its own on the GPU runs at bf16's rate."""
    peaks = system.peak_flops_per_s
    if not mx_activations_chosen(system):
        return None
    return max(peaks[Dtype.FP4] / peaks.get(dtype, peaks[Dtype.BF16]) for dtype in mx_activations(engine).values())


def mx_activations_chosen(system: SystemSpec) -> bool:
    """MXFP4 experts on `system` pair with the activations the engine chooses: NVIDIA fp4 tensor cores (Hopper has
    none and runs them weight-only in bf16; AMD CDNA4 pairs MXFP4 with MXFP4, an assumption)."""
    return system.vendor == "nvidia" and Dtype.FP4 in system.peak_flops_per_s


def mx_activations(engine: str) -> dict[str, Dtype]:
    """`engine`'s entry of `MX_EXPERT_ACTIVATIONS`; every engine's for one not in it (`generic`)."""
    return {engine: MX_EXPERT_ACTIVATIONS[engine]} if engine in MX_EXPERT_ACTIVATIONS else dict(MX_EXPERT_ACTIVATIONS)


class Calibration(_Frozen):
    schema_version: Literal[1] = 1
    fitted_on: str = Field(description="What data the factors were fitted on.")
    generations: dict[Generation, GenerationFactors]
    collectives: dict[Literal["allreduce", "alltoall", "p2p"], CollectiveFactors]
    nic_efficiency: float = Field(gt=0, le=1, description="Fraction of NIC (and host-link) bandwidth reached.")
    nic_latency_s: float = Field(
        0.0, ge=0,
        description="Latency each call of a transfer across the NIC pays beyond its kind's latency_s "
        "(an RDMA hop through PCIe, the NIC and the collective library's proxy).",
    )
    grouped_gemm_load_exposed: float = Field(
        0.0, ge=0,
        description="Share of a grouped GEMM's expert-weight load (at peak HBM bandwidth) not hidden behind its "
        "multiplies (`costmodel.pricing.grouped_gemm_share`; 0: grouped GEMMs as fast as dense ones).",
    )
    # a misspelt engine would be ignored (its scenarios priced with `generic`'s factors): only a scenario's engine
    # names (`generic`, which an engine without factors of its own takes, is required: `planner.calibrate`)
    engines: dict[EngineName, EngineFactors]

    def generation(self, system: SystemSpec) -> GenerationFactors:
        return self.generations[generation_of(system)]

    def engine(self, name: str) -> EngineFactors:
        return self.engines.get(cast(EngineName, name)) or self.engines["generic"]


def generation_of(system: SystemSpec) -> Generation:
    """GPU generation of a catalog system (by name; the GPU name decides for renamed systems)."""
    if system.name in _GENERATIONS:
        return _GENERATIONS[system.name]
    gpu = system.gpu_name.upper()
    if "MI300" in gpu or "MI325" in gpu:
        return "cdna3"
    if "MI35" in gpu:
        return "cdna4"
    return "hopper" if gpu.startswith("H") else "blackwell"


@functools.lru_cache(maxsize=2)
def _load(name: str) -> Calibration:
    text = resources.files("costmodel").joinpath("data", "calibration", name).read_text("utf-8")
    return Calibration.model_validate(yaml.safe_load(text))


def fingerprint(calibration: Calibration | dict[str, Any]) -> dict[str, str]:
    """What outputs priced with a calibration other than the bundled one record of it: what it was fitted on,
    and a hash of its values (`fitted_on` alone need not be unique)."""
    data = calibration.model_dump(mode="json") if isinstance(calibration, Calibration) else calibration
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    return {"fitted_on": str(data["fitted_on"]), "sha256": digest}


def default_calibration() -> Calibration:
    """The committed calibration fitted to serving measurements (`python -m benchmarks fit`)."""
    return _load("default.yaml")


def prior_calibration() -> Calibration:
    """Kernel-microbenchmark priors: where the fit starts, and the values of unfitted factors."""
    return _load("priors.yaml")
