"""SGLang: `python -m sglang.launch_server` per pool, expert placement as `--init-expert-location` JSON.

SGLang's `--tp-size` is the GPU count of one pipeline stage; attention data parallelism splits it into
`--dp-size` groups (`--enable-dp-attention`), experts into `--ep-size` banks (expert TP is what is left).
The initial expert location is `{"physical_to_logical_map": [[expert of each slot] per layer]}`, slots
rank by rank, `ep_num_redundant_experts` the slots beyond the logical experts. SGLang takes such a map as
given (sglang 0.5.23 eplb/expert_location.py) and, with a location other than "trivial", dispatches tokens
to the replicas (srt/arg_groups/parallel_hook.py; without one, redundant slots get no tokens). Run-time
rebalancing (`--enable-eplb`) is off by default and not set here, so `--eplb-algorithm auto` (hierarchical
wherever --nnodes divides n_group, for every role) never replaces the plan's banks.
"""

from __future__ import annotations

import json
import math

from costmodel.calibration import mx_rate_gap
from costmodel.precision import Dtype
from costmodel.serving import prefill_batch
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

PROGRAM = ("python3", "-m", "sglang.launch_server")
SGLANG_MAX_PREFILL_TOKENS = 16384  # SGLang's default --max-prefill-tokens (server_args.py, 0.5.8)
DISAGG_BACKEND = "nixl"
DEEPEP_DISPATCH_TOKENS = 128  # SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK default (sglang 0.5.21 environ.py)
DEEPEP_DISPATCH_TOKENS_MAX = 1024  # asserted in token_dispatcher/deepep.py (DeepEP's internode_ll finish tag)
BOOTSTRAP_PORT = 8998


# Model types whose SGLang 0.5.21 model code has no DeepEP path (models/gpt_oss.py: "forward_deepep branch not
# implemented yet", raised at the first forward), and those whose class has no
# `get_model_config_for_expert_location`, for which SGLang drops --init-expert-location without a word and
# keeps its contiguous order (eplb/expert_location.py from_model_config; models/kimi_k3.py, llama4.py,
# mixtral.py, kimi_linear.py).
NO_DEEPEP = frozenset({"gpt_oss"})
NO_EXPERT_LOCATION = frozenset({"kimi_k3", "llama4", "mixtral", "kimi_linear"})


def server_args(plan: Plan, pool: Pool, placement_file: str | None, node_flags: bool = True) -> list[str]:
    """SGLang server flags of one pool (also what `python -m dynamo.sglang` takes; under Dynamo the operator
    adds the node flags of a multi-node instance: `node_flags` False)."""
    context, _ = max_context_tokens(plan)
    # a dense model's attention-DP ranks share nothing: SGLang's data-parallel workers of tp GPUs each, every
    # one with its own scheduler (its share of the batch and of the prefill chunk), not DP attention
    workers = pool.dp_attention if _replica_dp(plan, pool) else 1
    args = ["--model-path", plan.model, "--trust-remote-code",
            "--tp-size", str(pool.gpus_per_stage // workers), "--pp-size", str(pool.pp),
            "--max-running-requests", str(_running_requests(pool, workers)), "--context-length", str(context),
            "--chunked-prefill-size", str(chunked_prefill_size(plan, pool) // workers),
            "--mem-fraction-static", str(memory_fraction())]
    per_rank = chunked_prefill_size(plan, pool) // pool.dp_attention
    if per_rank > SGLANG_MAX_PREFILL_TOKENS:  # a rank's prefill batch is capped by this too
        args += ["--max-prefill-tokens", str(per_rank)]
    if kv_dtype(plan) == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    args += speculative_args(plan, pool)
    if pool.dp_attention > 1:
        args += ["--dp-size", str(pool.dp_attention)] + ([] if workers > 1 else ["--enable-dp-attention"])
        if workers == 1 and pool.tp == 1 and _dense_layers(plan):  # priced on each rank alone, as planned
            args += ["--moe-dense-tp-size", "1"]
    if mx_priced_activations(plan, pool) is Dtype.BF16:  # sglang 0.5.23: "default" quantises them to MXFP8
        args += ["--flashinfer-mxfp4-moe-precision", "bf16"]
    if pool.cpu_offload_gb > 0:  # SGLang takes whole GiB: rounded up, so HBM holds no more than planned
        args += ["--cpu-offload-gb", str(math.ceil(pool.cpu_offload_gb))]
    model_type = plan.resolved.architecture.model_type
    if pool.moe_ep > 1:
        args += ["--ep-size", str(pool.moe_ep)]
        if pool.moe_ep == pool.gpus_per_stage and model_type not in NO_DEEPEP:  # DeepEP spans the whole stage
            args += ["--moe-a2a-backend", "deepep"]
    slots = expert_slots(pool)
    if slots is not None and placement_file is not None:
        experts = plan.resolved.architecture.num_experts or 0
        args += ["--init-expert-location", placement_file, "--ep-num-redundant-experts", str(len(slots) - experts)]
    if pool.engine_role != "aggregated":
        args += ["--disaggregation-mode", pool.engine_role, "--disaggregation-transfer-backend", DISAGG_BACKEND]
        if pool.engine_role == "prefill":
            args += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT)]
    if pool.nodes_per_instance > 1 and node_flags:
        args += ["--nnodes", str(pool.nodes_per_instance), "--node-rank", "${NODE_RANK}",
                 "--dist-init-addr", "${HEAD_ADDR}:5000"]
    return args


def speculative_args(plan: Plan, pool: Pool) -> list[str]:
    """MTP as SGLang runs it: the model's own NextN module through its EAGLE worker, a chain (top-k 1) of
    `draft_tokens` steps verified with the token before them (sglang 0.5.21 `arg_groups/speculative_hook.py`:
    NEXTN resolves to EAGLE, and with top-k 1 the verify width is steps + 1). Every pool gets them, as TRT-LLM's
    options do: each loads the MTP module, whose weights and KV the cost model counts in every pool's memory."""
    drafts = launched_drafts(plan, pool, "sglang")
    if drafts == 0:
        return []
    return ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(drafts),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(drafts + 1)]


def chunked_prefill_size(plan: Plan, pool: Pool) -> int:
    """The prompt tokens of one prefill batch over all attention-DP ranks (SGLang divides it among them), as
    the cost model prices them per rank: an aggregated pool's prefill batch (`costmodel.serving.prefill_batch`),
    a prefill pool's `FILL_CHUNK_TOKENS` per rank (a decode pool prefills nothing)."""
    if pool.engine_role == "aggregated":
        return int(prefill_batch(plan.resolved.scenario.prefill_batch_tokens, pool.hbm_bytes)) * pool.dp_attention
    return FILL_CHUNK_TOKENS * pool.dp_attention


def placement_json(plan: Plan, pool: Pool) -> dict[str, list[list[int]]] | None:
    """The same slot map on every layer: SGLang's map has one row per decoder layer (dense ones unused); None
    where the plan has no banks or SGLang's model code reads no map (`NO_EXPERT_LOCATION`)."""
    slots = expert_slots(pool)
    if slots is None or plan.resolved.architecture.model_type in NO_EXPERT_LOCATION:
        return None
    return {"physical_to_logical_map": [slots for _ in range(plan.resolved.architecture.num_layers)]}


def _deepep_capacity(plan: Plan, pool: Pool) -> list[str]:
    """DeepEP's low-latency (decode) buffers hold SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK tokens, 128
    by default and at most 1024 (sglang 0.5.21 `environ.py`, `token_dispatcher/deepep.py`); a decode step of
    this pool dispatches its sequences per rank times the verified tokens of each."""
    if pool.engine_role == "prefill" or pool.moe_ep <= 1 or pool.moe_ep != pool.gpus_per_stage:
        return []
    tokens = pool.batch_per_rank * (1 + launched_drafts(plan, pool, "sglang"))
    if tokens <= DEEPEP_DISPATCH_TOKENS:
        return []
    if tokens > DEEPEP_DISPATCH_TOKENS_MAX:
        return [f"a decode step dispatches {tokens} tokens per rank through DeepEP, beyond its limit of "
                f"{DEEPEP_DISPATCH_TOKENS_MAX}: lower the batch or the draft tokens"]
    return [f"set SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK={tokens} in the server's environment: a decode "
            f"step dispatches {tokens} tokens per rank through DeepEP, beyond its default {DEEPEP_DISPATCH_TOKENS}"]


def placement_name(pool: Pool) -> str:
    return f"sglang-expert-location-{pool.name}.json"


def export(plan: Plan) -> Export:
    out = Export("sglang")
    script = ["#!/usr/bin/env bash", "# SGLang launch commands (sglang==0.5.21) written by `plan export`.",
              comment_block(plan_comments(plan)).rstrip()]
    _, capped = max_context_tokens(plan)
    if capped:
        script.append(comment_block([capped]).rstrip())
    for pool in plan.pools:
        placement = placement_json(plan, pool)
        name = placement_name(pool) if placement is not None else None
        if placement is not None and name is not None:
            out.files[name] = json.dumps(placement, separators=(",", ":")) + "\n"
        args = [*server_args(plan, pool, name), "--host", HOST, "--port", str(PORT + pool.index)]
        notes = unexpressed(plan, pool)
        comments = pool_comments(plan, pool) + notes
        out.unexpressed += notes
        command = Command(PROGRAM, tuple(args), tuple(comments))
        out.commands[pool.name] = [command]
        script += ["", comment_block(comments).rstrip(), f"# start {pool.replicas} such instance(s), one per "
                   f"group of {pool.gpus_per_instance} GPUs", command.shell()]
    if plan.serving == "disaggregated":
        script += ["", comment_block(_router_note(plan)).rstrip()]
    out.files["launch-sglang.sh"] = "\n".join(script) + "\n"
    return out


def _running_requests(pool: Pool, workers: int) -> int:
    """--max-running-requests: per data-parallel worker (dense replicas), else per instance, which SGLang floors
    per attention-DP rank (mem_cache/kv_cache_configurator.py: max_num_reqs // attn_dp_size, and a rank of 0
    stops it at start-up: "max_running_request is zero"), so whole ranks' worth: the plan's batch, rounded up."""
    return pool.batch_per_rank if workers > 1 else pool.batch_per_rank * pool.dp_attention


def _replica_dp(plan: Plan, pool: Pool) -> bool:
    """Attention DP on a dense model: its ranks are replicas (SGLang's dense models have no DP attention)."""
    return pool.dp_attention > 1 and not plan.resolved.architecture.num_experts


def _dense_layers(plan: Plan) -> bool:
    """A MoE model with dense FFN layers (DeepSeek's first three, Kimi K2's first): SGLang runs them over the
    whole stage under DP attention unless `--moe-dense-tp-size 1` (the only other value it takes) keeps
    them on each rank, as the plan prices them (split like attention)."""
    return any(layer.ffn.kind == "dense" for layer in plan.resolved.architecture.layers)


def unexpressed(plan: Plan, pool: Pool) -> list[str]:
    notes = mtp_notes(plan, pool, "sglang") + _deepep_capacity(plan, pool)
    model_type = plan.resolved.architecture.model_type
    notes += rank_rounding_notes(pool, "data-parallel workers" if _replica_dp(plan, pool) else "attention-DP ranks",
                                 "SGLang")
    notes += head_split_notes(plan, pool, "SGLang", "sglang 0.5.21 models: assert total_num_heads % attn_tp_size")
    if expert_slots(pool) is not None and model_type in NO_EXPERT_LOCATION:
        notes.append(f"the plan's expert banks: SGLang's {model_type} model reads no --init-expert-location (it would "
                     "drop the file without a word), so the experts stay in SGLang's contiguous order and the plan's "
                     "redundant slots are not launched; the banks are in the plan file")
    if pool.moe_ep > 1 and pool.moe_ep == pool.gpus_per_stage and model_type in NO_DEEPEP:
        notes.append(f"no DeepEP: SGLang's {model_type} model has no DeepEP path; the all-to-all stays SGLang's "
                     "default")
    if mx_priced_activations(plan, pool) is Dtype.BF16 and plan.resolved.scenario.precision.expert_activations == "fp8":
        notes.append("the plan priced this pool's MXFP4 experts with bf16 activations where MXFP8 was asked, as its "
                     "engine, vLLM, runs them over DeepEP low-latency (costmodel.resolve.mxfp8_falls_back); "
                     "--flashinfer-mxfp4-moe-precision bf16 launches what was priced; without it SGLang computes "
                     "them with MXFP8 activations (its default), which the plan did not price: solve the scenario "
                     "with engine sglang to price that")
    if mx_priced_activations(plan, pool) is Dtype.FP4:
        notes.append("SGLang computes MXFP4 experts with MXFP8 activations on these GPUs by default (0.5.23: "
                     "--flashinfer-mxfp4-moe-precision default); the plan priced them at the fp4 rate, "
                     f"{mx_rate_gap(pool.system, 'sglang'):.3g}x fp8's tensor-core rate here; "
                     "precision.expert_activations: fp8 prices what runs")
    if _replica_dp(plan, pool) and pool.nodes_per_instance > 1:
        notes.append(f"SGLang runs data parallelism across nodes only with DP attention, which dense models lack: "
                     f"launch {pool.dp_attention} servers of {pool.gpus_per_instance // pool.dp_attention} GPUs "
                     "each instead of this instance")
    if pool.dp_attention > 1 and pool.tp > 1 and _dense_layers(plan) and not _replica_dp(plan, pool):
        notes.append(f"SGLang runs the dense FFN layers over all {pool.gpus_per_stage} GPUs of a stage "
                     f"(--moe-dense-tp-size takes 1 or the whole stage); the plan priced them at TP {pool.tp} on "
                     "each attention-DP rank")
    if pool.moe_tp > 1 and pool.moe_ep > 1:
        notes.append(f"expert TP {pool.moe_tp} inside each of {pool.moe_ep} banks follows from --tp-size / --ep-size; "
                     "the all-to-all stays SGLang's default (DeepEP needs EP over the whole stage)")
    if pool.banks is not None and pool.moe_ep > 1 and len({len(g) for g in pool.banks["gpu_experts"]}) > 1:
        notes.append("ranks hold unequal bank counts in the plan; shorter ranks are padded with copies of their own "
                     "experts (SGLang needs equal slots per rank)")
    return notes


def _router_note(plan: Plan) -> list[str]:
    roles = ", ".join(p.name for p in plan.pools)
    return [f"disaggregated: put a router in front of the pools ({roles}), e.g. `python3 -m "
            "sglang_router.launch_router --pd-disaggregation --prefill http://PREFILL:8000 "
            f"{BOOTSTRAP_PORT} --decode http://DECODE:8001` (sglang-router is a separate package; not checked)"]
