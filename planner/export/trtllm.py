"""TensorRT-LLM: `trtllm-serve` per pool with its extra LLM-API options YAML and MoE load-balancer file.

TensorRT-LLM's `tensor_parallel_size` is the GPU count of one pipeline stage; `enable_attention_dp` makes
attention data-parallel over all of them (attention TP 1), experts split as `moe_expert_parallel_size` x
`moe_tensor_parallel_size`. The initial expert assignment is the WIDEEP backend's `load_balancer` file:
`num_slots` and, per MoE layer, the logical expert of every slot, rank by rank.

Not exported: `attention_dp_config` (context-request balancing across attention-DP ranks; its keys are not in
the TensorRT-LLM definitions `tests/export/engine_args/trtllm.json` checks against). The cost model prices the
prompt hold-back it causes only when the scenario says the launch balances (`attention_dp_balance`, default
off, as exported); whoever sets it adds the balancing to the launch.
"""

from __future__ import annotations

from typing import Any

from costmodel.calibration import MX_ACTIVATION_NAMES
from planner.export.base import (
    FILL_CHUNK_TOKENS,
    HOST,
    PORT,
    Command,
    Export,
    Plan,
    Pool,
    comment_block,
    dump_yaml,
    expert_slots,
    kv_dtype,
    max_context_tokens,
    memory_fraction,
    moe_layer_indices,
    mx_priced_activations,
    plan_comments,
    pool_comments,
)

PROGRAM = ("trtllm-serve",)


def max_batch_size(pool: Pool) -> int:
    """Per rank with attention DP (each rank schedules its own sequences), else per instance."""
    return pool.batch_per_rank


def graph_batches(batch: int) -> list[int]:
    """CUDA-graph batch sizes: powers of two below the largest batch, and that batch."""
    return [b for b in (2**i for i in range(batch.bit_length())) if b < batch] + [batch]


def llm_api_options(plan: Plan, pool: Pool, balancer_path: str | None) -> dict[str, Any]:
    """The extra LLM-API options of one pool (`--extra_llm_api_options`, Dynamo's `--extra-engine-args`)."""
    context, _ = max_context_tokens(plan)
    batch = max_batch_size(pool)
    spec = plan.resolved.scenario.workload.speculative
    drafts = spec.draft_tokens if spec.method != "none" else 0
    options: dict[str, Any] = {
        "backend": "pytorch", "trust_remote_code": True,
        "tensor_parallel_size": pool.gpus_per_stage, "pipeline_parallel_size": pool.pp,
        "enable_attention_dp": pool.dp_attention > 1,
        "moe_expert_parallel_size": pool.moe_ep, "moe_tensor_parallel_size": pool.moe_tp,
        "max_batch_size": batch,
        "max_num_tokens": batch * (1 + drafts) if pool.engine_role == "decode" else FILL_CHUNK_TOKENS,
        "max_seq_len": context,
        "enable_chunked_prefill": pool.engine_role != "decode",
        "kv_cache_config": {"free_gpu_memory_fraction": memory_fraction(),
                            "dtype": "fp8" if kv_dtype(plan) == "fp8" else "auto"},
        "cuda_graph_config": {"enable_padding": True, "batch_sizes": graph_batches(batch)},
    }
    if balancer_path is not None:
        options["moe_config"] = {"backend": "WIDEEP", "load_balancer": balancer_path}
    if pool.engine_role != "aggregated":
        options["cache_transceiver_config"] = {"backend": "DEFAULT"}
        options["disable_overlap_scheduler"] = pool.engine_role == "prefill"  # unsupported on prefill-only workers
    if spec.method == "mtp":
        options["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": spec.draft_tokens}
    return options


def load_balancer(plan: Plan, pool: Pool) -> dict[str, Any] | None:
    slots = expert_slots(pool)
    if slots is None:
        return None
    return {"num_slots": len(slots), "layer_updates_per_iter": 0,
            "initial_global_assignments": {layer: slots for layer in moe_layer_indices(plan)}}


def unexpressed(plan: Plan, pool: Pool) -> list[str]:
    notes = []
    priced = mx_priced_activations(plan, pool)
    if priced is not None:
        notes.append(f"the plan priced MXFP4 experts with {MX_ACTIVATION_NAMES[priced]} activations; this config does "
                     "not choose TensorRT-LLM's MoE activation format (assumed MXFP8 for its TRTLLM MoE backend on "
                     "Blackwell: costmodel.calibration.MX_EXPERT_ACTIVATIONS): check the build runs the format priced")
    if pool.cpu_offload_gb > 0:
        notes.append(f"cpu_offload_gb {pool.cpu_offload_gb:g}: TensorRT-LLM has no CPU weight offload; without it each "
                     "GPU holds those weights in HBM, leaving less for KV than the plan assumes (lower the batch)")
    if pool.dp_attention > 1 and pool.tp > 1:
        notes.append(f"attention TP {pool.tp} inside each of {pool.dp_attention} attention-DP ranks: TensorRT-LLM's "
                     "attention DP has TP 1 per rank; this config runs attention DP over all "
                     f"{pool.gpus_per_stage} GPUs instead")
    return notes


def file_names(pool: Pool) -> tuple[str, str]:
    return f"trtllm-{pool.name}.yaml", f"trtllm-eplb-{pool.name}.yaml"


def configs(plan: Plan, pool: Pool, folder: str = ".") -> dict[str, dict[str, Any]]:
    """Config files of one pool by name: LLM-API options, and the load balancer where the plan has banks."""
    options_name, balancer_name = file_names(pool)
    balancer = load_balancer(plan, pool)
    out = {options_name: llm_api_options(plan, pool, f"{folder}/{balancer_name}" if balancer else None)}
    if balancer is not None:
        out[balancer_name] = balancer
    return out


def export(plan: Plan) -> Export:
    out = Export("trtllm")
    script = ["#!/usr/bin/env bash", "# TensorRT-LLM launch commands (tensorrt-llm==1.3.0rc29) written by "
              "`plan export`.", comment_block(plan_comments(plan)).rstrip()]
    _, capped = max_context_tokens(plan)
    if capped:
        script.append(comment_block([capped]).rstrip())
    for pool in plan.pools:
        files = configs(plan, pool)
        options_name = file_names(pool)[0]
        for name, data in files.items():
            out.configs[name] = data
            head = comment_block(pool_comments(plan, pool) + unexpressed(plan, pool)) if name == options_name else ""
            out.files[name] = head + dump_yaml(data)
        out.unexpressed += unexpressed(plan, pool)
        args = (plan.model, "--host", HOST, "--port", str(PORT + pool.index), "--backend", "pytorch",
                "--extra_llm_api_options", options_name)
        comments = pool_comments(plan, pool) + unexpressed(plan, pool)
        if pool.nodes_per_instance > 1:
            comments.append(f"multi-node: start under MPI/Slurm with {pool.gpus_per_instance} ranks, e.g. "
                            f"`srun -N {pool.nodes_per_instance} --ntasks-per-node {pool.gpus_per_node} "
                            "trtllm-llmapi-launch trtllm-serve ...`")
        command = Command(PROGRAM, args, tuple(comments))
        out.commands[pool.name] = [command]
        script += ["", comment_block(comments).rstrip(), command.shell()]
    if plan.serving == "disaggregated":
        script += ["", comment_block(_disagg_note(plan)).rstrip()]
    out.files["launch-trtllm.sh"] = "\n".join(script) + "\n"
    return out


def _disagg_note(plan: Plan) -> list[str]:
    servers = "; ".join(f"{p.name}: {p.replicas} x port {PORT + p.index}" for p in plan.pools)
    return ["disaggregated: start `trtllm-serve disaggregated -c disagg.yaml`, its context_servers the prefill "
            f"(and midfill) instances and generation_servers the decode ones ({servers}); not generated"]
