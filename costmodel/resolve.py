"""Semantic layer over the scenario schema: resolve names against the catalogs and check that the
pieces fit together. Every check raises `ScenarioError(message, field)` saying what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from costmodel.architecture import Architecture
from costmodel.calibration import mx_activations_chosen
from costmodel.errors import CatalogError, ScenarioError
from costmodel.hardware import SystemSpec, load_system, with_overrides
from costmodel.inventory import ClusterGroup, GpuIndex, parse_unavailable_id, uplink_bytes_per_s
from costmodel.layout import Layout, Pool
from costmodel.models import load_model
from costmodel.precision import Dtype, bytes_per_element
from costmodel.scenario import MAX_GPUS, Cluster, Scenario


@dataclass(frozen=True)
class ResolvedScenario:
    """A scenario with its model, systems and formats looked up; what the cost model and planner use.

    `groups` are the cluster's GPU groups (one for the `{system, gpus}` shorthand). The cost model prices a
    layout on one system: the planner works on each group through `view(group)`, a scenario whose cluster
    is that group alone."""

    scenario: Scenario
    architecture: Architecture
    groups: tuple[ClusterGroup, ...]
    weights: Dtype
    experts: Dtype
    kv_cache: Dtype

    @property
    def expert_bytes(self) -> float:
        """Bytes per element of the routed experts as stored: the published checkpoint's own (its block
        scales: MXFP4's one byte per 32 elements) where they keep its format, else the format's default."""
        native = self.architecture.native_expert_bytes
        return native if native is not None and self.experts is self.architecture.native_experts else \
            bytes_per_element(self.experts)

    @property
    def microscaled_experts(self) -> bool:
        """The routed experts stay in their checkpoint's MXFP4 (gpt-oss, Kimi K3), which NVIDIA engines
        compute with MXFP8 or bf16 activations by default (`costmodel.calibration.MX_EXPERT_ACTIVATIONS`)."""
        return self.architecture.native_experts_microscaled and self.experts is self.architecture.native_experts

    def mx_activations_on(self, system: SystemSpec) -> bool:
        """The routed experts are MXFP4 and `system`'s fp4 tensor cores pair them with the activations the engine
        chooses (`costmodel.calibration.mx_activations_chosen`; `precision.expert_activations` where set)."""
        return self.microscaled_experts and mx_activations_chosen(system)

    @property
    def system(self) -> SystemSpec:
        """The system of a one-group cluster (or of a group's view)."""
        return self.groups[0].system

    @property
    def group(self) -> ClusterGroup:
        """The cluster's only group (a view's)."""
        return self.groups[0]

    @property
    def gpus(self) -> int:
        """Available GPUs of every group."""
        return sum(g.gpus for g in self.groups)

    @property
    def installed_gpus(self) -> int:
        return sum(g.installed for g in self.groups)

    @property
    def cluster_text(self) -> str:
        """The cluster in words: `72 x gb200-nvl72`, or per group `16 x h200-sxm (hopper) + 72 x ...`."""
        if len(self.groups) == 1 and not self.groups[0].named:
            return f"{self.gpus} x {self.system.name}"
        return " + ".join(f"{g.gpus} x {g.system.name} ({g.name})" for g in self.groups)

    def view(self, group: ClusterGroup) -> ResolvedScenario:
        """This scenario on one group's GPUs only (a group of it)."""
        return replace(self, groups=(group,))

    def group_named(self, name: str | None) -> ClusterGroup | None:
        """The group of that name; `None` names the only group of a one-group cluster."""
        if name is None:
            return self.groups[0] if len(self.groups) == 1 else None
        return next((g for g in self.groups if g.name == name), None)


def resolve(scenario: Scenario, base_dir: Path | None = None) -> ResolvedScenario:
    """Look up the model and systems, apply overrides, and run every semantic check."""
    architecture = _resolve_model(scenario.model, base_dir)
    groups = _resolve_cluster(scenario.cluster)
    weights = Dtype(scenario.precision.weights or architecture.native_weights)
    experts_name = scenario.precision.experts or scenario.precision.weights or architecture.native_experts
    resolved = ResolvedScenario(
        scenario=scenario,
        architecture=architecture,
        groups=groups,
        weights=weights,
        experts=Dtype(experts_name),
        kv_cache=Dtype(scenario.precision.kv_cache),
    )
    check_engine_hardware(resolved)
    check_expert_activations(resolved)
    check_context(resolved)
    check_session_context(resolved)
    check_speculative(resolved)
    check_search_degrees(resolved)
    check_redundant_experts(resolved)
    return resolved


def _resolve_model(ref: str, base_dir: Path | None) -> Architecture:
    try:
        return load_model(ref, base_dir)
    except CatalogError as exc:
        raise ScenarioError(str(exc), "model") from None


def _resolve_cluster(cluster: Cluster) -> tuple[ClusterGroup, ...]:
    network = cluster.network
    if cluster.inventory is None:
        assert cluster.system is not None  # the schema asks for system without an inventory
        system = _system(cluster.system, cluster.overrides, "cluster")
        gpus = _installed(system, cluster.gpus, cluster.nodes, cluster.racks, "cluster")
        uplink = uplink_bytes_per_s(system, network.oversubscription, network.uplink_bytes_per_s)
        return (ClusterGroup(system.name, system, gpus, uplink_bytes_per_s=uplink),)
    groups = []
    for index, item in enumerate(cluster.inventory):
        where = f"cluster.inventory.{index}"
        system = _system(item.system, item.overrides, where)
        gpus = _installed(system, item.gpus, item.nodes, item.racks, where)
        unavailable = _unavailable(system, gpus, item.unavailable, where)
        uplink = uplink_bytes_per_s(system, network.oversubscription, network.uplink_bytes_per_s)
        groups.append(ClusterGroup(item.name, system, gpus, unavailable, True, uplink))
    total = sum(g.installed for g in groups)
    if total > MAX_GPUS:
        raise ScenarioError(f"{total} GPUs is more than the {MAX_GPUS} a cluster may have; use fewer",
                            "cluster.inventory")
    for index, group in enumerate(groups):
        if group.gpus == 0:
            raise ScenarioError(f"group {group.name} has no available GPU; drop it or free some",
                                f"cluster.inventory.{index}.unavailable")
    return tuple(groups)


def _system(name: str, overrides: Mapping[str, object], where: str) -> SystemSpec:
    try:
        system = load_system(name)
    except CatalogError as exc:
        raise ScenarioError(str(exc), f"{where}.system") from None
    try:
        return with_overrides(system, overrides)
    except CatalogError as exc:
        raise ScenarioError(str(exc), f"{where}.overrides" + (f".{exc.field}" if exc.field else "")) from None


def _installed(system: SystemSpec, gpus: int | None, nodes: int | None, racks: int | None, where: str) -> int:
    """GPUs installed: racks and nodes are whole; a GPU count may end in a partial node."""
    if racks is not None:
        count, field = racks * system.gpus_per_rack, f"{where}.racks"
    elif nodes is not None:
        count, field = nodes * system.gpus_per_node, f"{where}.nodes"
    else:
        count, field = gpus or 0, f"{where}.gpus"
    if count > MAX_GPUS:
        raise ScenarioError(f"{count} GPUs is more than the {MAX_GPUS} a cluster may have; use fewer", field)
    return count


def _unavailable(system: SystemSpec, installed: int, ids: list[str], where: str) -> frozenset[GpuIndex]:
    """The GPUs an inventory group marks busy: each listed GPU, every GPU of a listed node or rack."""
    nodes_per_rack = system.gpus_per_rack // system.gpus_per_node
    found: set[GpuIndex] = set()
    wrong: list[tuple[int, str]] = []  # (position, "id (kind)"): every one said at once
    for position, text in enumerate(ids):
        parsed = parse_unavailable_id(text)
        assert parsed is not None  # the schema's pattern
        rack, node, gpu = parsed
        nodes = range(nodes_per_rack) if node is None else [node]
        gpus = range(system.gpus_per_node) if gpu is None else [gpu]
        indices = [(rack, n, g) for n in nodes for g in gpus
                   if rack * system.gpus_per_rack + n * system.gpus_per_node + g < installed]
        if (node is not None and node >= nodes_per_rack) or (gpu is not None and gpu >= system.gpus_per_node) \
                or not indices:
            kind = "GPU" if gpu is not None else "node" if node is not None else "rack"
            wrong.append((position, f"{text} is not a {kind}"))
            continue
        found.update(indices)
    if wrong:
        said = "; ".join(text for _, text in wrong)
        raise ScenarioError(
            f"{said} of this group: it has {installed} GPUs in racks of {nodes_per_rack} nodes of "
            f"{system.gpus_per_node} GPUs (ids r<rack>/n<node>/g<gpu>, r<rack>/n<node> or r<rack>, from 0)",
            f"{where}.unavailable.{wrong[0][0]}")
    return frozenset(found)


def compute_dtype(storage: Dtype, system: SystemSpec) -> Dtype:
    """Format the tensor cores compute in for weights stored as `storage`.

    A format the GPU has no tensor cores for runs weight-only: dequantised to the widest supported
    format at or below bf16 (e.g. MXFP4 gpt-oss experts on H100 through Marlin-style kernels compute in
    bf16; int4 AWQ/GPTQ likewise). Memory traffic still uses the storage format.
    """
    return storage if storage in system.peak_flops_per_s else Dtype.BF16


def expert_compute_dtype(resolved: ResolvedScenario, system: SystemSpec, falls_back: bool) -> Dtype:
    """Format the routed experts' GEMMs compute in on `system`: their storage format's (`compute_dtype`), or, for
    MXFP4 experts on NVIDIA fp4 tensor cores, `precision.expert_activations` where set: a mixed-input kernel runs
    at the wider operand's rate (tcgen05 kind::f8f6f4 pairs e2m1 with e4m3 at the fp8 rate; MXFP4 x BF16 MoE
    kernels dequantise to bf16 and run kind::f16). `falls_back` (`mxfp8_falls_back`): the MXFP8 asked runs with
    bf16 activations in this pool."""
    chosen = resolved.scenario.precision.expert_activations
    if chosen is None or not resolved.mx_activations_on(system):
        return compute_dtype(resolved.experts, system)
    return Dtype.BF16 if falls_back else Dtype(chosen)


def batched_expert_input(engine: str, role: str, moe_ep: int, dp_attention: int) -> bool:
    """The pool's routed experts take DeepEP low-latency's batched activation format: vLLM's decode pools with
    expert parallelism over attention-DP ranks, which `plan export` launches with `--all2all-backend
    deepep_low_latency` (vLLM runs all-to-all kernels only with DP > 1: vllm 0.34 `fused_moe/config.py`
    use_all2all_kernels). vLLM's MXFP8 MoE kernels take only the Standard format, so with MXFP8 asked it runs
    MXFP4 experts with bf16 activations (0.34 `fused_moe/oracle/mxfp4.py`: the batched format leaves only bf16
    backends, `_warn_on_bf16_fallback`; 0.31 stops at start-up, so the export never asks it there). Assumption:
    priced at the bf16 tensor-core rate with FlashInfer's bf16 token tiles, where 0.34 on Blackwell picks Batched
    Marlin (weight-only W4A16, `marlin_moe.py`), likely slower: the figures of such pools may be optimistic."""
    return engine == "vllm" and role == "decode" and moe_ep > 1 and dp_attention > 1


def mxfp8_falls_back(resolved: ResolvedScenario, role: str, moe_ep: int, dp_attention: int) -> bool:
    """MXFP8 was asked of the experts and a pool of `role` and layout takes them in the batched format, so they
    compute with bf16 activations there (`batched_expert_input`): what a pool's context depends on beside its
    layout."""
    return resolved.scenario.precision.expert_activations == "fp8" and \
        batched_expert_input(resolved.scenario.engine, role, moe_ep, dp_attention)


def check_expert_activations(resolved: ResolvedScenario) -> None:
    """`precision.expert_activations` prices some group: else it says something the plan ignores."""
    if resolved.scenario.precision.expert_activations is None:
        return
    if not resolved.microscaled_experts:
        stored = "NVFP4, W4A4" if resolved.experts is Dtype.FP4 else resolved.experts.value
        raise ScenarioError(f"it applies to MXFP4 routed experts as their checkpoints store them (gpt-oss, Kimi K3), "
                            f"which engines pair with MXFP8 or bf16 activations; these experts compute as stored "
                            f"({stored}): remove it", "precision.expert_activations")
    if not any(mx_activations_chosen(group.system) for group in resolved.groups):
        names = ", ".join(sorted({group.system.name for group in resolved.groups}))
        raise ScenarioError(f"no GPU of this cluster ({names}) has NVIDIA fp4 tensor cores: MXFP4 experts are priced "
                            "weight-only in bf16 on Hopper (SGLang's MXFP4 x FP8 Hopper path is not modelled) and as "
                            "MXFP4 x MXFP4 on AMD CDNA4 (assumption): remove it", "precision.expert_activations")


def check_context(resolved: ResolvedScenario) -> None:
    workload = resolved.scenario.workload
    context = workload.longest_request_tokens  # with length distributions, the longest request
    limit = resolved.architecture.max_position_embeddings
    if context > limit:
        raise ScenarioError(
            f"cached + input + output = {context} tokens (the longest request) exceeds the model's context of "
            f"{limit} tokens; "
            "shorten the request",
            "workload",
        )


def check_session_context(resolved: ResolvedScenario) -> None:
    """A session's context grows by each turn's input and output: by its last turn it must still fit the
    model's window (agents compact or restart before it fills; the planner does not model that)."""
    workload = resolved.scenario.workload
    sessions = workload.sessions
    if sessions is None:
        return
    turn_in, turn_out = sessions.mean_lengths() or (workload.input_tokens, workload.output_tokens)
    per_turn = turn_in + turn_out
    last = sessions.system_prompt_tokens + sessions.turns * per_turn
    limit = resolved.architecture.max_position_embeddings
    if last > limit:
        most = max(0, (limit - sessions.system_prompt_tokens) // per_turn)
        raise ScenarioError(
            f"by its last turn a session holds {sessions.system_prompt_tokens} + {sessions.turns} turns x {per_turn} "
            f"tokens = {last} tokens, beyond the model's context of {limit} tokens; use at most {most} turns or "
            "shorter turns", "workload.sessions.turns")


# Engines that run on one vendor's GPUs only: TensorRT-LLM is NVIDIA's (CUDA kernels, no ROCm build)
ENGINE_VENDORS = {"trtllm": "nvidia"}


def runs_on(engine: str, system: SystemSpec) -> bool:
    """`engine` runs on `system`'s GPUs (`ENGINE_VENDORS`; an engine not listed runs on every vendor's)."""
    return ENGINE_VENDORS.get(engine, system.vendor) == system.vendor


def check_engine_hardware(resolved: ResolvedScenario) -> None:
    """The engine runs on the cluster's GPUs: a plan priced with TRT-LLM's calibration on AMD GPUs could not be
    launched (and `plan compare` would set it beside engines that can)."""
    engine = resolved.scenario.engine
    for index, group in enumerate(resolved.groups):
        if not runs_on(engine, group.system):
            where = "cluster.system" if resolved.scenario.cluster.inventory is None else \
                f"cluster.inventory.{index}.system"
            raise ScenarioError(f"engine {engine} runs on {ENGINE_VENDORS[engine].upper()} GPUs only and "
                                f"{group.system.name} is {group.system.vendor.upper()}: choose engine vllm, sglang "
                                "or generic, or other GPUs", where)


def check_speculative(resolved: ResolvedScenario) -> None:
    method = resolved.scenario.workload.speculative.method
    if method == "mtp" and resolved.architecture.mtp_layers == 0:
        raise ScenarioError(
            f"{resolved.architecture.name} has no MTP layers; use method: draft or none",
            "workload.speculative.method",
        )


def check_search_degrees(resolved: ResolvedScenario) -> None:
    """Every degree the search is given fits the cluster, and splits the model as a layout of it must
    (`_check_pool`): the solver would otherwise return plans that `evaluate` and `export` refuse."""
    search, architecture = resolved.scenario.search, resolved.architecture
    for name in ("tp", "dp_attention", "pp", "moe_tp", "moe_ep"):
        degrees: list[int] | None = getattr(search, name)
        too_big = [d for d in degrees or [] if d > resolved.gpus]
        if too_big:
            raise ScenarioError(
                f"degrees {too_big} exceed the cluster's {resolved.gpus} GPUs; remove them",
                f"search.{name}",
            )
    for name in ("tp", "pp", "moe_ep"):
        for index, degree in enumerate(getattr(search, name) or []):
            try:
                _check_pool(architecture, Pool.model_construct(role="mixed", batch=1, **{name: degree}), "search")
            except ScenarioError as exc:
                raise ScenarioError(f"{exc}; remove it from search.{name}", f"search.{name}.{index}") from None


def check_redundant_experts(resolved: ResolvedScenario) -> None:
    """Extra slots beyond one per routed expert would only copy every expert again: refuse them (the
    placement's work grows with the slots)."""
    redundant, experts = resolved.scenario.search.redundant_experts, resolved.architecture.num_experts
    if redundant > (experts or 0):
        have = f"the {experts} routed experts" if experts else f"{resolved.architecture.name}, which has no experts"
        raise ScenarioError(f"{redundant} redundant slots is more than {have}; use at most {experts or 0}",
                            "search.redundant_experts")


def check_layout(resolved: ResolvedScenario, layout: Layout) -> None:
    """A layout must fit the cluster's GPU count and divide the model the way engines can split it."""
    if layout.gpus > resolved.gpus:
        raise ScenarioError(
            f"the layout holds {layout.gpus} GPUs but the cluster has {resolved.gpus}; "
            "reduce replicas or parallel degrees",
            "pools",
        )
    for index, pool in enumerate(layout.pools):
        _check_pool(resolved.architecture, pool, f"pools.{index}")
    check_session_pools(resolved, layout)


def check_session_pools(resolved: ResolvedScenario, layout: Layout) -> None:
    """A midfill pool needs sessions of two turns or more; a pool that parks contexts in the shared KV
    store needs sessions and a store."""
    scenario = resolved.scenario
    sessions = scenario.workload.sessions
    split = {pool.deployment for pool in layout.pools if pool.role == "midfill"}  # deployments with a midfill pool
    for index, pool in enumerate(layout.pools):
        if pool.role == "midfill" and (sessions is None or sessions.turns < 2):
            raise ScenarioError("a midfill pool runs the turns after a session's first; the workload has no sessions "
                                "of two turns or more: drop the pool or describe workload.sessions",
                                f"pools.{index}.role")
        if pool.kv_store and (sessions is None or scenario.cluster.kv_store is None):
            raise ScenarioError("kv_store parks idle session contexts in the cluster's shared KV store: give "
                                "workload.sessions and cluster.kv_store, or set kv_store to false",
                                f"pools.{index}.kv_store")
        if pool.role == "prefill" and pool.deployment in split:  # first turns only: no idle contexts of its own
            for field, default in (("kv_store", False), ("tier_load", 1.0)):
                if getattr(pool, field) != default:
                    raise ScenarioError(f"beside a midfill pool the prefill pool runs only first turns and holds no "
                                        f"idle contexts: set {field} on the midfill pool, not here",
                                        f"pools.{index}.{field}")


def _head_counts(architecture: Architecture) -> list[int]:
    return sorted({layer.attention.num_heads for layer in architecture.layers})


def _check_pool(architecture: Architecture, pool: Pool, where: str) -> None:
    for heads in _head_counts(architecture):
        # Engines split heads evenly, or replicate each head on tp / heads ranks when tp exceeds the count.
        if heads % pool.tp and pool.tp % heads:
            raise ScenarioError(f"tp {pool.tp} does not divide the {heads} attention heads and is not a multiple "
                                f"of them (heads replicated); use a divisor of {heads}", f"{where}.tp")
    if pool.pp > architecture.num_layers:
        raise ScenarioError(
            f"pp {pool.pp} exceeds the model's {architecture.num_layers} layers", f"{where}.pp"
        )
    experts = architecture.num_experts
    if experts is None:
        if pool.moe_ep > 1:
            raise ScenarioError(
                f"{architecture.name} has no experts; use moe_ep: 1 (put the GPUs in moe_tp)", f"{where}.moe_ep"
            )
        return
    if pool.moe_ep > experts:
        raise ScenarioError(
            f"moe_ep {pool.moe_ep} exceeds the {experts} routed experts", f"{where}.moe_ep"
        )


def layout_warnings(resolved: ResolvedScenario, layout: Layout) -> tuple[str, ...]:
    """Layouts engines run but that waste GPUs, with what to change."""
    warnings = []
    heads = _head_counts(resolved.architecture)[0]
    for pool in layout.pools:
        if pool.tp > heads:
            warnings.append(f"{pool.role} pool: tp {pool.tp} exceeds the {heads} attention heads, so each head is "
                            f"computed on {pool.tp // heads} ranks; dp_attention gives those GPUs their own "
                            "sequences instead")
        if pool.batch < pool.dp_attention:
            warnings.append(f"{pool.role} pool: batch {pool.batch} leaves {pool.dp_attention - pool.batch} of the "
                            f"{pool.dp_attention} attention-DP ranks without a sequence: they only join the "
                            "expert layers")
    return tuple(warnings)
