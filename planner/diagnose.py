"""Why a scenario has no feasible deployment, named by its binding resource."""

from __future__ import annotations

from costmodel.evaluate import pool_context
from costmodel.hardware import GB, TB
from costmodel.layout import Pool
from costmodel.memory import stage_weight_bytes
from costmodel.resolve import ResolvedScenario
from planner.errors import InfeasibleError
from planner.formulation.options import STORE_TOO_SMALL
from planner.templates import CandidateSet


def weight_bytes(resolved: ResolvedScenario) -> float:
    """All weights of the model at the scenario's precision (one copy)."""
    pool = Pool(role="decode", replicas=1, tp=1, dp_attention=1, pp=1, moe_tp=1, moe_ep=1, batch=1)
    with_mtp = resolved.scenario.workload.speculative.method == "mtp"
    return stage_weight_bytes(pool_context(resolved, pool), 0, with_mtp)


def no_candidates(resolved: ResolvedScenario, candidates: CandidateSet) -> InfeasibleError:
    """No instance layout survives HBM and SLO pruning: say which limit binds."""
    slo, fastest = resolved.scenario.slo, candidates.fastest_ms
    if not fastest:  # nothing fits in HBM
        need, hbm = weight_bytes(resolved), resolved.gpus * resolved.system.hbm_capacity_bytes
        if need > hbm:
            return InfeasibleError(
                f"HBM: the weights need {need / TB:.2f} TB but the cluster's {resolved.gpus} GPUs hold "
                f"{hbm / TB:.2f} TB; use more GPUs or smaller formats (precision.weights / precision.experts)")
        return InfeasibleError(
            f"HBM: no instance layout the search allows fits (largest tried: {candidates.instance_gpus} GPUs, "
            f"{hbm / resolved.gpus / GB:.0f} GB each; the weights need {need / GB:.0f} GB plus KV cache and "
            "workspace); allow larger instances (search.tp, dp_attention, pp), shorter contexts or fp8 KV cache")
    if slo.tpot_ms is not None and fastest.get("tpot", 0.0) > slo.tpot_ms:
        return InfeasibleError(f"TPOT: the SLO asks for {slo.tpot_ms:g} ms but the fastest layout that fits "
                               f"gives {fastest['tpot']:.1f} ms; relax slo.tpot_ms or add GPUs")
    if slo.ttft_ms is not None and fastest.get("ttft", 0.0) > slo.ttft_ms:
        return InfeasibleError(f"TTFT: the SLO asks for {slo.ttft_ms:g} ms but the fastest layout that fits "
                               f"gives {fastest['ttft']:.1f} ms; relax slo.ttft_ms or add GPUs")
    store = resolved.scenario.cluster.kv_store
    if store is not None and candidates.pruned.get(STORE_TOO_SMALL):
        return InfeasibleError(
            f"KV store: the {candidates.pruned[STORE_TOO_SMALL]} layouts that park idle session contexts in the "
            f"shared store need more than it holds or serves ({store.capacity_bytes / TB:.2f} TB, "
            f"{store.bandwidth_bytes_per_s / GB:.0f} GB/s) even as one instance, and no layout without it meets "
            "the targets; enlarge cluster.kv_store or relax the SLOs")
    return InfeasibleError("no layout meets both the TTFT and TPOT targets at once; relax slo.ttft_ms or slo.tpot_ms")


def no_deployment(resolved: ResolvedScenario) -> InfeasibleError:
    """Candidates exist but no deployment of them meets the TTFT target (queueing, transfers)."""
    slo = resolved.scenario.slo
    if slo.ttft_ms is None:
        return InfeasibleError("GPUs: no prefill and decode instances fit the cluster's scale-up domains together; "
                               "add GPUs or allow smaller instances")
    return InfeasibleError(
        f"TTFT: no deployment meets slo.ttft_ms = {slo.ttft_ms:g} ms once prefill queueing and KV transfer "
        "are counted; relax slo.ttft_ms or add GPUs")
