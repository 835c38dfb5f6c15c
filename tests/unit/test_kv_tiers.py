"""Multi-turn sessions: tier sizing by hand, fetch time in TTFT, pauses pushing contexts down a tier."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from costmodel.errors import ScenarioError
from costmodel.evaluate import evaluate
from costmodel.hardware import load_system, with_overrides
from costmodel.kv_tiers import DRAM_USABLE, SSD_USABLE, fetch_s_per_token, plan_tiers, store_use, turn_context
from costmodel.layout import Layout
from costmodel.scenario import KvStore, Sessions, Workload
from costmodel.serving import RequestShape
from planner.scenario import scenario_from_data

GB = 1e9
KV_PER_TOKEN = 70e3  # bytes: about a 61-layer MLA model at bf16


def sessions(**changes: Any) -> Sessions:
    base = {"arrival_rate_per_s": 1.0, "turns": 11, "system_prompt_tokens": 10_000, "think_time_s": 10.0,
            "pause_probability": 0.0, "pause_s": 600.0}
    return Sessions.model_validate({**base, **changes})


def test_turn_shape_and_populations_by_hand() -> None:
    assert turn_context(sessions(), 1000, 200) == 10_000 + 11 * 1200 / 2  # S + T (i + o) / 2
    turn = RequestShape.of(Workload.model_validate({"input_tokens": 1000, "output_tokens": 200,
                                                     "sessions": sessions().model_dump()}))
    assert turn.new == 1000 and turn.fetch == ()  # new tokens per turn; no tiers yet: all in HBM
    system = load_system("h200-sxm")
    # 11 turns/s over 8 GPUs: 10 gaps/s x 10 s thinking = 100 idle sessions over 8 GPUs, 16,600 tokens each
    plan = plan_tiers(sessions(), 1000, 200, KV_PER_TOKEN, system, turns_per_s_per_gpu=11 / 8, hbm_free_bytes=1e15)
    per_gpu = 100 / 8 * 16_600 * KV_PER_TOKEN
    assert plan.stored_bytes["hbm"] == pytest.approx(per_gpu)
    assert plan.turn_shares == pytest.approx({"hbm": 1.0, "host_dram": 0.0, "ssd": 0.0, "store": 0.0,
                                              "recompute": 0.0})
    assert plan.turns_per_s_per_gpu == pytest.approx(11 / 8)


def test_a_context_that_fits_only_in_dram_is_fetched_from_dram() -> None:
    system = load_system("h200-sxm")
    plan = plan_tiers(sessions(), 1000, 200, KV_PER_TOKEN, system, turns_per_s_per_gpu=11 / 8, hbm_free_bytes=0.0)
    assert plan.turn_shares["host_dram"] == pytest.approx(10 / 11)  # every turn after the first
    assert plan.turn_shares["hbm"] == pytest.approx(1 / 11)  # first turns: the system prompt prefix
    assert plan.capacity_bytes["host_dram"] == pytest.approx(DRAM_USABLE * system.host_dram_bytes_per_node / 8)
    fetch = plan.fetch_bytes_per_s(KV_PER_TOKEN)
    assert fetch["host_dram"] == pytest.approx(10 / 11 * 16_600 * KV_PER_TOKEN * 11 / 8)


def test_doubling_the_pause_moves_sessions_to_a_lower_tier() -> None:
    system = load_system("h200-sxm")
    dram = DRAM_USABLE * system.host_dram_bytes_per_node / system.gpus_per_node
    # paused sessions sized to fill about 80% of DRAM per GPU at the shorter pause
    each = 16_600 * KV_PER_TOKEN
    pause = 0.8 * dram * 8 / (10 * 0.5 * each)
    short = plan_tiers(sessions(pause_probability=0.5, pause_s=pause, think_time_s=0.0), 1000, 200, KV_PER_TOKEN,
                       system, turns_per_s_per_gpu=11 / 8, hbm_free_bytes=0.0)
    long = plan_tiers(sessions(pause_probability=0.5, pause_s=2 * pause, think_time_s=0.0), 1000, 200,
                      KV_PER_TOKEN, system, turns_per_s_per_gpu=11 / 8, hbm_free_bytes=0.0)
    assert short.turn_shares["ssd"] == 0.0 and long.turn_shares["ssd"] > 0.0
    assert long.turn_shares["host_dram"] < short.turn_shares["host_dram"]


def agent(**session_changes: Any) -> dict[str, Any]:
    return {"schema_version": 1, "name": "agent", "model": "deepseek-v3",
            "precision": {"weights": "fp8", "experts": "fp4", "kv_cache": "fp8"},
            "cluster": {"system": "gb200-nvl72", "racks": 1},
            "workload": {"input_tokens": 2000, "output_tokens": 500,
                         "sessions": {"arrival_rate_per_s": 0.2, "turns": 40, "system_prompt_tokens": 50_000,
                                      "think_time_s": 20.0, **session_changes}}}


LAYOUT = Layout.model_validate({"serving": "aggregated", "pools": [
    {"role": "mixed", "replicas": 9, "tp": 1, "dp_attention": 8, "pp": 1, "moe_tp": 1, "moe_ep": 8, "batch": 64}]})


def test_dram_fetch_time_enters_ttft() -> None:
    hot = evaluate(scenario_from_data(agent()), LAYOUT)
    # 7.5 turns/s leave 0.5 TB of thinking contexts; 30 times longer thinking: 15 TB, but 5.7 TB of HBM is
    # left free and 13.8 TB of DRAM is there: about three fifths wait in DRAM
    cold = evaluate(scenario_from_data(agent(think_time_s=600.0)), LAYOUT)
    assert hot.kv_tiers is not None and cold.kv_tiers is not None
    assert hot.kv_tiers["hit_rates"]["hbm"] == pytest.approx(1.0)
    assert cold.kv_tiers["hit_rates"]["host_dram"] > 0.5
    assert hot.kv_tiers["fetch_share_of_ttft"] == 0.0 < cold.kv_tiers["fetch_share_of_ttft"]
    assert cold.ttft_ms > hot.ttft_ms
    assert cold.kv_tiers["fetch_gb_per_s"]["host_dram"] > 0


def test_single_turn_workloads_have_no_tier_report() -> None:
    data = agent()
    data["workload"] = {"input_tokens": 2000, "output_tokens": 500}
    assert evaluate(scenario_from_data(data), LAYOUT).kv_tiers is None


def test_a_tier_slower_than_recomputing_is_recomputed() -> None:
    system = with_overrides(load_system("h200-sxm"), {"ssd_bandwidth_bytes_per_s_per_node": 1e6})  # 1 MB/s
    plan = plan_tiers(sessions(pause_probability=1.0, think_time_s=0.0, pause_s=1e6), 1000, 200, KV_PER_TOKEN,
                      system, turns_per_s_per_gpu=11 / 8, hbm_free_bytes=0.0, recompute_s_per_token=1e-5)
    assert plan.recomputed_tiers == ("ssd",) and plan.turn_shares["ssd"] == 0.0
    assert plan.turn_shares["recompute"] > 0.0


def test_idle_contexts_follow_the_fill_pools_rate() -> None:
    """Little's law: twice the turns per GPU leave twice the idle KV per GPU."""
    system = load_system("h200-sxm")
    one = plan_tiers(sessions(), 1000, 200, KV_PER_TOKEN, system, turns_per_s_per_gpu=1.0, hbm_free_bytes=1e15)
    two = plan_tiers(sessions(), 1000, 200, KV_PER_TOKEN, system, turns_per_s_per_gpu=2.0, hbm_free_bytes=1e15)
    # 1 turn/s: 10/11 gaps/s x 10 s = 100/11 sessions thinking, 16,600 tokens each
    assert one.stored_bytes["hbm"] == pytest.approx(100 / 11 * 16_600 * KV_PER_TOKEN)
    assert two.stored_bytes["hbm"] == pytest.approx(2 * one.stored_bytes["hbm"])


def test_the_shared_store_takes_what_local_tiers_cannot_hold() -> None:
    system = with_overrides(load_system("h200-sxm"), {"ssd_capacity_bytes_per_node": 1e9})
    paused = sessions(pause_probability=1.0, think_time_s=0.0, pause_s=1e5)
    local = plan_tiers(paused, 1000, 200, KV_PER_TOKEN, system, turns_per_s_per_gpu=1.0, hbm_free_bytes=0.0)
    shared = plan_tiers(paused, 1000, 200, KV_PER_TOKEN, system, turns_per_s_per_gpu=1.0, hbm_free_bytes=0.0,
                        store=True)
    idle = 10 / 11 * 1e5 * 16_600 * KV_PER_TOKEN  # bytes per GPU, all paused
    local_bytes = DRAM_USABLE * system.host_dram_bytes_per_node / 8 + SSD_USABLE * 1e9 / 8
    assert shared.stored_bytes["store"] == pytest.approx(idle - local_bytes)
    assert shared.turn_shares["store"] == pytest.approx(10 / 11 * (idle - local_bytes) / idle)
    assert local.turn_shares["recompute"] == pytest.approx(shared.turn_shares["store"])
    assert shared.turn_shares["recompute"] == 0.0
    # fetched over the NIC: the store's share of the fetches, at the GPU's NIC speed per token
    fetch = shared.fetch_bytes_per_s(KV_PER_TOKEN)["store"]
    assert fetch == pytest.approx(shared.turn_shares["store"] * 16_600 * KV_PER_TOKEN * 1.0)
    assert fetch_s_per_token(system, KV_PER_TOKEN)["store"] == KV_PER_TOKEN / system.nic_bandwidth_bytes_per_s


def test_store_use_scales_with_the_pool_and_breaches_name_the_store() -> None:
    system = load_system("h200-sxm")
    plan = plan_tiers(sessions(pause_probability=1.0, think_time_s=0.0, pause_s=1e6), 1000, 200, KV_PER_TOKEN,
                      system, turns_per_s_per_gpu=1.0, hbm_free_bytes=0.0, store=True)
    use = store_use(plan, KV_PER_TOKEN, 16)
    assert use.bytes == pytest.approx(16 * plan.stored_bytes["store"])
    roomy = KvStore(capacity_bytes=2 * use.bytes, bandwidth_bytes_per_s=2 * use.bytes_per_s)
    assert use.breach(roomy) is None and use.most_within(roomy) == pytest.approx(2.0)
    small = KvStore(capacity_bytes=use.bytes / 2, bandwidth_bytes_per_s=2 * use.bytes_per_s)
    assert "KV store" in (use.breach(small) or "") and "TB" in (use.breach(small) or "")
    narrow = KvStore(capacity_bytes=2 * use.bytes, bandwidth_bytes_per_s=use.bytes_per_s / 2)
    assert "GB/s" in (use.breach(narrow) or "")
    assert "cluster.kv_store" in (use.breach(None) or "")


def test_evaluate_refuses_a_store_the_cluster_lacks_or_cannot_fill() -> None:
    paused = {"think_time_s": 20.0, "pause_probability": 0.5, "pause_s": 36_000.0}
    parked = LAYOUT.model_copy(update={"pools": [LAYOUT.pools[0].model_copy(update={"kv_store": True})]})
    with pytest.raises(ScenarioError, match=r"cluster\.kv_store"):
        evaluate(scenario_from_data(agent(**paused)), parked)
    data = agent(**paused)
    data["cluster"]["kv_store"] = {"capacity_bytes": 1e12, "bandwidth_bytes_per_s": 1e12}
    small = evaluate(scenario_from_data(data), parked)
    assert not small.feasible and any(r.startswith("KV store: the idle contexts need") for r in small.reasons)
    assert small.kv_tiers is not None and small.kv_tiers["hit_rates"]["store"] > 0.0
    data["cluster"]["kv_store"] = {"capacity_bytes": 1e16, "bandwidth_bytes_per_s": 1e12}
    roomy = evaluate(scenario_from_data(data), parked)
    recomputing = evaluate(scenario_from_data(data), LAYOUT)
    assert roomy.feasible and roomy.kv_tiers is not None and recomputing.kv_tiers is not None
    assert roomy.kv_tiers["hit_rates"]["recompute"] == 0.0 < recomputing.kv_tiers["hit_rates"]["recompute"]
    assert roomy.ttft_ms < recomputing.ttft_ms  # fetching over the NIC beats recomputing the context


def test_turn_lengths_enter_as_their_means() -> None:
    kinds = [{"share": 0.75, "input_tokens": 1000, "output_tokens": 100},
             {"share": 0.25, "input_tokens": 5000, "output_tokens": 900}]
    workload = Workload.model_validate({"sessions": {**sessions().model_dump(exclude={"turn_lengths"}),
                                                     "turn_lengths": kinds}})
    assert (workload.input_tokens, workload.output_tokens) == (2000, 300)
    with pytest.raises(ValueError, match="omit input_tokens or make it 2000"):
        Workload.model_validate({"input_tokens": 1000, "sessions": {"arrival_rate_per_s": 1.0, "turns": 3,
                                                                    "turn_lengths": kinds}})
    with pytest.raises(ValueError, match=r"add up to 0\.5"):
        Sessions.model_validate({"arrival_rate_per_s": 1.0, "turns": 3, "turn_lengths": kinds[1:] + kinds[1:]})
    with pytest.raises(ValidationError) as bad:  # one error, in sessions: no "input_tokens missing" beside it
        Workload.model_validate({"sessions": {"arrival_rate_per_s": 1.0, "turns": 3,
                                              "turn_lengths": kinds[1:] + kinds[1:]}})
    assert [error["loc"] for error in bad.value.errors()] == [("sessions",)]
