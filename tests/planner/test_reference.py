"""Candidates, placement, Pareto utilities and the exhaustive reference front."""

from __future__ import annotations

import pytest

from costmodel.calibration import default_calibration
from costmodel.evaluate import evaluate
from costmodel.layout import Layout
from costmodel.resolve import ResolvedScenario
from planner.pareto import FrontPoint, additive_epsilon, dominates, hypervolume, non_dominated
from planner.placement import Domains, cluster_domains, fits, max_replicas
from planner.reference import exhaustive_front
from planner.scenario import load_scenario, scenario_from_data
from planner.templates import generate
from tests.conftest import SCENARIOS

LAYOUT = Layout.model_validate({"serving": "aggregated", "pools": [{"role": "mixed", "batch": 1}]})


def point(ttft: float, throughput: float, gpus: int = 8) -> FrontPoint:
    return FrontPoint(ttft, 10.0, throughput, gpus, LAYOUT)


def small(serving: list[str], **slo: float) -> ResolvedScenario:
    return scenario_from_data({
        "schema_version": 1, "name": "s", "model": "qwen3-30b", "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "cluster": {"system": "h200-sxm", "gpus": 8}, "workload": {"input_tokens": 2048, "output_tokens": 256},
        "slo": slo, "search": {"serving": serving, "pp": [1], "dp_attention": [1, 2]},
    })


def test_non_dominated_keeps_the_staircase() -> None:
    points = [point(10, 100), point(20, 90), point(20, 300), point(30, 300, gpus=4), point(30, 300), point(5, 50)]
    front = non_dominated(points)
    assert [(p.ttft_ms, p.tokens_per_s_per_gpu) for p in front] == [(5, 50), (10, 100), (20, 300)]
    assert dominates(point(10, 100), point(20, 90)) and not dominates(point(10, 100), point(10, 100))


def test_hypervolume_and_epsilon_by_hand() -> None:
    front = [point(10, 100), point(20, 300)]
    # (20-10) x 100 + (40-20) x 300 with the reference at TTFT 40 ms, throughput 0
    assert hypervolume(front, 40.0) == pytest.approx(10 * 100 + 20 * 300)
    assert additive_epsilon(front, front) == 0.0
    worse = [point(10, 50), point(20, 150)]
    assert additive_epsilon(worse, front) == pytest.approx(150 / 300)


def test_domains_and_packing() -> None:
    gb200 = scenario_from_data({"schema_version": 1, "name": "g", "model": "qwen3-30b",
                                "cluster": {"system": "gb200-nvl72", "gpus": 80},
                                "workload": {"input_tokens": 10, "output_tokens": 10}})
    domains = cluster_domains(gb200)
    assert domains.bins == (72, 8)  # one full NVL72 domain and 8 GPUs of a second rack
    assert fits([(16, 4), (8, 1)], domains) and not fits([(16, 5)], domains)
    assert fits([(32, 2), (8, 2)], domains) and not fits([(32, 2), (8, 3)], domains)
    assert max_replicas(16, domains) == 4 and max_replicas(8, Domains(8, 2)) == 2
    assert max_replicas(144, Domains(72, 2)) == 1 and max_replicas(144, domains) == 0


def test_exhaustive_front_points_are_reproduced_by_evaluate() -> None:
    resolved = small(["aggregated", "disaggregated"], tpot_ms=50)
    calibration = default_calibration()
    front = exhaustive_front(resolved, generate(resolved, calibration), calibration)
    assert len(front) > 5
    assert {p.layout.serving for p in front} == {"aggregated", "disaggregated"}
    ttfts = [p.ttft_ms for p in front]
    throughputs = [p.tokens_per_s_per_gpu for p in front]
    assert ttfts == sorted(ttfts) and throughputs == sorted(throughputs)
    for p in front:
        prediction = evaluate(resolved, p.layout)
        assert prediction.gpus == p.gpus <= resolved.gpus
        assert prediction.feasible
        assert (prediction.ttft_ms, prediction.tpot_ms, prediction.tokens_per_s_per_gpu) == pytest.approx(
            (p.ttft_ms, p.tpot_ms, p.tokens_per_s_per_gpu_used), rel=1e-9)
        assert p.tpot_ms <= 50


def test_slo_cuts_the_front() -> None:
    calibration = default_calibration()
    loose = small(["aggregated"])
    tight = small(["aggregated"], ttft_ms=100)
    loose_front = exhaustive_front(loose, generate(loose, calibration), calibration)
    tight_front = exhaustive_front(tight, generate(tight, calibration), calibration)
    assert max(p.ttft_ms for p in loose_front) > 100 >= max(p.ttft_ms for p in tight_front)
    assert [p for p in loose_front if p.ttft_ms <= 100] == tight_front


@pytest.mark.parametrize("name", ["deepseek-v3-8xh200", "gpt-oss-120b-8xb200", "qwen3-235b-16xh100"])
def test_example_scenarios_have_feasible_candidates(name: str) -> None:
    resolved = load_scenario(SCENARIOS / f"{name}.yaml")
    candidates = generate(resolved, default_calibration())
    for role, found in candidates.by_role.items():
        assert found, role
        for candidate in found:
            assert candidate.timing.plan.memory.fits
            assert candidate.gpus <= resolved.gpus
            if role != "prefill" and resolved.scenario.slo.tpot_ms is not None:
                assert candidate.timing.tpot_s * 1e3 <= resolved.scenario.slo.tpot_ms


def test_divisible_packing_is_exact_against_the_search() -> None:
    from itertools import product

    from planner.placement import _fill_bins

    for domains in (Domains(72, 2), Domains(72, 1, (8,)), Domains(40, 1, (24, 24)), Domains(8, 1, (7, 5, 3))):
        for counts in product(range(4), repeat=3):
            items = tuple((size, count) for size, count in zip((32, 16, 8), counts, strict=True) if count)
            assert fits(items, domains) == (_fill_bins(items, domains.bins) is not None), (domains, items)
    assert fits([(16, 4), (32, 64)], Domains(72, 64))  # many domains: no exhaustive search
