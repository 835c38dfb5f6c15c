"""Prompt steps' expert all-to-all across scale-up domains, one NIC copy per remote domain (DeepEP's normal
kernels: `costmodel.collectives.dispatch_combine`, `relayed`), by hand."""

from __future__ import annotations

import pytest

from costmodel.collectives import dispatch_combine, expected_remote_domains
from costmodel.hardware import load_system
from costmodel.operators import Parallel
from costmodel.work import Transfer

H200 = load_system("h200-sxm")  # 8 GPUs per NVLink domain


def _bytes(transfers: list[Transfer], name: str, tier: str) -> float:
    return sum(t.bytes for t in transfers if t.name == name and t.tier == tier)


def test_a_token_crosses_the_nic_once_per_remote_domain_it_reaches() -> None:
    """EP 32 on four 8-GPU nodes, top-8, 4,096 tokens per GPU, fp8 dispatch and bf16 combine."""
    tokens, hidden = 4096, 7168
    found = dispatch_combine(tokens * 32, hidden, 8, Parallel(dp=32, moe_ep=32), 1.0, H200, relayed=True)
    remote_domains = 3 * (1 - (3 / 4) ** 8)  # each of the 3 other nodes holds one of 8 experts w.p. 1 - (3/4)^8
    remote_ranks = 32 * (1 - (31 / 32) ** 8) * 31 / 32  # every destination gets its copy over NVLink
    assert _bytes(found, "moe_dispatch", "nic") == pytest.approx(tokens * remote_domains * hidden)
    assert _bytes(found, "moe_combine", "nic") == pytest.approx(tokens * remote_domains * hidden * 2)
    assert _bytes(found, "moe_dispatch", "scaleup") == pytest.approx(tokens * remote_ranks * hidden)
    per_rank = dispatch_combine(tokens * 32, hidden, 8, Parallel(dp=32, moe_ep=32), 1.0, H200)
    assert _bytes(found, "moe_dispatch", "nic") < 0.55 * _bytes(per_rank, "moe_dispatch", "nic")


@pytest.mark.parametrize("ep", [16, 32, 64, 128])
@pytest.mark.parametrize("top_k", [1, 2, 4, 8])
def test_relaying_never_sends_more_over_the_nic_than_a_copy_per_remote_rank(ep: int, top_k: int) -> None:
    """At most one copy per remote-domain rank a token reaches, (ep - 8) x P(a rank is reached); exactly that with
    one expert per token (one destination: one copy either way)."""
    found = dispatch_combine(ep, 1, top_k, Parallel(dp=ep, moe_ep=ep), 1.0, H200, relayed=True)
    reached = (ep - 8) * (1 - (1 - 1 / ep) ** top_k)
    nic = _bytes(found, "moe_dispatch", "nic")
    assert nic <= reached * (1 + 1e-12)
    if top_k == 1:
        assert nic == pytest.approx(reached)


@pytest.mark.parametrize("system", ["h200-sxm", "gb200-nvl72"])
@pytest.mark.parametrize("domains", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("top_k", [1, 2, 4, 8])
def test_relaying_never_sends_more_over_the_nic_than_per_rank_sends(system: str, domains: int, top_k: int) -> None:
    """Per-rank sends put a copy on the NIC for every remote rank reached, relaying one per remote domain: never
    more, and the same at top-1 (one destination). Failed when per-rank sends took the share 1 - D/n of their
    bytes across the NIC, which counts the sender among its own peers (Llama-4's top-1 at EP 144 on NVL72 spans:
    relayed 0.5 per token against 0.497 per rank)."""
    spec = load_system(system)
    ep = domains * spec.scaleup_domain_gpus
    par = Parallel(dp=ep, moe_ep=ep)
    relayed = _bytes(dispatch_combine(ep * 64, 1, top_k, par, 1.0, spec, relayed=True), "moe_dispatch", "nic")
    per_rank = _bytes(dispatch_combine(ep * 64, 1, top_k, par, 1.0, spec), "moe_dispatch", "nic")
    assert relayed <= per_rank * (1 + 1e-12)
    if top_k == 1:
        assert relayed == pytest.approx(per_rank)


def test_within_one_domain_the_sends_are_per_rank_either_way() -> None:
    one_node = Parallel(dp=8, moe_ep=8)
    assert (dispatch_combine(8 * 512, 7168, 8, one_node, 1.0, H200, relayed=True)
            == dispatch_combine(8 * 512, 7168, 8, one_node, 1.0, H200))


def _nic_share(engine: str, role: str) -> float:
    """NIC over NVLink bytes of the expert dispatch in a prompt-carrying step of qwen3-30b (128 experts, top-8)
    at attention DP 16 and EP 16 over two 8-GPU H200 nodes."""
    from costmodel.evaluate import plan_layout
    from costmodel.layout import Layout
    from planner.scenario import scenario_from_data

    resolved = scenario_from_data({
        "schema_version": 1, "name": "relay", "model": "qwen3-30b", "engine": engine,
        "cluster": {"system": "h200-sxm", "gpus": 16}, "workload": {"input_tokens": 4096, "output_tokens": 256}})
    pools = [{"role": role, "tp": 1, "dp_attention": 16, "moe_ep": 16, "batch": 64}]
    if role == "prefill":
        pools.append({"role": "decode", "tp": 1, "dp_attention": 16, "moe_ep": 16, "batch": 64})
    layout = Layout.model_validate({"schema_version": 1, "serving": "aggregated" if role == "mixed"
                                    else "disaggregated", "pools": pools})
    plan = plan_layout(resolved, layout).pools[0]
    step = (plan.fill if role == "prefill" else plan.mixed)[0]
    return _bytes(step.transfers, "moe_dispatch", "nic") / _bytes(step.transfers, "moe_dispatch", "scaleup")


def test_steps_without_decode_tokens_relay_and_piggyback_mixed_steps_send_per_rank() -> None:
    relayed = (1 - 0.5 ** 8) / (16 * (1 - (15 / 16) ** 8) * 15 / 16)  # one remote node over all destinations
    assert _nic_share("vllm", "prefill") == pytest.approx(relayed)
    assert _nic_share("sglang", "mixed") == pytest.approx(relayed)  # prefill first: its prompt batches run alone
    # vLLM's mixed step carries the decode tokens' and the prompt chunk's sends alike: per rank, 8 of the 15
    # other GPUs on the other node
    assert _nic_share("vllm", "mixed") == pytest.approx(8 / 7)


@pytest.mark.parametrize(("domains", "expected"), [
    (2, 1 - 1 / 70),  # the other node's 4 groups all missed: C(4, 4) / C(8, 4)
    (4, 3 * (1 - 15 / 70)),  # each other node's 2 groups missed: C(6, 4) / C(8, 4)
    (8, 7 * 4 / 8),  # one group a node, 4 of 8 chosen
])
def test_node_limited_routing_reaches_the_domains_of_the_chosen_groups(domains: int, expected: float) -> None:
    """DeepSeek-V3 (8 groups, a token's top-8 from 4 of them), whole groups on each domain, by hand."""
    assert expected_remote_domains(domains, 8, 8, 4) == pytest.approx(expected)
    assert expected_remote_domains(domains, 8, 8, 4) < expected_remote_domains(domains, 8)


def test_node_limited_routing_needs_whole_groups_per_domain_and_caps_at_uniform() -> None:
    assert expected_remote_domains(16, 8, 8, 4) == expected_remote_domains(16, 8)  # groups span domains
    assert expected_remote_domains(3, 8, 8, 4) == expected_remote_domains(3, 8)  # 8 groups on 3 domains
    assert expected_remote_domains(8, 8, 8, 8) == expected_remote_domains(8, 8)  # every group allowed
    # two experts reach at most two domains, whichever groups they come from
    assert expected_remote_domains(8, 2, 8, 4) == expected_remote_domains(8, 2)


def _deepseek_pools(roles: tuple[str, str], ep: int, system: str = "h200-sxm", redundant: int = 0) -> list[int]:
    """`expert_domains` of each pool of a DeepSeek-V3 layout at attention DP and EP `ep`."""
    from costmodel.evaluate import pool_context
    from costmodel.layout import Layout
    from planner.scenario import scenario_from_data

    resolved = scenario_from_data({
        "schema_version": 1, "name": "groups", "model": "deepseek-v3", "engine": "sglang",
        "cluster": {"system": system, "gpus": 2 * ep}, "workload": {"input_tokens": 4096, "output_tokens": 256},
        "search": {"redundant_experts": redundant}})
    layout = Layout.model_validate({"schema_version": 1, "serving": "disaggregated", "pools": [
        {"role": role, "tp": 1, "dp_attention": ep, "moe_ep": ep, "batch": ep} for role in roles]})
    return [pool_context(resolved, pool).expert_domains for pool in layout.pools]


def test_prefill_pools_place_experts_by_domain_as_eplb_does() -> None:
    """EPLB's hierarchical policy where the nodes divide the groups, in prefill; the global one in decode."""
    assert _deepseek_pools(("prefill", "decode"), 64) == [8, 1]
    assert _deepseek_pools(("prefill", "decode"), 32) == [4, 1]
    assert _deepseek_pools(("prefill", "decode"), 48) == [1, 1]  # 6 nodes do not divide 8 groups
    assert _deepseek_pools(("prefill", "decode"), 128) == [1, 1]  # 16 nodes: groups span nodes
    assert _deepseek_pools(("prefill", "decode"), 32, redundant=2) == [1, 1]  # 2 replicas over 4 nodes
    assert _deepseek_pools(("prefill", "decode"), 32, redundant=32) == [4, 1]
    assert _deepseek_pools(("prefill", "decode"), 64, system="mi300x") == [1, 1]  # no relay: not priced
    assert _deepseek_pools(("prefill", "decode"), 64, system="gb200-nvl72") == [1, 1]  # one domain


def test_a_prefill_step_sends_the_node_limited_copies() -> None:
    """DeepSeek-V3's prefill pool at EP 64 on eight H200 nodes: 3.5 remote nodes a token, not 4.6."""
    from costmodel.evaluate import plan_layout
    from costmodel.layout import Layout
    from planner.scenario import scenario_from_data

    resolved = scenario_from_data({
        "schema_version": 1, "name": "groups", "model": "deepseek-v3", "engine": "sglang",
        "cluster": {"system": "h200-sxm", "gpus": 128}, "workload": {"input_tokens": 4096, "output_tokens": 256}})
    pools = [{"role": role, "tp": 1, "dp_attention": 64, "moe_ep": 64, "batch": 64} for role in ("prefill", "decode")]
    plan = plan_layout(resolved, Layout.model_validate({"schema_version": 1, "serving": "disaggregated",
                                                        "pools": pools})).pools[0]
    step = plan.fill[0]
    nic, scaleup = _bytes(step.transfers, "moe_dispatch", "nic"), _bytes(step.transfers, "moe_dispatch", "scaleup")
    remote_ranks = 64 * (1 - (63 / 64) ** 8) * 63 / 64  # every destination's copy over NVLink
    assert nic / scaleup == pytest.approx(3.5 / remote_ranks)


@pytest.mark.parametrize("domains", [2, 4, 8])
def test_node_limited_domains_bound_deepseeks_own_routing(domains: int) -> None:
    """DeepSeek-V3's gate simulated (sigmoid scores, groups ranked by their two best, top-8 of the best 4 groups'
    experts), whole groups per domain: the formula, which counts every chosen group as holding one of the
    token's experts, is never below the simulation and within 2% of it (0.984 / 2.343 / 3.469 at 200K tokens
    against 0.986 / 2.357 / 3.5)."""
    import numpy as np

    rng = np.random.default_rng(0)
    experts, groups, chosen, top_k, tokens = 256, 8, 4, 8, 20_000
    size = experts // groups
    scores = 1 / (1 + np.exp(-rng.normal(size=(tokens, experts))))
    best_two = np.sort(scores.reshape(tokens, groups, size), axis=2)[:, :, -2:].sum(axis=2)
    allowed = np.zeros((tokens, groups), bool)
    np.put_along_axis(allowed, np.argsort(-best_two, axis=1)[:, :chosen], True, axis=1)
    picked = np.argsort(-np.where(np.repeat(allowed, size, axis=1), scores, -np.inf), axis=1)[:, :top_k]
    reached = np.zeros((tokens, domains), bool)
    np.put_along_axis(reached, picked // size // (groups // domains), True, axis=1)
    sender = rng.integers(0, domains, size=tokens)
    simulated = float((reached.sum(axis=1) - reached[np.arange(tokens), sender]).mean())
    formula = expected_remote_domains(domains, top_k, groups, chosen)
    assert simulated <= formula * 1.005 and formula <= simulated * 1.02


@pytest.mark.parametrize(("system", "ep", "smallest"), [
    ("h200-sxm", 16, 8), ("h200-sxm", 12, 4), ("h200-sxm", 24, 8), ("gb200-nvl72", 128, 56), ("gb200-nvl72", 144, 72),
    ("gb200-nvl72", 256, 40),
])
def test_per_rank_sends_are_paced_by_the_smallest_domain_part(system: str, ep: int, smallest: int) -> None:
    """A group that is not a whole number of domains (128 GPUs over 72-GPU racks: 72 + 56): the GPUs of the
    partial domain have n - r of their n - 1 peers across the NIC, and every rank waits for them."""
    spec = load_system(system)
    sends = dispatch_combine(ep * 64, 1, 8, Parallel(dp=ep, moe_ep=ep), 1.0, spec)
    nic, scaleup = _bytes(sends, "moe_dispatch", "nic"), _bytes(sends, "moe_dispatch", "scaleup")
    assert nic / (nic + scaleup) == pytest.approx((ep - smallest) / (ep - 1))
    assert nic / (nic + scaleup) >= (ep - spec.scaleup_domain_gpus) / (ep - 1)  # never below whole domains'
