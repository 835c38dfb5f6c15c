"""Economics of front points: hand-computed prices, power and HBM figures, overrides, and the outputs."""

from __future__ import annotations

import copy
import csv
import io
import json
from typing import Any

import pytest

from costmodel.calibration import default_calibration
from costmodel.economics import (
    hbm_use,
    mixed_phase_seconds,
    point_economics,
    rates,
    tokens_per_s_per_mw,
    usd_per_million_tokens,
)
from costmodel.evaluate import evaluate, plan_layout
from costmodel.layout import Layout
from costmodel.pricing import DirectPricer
from costmodel.serving import time_pool
from planner.scenario import scenario_from_data
from tests.helpers import run_cli

GB = 1e9
QWEN: dict[str, Any] = {
    "schema_version": 1, "name": "qwen-econ", "model": "qwen3-30b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
    "cluster": {"system": "h200-sxm", "gpus": 8}, "workload": {"input_tokens": 2048, "output_tokens": 256},
    "slo": {"tpot_ms": 50}, "search": {"pp": [1], "dp_attention": [1, 2], "max_batch": 48, "time_limit_s": 30},
}


def _layout(serving: str, pools: list[dict[str, Any]]) -> Layout:
    return Layout.model_validate({"serving": serving, "pools": pools})


def test_price_and_power_by_hand() -> None:
    # $3.60 per GPU-hour at 100 tokens/s per GPU: 360,000 tokens an hour for $3.60, $10 per million
    assert usd_per_million_tokens(100.0, 3.6) == pytest.approx(10.0)
    # 100 tokens/s per GPU at 2 kW per GPU: 500 GPUs per MW, 50,000 tokens/s per MW
    assert tokens_per_s_per_mw(100.0, 2000.0) == pytest.approx(50_000.0)
    with pytest.raises(ValueError):
        usd_per_million_tokens(0.0, 3.6)


def test_default_rates_and_overrides() -> None:
    resolved = scenario_from_data({**QWEN, "cluster": {"system": "b200-sxm", "gpus": 8}})
    rate = rates(resolved.system, resolved.scenario.economics)
    assert rate.usd_per_gpu_hour == pytest.approx(68.80 / 8)  # CoreWeave HGX B200 list, per GPU
    # DGX B200: 14.3 kW for 8 GPUs of 1,000 W TDP -> 787.5 W of the rest per GPU; x PUE 1.3
    assert rate.facility_w_per_gpu == pytest.approx((1000.0 + 787.5) * 1.3)
    assert "CoreWeave" in rate.usd_source and "DGX B200" in rate.power_source
    overridden = scenario_from_data({**QWEN, "cluster": {"system": "b200-sxm", "gpus": 8,
                                                         "overrides": {"power_w": 800.0}},
                                     "economics": {"usd_per_gpu_hour": {"b200-sxm": 4.0, "h100-sxm": 1.0},
                                                   "node_w_per_gpu": 500, "pue": 1.1}})
    rate = rates(overridden.system, overridden.scenario.economics)
    assert rate.usd_per_gpu_hour == 4.0 and rate.usd_source == "scenario override"
    assert rate.facility_w_per_gpu == pytest.approx((800.0 + 500.0) * 1.1)
    single = scenario_from_data({**QWEN, "economics": {"usd_per_gpu_hour": 2.5}})
    assert rates(single.system, single.scenario.economics).usd_per_gpu_hour == 2.5


def test_bad_economics_is_exit_2_with_line(tmp_path: Any) -> None:
    import yaml

    for economics, field in (({"pue": 0.5}, "economics.pue"),
                             ({"usd_per_gpu_hour": {"b200": 3.0}}, "economics.usd_per_gpu_hour.b200"),
                             ({"usd_per_gpu_hour": -1.0}, "economics.usd_per_gpu_hour")):
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({**QWEN, "economics": economics}, sort_keys=False))
        result = run_cli("validate", str(path))
        assert result.code == 2, result.err
        line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("economics"))
        assert f"{path}:" in result.err and field in result.err
        assert any(f"{path}:{n}:" in result.err for n in range(line, line + 3)), result.err


def test_hbm_of_an_aggregated_layout_with_idle_gpus() -> None:
    resolved = scenario_from_data(QWEN)
    layout = _layout("aggregated", [{"role": "mixed", "replicas": 2, "tp": 2, "dp_attention": 1, "pp": 1,
                                     "moe_tp": 1, "moe_ep": 2, "batch": 32}])
    prediction = evaluate(resolved, layout)
    pool = prediction.pools[0]
    used_gb, capacity_gb = pool["memory_per_gpu_gb"]["total"], pool["memory_per_gpu_gb"]["capacity"]
    use = hbm_use(resolved, layout, ((resolved.system, 8),), default_calibration())
    # 4 GPUs hold the layout, 4 of the 8 paid for stay idle: their HBM is all stranded
    assert use.capacity_utilisation == pytest.approx(4 * used_gb / (8 * capacity_gb))
    assert use.stranded_bytes / GB == pytest.approx(8 * capacity_gb - 4 * used_gb)
    # bandwidth: a time-weighted mean of the mixed and decode-only steps, over the 8 GPUs
    mixed = pool["mixed"]["utilisation"]["hbm_bandwidth"]
    decode = pool["decode"]["utilisation"]["hbm_bandwidth"]
    pricer = DirectPricer(resolved.system, default_calibration(), resolved.scenario.engine)
    timing = time_pool(plan_layout(resolved, layout, pricer).pools[0], pricer)
    mixed_s, decode_s = mixed_phase_seconds(timing)
    assert mixed_s + decode_s == pytest.approx(timing.cycle_s)  # the cost model's round, as priced
    busy = (mixed_s * mixed + decode_s * decode) / (mixed_s + decode_s)
    assert use.bandwidth_utilisation == pytest.approx(4 * busy / 8)
    assert min(mixed, decode) * 0.5 <= use.bandwidth_utilisation <= max(mixed, decode) * 0.5
    # the same layout paid only for the GPUs it holds
    held = hbm_use(resolved, layout, ((resolved.system, 4),), default_calibration())
    assert held.capacity_utilisation == pytest.approx(used_gb / capacity_gb)
    with pytest.raises(ValueError):
        hbm_use(resolved, layout, ((resolved.system, 2),), default_calibration())


def test_hbm_bandwidth_of_a_disaggregated_layout_counts_the_prefill_pools_idle_time() -> None:
    resolved = scenario_from_data(QWEN)
    pools = [{"role": "prefill", "replicas": 2, "tp": 1, "dp_attention": 1, "pp": 1, "moe_tp": 1, "moe_ep": 1,
              "batch": 1},
             {"role": "decode", "replicas": 1, "tp": 2, "dp_attention": 1, "pp": 1, "moe_tp": 1, "moe_ep": 2,
              "batch": 16}]
    layout = _layout("disaggregated", pools)
    prediction = evaluate(resolved, layout)
    prefill, decode = prediction.pools
    # requests/s of the deployment, from its tokens/s: what the prefill pool must fill
    rate = prediction.tokens_per_s_per_gpu * layout.gpus / 256
    pricer = DirectPricer(resolved.system, default_calibration(), resolved.scenario.engine)
    fill = time_pool(plan_layout(resolved, layout, pricer).pools[0], pricer)
    busy = rate / (2 * fill.requests_per_s)
    assert 0 < busy < 1
    expected = (2 * busy * prefill["fill"]["utilisation"]["hbm_bandwidth"]
                + 2 * decode["decode"]["utilisation"]["hbm_bandwidth"]) / 4
    paid = ((resolved.system, 4),)
    assert hbm_use(resolved, layout, paid, default_calibration()).bandwidth_utilisation == pytest.approx(expected)


def test_solve_json_csv_and_table_carry_economics(tmp_path: Any) -> None:
    import yaml

    path = tmp_path / "qwen.yaml"
    path.write_text(yaml.safe_dump(QWEN, sort_keys=False))
    result = run_cli("solve", str(path), "--format", "json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["objective"] == "tokens_per_gpu"
    price = data["economics"]["usd_per_gpu_hour"]
    watts = data["economics"]["facility_w_per_gpu"]
    assert watts == pytest.approx((700.0 + 575.0) * 1.3)  # H200 TDP + DGX H200's rest, PUE 1.3
    for point in data["front"]:
        rate = point["tokens_per_s_per_gpu"]  # per cluster GPU: 8 are paid for
        assert point["usd_per_million_tokens"] == pytest.approx(price / (rate * 3600) * 1e6)
        assert point["tokens_per_s_per_mw"] == pytest.approx(rate * 1e6 / watts)
        assert point["economics"]["paid_gpus"] == 8
        assert point["economics"]["usd_per_hour"] == pytest.approx(8 * price)
        assert 0 < point["economics"]["hbm_capacity_utilisation"] <= 1
        assert 0 < point["economics"]["hbm_bandwidth_utilisation"] <= 1
        assert point["economics"]["stranded_hbm_gb"] >= 0
    rows = list(csv.DictReader(io.StringIO(run_cli("solve", str(path), "--format", "csv").out)))
    assert [float(r["usd_per_million_tokens"]) for r in rows] == pytest.approx(
        [p["usd_per_million_tokens"] for p in data["front"]], rel=1e-5)
    table = run_cli("solve", str(path)).out
    assert "$/Mtok" in table and "tok/s/MW" in table and "$8.60" not in table and "h200-sxm GPU-hour" in table


def test_used_accounting_pays_for_the_gpus_held() -> None:
    from planner.api import solve

    data = copy.deepcopy(QWEN)
    data["search"]["gpu_accounting"] = "used"
    data["economics"] = {"usd_per_gpu_hour": 2.0}
    front = solve(scenario_from_data(data))
    for point in front.points:
        entry = point.data
        assert entry["economics"]["paid_gpus"] == entry["gpus"]
        assert entry["usd_per_million_tokens"] == pytest.approx(2.0 / (entry["tokens_per_s_per_gpu_used"] * 3600) * 1e6)
    resolved = scenario_from_data(data)
    first = front.points[0]
    direct = point_economics(resolved, first.layout, first.tokens_per_s_per_gpu, ((resolved.system, first.gpus),),
                             default_calibration())
    assert direct.usd_per_million_tokens == pytest.approx(first.data["usd_per_million_tokens"])


def test_an_inventory_of_two_systems_prices_each_at_its_own_rate() -> None:
    """Cluster accounting pays for every available GPU of both groups, each at its system's price and power."""
    data = {**QWEN, "cluster": {"inventory": [{"name": "old", "system": "h100-sxm", "gpus": 8},
                                              {"name": "new", "system": "h200-sxm", "gpus": 8}]}}
    resolved = scenario_from_data(data)
    layout = _layout("aggregated", [{"role": "mixed", "group": "new", "replicas": 2, "tp": 2, "dp_attention": 1,
                                     "pp": 1, "moe_tp": 1, "moe_ep": 2, "batch": 32}])
    h100, h200 = (group.system for group in resolved.groups)
    paid = ((h100, 8), (h200, 8))
    economics = point_economics(resolved, layout, 100.0, paid, default_calibration())
    usd = 8 * 49.24 / 8 + 8 * 50.44 / 8  # CoreWeave HGX H100 and H200 lists, per GPU-hour
    assert economics.usd_per_hour == pytest.approx(usd)
    # 100 tokens/s per GPU over 16 GPUs: 5.76 M tokens an hour
    assert economics.usd_per_million_tokens == pytest.approx(usd / (100.0 * 16 * 3600) * 1e6)
    watts = 8 * (700 + 575) * 1.3 * 2  # both DGX generations: 700 W GPUs, 575 W of the rest per GPU
    assert economics.facility_kw == pytest.approx(watts / 1e3)
    pool = evaluate(resolved, layout).pools[0]["memory_per_gpu_gb"]
    capacity = 8 * h100.hbm_capacity_bytes + 8 * h200.hbm_capacity_bytes
    assert economics.hbm.capacity_utilisation == pytest.approx(4 * pool["total"] * GB / capacity)
    assert pool["capacity"] * GB == pytest.approx(h200.hbm_capacity_bytes)  # the pool sits on the H200 group
