"""Semantic layer over the scenario schema: resolve names against the catalogs and check that the
pieces fit together. Every check raises `ScenarioError(message, field)` saying what to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from costmodel.architecture import Architecture
from costmodel.errors import CatalogError, ScenarioError
from costmodel.hardware import SystemSpec, load_system, with_overrides
from costmodel.layout import Layout, Pool
from costmodel.models import load_model
from costmodel.precision import Dtype
from costmodel.scenario import MAX_GPUS, Cluster, Scenario


@dataclass(frozen=True)
class ClusterPartition:
    """GPUs of one system type. A cluster is a tuple of these so that later releases can mix GPU types;
    this release's scenario schema yields exactly one."""

    system: SystemSpec
    gpus: int

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.system.gpus_per_node)

    @property
    def racks(self) -> int:
        return -(-self.gpus // self.system.gpus_per_rack)


@dataclass(frozen=True)
class ResolvedScenario:
    """A scenario with its model, system and formats looked up; what the cost model and planner use."""

    scenario: Scenario
    architecture: Architecture
    partitions: tuple[ClusterPartition, ...]
    weights: Dtype
    experts: Dtype
    kv_cache: Dtype

    @property
    def system(self) -> SystemSpec:
        """The (single) system type of this release's clusters."""
        return self.partitions[0].system

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.partitions)


def resolve(scenario: Scenario, base_dir: Path | None = None) -> ResolvedScenario:
    """Look up the model and system, apply overrides, and run every semantic check."""
    architecture = _resolve_model(scenario.model, base_dir)
    partition = _resolve_cluster(scenario.cluster)
    weights = Dtype(scenario.precision.weights or architecture.native_weights)
    experts_name = scenario.precision.experts or scenario.precision.weights or architecture.native_experts
    resolved = ResolvedScenario(
        scenario=scenario,
        architecture=architecture,
        partitions=(partition,),
        weights=weights,
        experts=Dtype(experts_name),
        kv_cache=Dtype(scenario.precision.kv_cache),
    )
    check_context(resolved)
    check_speculative(resolved)
    check_search_degrees(resolved)
    check_redundant_experts(resolved)
    return resolved


def _resolve_model(ref: str, base_dir: Path | None) -> Architecture:
    try:
        return load_model(ref, base_dir)
    except CatalogError as exc:
        raise ScenarioError(str(exc), "model") from None


def _resolve_cluster(cluster: Cluster) -> ClusterPartition:
    try:
        system = load_system(cluster.system)
    except CatalogError as exc:
        raise ScenarioError(str(exc), "cluster.system") from None
    try:
        system = with_overrides(system, cluster.overrides)
    except CatalogError as exc:
        raise ScenarioError(str(exc), "cluster.overrides") from None
    if cluster.racks is not None:
        return _bounded(ClusterPartition(system, cluster.racks * system.gpus_per_rack), "cluster.racks")
    if cluster.nodes is not None:
        return _bounded(ClusterPartition(system, cluster.nodes * system.gpus_per_node), "cluster.nodes")
    gpus = cluster.gpus or 0
    if gpus > system.gpus_per_node and gpus % system.gpus_per_node:
        raise ScenarioError(
            f"{gpus} GPUs is not a whole number of {system.name} nodes of {system.gpus_per_node}; "
            f"use a multiple of {system.gpus_per_node} or give `nodes:`",
            "cluster.gpus",
        )
    return ClusterPartition(system, gpus)


def _bounded(partition: ClusterPartition, field: str) -> ClusterPartition:
    if partition.gpus > MAX_GPUS:
        raise ScenarioError(f"{partition.gpus} GPUs is more than the {MAX_GPUS} a cluster may have; use fewer", field)
    return partition


def compute_dtype(storage: Dtype, system: SystemSpec) -> Dtype:
    """Format the tensor cores compute in for weights stored as `storage`.

    A format the GPU has no tensor cores for runs weight-only: dequantised to the widest supported
    format at or below bf16 (e.g. MXFP4 gpt-oss experts on H100 through Marlin-style kernels compute in
    bf16; int4 AWQ/GPTQ likewise). Memory traffic still uses the storage format.
    """
    return storage if storage in system.peak_flops_per_s else Dtype.BF16


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


def check_speculative(resolved: ResolvedScenario) -> None:
    method = resolved.scenario.workload.speculative.method
    if method == "mtp" and resolved.architecture.mtp_layers == 0:
        raise ScenarioError(
            f"{resolved.architecture.name} has no MTP layers; use method: draft or none",
            "workload.speculative.method",
        )


def check_search_degrees(resolved: ResolvedScenario) -> None:
    search = resolved.scenario.search
    for name in ("tp", "dp_attention", "pp", "moe_tp", "moe_ep"):
        degrees: list[int] | None = getattr(search, name)
        too_big = [d for d in degrees or [] if d > resolved.gpus]
        if too_big:
            raise ScenarioError(
                f"degrees {too_big} exceed the cluster's {resolved.gpus} GPUs; remove them",
                f"search.{name}",
            )


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
    for index, pool in enumerate(layout.pools):
        if pool.role == "midfill" and (sessions is None or sessions.turns < 2):
            raise ScenarioError("a midfill pool runs the turns after a session's first; the workload has no sessions "
                                "of two turns or more: drop the pool or describe workload.sessions",
                                f"pools.{index}.role")
        if pool.kv_store and (sessions is None or scenario.cluster.kv_store is None):
            raise ScenarioError("kv_store parks idle session contexts in the cluster's shared KV store: give "
                                "workload.sessions and cluster.kv_store, or set kv_store to false",
                                f"pools.{index}.kv_store")
        if pool.role == "prefill" and layout.split_fills:  # first turns only: no idle contexts of its own
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
