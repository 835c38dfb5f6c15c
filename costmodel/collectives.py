"""Bytes each GPU moves in the collectives of one layer, on the link tier they really cross.

Tier rule: a group of n GPUs whose placement keeps it inside one scale-up domain of D GPUs talks over
NVLink/xGMI; a larger group spans ceil(n/D) domains, whole ones first (the planner's first-fit placement)
and the remainder r = n mod D in one more. An all-to-all's bytes go to the n - 1 other GPUs evenly; the
ranks step together, so the GPUs with the most peers across the NIC set the pace: those of the smallest
domain part, with the share (n - r)/(n - 1) (r = D for whole domains: (n - D)/(n - 1); 128 GPUs over
72-GPU racks, 72 + 56: 72/127). A ring all-reduce across domains keeps the share 1 - D/n (its hops, a
rough rule: NCCL's rings and trees per NIC are not modelled). Relayed sends (`dispatch_combine`) count
ceil(n/D) domains as equal. The planner places groups inside domains whenever they fit; this module
assumes that placement.
Both tiers' times are added (a conservative choice: engines overlap them only partly).
"""

from __future__ import annotations

import math

from costmodel.hardware import SystemSpec
from costmodel.operators import Parallel
from costmodel.work import CollectiveKind, Tier, Transfer


def split_by_tier(name: str, kind: CollectiveKind, group: int, bytes_per_gpu: float, calls: float,
                  system: SystemSpec, ranks: int = 0) -> list[Transfer]:
    """Transfers of a collective among `group` GPUs, split between scale-up and scale-out; `ranks`: the
    group size a transfer inside one domain keeps (`Transfer.ranks`)."""
    if group <= 1 or bytes_per_gpu <= 0:
        return []
    domain = system.scaleup_domain_gpus
    if group <= domain:
        return [Transfer(name, "scaleup", bytes_per_gpu, calls, kind, ranks)]
    smallest = group % domain or domain  # GPUs of the group's last, partial domain (if any)
    remote = (group - smallest) / (group - 1) if kind == "alltoall" else 1.0 - domain / group
    return [
        Transfer(name, "scaleup", bytes_per_gpu * (1.0 - remote), calls, kind),
        Transfer(name, "nic", bytes_per_gpu * remote, calls, kind),
    ]


def all_reduce(name: str, ranks: int, payload_bytes: float, system: SystemSpec) -> list[Transfer]:
    """All-reduce among `ranks` GPUs, counted as ring bytes (each rank sends 2 (n-1)/n of the payload).
    Inside a scale-up domain the transfer keeps its rank count, and pricing takes the fastest algorithm
    engines choose among by message size (`costmodel.pricing.ALL_REDUCE_ALGORITHMS`); across domains, ring."""
    return split_by_tier(name, "allreduce", ranks, 2.0 * (ranks - 1) / ranks * payload_bytes, 1.0, system, ranks)


def expected_remote_ranks(ep: int, top_k: int) -> float:
    """Distinct other EP ranks a token is sent to when its top_k experts fall uniformly on `ep` ranks."""
    if ep <= 1:
        return 0.0
    distinct = ep * (1.0 - (1.0 - 1.0 / ep) ** top_k)
    return distinct * (ep - 1) / ep


def expected_remote_domains(domains: int, top_k: int, groups: int = 1, groups_per_token: int = 0) -> float:
    """Distinct scale-up domains other than the sender's that a token reaches when its top_k experts fall
    uniformly on `domains` equal domains.

    Group-limited routing with whole groups per domain (`costmodel.routing.placement_domains`: each domain holds
    G / domains of the G groups; a token's experts come from g of them): a domain is reached when one of its
    groups is among the token's, 1 - C(G - G/domains, g) / C(G, g), the token's groups falling evenly on the
    groups. Assumed: every chosen group holds one of its experts (DeepSeek-V3 ranks groups by their two best
    experts' scores, so a chosen group's best expert nearly always makes the top_k: its gate simulated with
    i.i.d. scores puts an expert in 3.97 of the 4, and reaches 3.47 remote domains of 7 where this gives 3.5,
    `tests/unit/test_relayed_dispatch.py`); never more than the uniform figure (a top_k below g cannot reach
    every chosen group). DeepSeek-V3 (G 8, g 4, top-8) over 8 domains: 3.5 remote domains a token, against
    4.6 under uniform routing; over 4: 2.4 against 2.7."""
    if domains <= 1:
        return 0.0
    uniform = (domains - 1) * (1.0 - (1.0 - 1.0 / domains) ** top_k)
    if not (0 < groups_per_token < groups and groups % domains == 0):
        return uniform
    held = groups // domains
    missed = math.comb(groups - held, groups_per_token) / math.comb(groups, groups_per_token)
    return min(uniform, (domains - 1) * (1.0 - missed))


def dispatch_combine(group_tokens: float, hidden: int, top_k: int, par: Parallel, dispatch_bytes: float,
                     system: SystemSpec, relayed: bool = False, groups: tuple[int, int] = (1, 0)) -> list[Transfer]:
    """MoE all-to-all under attention data parallelism: each GPU sends its share of the group's tokens
    to the EP ranks holding their experts (each of the moe_tp slices needs a copy), in `dispatch_bytes`
    per element, and receives the results back in bf16 (combine).

    `relayed` (prompt steps with no decode tokens beside them, on NVIDIA GPUs): an expert-parallel group
    wider than a scale-up domain sends each token once per remote domain over the NIC, to one GPU there that
    forwards it over NVLink to the ranks holding its experts, and combine reduces there before the one
    return trip: DeepEP's normal (prefill) kernels (K01: 43-58 GB/s of RDMA per H800 at EP16-64, near CX7's
    50 GB/s, counting those deduplicated bytes).
    Assumption: prefill pools and prefill-first engines' prompt batches run such kernels wherever the group
    spans domains (SGLang's DeepEP `auto` mode does for its prefill batches; vLLM's prefill instances take
    `deepep_high_throughput`); a piggyback engine's mixed steps carry decode tokens and keep per-rank sends.
    Every destination still receives its copy over NVLink (conservative: a relay that is itself a destination
    needs none). Decode steps keep the per-rank sends of the low-latency kernels, which go to each destination
    rank directly. `groups`: (G, g) of a group-limited model whose groups the pool places by domain
    (`costmodel.routing.placement_domains`), which caps the remote domains a relayed token reaches
    (`expected_remote_domains`); (1, 0) otherwise. Per-rank sends keep the uniform spread (conservative: a
    token's experts in fewer groups reach no more ranks)."""
    if par.dp <= 1:
        return []  # tokens are already on every rank; the tp all-reduce combines the outputs
    tokens_per_gpu = group_tokens / par.stage_gpus
    destinations = expected_remote_ranks(par.moe_ep, top_k) * par.moe_tp + (par.moe_tp - 1)
    elements = tokens_per_gpu * destinations * hidden
    domain = system.scaleup_domain_gpus
    if relayed and par.moe_tp == 1 and par.stage_gpus > domain:
        reached = expected_remote_domains(math.ceil(par.stage_gpus / domain), top_k, *groups)
        remote = tokens_per_gpu * reached * hidden
        return [Transfer("moe_dispatch", "scaleup", elements * dispatch_bytes, 1.0, "alltoall"),
                Transfer("moe_dispatch", "nic", remote * dispatch_bytes, 1.0, "alltoall"),
                Transfer("moe_combine", "scaleup", elements * 2.0, 1.0, "alltoall"),
                Transfer("moe_combine", "nic", remote * 2.0, 1.0, "alltoall")]
    return (split_by_tier("moe_dispatch", "alltoall", par.stage_gpus, elements * dispatch_bytes, 1.0, system)
            + split_by_tier("moe_combine", "alltoall", par.stage_gpus, elements * 2.0, 1.0, system))


def pipeline_hop(tokens_per_rank: float, hidden: int, par: Parallel, activation_bytes: float,
                 system: SystemSpec) -> list[Transfer]:
    """Activations passed to the next stage; each tp rank sends its 1/tp share. Stages of an instance
    larger than a domain are placed one domain apart (NIC)."""
    if par.pp <= 1:
        return []
    tier: Tier = "scaleup" if par.instance_gpus <= system.scaleup_domain_gpus else "nic"
    return [Transfer("pipeline_send", tier, tokens_per_rank * hidden * activation_bytes / par.tp, 1.0, "p2p")]
