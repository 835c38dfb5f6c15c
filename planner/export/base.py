"""What every engine exporter shares: the plan read back, one view per pool, commands and files out.

A plan file (`plan-<i>.yaml` from `plan solve --out`) is read as a plain dict so that keys added to it
later do not break the export; only `layout`, `placement` and `expert_banks` are required. The scenario
gives the model id, formats, workload lengths and the system (GPUs per node).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from costmodel.evaluate import memory_reasons
from costmodel.hardware import SystemSpec
from costmodel.layout import Layout
from costmodel.precision import Dtype
from costmodel.resolve import ResolvedScenario, expert_compute_dtype, mxfp8_falls_back
from planner.errors import InputError

# Engine versions the exports are written for: those ai-dynamo 1.6.1 is released against (its `sglang`,
# `vllm` and `trtllm` extras), so one version per engine holds whether it runs alone or under Dynamo.
ENGINE_VERSIONS: dict[str, tuple[str, str]] = {
    "trtllm": ("tensorrt-llm", "1.3.0rc29"),
    "sglang": ("sglang", "0.5.21"),
    "vllm": ("vllm", "0.31.0"),
    "dynamo": ("ai-dynamo", "1.6.1"),
}
ENGINES = ("trtllm", "sglang", "vllm", "dynamo")
FILL_CHUNK_TOKENS = 8192  # the cost model's chunked-prefill size (costmodel.serving), also the engines' default
HBM_OUTSIDE_POOLS = 0.10  # share of HBM engines keep outside their pools (the cost model's memory rule)
HOST = "0.0.0.0"
PORT = 8000
_PLACEHOLDER = re.compile(r"^\$\{[A-Z_][A-Z0-9_]*\}[\w.:-]*$")  # a shell variable set per node (e.g. ${HEAD_ADDR}:5000)


@dataclass(frozen=True)
class Pool:
    """One pool of the plan with what every engine needs to launch it."""

    index: int
    role: str  # mixed | prefill | midfill | decode
    replicas: int
    tp: int
    dp_attention: int
    pp: int
    moe_tp: int
    moe_ep: int
    batch: int
    gpus_per_instance: int
    nodes_per_instance: int  # nodes one instance spans
    gpus_per_node: int  # GPUs of one instance on each node it spans
    banks: dict[str, Any] | None  # expert banks of this pool's expert-parallel degree, None when absent
    stages: list[dict[str, Any]]
    system: SystemSpec  # the GPUs of the pool's inventory group
    cpu_offload_gb: float = 0.0  # weights each GPU keeps in host DRAM, GiB (`costmodel.layout.Pool`)

    @property
    def hbm_bytes(self) -> float:
        """Usable HBM of one of the pool's GPUs (the cost model's)."""
        return self.system.hbm_capacity_bytes

    @property
    def gpus_per_stage(self) -> int:
        return self.tp * self.dp_attention

    @property
    def batch_per_rank(self) -> int:
        """Sequences each attention-DP rank (or data-parallel worker) admits: the plan's batch, rounded up."""
        return math.ceil(self.batch / self.dp_attention)

    @property
    def engine_role(self) -> str:
        """The role an engine knows: a midfill pool runs as a prefill server."""
        return {"mixed": "aggregated", "midfill": "prefill"}.get(self.role, self.role)

    @property
    def name(self) -> str:
        return self.role if self.role != "mixed" else "agg"


@dataclass(frozen=True)
class Command:
    """One process to start: the program, its arguments, and comments to print above it."""

    program: tuple[str, ...]
    args: tuple[str, ...]
    comments: tuple[str, ...] = ()

    def shell(self) -> str:
        quoted = [f'"{w}"' if _PLACEHOLDER.match(w) else shlex.quote(w) for w in self.args]
        return " \\\n    ".join([shlex.join(self.program), *_pairs(quoted)])


def _pairs(words: list[str]) -> list[str]:
    """Keep each flag on one line with its value."""
    lines: list[str] = []
    for word in words:
        if lines and not word.startswith("-") and lines[-1].startswith("-") and " " not in lines[-1]:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


@dataclass
class Export:
    """An engine's export: files by name, the commands (for tests), and what it could not express."""

    engine: str
    files: dict[str, str] = field(default_factory=dict)
    commands: dict[str, list[Command]] = field(default_factory=dict)  # per pool name
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # structured copies of config files
    unexpressed: list[str] = field(default_factory=list)

    def write(self, folder: Path) -> list[Path]:
        written = []
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for name, text in self.files.items():
                path = folder / name
                path.parent.mkdir(parents=True, exist_ok=True)  # a composite plan: one folder per deployment
                path.write_text(text, encoding="utf-8")
                if name.endswith(".sh"):
                    path.chmod(0o755)
                written.append(path)
        except OSError as exc:
            raise InputError.single(folder, None, "--out", f"cannot write there: {exc.strerror}") from None
        return written


@dataclass(frozen=True)
class Plan:
    """A plan file and its scenario, read for export."""

    path: Path
    data: dict[str, Any]
    resolved: ResolvedScenario
    pools: tuple[Pool, ...]

    @property
    def serving(self) -> str:
        return str(self.data["layout"]["serving"])

    @property
    def model(self) -> str:
        """The Hugging Face id (aliases resolved): what engines download or find in their model cache."""
        return self.resolved.architecture.name

    @property
    def label(self) -> str:
        return f"{self.path.stem} of scenario '{self.resolved.scenario.name}'"


def read_plan(path: Path, data: Any, resolved: ResolvedScenario) -> Plan:
    """Check the parts of a plan file the export reads and build one `Pool` per layout pool."""
    if not isinstance(data, dict) or not isinstance(data.get("layout"), dict):
        raise InputError.single(path, None, "layout", "not a plan file from `plan solve --out` (no layout)")
    pools = _list(path, data["layout"], "layout.pools")
    placed = _list(path, data.get("placement") or {}, "placement.pools")
    if len(placed) != len(pools):
        raise InputError.single(path, None, "placement.pools",
                                f"{len(placed)} placed pools for {len(pools)} layout pools; re-run `plan solve --out`")
    banks = data.get("expert_banks") or {}
    experts = resolved.architecture.num_experts or 0
    out = []
    for index, (pool, place) in enumerate(zip(pools, placed, strict=True)):
        group = resolved.group_named(pool.get("group") if isinstance(pool, dict) else None)
        system = (group or resolved.groups[0]).system  # each pool on its own group's nodes
        per_node = system.gpus_per_node
        try:
            gpus = int(place["gpus_per_instance"])
            numbers = {key: int(pool[key]) for key in ("replicas", "tp", "dp_attention", "pp", "moe_tp", "moe_ep",
                                                       "batch")}
            name = _bank_of(place, numbers["moe_ep"])
            bank = banks.get(name) if isinstance(banks, dict) else None
            if bank is not None and numbers["moe_ep"] > 1:
                _check_banks(path, f"expert_banks.{name}", bank, numbers["moe_ep"], experts)
            out.append(Pool(index=index, role=str(pool["role"]), gpus_per_instance=gpus,
                            nodes_per_instance=math.ceil(gpus / per_node), gpus_per_node=min(gpus, per_node),
                            banks=bank, stages=list(place.get("stages") or []),
                            cpu_offload_gb=float(pool.get("cpu_offload_gb") or 0.0), system=system, **numbers))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError.single(path, None, f"layout.pools.{index}", f"missing or bad field: {exc}") from None
    return Plan(path=path, data=data, resolved=resolved, pools=tuple(out))


def check_fits(path: Path, resolved: ResolvedScenario, layout: Layout) -> None:
    """A plan's pools fit in HBM (`costmodel.evaluate.memory_reasons`): a hand-edited batch, or a --scenario of
    longer requests, is refused before engines are told to hold it."""
    reasons = memory_reasons(resolved, layout)
    if reasons:
        raise InputError.single(path, None, "layout", f"the plan does not fit: {'; '.join(reasons)}; lower the "
                                "pool's batch to what fits, or re-run `plan solve --out`")


def _check_banks(path: Path, field: str, bank: Any, moe_ep: int, experts: int) -> None:
    """A pool's expert banks as the export writes them into engines' placement files: `gpu_experts` holds
    `moe_ep` ranks, each a non-empty list of expert ids of the model (0 .. experts - 1; a replica may share its
    rank with the original where a rank's redundant slots outnumber the others' experts), every expert on some
    rank (a hand-edited plan is refused here, not written into a file an engine reads)."""
    ranks = bank.get("gpu_experts") if isinstance(bank, dict) else None
    if not isinstance(ranks, list) or len(ranks) != moe_ep:
        raise InputError.single(path, None, f"{field}.gpu_experts",
                                f"expected a list of {moe_ep} ranks' expert ids; re-run `plan solve --out`")
    for rank, ids in enumerate(ranks):
        where = f"{field}.gpu_experts.{rank}"
        bad = [e for e in ids if type(e) is not int or not 0 <= e < experts] if isinstance(ids, list) else [ids]
        if bad or not ids:
            raise InputError.single(path, None, where, f"expected a non-empty list of expert ids 0 .. {experts - 1} "
                                    f"(the model's {experts} experts), found {bad[:4]!r}; re-run `plan solve --out`")
    missing = sorted(set(range(experts)) - {e for ids in ranks for e in ids})
    if missing:
        raise InputError.single(path, None, f"{field}.gpu_experts", f"experts {missing[:8]} are on no rank; "
                                "re-run `plan solve --out`")


def _bank_of(place: dict[str, Any], moe_ep: int) -> str:
    """The pool's key under `expert_banks`: named in its placement (plans since session 34), else its degree."""
    experts = place.get("experts")
    named = experts.get("banks") if isinstance(experts, dict) else None
    return str(named) if named is not None else str(moe_ep)


def _list(path: Path, data: Any, name: str) -> list[dict[str, Any]]:
    value = data.get(name.split(".")[-1]) if isinstance(data, dict) else None
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        raise InputError.single(path, None, name, "expected a non-empty list of pools")
    return value


def max_context_tokens(plan: Plan) -> tuple[int, str | None]:
    """Longest sequence a request can reach, capped at the model's positions (the note says when capped)."""
    workload = plan.resolved.scenario.workload
    longest = workload.longest_request_tokens  # the longest lengths a distribution allows
    sessions = workload.sessions
    if sessions is not None:
        kinds = [(t.input_tokens, t.output_tokens) for t in sessions.turn_lengths or []]
        turn = max([i + o for i, o in kinds] or [workload.input_tokens + workload.output_tokens])
        longest = sessions.system_prompt_tokens + sessions.turns * turn
    limit = plan.resolved.architecture.max_position_embeddings
    if longest > limit:
        return limit, f"sequences may reach {longest:,} tokens; capped at the model's {limit:,} positions"
    return longest, None


def kv_dtype(plan: Plan) -> str:
    return str(plan.resolved.kv_cache.value)


def memory_fraction() -> float:
    """Share of HBM the engine may give to weights and KV: all but what the cost model keeps outside."""
    return round(1.0 - HBM_OUTSIDE_POOLS, 2)


def expert_slots(pool: Pool) -> list[int] | None:
    """Logical expert id of every physical slot, rank by rank, each rank padded to the same slot count.

    Engines need equal slots per rank; a rank with fewer banks gets extra copies of its own experts
    (cycled), which only adds replicas. None when the plan has no banks for this pool.
    """
    if pool.banks is None or pool.moe_ep <= 1:
        return None
    ranks = [list(map(int, experts)) for experts in pool.banks["gpu_experts"]]
    width = max(len(r) for r in ranks)
    slots: list[int] = []
    for experts in ranks:
        slots += experts + [experts[i % len(experts)] for i in range(width - len(experts))]
    return slots


def moe_layer_indices(plan: Plan) -> list[int]:
    return [i for i, layer in enumerate(plan.resolved.architecture.layers) if layer.ffn.kind == "moe"]


def pool_comments(plan: Plan, pool: Pool, operator: bool = False) -> list[str]:
    """The plan's own numbers for a pool, printed above its command (`operator`: a Kubernetes operator
    starts the nodes of an instance, not the user)."""
    lines = [f"{pool.role} pool: {pool.replicas} instance(s) of {pool.gpus_per_instance} GPUs "
             f"(tp {pool.tp} x attention-DP {pool.dp_attention} x pp {pool.pp}; experts moe_tp {pool.moe_tp} x "
             f"moe_ep {pool.moe_ep}); batch {pool.batch} sequences per instance"]
    if pool.nodes_per_instance > 1 and operator:
        lines.append(f"one instance spans {pool.nodes_per_instance} nodes of {pool.gpus_per_node} GPUs "
                     "(multinode.nodeCount)")
    elif pool.nodes_per_instance > 1:
        lines.append(f"one instance spans {pool.nodes_per_instance} nodes of {pool.gpus_per_node} GPUs: run the "
                     "command on each, NODE_RANK 0..n-1 in the order the plan lists the instance's GPUs "
                     f"(placement.pools[{pool.index}].instances: ranks, expert banks and pipeline stages follow it), "
                     "HEAD_ADDR the address of node 0")
    if pool.role == "midfill":
        lines.append("midfill pool: serves the turns that follow a gap; no engine routes by turn, so the router "
                     "must send those turns here (not expressible as an engine flag)")
    for stage in pool.stages:
        lines.append(f"pipeline stage {stage.get('stage')}: layers {stage.get('layers')} on GPUs "
                     f"{stage.get('gpu_offset')} of the instance (engines split layers evenly too)")
    return lines


# Model types whose MTP modules the pinned SGLang and vLLM run as drafters, read from their sources: vLLM
# 0.31 `SpeculativeConfig.hf_config_override` maps deepseek_v3 / deepseek_v32 / glm_moe_dsa to deepseek_mtp,
# Glm4MoeForCausalLM to glm4_moe_mtp, qwen3_next and qwen3_5(_moe) to their MTP models; SGLang 0.5.21 ships
# NextN/MTP model code for the same (`srt/models/deepseek_nextn.py`, `glm4_moe_nextn.py`, `qwen3_next_mtp.py`,
# `qwen3_5_mtp.py`). MiniMax-M2's MTP modules have none in either: an MTP plan of it cannot be launched there.
MTP_MODEL_TYPES = frozenset({"deepseek_v3", "deepseek_v32", "glm_moe_dsa", "glm4_moe", "qwen3_next", "qwen3_5_moe"})


def mx_priced_activations(plan: Plan, pool: Pool) -> Dtype | None:
    """What the plan priced this pool's MXFP4 experts with where NVIDIA fp4 tensor cores take them
    (`ResolvedScenario.mx_activations_on`): FP4 by default, FP8 or BF16 as `precision.expert_activations`
    sets; None elsewhere (no MXFP4 experts, or GPUs that run them weight-only or pair them natively)."""
    if not plan.resolved.mx_activations_on(pool.system):
        return None
    falls_back = mxfp8_falls_back(plan.resolved, pool.role, pool.moe_ep, pool.dp_attention)
    return expert_compute_dtype(plan.resolved, pool.system, falls_back)


def mtp_notes(plan: Plan, pool: Pool, engine: str) -> list[str]:
    """Why a pool of an MTP plan launches without MTP on SGLang or vLLM (empty: it launches with it)."""
    spec = plan.resolved.scenario.workload.speculative
    if spec.method != "mtp":
        return []
    model_type = plan.resolved.architecture.model_type
    if model_type not in MTP_MODEL_TYPES:
        return [f"MTP is priced, but {engine} has no MTP drafter for model type {model_type or 'unknown'}: "
                "this pool decodes without it, slower than the plan's TPOT"]
    if engine == "sglang" and pool.pp > 1 and pool.engine_role != "prefill":
        return ["MTP is priced, but SGLang runs it with pipeline stages on prefill servers only (validation "
                "hook check_pipeline_parallel_compat; SGLANG_ENABLE_PP_SPEC=1 lifts it, experimentally, for "
                "aggregated servers without attention DP): this pool decodes without it, slower than the plan's TPOT"]
    return []


def launched_drafts(plan: Plan, pool: Pool, engine: str) -> int:
    """MTP draft tokens per step this pool launches on SGLang or vLLM: the plan's, or 0 where it prices none or
    the engine cannot run them (`mtp_notes` says why)."""
    spec = plan.resolved.scenario.workload.speculative
    return spec.draft_tokens if spec.method == "mtp" and not mtp_notes(plan, pool, engine) else 0


def draft_model_notes(plan: Plan) -> list[str]:
    """Speculative decoding with a separate draft model is priced (`workload.speculative.method: draft`), but no
    scenario field names the draft model, so no engine flag can load it: said, not silently dropped."""
    spec = plan.resolved.scenario.workload.speculative
    if spec.method != "draft":
        return []
    return [f"speculative decoding with a draft model ({spec.draft_tokens} token(s) per step, acceptance "
            f"{spec.acceptance_rate:g}) is priced, but the scenario names no draft model: add the engine's "
            "draft-model settings, or the engine decodes without it (slower than the plan's TPOT)"]


def rank_rounding_notes(pool: Pool, ranks: str, engine: str) -> list[str]:
    """Engines admit sequences per rank (`Pool.batch_per_rank`): a batch the ranks do not divide runs as
    whole ranks' worth, said where that is more than the plan's batch."""
    if pool.batch % pool.dp_attention == 0:
        return []
    return [f"batch {pool.batch} over {pool.dp_attention} {ranks}: {engine} admits per rank, so each admits up to "
            f"{pool.batch_per_rank} ({pool.batch_per_rank * pool.dp_attention} in all)"]


def head_split_notes(plan: Plan, pool: Pool, engine: str, source: str) -> list[str]:
    """A tp the attention heads do not divide (a multiple of them: the cost model replicates heads, with a layout
    warning) is one `engine` refuses at start-up (`source`: where it checks)."""
    heads = min(layer.attention.num_heads for layer in plan.resolved.architecture.layers)
    if heads % pool.tp == 0:
        return []
    return [f"tp {pool.tp} exceeds the model's {heads} attention heads: {engine} needs the heads divisible by its "
            f"attention TP ({source}) and will not start; re-plan with tp a divisor of {heads} and the rest in "
            "dp_attention"]


def checkpoint_notes(plan: Plan) -> list[str]:
    """The formats the plan prices against the published checkpoint's (the model argument): an engine takes the
    quantisation from the checkpoint's config, so a plan priced with fp4 experts on an fp8 checkpoint would
    run at twice the expert bytes priced unless the launch names a checkpoint stored as planned."""
    resolved, arch = plan.resolved, plan.resolved.architecture
    planned = {"weights": resolved.weights, "experts": resolved.experts} if arch.num_experts else \
        {"weights": resolved.weights}
    native = {"weights": arch.native_weights, "experts": arch.native_experts}
    differ = {part: (fmt, native[part]) for part, fmt in planned.items() if fmt is not native[part]}
    if not differ:
        return []
    said = ", ".join(f"{part} {fmt.value} (published {was.value})" for part, (fmt, was) in differ.items())
    return [f"the plan prices {said}: point the model argument at a checkpoint stored so (or use the engine's "
            f"online quantisation where it has one); {plan.model} as published runs its own formats, not the "
            "plan's figures"]


def plan_comments(plan: Plan) -> list[str]:
    """Figures and session tiers of the whole plan, for the head of each file."""
    figures = plan.data.get("figures") or {}
    lines = [f"{plan.label}: {plan.serving}, model {plan.model}",
             "figures: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                     for k, v in figures.items())]
    tiers = plan.data.get("kv_tiers")
    if isinstance(tiers, dict):
        stored = tiers.get("stored_gb") or {}
        lines.append("KV tiers of the fill pool (not expressible as engine flags: size host/SSD caches by hand): "
                     + ", ".join(f"{tier} {gb:,.0f} GB" for tier, gb in stored.items()))
    midfill = plan.data.get("midfill")
    if isinstance(midfill, dict) and "why" in midfill:
        lines.append(f"midfill: {midfill['why']}")
    return lines + draft_model_notes(plan) + checkpoint_notes(plan)


_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: load balancers are large


class _NoAliases(_Dumper):  # type: ignore[valid-type,misc]
    """Repeated lists (one expert map per layer) written out in full: engines' YAML readers differ on aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _block_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_NoAliases.add_representer(str, _block_text)  # a config file inside a ConfigMap stays readable


def dump_yaml(data: Any, *, flow: bool | None = None) -> str:
    return yaml.dump(data, Dumper=_NoAliases, sort_keys=False, default_flow_style=flow, width=120)


def dump_yaml_all(documents: list[Any]) -> str:
    return yaml.dump_all(documents, Dumper=_NoAliases, sort_keys=False, default_flow_style=False, width=120)


def comment_block(lines: list[str], mark: str = "#") -> str:
    return "".join(f"{mark} {line}\n" for line in lines)
