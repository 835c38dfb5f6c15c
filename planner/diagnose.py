"""Why a scenario has no feasible deployment, named by its binding resource."""

from __future__ import annotations

import math

from costmodel.evaluate import pool_context
from costmodel.hardware import GB, TB
from costmodel.layout import Pool
from costmodel.memory import ENGINE_MEMORY_FRACTION, RUNTIME_RESERVE_BYTES, stage_weight_bytes
from costmodel.resolve import ResolvedScenario
from planner.errors import InfeasibleError
from planner.formulation.options import STORE_TOO_SMALL
from planner.templates import CandidateSet


def weight_bytes(resolved: ResolvedScenario) -> float:
    """All weights of the model at the scenario's precision (one copy)."""
    group = resolved.groups[0].name if len(resolved.groups) > 1 else None  # an inventory's pools name their group
    pool = Pool(role="decode", replicas=1, tp=1, dp_attention=1, pp=1, moe_tp=1, moe_ep=1, batch=1, group=group)
    with_mtp = resolved.scenario.workload.speculative.method == "mtp"
    return stage_weight_bytes(pool_context(resolved, pool), 0, with_mtp)


def longest_context(resolved: ResolvedScenario) -> int:
    """Tokens of context the longest request (or a session's last turn) holds at its end."""
    workload = resolved.scenario.workload
    sessions = workload.sessions
    if sessions is None:
        return workload.longest_request_tokens
    return sessions.system_prompt_tokens + sessions.turns * (workload.input_tokens + workload.output_tokens)


def sequence_bytes(resolved: ResolvedScenario, context: int) -> float:
    """KV cache and fixed states of one sequence of `context` tokens, all layers (one copy), with the MTP
    layers' own KV where they draft (as `costmodel.memory.stage_memory` holds it)."""
    arch, kv = resolved.architecture, resolved.kv_cache
    mtp = arch.mtp_kv_bytes_per_token(kv) * context if resolved.scenario.workload.speculative.method == "mtp" else 0.0
    return arch.sequence_bytes(context, kv) + mtp


def usable_bytes_per_gpu(resolved: ResolvedScenario) -> float:
    """HBM an engine gives to weights and KV on one GPU: its pool share less the runtime reserve."""
    largest = max(g.system.hbm_capacity_bytes for g in resolved.groups)  # an inventory: its largest GPUs
    return ENGINE_MEMORY_FRACTION * largest - RUNTIME_RESERVE_BYTES


def _kv_binds(resolved: ResolvedScenario, gpus: int) -> InfeasibleError | None:
    """The weights fit `gpus` GPUs but not beside one sequence's KV cache: name the KV cache, with numbers."""
    weights, usable = weight_bytes(resolved), usable_bytes_per_gpu(resolved) * gpus
    context = longest_context(resolved)
    sequence = sequence_bytes(resolved, context)
    if weights > usable or weights + sequence <= usable:
        return None
    fp8 = " use fp8 KV cache (precision.kv_cache)," if resolved.kv_cache.value != "fp8" else ""
    return InfeasibleError(
        f"KV cache: one sequence of {context:,} tokens needs {sequence / GB:,.1f} GB of KV cache beside "
        f"{weights / GB:,.1f} GB of weights, but an instance of {gpus} GPUs has {usable / GB:,.1f} GB for both "
        f"({usable / gpus / GB:,.1f} GB per GPU after the runtime reserve); shorten the context,{fp8} or allow "
        "larger instances / add GPUs")


def _down(ms: float) -> str:
    """A lower bound to one decimal, rounded down so that it stays one."""
    return f"{math.floor(ms * 10) / 10:.1f}"


def no_candidates(resolved: ResolvedScenario, candidates: CandidateSet) -> InfeasibleError:
    """No instance layout survives HBM and SLO pruning: say which limit binds."""
    slo, fastest = resolved.scenario.slo, candidates.fastest_ms
    if not fastest:  # nothing fits in HBM
        need, hbm = weight_bytes(resolved), sum(g.gpus * g.system.hbm_capacity_bytes for g in resolved.groups)
        if need > hbm:
            return InfeasibleError(
                f"HBM: the weights need {need / TB:.2f} TB but the cluster's {_gpus(resolved.gpus)} hold"
                f"{'s' if resolved.gpus == 1 else ''} {hbm / TB:.2f} TB; use more GPUs or smaller formats "
                "(precision.weights / precision.experts)")
        group_binds = _group_binds(resolved, need)
        if group_binds is not None:
            return group_binds
        kv_binds = _kv_binds(resolved, candidates.instance_gpus or resolved.gpus)
        if kv_binds is not None:
            return kv_binds
        unavailable = _unavailable_bind(resolved, candidates.instance_gpus)
        if unavailable is not None:
            return unavailable
        largest = max(g.system.hbm_capacity_bytes for g in resolved.groups)
        return InfeasibleError(
            f"HBM: no instance layout the search allows fits (largest tried: {candidates.instance_gpus} GPUs, "
            f"{largest / GB:.0f} GB each at most; the weights need {need / GB:.0f} GB plus KV cache and "
            "workspace); allow larger instances (search.tp, dp_attention, pp), shorter contexts or fp8 KV cache")
    if slo.tpot_ms is not None and fastest.get("tpot", 0.0) > slo.tpot_ms:
        return InfeasibleError(f"TPOT: the SLO asks for {slo.tpot_ms:g} ms but no layout that fits decodes faster "
                               f"than {_down(fastest['tpot'])} ms (its instance alone: a deployment's is no faster); "
                               "relax slo.tpot_ms or add GPUs")
    if slo.ttft_ms is not None and fastest.get("ttft", 0.0) > slo.ttft_ms:
        # a bound, not the fastest deployment's TTFT (session 38: 414.1 ms quoted where deployments start at 422.3)
        return InfeasibleError(f"TTFT: the SLO asks for {slo.ttft_ms:g} ms but no layout that fits gets under "
                               f"{_down(fastest['ttft'])} ms (its prefill alone; queueing and KV transfer add to it); "
                               "relax slo.ttft_ms or add GPUs")
    store = resolved.scenario.cluster.kv_store
    if store is not None and candidates.pruned.get(STORE_TOO_SMALL):
        return InfeasibleError(
            f"KV store: the {candidates.pruned[STORE_TOO_SMALL]} layouts that park idle session contexts in the "
            f"shared store need more than it holds or serves ({store.capacity_bytes / TB:.2f} TB, "
            f"{store.bandwidth_bytes_per_s / GB:.0f} GB/s) even as one instance, and no layout without it meets "
            "the targets; enlarge cluster.kv_store or relax the SLOs")
    return InfeasibleError("no layout meets both the TTFT and TPOT targets at once; relax slo.ttft_ms or slo.tpot_ms")


def _group_binds(resolved: ResolvedScenario, need: float) -> InfeasibleError | None:
    """An inventory whose groups together hold the weights but none alone: an instance cannot span groups."""
    if len(resolved.groups) < 2:
        return None
    largest = max(resolved.groups, key=lambda g: g.gpus * g.system.hbm_capacity_bytes)
    hbm = largest.gpus * largest.system.hbm_capacity_bytes
    if need <= hbm:
        return None
    return InfeasibleError(
        f"HBM: the weights need {need / TB:.2f} TB but the largest inventory group ('{largest.name}', "
        f"{_gpus(largest.gpus)} of {largest.system.name}) holds {hbm / TB:.2f} TB, and an instance cannot span "
        "groups; add GPUs to one group (cluster.inventory) or use smaller formats (precision.weights / "
        "precision.experts)")


def _unavailable_bind(resolved: ResolvedScenario, largest: int) -> InfeasibleError | None:
    """Busy or failed GPUs that leave no room for the next larger instance, which a group would hold were they
    free: they, not HBM, bind (one failed GPU on 8 GB200s left instances of 4 GPUs, too small for Kimi K2)."""
    count = sum(len(group.unavailable) for group in resolved.groups)
    wider = 2 * max(largest, 1)
    if not count or not any(wider <= group.installed for group in resolved.groups) or _widest(resolved) < wider:
        return None  # no group would hold a wider instance, or the search's degrees allow none: not theirs
    need = weight_bytes(resolved)
    return InfeasibleError(
        f"GPUs: the {_gpus(count)} marked unavailable (cluster.inventory unavailable) leave{'s' if count == 1 else ''} "
        f"no {wider} available GPUs together for an instance, and no instance of at most {_gpus(largest)} holds the "
        f"weights ({need / GB:.0f} GB plus KV cache and workspace); free {'it' if count == 1 else 'them'} or add GPUs")


def _widest(resolved: ResolvedScenario) -> float:
    """GPUs of the widest instance the search's degrees allow (tp x dp_attention x pp; unbounded: inf)."""
    search, widest = resolved.scenario.search, 1.0
    for degrees in (search.tp, search.dp_attention, search.pp):
        widest *= max(degrees) if degrees else math.inf
    return widest


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")


def _too_few_gpus(resolved: ResolvedScenario) -> InfeasibleError | None:
    """Disaggregated serving only, and a prefill plus a decode instance cannot both fit the cluster."""
    if "aggregated" in resolved.scenario.search.serving:
        return None
    per_instance = max(1, math.ceil(weight_bytes(resolved) / usable_bytes_per_gpu(resolved)))
    if 2 * per_instance <= resolved.gpus:
        return None
    return InfeasibleError(
        f"GPUs: disaggregated serving needs a prefill and a decode instance of at least {_gpus(per_instance)} each "
        f"(the weights, {weight_bytes(resolved) / GB:,.1f} GB, need {_gpus(per_instance)} of "
        f"{usable_bytes_per_gpu(resolved) / GB:,.1f} GB), {2 * per_instance} GPUs in all, but the cluster has "
        f"{resolved.gpus}; add GPUs or allow aggregated serving (search.serving)")


def no_deployment(resolved: ResolvedScenario) -> InfeasibleError:
    """Candidates exist but no deployment of them meets the TTFT target (queueing, transfers)."""
    slo = resolved.scenario.slo
    too_few = _too_few_gpus(resolved)
    if too_few is not None:
        return too_few
    if slo.ttft_ms is None:
        return InfeasibleError("GPUs: no prefill and decode instances fit the cluster's scale-up domains together; "
                               "add GPUs or allow smaller instances")
    return InfeasibleError(
        f"TTFT: no deployment meets slo.ttft_ms = {slo.ttft_ms:g} ms once prefill queueing and KV transfer "
        "are counted; relax slo.ttft_ms or add GPUs")
