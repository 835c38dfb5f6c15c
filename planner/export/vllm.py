"""vLLM: `vllm serve` per pool.

vLLM runs attention data-parallel as `--data-parallel-size` engines of `--tensor-parallel-size` GPUs each;
`--enable-expert-parallel` then spreads the experts over all of them (EP = TP x DP, no expert TP). vLLM
has no file for an initial expert placement: EPLB (`--enable-eplb`) rebalances at run time from measured
loads, given the plan's redundant slots. An instance over several nodes runs `--data-parallel-size-local`
engines per node, the other nodes `--headless`, where a DP rank (tp x pp GPUs) fits a node; where it fills whole
nodes, `--nnodes` of the multiprocessing backend; otherwise Ray (said).
"""

from __future__ import annotations

import json

from costmodel.calibration import mx_rate_gap
from costmodel.precision import Dtype
from costmodel.resolve import batched_expert_input
from planner.export.base import (
    FILL_CHUNK_TOKENS,
    HOST,
    PORT,
    Command,
    Export,
    Plan,
    Pool,
    comment_block,
    expert_slots,
    head_split_notes,
    kv_dtype,
    launched_drafts,
    max_context_tokens,
    memory_fraction,
    mtp_notes,
    mx_priced_activations,
    plan_comments,
    pool_comments,
    rank_rounding_notes,
)

PROGRAM = ("vllm", "serve")
NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
DP_RPC_PORT = 13345
# MXFP4 experts with MXFP8 activations: vLLM's user override of the MoE activation format (config/quantization.py
# QuantizationConfigArgs.moe; fused_moe/oracle/mxfp4.py `_resolve_activation_key`: 0.31 keeps only MXFP8 backends).
MXFP8_EXPERTS = {"moe": {"activation": "mxfp8"}}


def engine_args(plan: Plan, pool: Pool) -> list[str]:
    """vLLM engine flags of one pool (also what `python -m dynamo.vllm` takes)."""
    context, _ = max_context_tokens(plan)
    args = ["--trust-remote-code", "--tensor-parallel-size", str(pool.tp), "--pipeline-parallel-size", str(pool.pp),
            "--data-parallel-size", str(pool.dp_attention),
            "--max-num-seqs", str(pool.batch_per_rank),
            "--max-num-batched-tokens", str(FILL_CHUNK_TOKENS), "--max-model-len", str(context),
            "--gpu-memory-utilization", str(memory_fraction())]
    if kv_dtype(plan) == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    drafts = launched_drafts(plan, pool, "vllm")
    if drafts:  # vllm 0.31 config/speculative.py: "mtp" drafts with the model's own MTP layers
        args += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": drafts})]
    if pool.cpu_offload_gb > 0:
        args += ["--cpu-offload-gb", f"{pool.cpu_offload_gb:g}"]
    if mx_priced_activations(plan, pool) is Dtype.FP8 and not _batched_experts(pool):
        args += ["--quantization-config", json.dumps(MXFP8_EXPERTS)]
    if pool.moe_ep > 1:
        backend = "deepep_low_latency" if _batched_experts(pool) else "deepep_high_throughput"
        args += ["--enable-expert-parallel", "--all2all-backend", backend]
        slots = expert_slots(pool)
        if slots is not None and plan.resolved.architecture.model_type not in NO_EPLB:
            redundant = len(slots) - (plan.resolved.architecture.num_experts or 0)
            args += ["--enable-eplb", "--eplb-config", json.dumps({"num_redundant_experts": redundant})]
    if pool.engine_role != "aggregated":
        args += ["--kv-transfer-config", json.dumps(NIXL)]
    return args


def _batched_experts(pool: Pool) -> bool:
    """The pool's expert layers take DeepEP low-latency's batched input (decode pools with expert parallelism
    over attention-DP ranks),
    which vLLM's MXFP8 MoE kernels do not (FlashInfer's TRT-LLM-gen and CUTLASS experts: Standard format only)."""
    return batched_expert_input("vllm", pool.role, pool.moe_ep, pool.dp_attention)


# Model types whose vLLM 0.31 model class lacks the MixtureOfExperts protocol's members (num_moe_layers,
# expert_weights...: model_executor/models/gpt_oss.py, minimax_m2.py), which EPLB asserts at start-up
# (v1/worker/gpu_model_runner.py eplb_step: `assert self._moe_model is not None`).
NO_EPLB = frozenset({"gpt_oss", "minimax_m2"})


def _node_args(pool: Pool) -> tuple[list[str], list[str], str] | None:
    """Head-node and other-node flags for an instance over several nodes, with what the other nodes set; None
    when it fits one node, or when vLLM's multiprocessing backend cannot split it (`_splits`)."""
    if pool.nodes_per_instance <= 1:
        return None
    per_rank = pool.tp * pool.pp  # GPUs of one DP rank
    if pool.gpus_per_node % per_rank == 0:  # whole DP ranks on each node: DP engines per node, the rest headless
        local = pool.gpus_per_node // per_rank
        common = ["--data-parallel-size-local", str(local), "--data-parallel-address", "${HEAD_ADDR}",
                  "--data-parallel-rpc-port", str(DP_RPC_PORT)]
        return (common, [*common, "--data-parallel-start-rank", "${DP_START_RANK}", "--headless"],
                f"DP_START_RANK = NODE_RANK x {local}")
    if not _splits(pool):
        return None
    # A DP rank over whole nodes: the multiprocessing backend over --nnodes (vllm 0.31 engine/arg_utils.py: the
    # world size split evenly over the nodes, each node's DP rank inferred from its rank; entrypoints/cli/serve.py:
    # a node other than its DP rank's first runs that rank's workers --headless, the first its engine, node 0 the
    # API), the DP handshake at --master-addr. So every node but 0 is --headless: run_headless starts the engine
    # of a DP rank whose first node it is (node_rank_within_dp 0, its DP rank inferred from --node-rank) and the
    # workers elsewhere; only dp 1 is tested against a launch here (no multi-node machine)
    common = ["--nnodes", str(pool.nodes_per_instance), "--master-addr", "${HEAD_ADDR}"]
    return [*common, "--node-rank", "0"], [*common, "--node-rank", "${NODE_RANK}", "--headless"], "NODE_RANK 1..n-1"


def _splits(pool: Pool) -> bool:
    """A DP rank spans whole nodes, as vLLM's multiprocessing backend splits it (the same GPUs on every node)."""
    return pool.tp * pool.pp % pool.gpus_per_node == 0


def commands(plan: Plan, pool: Pool) -> list[Command]:
    comments = pool_comments(plan, pool) + unexpressed(plan, pool)
    args = [plan.model, *engine_args(plan, pool), "--host", HOST, "--port", str(PORT + pool.index)]
    nodes = _node_args(pool)
    if nodes is None:
        return [Command(PROGRAM, tuple(args), tuple(comments))]
    head, rest, others = nodes
    return [Command(PROGRAM, (*args, *head), (*comments, "node 0 of the instance (serves the API)")),
            Command(PROGRAM, (*args, *rest), (f"nodes 1..{pool.nodes_per_instance - 1}: {others}",))]


def unexpressed(plan: Plan, pool: Pool) -> list[str]:
    notes = mtp_notes(plan, pool, "vllm")
    model_type = plan.resolved.architecture.model_type
    notes += rank_rounding_notes(pool, "DP ranks", "vLLM (--max-num-seqs)")
    notes += head_split_notes(plan, pool, "vLLM", "vllm 0.31 config/model.py verify_with_parallel_config")
    if pool.moe_ep > 1 and expert_slots(pool) is not None and model_type in NO_EPLB:
        notes.append(f"no EPLB: vLLM's {model_type} model is not a MixtureOfExperts (no num_moe_layers), and "
                     "--enable-eplb stops it at start-up; the experts stay in vLLM's contiguous order")
    if pool.moe_ep > 1 and pool.dp_attention > 1 and pool.engine_role == "aggregated":
        notes.append("vLLM runs without CUDA graphs with deepep_high_throughput and DP > 1 (config/compilation.py): "
                     "this pool's decode steps run eager, slower at small batches than priced")
    if pool.pp > 1 and pool.dp_attention > 1 and pool.nodes_per_instance > 1:
        notes.append("vLLM orders ranks DP x PP x TP, so each node holds whole DP ranks with all their stages and a "
                     "stage's expert all-to-all crosses nodes; the plan placed each stage on its own GPUs")
    if pool.moe_ep > 1 and pool.moe_ep != pool.tp * pool.dp_attention:
        notes.append(f"expert TP {pool.moe_tp} x EP {pool.moe_ep}: vLLM's expert parallelism spans all "
                     f"{pool.tp * pool.dp_attention} GPUs of a stage (EP {pool.tp * pool.dp_attention}, no expert TP)")
    priced = mx_priced_activations(plan, pool)
    if _batched_experts(pool) and plan.resolved.scenario.precision.expert_activations == "fp8" and priced is not None:
        if priced is Dtype.FP8:  # priced for another engine
            notes.append("the plan priced MXFP4 experts with MXFP8 activations, but vLLM's MXFP8 MoE kernels take no "
                         "DeepEP low-latency (batched) input: this decode pool runs them with bf16 activations, "
                         "slower than priced (0.34 falls back with a warning; 0.31 stops at start-up, so the flag "
                         "is not written); solve the scenario with engine vllm to price what runs")
        else:
            notes.append("precision.expert_activations asks for MXFP8, but vLLM's MXFP8 MoE kernels take no DeepEP "
                         "low-latency (batched) input: this decode pool runs its MXFP4 experts with bf16 activations, "
                         "as the plan priced them (0.34 falls back with a warning, to Batched Marlin on Blackwell, "
                         "a weight-only kernel likely slower than the bf16 rate priced; 0.31 stops at start-up, so "
                         "the flag is not written)")
    if priced is Dtype.FP4:
        gap = mx_rate_gap(pool.system, "vllm")
        notes.append(f"vLLM computes MXFP4 experts with bf16 activations on these GPUs by default (0.34: FlashInfer's "
                     f"MXFP4 x BF16 MoE); the plan priced them at the fp4 rate, {gap:.3g}x bf16's tensor-core rate "
                     f"here; `--quantization-config '{json.dumps(MXFP8_EXPERTS)}'` runs them with MXFP8 activations, "
                     "at twice the bf16 peak, as SGLang does by default; precision.expert_activations (bf16, or fp8 "
                     "with that flag, which the export then writes) prices what runs")
    if pool.banks is not None and pool.moe_ep > 1:
        notes.append("the plan's expert banks: vLLM loads no initial placement (EPLB rebalances from measured "
                     "loads); the banks are in the plan file")
    if pool.nodes_per_instance > 1 and _node_args(pool) is None:
        notes.append(f"tp x pp = {pool.tp * pool.pp} GPUs neither divide a node's {pool.gpus_per_node} nor fill whole "
                     "nodes, as vLLM's multiprocessing backend splits an instance: run it with "
                     "--distributed-executor-backend ray over a Ray cluster of its nodes")
    return notes


def export(plan: Plan) -> Export:
    out = Export("vllm")
    script = ["#!/usr/bin/env bash", "# vLLM launch commands (vllm==0.31.0) written by `plan export`.",
              comment_block(plan_comments(plan)).rstrip()]
    _, capped = max_context_tokens(plan)
    if capped:
        script.append(comment_block([capped]).rstrip())
    for pool in plan.pools:
        out.unexpressed += unexpressed(plan, pool)
        out.commands[pool.name] = commands(plan, pool)
        for command in out.commands[pool.name]:
            script += ["", comment_block(list(command.comments)).rstrip(), command.shell()]
    if plan.serving == "disaggregated":
        script += ["", comment_block(["disaggregated: the NIXL connector moves KV between pools; put a "
                                      "prefill/decode proxy in front (vLLM ships examples; not checked)"]).rstrip()]
    out.files["launch-vllm.sh"] = "\n".join(script) + "\n"
    return out
