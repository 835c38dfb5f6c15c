"""The unit table (cluster accounting): P_max from the packing rows equals the exact packer's largest
count, and the table holds the front of every (prefill, P, decode, D) deployment by brute force."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.calibration import default_calibration
from costmodel.hardware import load_system
from costmodel.inventory import ClusterGroup
from planner.formulation.options import DeploymentOptions, deployment_options
from planner.formulation.pairs import pair_figures
from planner.formulation.units import most_beside, unit_table
from planner.pareto import TIE_REL
from planner.placement import assign, fits, group_domains
from planner.scenario import scenario_from_data
from planner.templates import generate
from tests.planner.small_scenarios import small_data


def _options(name: str, **cluster: object) -> DeploymentOptions:
    data = small_data(name)
    data["cluster"] = {**data["cluster"], **cluster}
    scenario = scenario_from_data(data)
    calibration = default_calibration()
    return deployment_options(scenario, generate(scenario, calibration), calibration)


def _placeable(group: ClusterGroup, items: list[tuple[int, int]]) -> bool:
    try:
        assign([size for size, count in items for _ in range(count)], group)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(("system", "gpus", "unavailable"), [
    ("h200-sxm", 16, ()), ("gb200-nvl72", 72, ()), ("gb200-nvl72", 144, ()), ("h200-sxm", 20, ()),
    ("h200-sxm", 72, ((0, 1, 3), (1, 0, 0))), ("gb200-nvl72", 144, ((1, 17, 2),))])
def test_most_beside_matches_the_placer(system: str, gpus: int, unavailable: tuple[tuple[int, int, int], ...]) -> None:
    """Powers of two in domains of 8 or 72 GPUs, whole and partial domains and racks, failed GPUs, instances
    wider than a domain or a rack: the packing rows' counts equal what first-fit placement achieves."""
    group = ClusterGroup("g", load_system(system), gpus, frozenset(unavailable))
    domains = group_domains(group)
    sizes = np.array([1, 2, 4, 8, 16, 32, 64, 128])
    for size_d in (1, 4, 8, 32, 128):
        counts = np.arange(1, gpus // size_d + 2)
        most = most_beside(sizes, size_d, counts, domains)
        for row, size in enumerate(sizes):
            for col, count_d in enumerate(counts):
                brute = 0
                while _placeable(group, [(int(size), brute + 1), (size_d, int(count_d))]):
                    brute += 1
                if not _placeable(group, [(size_d, int(count_d))]):
                    brute = 0
                assert most[row, col] == brute, (size, size_d, count_d)


@pytest.mark.parametrize("name", ["qwen3-30b-16xh100-prefix-cache", "gpt-oss-20b-4xb200-sglang"])
def test_the_table_holds_the_front_of_every_count(name: str) -> None:
    options = _options(name)
    table = unit_table(options, None)
    assert table is not None
    best: list[tuple[float, float]] = []
    for p in options.prefill:
        for d in options.decode:
            for count_d in range(1, d.most + 1):
                for count_p in range(1, p.most + 1):
                    if not fits([(p.gpus, count_p), (d.gpus, count_d)], options.domains):
                        continue
                    ttft, rate = pair_figures(np.array(p.capacity * count_p), np.array(p.fill_s),
                                              np.array(options.kv_transfer_s[(p.gpus, d.gpus)]),
                                              np.array(float(d.slots * count_d)), np.array(d.decoding_s),
                                              options.cohort_fraction)
                    best.append((float(ttft), float(rate)))
    best.sort(key=lambda x: (x[0], -x[1]))
    front, top = [], -np.inf
    for ttft, rate in best:
        if rate > top * (1 + TIE_REL):
            front.append((ttft, rate))
            top = rate
    for ttft, rate in front:  # the table's best within each front point's TTFT reaches its rate
        entry = table.best_within(ttft * (1 + 1e-12))
        assert entry is not None and table.rate[entry] >= rate * (1 - 1e-9)
    for ttft, rate in zip(table.ttft, table.rate, strict=True):  # and nothing beyond what exists
        assert any(t <= ttft * (1 + 1e-12) and r >= rate * (1 - 1e-9) for t, r in front)

