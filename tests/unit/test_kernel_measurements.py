"""The H200 kernel measurements behind the Hopper priors (benchmarks/kernel_measurements/h200.json, written by
tools/kernel_microbench.py on a lent H200): the system spec's peaks bound every measured kernel, and each
Hopper prior that cites them lies within what they measured and within NEAR of its typical (median) rate:
the priors before them (fp8 0.70, attention 0.55, HBM 0.85) fail."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from costmodel.calibration import prior_calibration
from costmodel.hardware import load_system
from costmodel.precision import Dtype

MEASUREMENTS = Path(__file__).resolve().parents[2] / "benchmarks" / "kernel_measurements" / "h200.json"
H200 = load_system("h200-sxm")
NEAR = 0.04  # a prior's distance from the median of its measured rates, at most (fraction of peak)


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MEASUREMENTS.read_text())
    return data


def _timed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if "s" in row]


def _shares(rows: list[dict[str, Any]], dtype: Dtype, min_rows: int) -> list[float]:
    """Large GEMMs' rate as a share of the H200's peak in `dtype`."""
    return [row["TFLOPs"] * 1e12 / H200.peak_flops_per_s[dtype] for row in rows if row["M"] >= min_rows]


def test_no_measured_kernel_beats_the_system_spec(measured: dict[str, Any]) -> None:
    peak_bf16, peak_fp8 = H200.peak_flops_per_s[Dtype.BF16], H200.peak_flops_per_s[Dtype.FP8]
    bandwidth = H200.hbm_bandwidth_bytes_per_s
    assert measured["hbm"]["copy_GBps"] * 1e9 < bandwidth and measured["hbm"]["read_GBps"] * 1e9 < bandwidth
    for section, peak in (("dense_bf16", peak_bf16), ("grouped_bf16", peak_bf16), ("dense_sharded", peak_bf16),
                          ("dense_fp8", peak_fp8), ("blockwise_fp8", peak_fp8), ("grouped_fp8", peak_fp8),
                          ("prefill_attention", peak_bf16), ("chunked_prefill_attention", peak_bf16),
                          ("split_chunk_attention", peak_bf16)):
        rows = _timed(measured[section])
        assert rows, section
        assert max(row["TFLOPs"] for row in rows) * 1e12 < peak, section
    # weight streams: bytes read once per call, never faster than HBM (the rotation keeps them out of L2)
    for section in ("dense_bf16", "dense_fp8", "grouped_bf16", "dense_sharded", "graph_gemms"):
        assert max(row["weight_GBps"] for row in measured[section]) * 1e9 < bandwidth, section
    for row in measured["graph_gemms"]:
        assert row["TFLOPs"] * 1e12 < H200.peak_flops_per_s[Dtype(row["dtype"])]
    for section in ("decode_attention", "graph_decode_attention"):
        assert max(row["GBps"] for row in _timed(measured[section])) * 1e9 < bandwidth, section


def test_hopper_gemm_priors_lie_within_the_measured_plateaus(measured: dict[str, Any]) -> None:
    hopper = prior_calibration().generations["hopper"]
    bf16 = _shares(measured["dense_bf16"], Dtype.BF16, 1024)
    assert min(bf16) <= hopper.gemm(Dtype.BF16) <= max(bf16)
    assert abs(hopper.gemm(Dtype.BF16) - statistics.median(bf16)) <= NEAR
    # fp8: between DeepSeek's block-scaled kernels and per-tensor scales, the two ways engines run fp8 weights
    per_tensor = _shares(measured["dense_fp8"], Dtype.FP8, 1024)
    blocks = _shares(_timed(measured["blockwise_fp8"]), Dtype.FP8, 1024)
    assert min(per_tensor + blocks) <= hopper.gemm(Dtype.FP8) <= max(per_tensor + blocks)
    assert statistics.median(blocks) - NEAR <= hopper.gemm(Dtype.FP8) <= statistics.median(per_tensor) + NEAR


def test_hopper_attention_and_hbm_priors_lie_within_the_measured_ranges(measured: dict[str, Any]) -> None:
    hopper = prior_calibration().generations["hopper"]
    # FlashAttention-3-class kernels (cuDNN) past 2K tokens, the engines' prefill attention on Hopper
    long = [row["TFLOPs"] * 1e12 / H200.peak_flops_per_s[Dtype.BF16] for row in _timed(measured["prefill_attention"])
            if row["backend"] == "cudnn" and row["length"] >= 2048]
    assert min(long) <= hopper.attention_efficiency <= max(long)
    assert abs(hopper.attention_efficiency - statistics.median(long)) <= NEAR
    # a prompt chunk over a cached context (two cuDNN calls: against the context, and causal against itself)
    chunks = [row["TFLOPs"] * 1e12 / H200.peak_flops_per_s[Dtype.BF16]
              for row in _timed(measured["split_chunk_attention"]) if row["backend"] == "cudnn"]
    assert abs(hopper.attention_efficiency - statistics.median(chunks)) <= NEAR
    bandwidth = H200.hbm_bandwidth_bytes_per_s
    streams = [measured["hbm"]["copy_GBps"], measured["hbm"]["read_GBps"],
               max(row["weight_GBps"] for row in measured["dense_bf16"])]
    assert min(streams) * 1e9 / bandwidth <= hopper.hbm_efficiency <= max(streams) * 1e9 / bandwidth


def test_short_sequences_reach_a_smaller_share_of_the_attention_peak(measured: dict[str, Any]) -> None:
    """What the priors' note says of the ramp: causal cuDNN attention at 256 tokens reaches under half of its
    rate at 4K tokens, and the rate never falls as sequences grow up to 4K."""
    causal = {row["length"]: row["TFLOPs"] for row in _timed(measured["prefill_attention"])
              if row["backend"] == "cudnn" and row["causal"] and row["dqk"] == 128}
    assert causal[256] < 0.5 * causal[4096]
    lengths = sorted(length for length in causal if length <= 4096)
    assert all(causal[a] < causal[b] for a, b in itertools.pairwise(lengths))
