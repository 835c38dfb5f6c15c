"""Kernel microbenchmarks on one GPU, for the cost model's priors and shape terms (issue 13).

Run on a machine with a CUDA GPU and PyTorch (not a dependency of moe-planner; never run by CI):

    python tools/kernel_microbench.py OUT.json [SECTION,...]

(with no CUDA device it runs every section at toy sizes on the CPU: a smoke test of the script itself).
It measures, with CUDA events (median of five timed batches after warm-up; weights rotated over more than
four times the L2 so that memory-bound shapes read HBM, not cache):
- HBM: device-to-device copy and a read-only reduction of 4 GiB;
- dense GEMMs, bf16 (torch.matmul, cuBLAS) and fp8 e4m3 with per-tensor scales (torch._scaled_mm, cuBLASLt),
  over rows M at three weight shapes (K, N); fp8 with DeepSeek's 1 x 128 / 128 x 128 block scales; bf16 at
  tensor-parallel shard shapes;
- grouped GEMMs (routed experts), 32 experts: bf16 (torch._grouped_mm, CUTLASS) and fp8 with row-wise scales
  (torch._scaled_grouped_mm), over rows per expert;
- attention prefill: scaled_dot_product_attention per backend (flash = FlashAttention-2, cuDNN, memory-efficient),
  causal and not, head dims 128/128 and 192/128 (MLA's un-absorbed prefill), over sequence lengths at about 32K
  tokens a call; and a chunk of new tokens over a cached context (bottom-right causal mask);
- attention decode: one query per sequence over a cached context, grouped-query heads, per backend;
- fixed costs: eager launches and CUDA-graph replays of tiny kernels; decode-sized GEMMs (graph_gemms) and decode
  attention (graph_decode_attention) replayed from CUDA graphs, as engines run decode, free of dispatch gaps;
- a prompt chunk over a cached context as two calls each backend runs natively (split_chunk_attention).

Calls are launched eagerly, back to back: a kernel shorter than the host's dispatch (measured 2026-12-04: 9.6 us
for a tiny add, 13-22 us for a GEMM call, 23-42 us for an SDPA call) is timed at the dispatch rate, so the
floors of small shapes (dense_sharded, few-row GEMMs, decode at one sequence) bound the GPU's time from above,
not measure it. PyTorch runs a bottom-right causal mask natively in the flash and memory-efficient backends
only: under cuDNN it materialises the mask, so cuDNN's chunk rows with a context time the whole rectangle
(their TFLOPs count the causal half). In the run of 2026-12-04 blockwise_fp8 read one weight tensor (rows up
to 256 at 7,168 x 4,096 may have read it from L2); it has rotated copies since. That run's measurements are
in benchmarks/kernel_measurements/h200.json; costmodel/data/calibration/priors.yaml cites them and
tests/unit/test_kernel_measurements.py checks the priors against them.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

SMOKE = not torch.cuda.is_available()  # a CPU smoke run of the script's logic at toy sizes
DEV = "cpu" if SMOKE else "cuda"
SCALE = 64 if SMOKE else 1  # sizes divided by this in a smoke run
L2_ROTATION_BYTES = 512 * 2**20 // SCALE  # weights rotated over >= 512 MiB: several times any GPU's L2
RESULTS: dict[str, Any] = {}


def timed(fn: Callable[[], object], target_s: float = 0.02) -> float:
    """Median seconds per call of `fn` over five batches sized to about `target_s` each."""
    if SMOKE:
        fn()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    once = max(start.elapsed_time(end) / 1e3, 1e-6)
    reps = int(min(max(target_s / once, 3), 400))
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(samples)


def section(name: str, body: Callable[[], Any], out_path: str) -> None:
    t0 = time.time()
    try:
        RESULTS[name] = body()
    except Exception as exc:  # one section's failure must not cost the others their figures
        RESULTS[name] = {"error": repr(exc), "trace": traceback.format_exc(limit=3)}
    print(f"[{name}] {time.time() - t0:.1f} s", flush=True)
    with open(out_path, "w") as f:
        json.dump(RESULTS, f, indent=1)
    torch.cuda.empty_cache()


def hbm() -> dict[str, float]:
    n = 2**31 // SCALE  # 4 GiB of bf16
    x = torch.empty(n, dtype=torch.bfloat16, device=DEV).normal_()
    y = torch.empty_like(x)
    copy_s = timed(lambda: y.copy_(x))
    read_s = timed(lambda: x.sum(dtype=torch.float32))
    return {"bytes": 2 * n, "copy_s": copy_s, "copy_GBps": 2 * 2 * n / copy_s / 1e9,
            "read_s": read_s, "read_GBps": 2 * n / read_s / 1e9}


def _copies(nbytes: int) -> int:
    return max(1, math.ceil(L2_ROTATION_BYTES / nbytes))


# (K, N): a small projection, DeepSeek's expert gate-up, Llama-70B's gate-up
DENSE_SHAPES = [(4096, 4096), (7168, 4096), (8192, 28672)]
ROWS = [1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def _rotating_gemm(a: torch.Tensor, ws: list[torch.Tensor],
                   scale: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None) -> Callable[[], object]:
    """One GEMM per call, cycling over the weight copies; `scale` set: fp8 with per-tensor scales, or the
    (activation, weight) block scales (weights stored (N, K), passed column-major as _scaled_mm wants)."""
    turn = [0]
    scale_a, scale_b = scale if isinstance(scale, tuple) else (scale, scale)

    def call() -> object:
        turn[0] = (turn[0] + 1) % len(ws)
        if scale_a is not None:
            return torch._scaled_mm(a, ws[turn[0]].t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
        return a @ ws[turn[0]]

    return call


def dense_gemms(fp8: bool) -> list[dict[str, Any]]:
    rows = []
    one = torch.tensor(1.0, device=DEV)
    for k, n in DENSE_SHAPES:
        k, n = k // SCALE * 4 if SMOKE else k, n // SCALE * 4 if SMOKE else n
        elem = 1 if fp8 else 2
        copies = _copies(k * n * elem)
        if fp8:
            ws = [torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn) for _ in range(copies)]
        else:
            ws = [torch.randn(k, n, device=DEV, dtype=torch.bfloat16) for _ in range(copies)]
        for m in ROWS:
            mp = max(m, 16) if fp8 else m  # _scaled_mm wants every dim a multiple of 16
            if fp8:
                a = torch.randn(mp, k, device=DEV).to(torch.float8_e4m3fn)
            else:
                a = torch.randn(mp, k, device=DEV, dtype=torch.bfloat16)
            s = timed(_rotating_gemm(a, ws, one if fp8 else None))
            rows.append({"K": k, "N": n, "M": m, "M_run": mp, "s": s, "TFLOPs": 2 * mp * k * n / s / 1e12,
                         "weight_GBps": k * n * elem / s / 1e9})
        del ws
        torch.cuda.empty_cache()
    return rows


def grouped_gemms() -> list[dict[str, Any]]:
    g, k, n = (32, 7168, 4096) if not SMOKE else (4, 128, 64)
    w = torch.randn(g, n, k, device=DEV, dtype=torch.bfloat16)  # 1.9 GB: no rotation needed
    rows = []
    for r in [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]:
        a = torch.randn(g * r, k, device=DEV, dtype=torch.bfloat16)
        offs = torch.arange(1, g + 1, device=DEV, dtype=torch.int32) * r
        s = timed(lambda a=a, offs=offs: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs,
                                                           out_dtype=torch.bfloat16))
        rows.append({"experts": g, "K": k, "N": n, "rows_per_expert": r, "s": s,
                     "TFLOPs": 2 * g * r * k * n / s / 1e12, "weight_GBps": g * k * n * 2 / s / 1e9})
    return rows


PREFILL_LENGTHS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
DECODE_BATCHES = [1, 8, 64]
DECODE_CONTEXTS = [1024, 4096, 16384]
BACKENDS = {
    "flash": torch.nn.attention.SDPBackend.FLASH_ATTENTION,
    "cudnn": torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
    "efficient": torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION,
}


def _sdpa_row(row: dict[str, Any], backend: str, call: Callable[[], object], flops: float = 0.0,
              nbytes: float = 0.0) -> dict[str, Any]:
    """`row` with the time of `call` under one SDPA backend (and its TFLOP/s or GB/s), or the error."""
    try:
        with torch.nn.attention.sdpa_kernel([BACKENDS[backend]]):
            s = timed(call)
        row["s"] = s
        if flops:
            row["TFLOPs"] = flops / s / 1e12
        if nbytes:
            row["GBps"] = nbytes / s / 1e9
    except Exception as exc:
        row["error"] = repr(exc)[:200]
    return row


def prefill_attention() -> list[dict[str, Any]]:
    rows = []
    for dqk, dv, heads in [(128, 128, 32), (192, 128, 16)]:
        for length in PREFILL_LENGTHS:
            batch = max(1, 32768 // length // SCALE)
            q = torch.randn(batch, heads, length, dqk, device=DEV, dtype=torch.bfloat16)
            kk = torch.randn(batch, heads, length, dqk, device=DEV, dtype=torch.bfloat16)
            v = torch.randn(batch, heads, length, dv, device=DEV, dtype=torch.bfloat16)
            for causal in (True, False):
                flops = 2.0 * batch * heads * length * length * (dqk + dv) * (0.5 if causal else 1.0)
                for name in BACKENDS:
                    row = {"dqk": dqk, "dv": dv, "heads": heads, "length": length, "batch": batch,
                           "causal": causal, "backend": name}
                    rows.append(_sdpa_row(row, name, lambda q=q, kk=kk, v=v, causal=causal:
                                          F.scaled_dot_product_attention(q, kk, v, is_causal=causal), flops=flops))
            del q, kk, v
    return rows


def _decode_cases() -> Iterator[tuple[int, int, int, int]]:
    """(query heads, KV heads, sequences, context) of the decode-attention sections."""
    for hq, hkv in [(8, 1), (32, 8)]:
        for batch in DECODE_BATCHES:
            for context in DECODE_CONTEXTS:
                yield hq, hkv, batch, context


def decode_attention() -> list[dict[str, Any]]:
    rows = []
    for hq, hkv, batch, context in _decode_cases():
        q = torch.randn(batch, hq, 1, 128, device=DEV, dtype=torch.bfloat16)
        kk = torch.randn(batch, hkv, context, 128, device=DEV, dtype=torch.bfloat16)
        v = torch.randn(batch, hkv, context, 128, device=DEV, dtype=torch.bfloat16)
        kv_bytes = 2 * batch * hkv * context * 128 * 2
        for name in BACKENDS:
            row = {"q_heads": hq, "kv_heads": hkv, "batch": batch, "context": context, "backend": name,
                   "kv_bytes": kv_bytes}
            rows.append(_sdpa_row(row, name, lambda q=q, kk=kk, v=v:
                                  F.scaled_dot_product_attention(q, kk, v, enable_gqa=True), nbytes=kv_bytes))
        del q, kk, v
    return rows


CHUNKS = [512, 2048, 8192]
CONTEXTS = [0, 1024, 4096, 16384, 32768]


def chunked_prefill_attention() -> list[dict[str, Any]]:
    """A prompt chunk of `chunk` new tokens over `context` cached ones (the causal mask aligned bottom-right:
    query i sees context + i + 1 keys), as chunked prefill and multi-turn prompts run."""
    from torch.nn.attention.bias import causal_lower_right

    rows = []
    heads, dim = 32, 128
    for chunk in CHUNKS:
        batch = max(1, 16384 // chunk // SCALE)
        for context in CONTEXTS:
            keys = context + chunk
            q = torch.randn(batch, heads, chunk, dim, device=DEV, dtype=torch.bfloat16)
            kk = torch.randn(batch, heads, keys, dim, device=DEV, dtype=torch.bfloat16)
            v = torch.randn(batch, heads, keys, dim, device=DEV, dtype=torch.bfloat16)
            mask = causal_lower_right(chunk, keys)
            flops = 4.0 * batch * heads * chunk * (context + (chunk + 1) / 2) * dim
            for name in BACKENDS:
                row = {"chunk": chunk, "context": context, "batch": batch, "heads": heads, "dim": dim,
                       "backend": name, "dense_mask": name == "cudnn" and context > 0}  # see the module notes
                rows.append(_sdpa_row(row, name, lambda q=q, kk=kk, v=v, mask=mask:
                                      F.scaled_dot_product_attention(q, kk, v, attn_mask=mask), flops=flops))
            del q, kk, v
    return rows


def grouped_fp8() -> list[dict[str, Any]]:
    """Routed experts in fp8 with row-wise scales (torch._scaled_grouped_mm), as `grouped_gemms` in bf16."""
    g, k, n = (32, 7168, 4096) if not SMOKE else (4, 128, 64)
    w = torch.randn(g, n, k, device=DEV).to(torch.float8_e4m3fn)
    scale_b = torch.ones(g, n, device=DEV, dtype=torch.float32)
    rows = []
    for r in [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]:
        a = torch.randn(g * r, k, device=DEV).to(torch.float8_e4m3fn)
        scale_a = torch.ones(g * r, device=DEV, dtype=torch.float32)
        offs = torch.arange(1, g + 1, device=DEV, dtype=torch.int32) * r
        s = timed(lambda a=a, offs=offs, scale_a=scale_a: torch._scaled_grouped_mm(
            a, w.transpose(-2, -1), scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16))
        rows.append({"experts": g, "K": k, "N": n, "rows_per_expert": r, "s": s,
                     "TFLOPs": 2 * g * r * k * n / s / 1e12, "weight_GBps": g * k * n / s / 1e9})
    return rows


def blockwise_fp8() -> list[dict[str, Any]]:
    """fp8 GEMMs with DeepSeek's block scales (1 x 128 on activations, 128 x 128 on weights), as engines run
    `fp8_block` checkpoints; each scale layout torch accepts is tried in turn and the first that runs kept."""
    rows = []
    for k, n in [(7168, 4096), (8192, 28672)] if not SMOKE else [(512, 256)]:
        ws = [torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn) for _ in range(_copies(k * n))]
        for m in [16, 64, 256, 1024, 4096, 16384]:
            a = torch.randn(m, k, device=DEV).to(torch.float8_e4m3fn)
            row: dict[str, Any] = {"K": k, "N": n, "M": m}
            variants = {
                "a_MxK128_outer_b_K128xN128": (torch.ones(k // 128, m, device=DEV).t(),
                                               torch.ones(n // 128, k // 128, device=DEV).t()),
                "a_MxK128_b_K128xN128": (torch.ones(m, k // 128, device=DEV),
                                         torch.ones(k // 128, n // 128, device=DEV)),
                "a_MxK128_b_K128xN128_outer": (torch.ones(m, k // 128, device=DEV),
                                               torch.ones(n // 128, k // 128, device=DEV).t()),
            }
            for label, (sa, sb) in variants.items():
                try:
                    s = timed(_rotating_gemm(a, ws, (sa, sb)))
                    row.update(variant=label, s=s, TFLOPs=2 * m * k * n / s / 1e12)
                    break
                except Exception as exc:
                    row["error_" + label] = repr(exc)[:200]
            rows.append(row)
    return rows


SHARDED_SHAPES = [(8192, 7168), (8192, 3584), (3584, 8192), (7168, 576), (7168, 1536), (1536, 3072)]


def dense_sharded() -> list[dict[str, Any]]:
    """bf16 GEMMs of tensor-parallel shards (Llama-70B's gate-up at tp 4 and 8 and down at tp 8, DeepSeek's
    MLA down-projections), where a GEMM's fixed latency is a large part of a decode step."""
    rows = []
    for k, n in SHARDED_SHAPES:
        k, n = (k // SCALE * 4, n // SCALE * 4) if SMOKE else (k, n)
        copies = _copies(k * n * 2)
        ws = [torch.randn(k, n, device=DEV, dtype=torch.bfloat16) for _ in range(copies)]
        for m in [1, 16, 64, 256, 1024, 4096]:
            a = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            s = timed(_rotating_gemm(a, ws, None))
            rows.append({"K": k, "N": n, "M": m, "s": s, "TFLOPs": 2 * m * k * n / s / 1e12,
                         "weight_GBps": k * n * 2 / s / 1e9})
        del ws
    return rows


def graph_timed(body: Callable[[], object], calls: int) -> float:
    """Seconds per call of `body`'s `calls` kernel calls replayed from a CUDA graph, as engines run decode: no
    host dispatch between kernels (eagerly on a CPU smoke run)."""
    if SMOKE:
        return timed(body) / calls
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        body()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return timed(graph.replay) / calls


def fixed_costs() -> dict[str, float]:
    """Per-kernel floors: a tiny add launched eagerly and replayed from a CUDA graph, a 1 x 1,024 x 1,024 bf16
    GEMM replayed from a graph."""
    x = torch.zeros(1024, device=DEV)
    a = torch.randn(1, 1024, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device=DEV, dtype=torch.bfloat16)
    kernels = 200

    def adds() -> None:
        for _ in range(kernels):
            x.add_(1.0)

    def gemms() -> None:
        for _ in range(kernels):
            torch.matmul(a, w)

    return {"eager_launch_s": timed(adds) / kernels, "graph_tiny_kernel_s": graph_timed(adds, kernels),
            "graph_small_gemm_s": graph_timed(gemms, kernels)}


def graph_gemms() -> list[dict[str, Any]]:
    """Decode-sized GEMMs without dispatch gaps: one CUDA graph per shape and row count, cycling through the
    rotated weight copies (each call reads its weights from HBM); bf16 and fp8 with per-tensor scales."""
    rows = []
    for k, n in DENSE_SHAPES[:2] + SHARDED_SHAPES:
        k, n = (k // SCALE * 4, n // SCALE * 4) if SMOKE else (k, n)
        for fp8 in (False, True):
            elem = 1 if fp8 else 2
            copies = max(_copies(k * n * elem), 8)
            if fp8:
                ws = [torch.randn(n, k, device=DEV).to(torch.float8_e4m3fn) for _ in range(copies)]
            else:
                ws = [torch.randn(k, n, device=DEV, dtype=torch.bfloat16) for _ in range(copies)]
            one = torch.tensor(1.0, device=DEV)
            for m in [1, 16, 64, 256]:
                mp = max(m, 16) if fp8 else m
                a = (torch.randn(mp, k, device=DEV).to(torch.float8_e4m3fn) if fp8
                     else torch.randn(mp, k, device=DEV, dtype=torch.bfloat16))
                call = _rotating_gemm(a, ws, one if fp8 else None)

                def body(call: Callable[[], object] = call, copies: int = copies) -> None:
                    for _ in range(copies):
                        call()

                s = graph_timed(body, copies)
                rows.append({"K": k, "N": n, "M": m, "M_run": mp, "dtype": "fp8" if fp8 else "bf16", "s": s,
                             "TFLOPs": 2 * mp * k * n / s / 1e12, "weight_GBps": k * n * elem / s / 1e9})
            del ws
    return rows


def graph_decode_attention() -> list[dict[str, Any]]:
    """`decode_attention` replayed from CUDA graphs (8 calls over 8 KV copies a graph): the kernels' own time."""
    rows = []
    for hq, hkv, batch, context in _decode_cases():
        q = torch.randn(batch, hq, 1, 128, device=DEV, dtype=torch.bfloat16)
        # separate keys and values: one tensor for both would read each block once and hit L2 for the other
        kvs = [(torch.randn(batch, hkv, context, 128, device=DEV, dtype=torch.bfloat16),
                torch.randn(batch, hkv, context, 128, device=DEV, dtype=torch.bfloat16)) for _ in range(8)]
        kv_bytes = 2 * batch * hkv * context * 128 * 2
        for name in BACKENDS:
            row: dict[str, Any] = {"q_heads": hq, "kv_heads": hkv, "batch": batch, "context": context,
                                   "backend": name, "kv_bytes": kv_bytes}
            try:
                with torch.nn.attention.sdpa_kernel([BACKENDS[name]]):
                    def body(q: torch.Tensor = q, kvs: list[tuple[torch.Tensor, torch.Tensor]] = kvs) -> None:
                        for keys, values in kvs:
                            F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)

                    s = graph_timed(body, len(kvs))
                row.update(s=s, GBps=kv_bytes / s / 1e9)
            except Exception as exc:
                row["error"] = repr(exc)[:200]
            rows.append(row)
        del q, kvs
    return rows


def split_chunk_attention() -> list[dict[str, Any]]:
    """A chunk over a cached context as two calls each backend runs natively: the chunk's queries against the
    context (no mask) and against themselves (causal, square); their summed time stands for a fused
    bottom-right causal kernel (cuDNN's, FlashAttention-3-class, is not reachable from PyTorch's mask API)."""
    rows = []
    heads, dim = 32, 128
    for chunk in CHUNKS:
        batch = max(1, 16384 // chunk // SCALE)
        for context in CONTEXTS[1:]:
            q = torch.randn(batch, heads, chunk, dim, device=DEV, dtype=torch.bfloat16)
            ck = torch.randn(batch, heads, context, dim, device=DEV, dtype=torch.bfloat16)
            own = torch.randn(batch, heads, chunk, dim, device=DEV, dtype=torch.bfloat16)
            flops = 4.0 * batch * heads * chunk * (context + (chunk + 1) / 2) * dim
            for name in BACKENDS:
                row = {"chunk": chunk, "context": context, "batch": batch, "heads": heads, "dim": dim,
                       "backend": name}

                def both(q: torch.Tensor = q, ck: torch.Tensor = ck, own: torch.Tensor = own) -> None:
                    F.scaled_dot_product_attention(q, ck, ck)
                    F.scaled_dot_product_attention(q, own, own, is_causal=True)

                rows.append(_sdpa_row(row, name, both, flops=flops))
            del q, ck, own
    return rows


# every section, in the order a full run takes them
SECTIONS: dict[str, Callable[[], Any]] = {
    "hbm": hbm, "fixed_costs": fixed_costs, "dense_bf16": lambda: dense_gemms(fp8=False),
    "dense_fp8": lambda: dense_gemms(fp8=True), "grouped_bf16": grouped_gemms, "prefill_attention": prefill_attention,
    "decode_attention": decode_attention, "chunked_prefill_attention": chunked_prefill_attention,
    "grouped_fp8": grouped_fp8, "blockwise_fp8": blockwise_fp8, "dense_sharded": dense_sharded,
    "graph_gemms": graph_gemms, "graph_decode_attention": graph_decode_attention,
    "split_chunk_attention": split_chunk_attention,
}


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "kernels.json"
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(SECTIONS)
    if SMOKE:
        global ROWS, PREFILL_LENGTHS, DECODE_BATCHES, DECODE_CONTEXTS, CHUNKS, CONTEXTS
        ROWS, PREFILL_LENGTHS, DECODE_BATCHES, DECODE_CONTEXTS = [1, 16, 64], [64, 128], [1, 2], [64, 128]
        CHUNKS, CONTEXTS = [64], [0, 128]
    else:
        props = torch.cuda.get_device_properties(0)
        RESULTS["device"] = {"name": props.name, "sms": props.multi_processor_count,
                             "memory_GiB": props.total_memory / 2**30, "torch": torch.__version__,
                             "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
        torch.backends.cuda.matmul.allow_tf32 = False
    for name in names:
        section(name, SECTIONS[name], out)
    print(json.dumps({k: v for k, v in RESULTS.items() if k in ("device", "hbm", "fixed_costs")}, indent=1))


if __name__ == "__main__":
    main()
