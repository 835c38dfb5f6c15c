"""The unit table (cluster accounting): P_max from the packing rows equals the exact packer's largest
count, and the table holds the front of every (prefill, P, decode, D) deployment by brute force."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from costmodel.calibration import default_calibration
from costmodel.hardware import load_system
from costmodel.inventory import ClusterGroup
from planner.formulation.options import DeploymentOptions, deployment_options
from planner.formulation.pairs import pair_figures
from planner.formulation.units import TableEntries, UnitTable, join_tables, most_beside, unit_table
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



@pytest.mark.parametrize(("system", "gpus", "unavailable"), [
    ("gb200-nvl72", 144, ()), ("gb200-nvl72", 144, ((1, 17, 2),)), ("h200-sxm", 24, ((0, 1, 3),))])
def test_fill_counts_are_the_packers_largest(system: str, gpus: int,
                                             unavailable: tuple[tuple[int, int, int], ...]) -> None:
    """Sizes that do not all divide each other (12, 24 and 36 beside powers of two): each fill count is the
    largest the exact packer accepts beside each decode count, whether the pair's own sizes divide (the
    packing rows, exact there, are taken as they are) or not (lowered until the packer accepts)."""
    from planner.formulation.units import _prefill_counts

    group = ClusterGroup("g", load_system(system), gpus, frozenset(unavailable))
    domains = group_domains(group)
    options = _options("qwen3-30b-4xh200")
    sizes = [4, 8, 12, 24, 36, 48]
    prefill = [replace(options.prefill[0], gpus=size, most=10**6) for size in sizes]
    options = replace(options, domains=domains)
    for size_d in (8, 12, 16, 72):
        counts = np.arange(1, gpus // size_d + 1)
        found = _prefill_counts(options, prefill, size_d, counts, divisible=False)
        for row, size in enumerate(sizes):
            for col, count_d in enumerate(counts.tolist()):
                most = 0
                while fits([(size, most + 1), (size_d, count_d)], domains):
                    most += 1
                if not fits([(size_d, count_d)], domains):
                    most = 0
                assert found[row, col] == most, (size, size_d, count_d)


def _entries(table: UnitTable) -> list[tuple[float, float, int, int, int, int]]:
    return sorted(zip(table.ttft.tolist(), table.rate.tolist(), table.prefill.tolist(), table.prefills.tolist(),
                      table.decode.tolist(), table.decodes.tolist(), strict=True))


def same_table(joined: UnitTable, fresh: UnitTable) -> bool:
    """A table joined from a search's rounds against one built afresh: every fresh entry in it, and what else it
    holds near-ties of fresh ones (within KEEP_TOL of a fresh entry's rate at no more TTFT: a fill the fresh
    build's dominance cut drops, `undominated_fills`, stays where its round lacked the fill dominating it)."""
    from planner.formulation.units import KEEP_TOL

    ours, theirs = _entries(joined), _entries(fresh)
    extra = set(ours) - set(theirs)
    return set(theirs) <= set(ours) and all(
        any(t <= ttft * (1 + 1e-12) and r >= rate * (1 - KEEP_TOL) for t, r, *_ in theirs) for ttft, rate, *_ in extra)


@pytest.mark.parametrize("name", ["qwen3-30b-4xh200", "gpt-oss-20b-4xb200-sglang", "qwen3-30b-16xh100-prefix-cache",
                                  "llama-8b-dense-6xh100-disaggregated",
                                  "kimi-k2-72xgb200"])  # one rack: fills timed in later rounds prune earlier ones
def test_the_batch_search_leaves_the_sweep_its_table(name: str) -> None:
    """The batch search joins the unit tables of its rounds into the table of the options it returns, which the
    sweep then takes as it is: the entries of the table built afresh (fills pruned since are dropped: on one
    GB200 rack 21 entries of 737), and at most near-ties of them besides (`same_table`)."""
    from benchmarks.suite import scenario_data
    from planner.batches import refine
    from planner.formulation.units import _unit_table, first_cap

    scenario = scenario_from_data(scenario_data(name) if name == "kimi-k2-72xgb200" else small_data(name))
    calibration = default_calibration()
    options, coverage = refine(scenario, calibration, generate(scenario, calibration), math.inf, 0.01)
    cap = first_cap(scenario)
    assert coverage.rounds >= 1 and cap in options.unit_tables
    joined, fresh = unit_table(options, cap), _unit_table(options, cap)
    assert joined is options.unit_tables[cap]
    assert joined is not None and fresh is not None and same_table(joined, fresh)


def test_tables_are_not_joined_across_kv_sizes_under_link_limits() -> None:
    """Where the KV transfer takes the NICs, a part's link limits used its own fills' largest KV: a part that
    took another one is not joined (the sweep builds the table afresh)."""
    options = _options("qwen3-30b-4xh200")
    table = _unit_table_of(options)
    part = TableEntries.of(table, options)
    linked = replace(options, links={(1, 1): (1e9, 1e9)})
    assert join_tables(linked, [part], None) and linked.unit_tables[None] is not None
    other = replace(options, links={(1, 1): (1e9, 1e9)})
    assert not join_tables(other, [replace(part, kv_bytes=part.kv_bytes / 2)], None)
    assert None not in other.unit_tables
    assert join_tables(replace(options), [replace(part, kv_bytes=part.kv_bytes / 2)], None)  # no links: no limit


def _unit_table_of(options: DeploymentOptions) -> UnitTable:
    table = unit_table(options, None)
    assert table is not None
    return table


def test_a_search_cut_by_its_deadline_leaves_the_whole_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut at every point of its rounds (a clock that ticks once a reading): the options returned carry the
    table of all their fills and decode options, those timed after the last front included."""
    import itertools

    import planner.batches as batches
    from planner.formulation.units import _unit_table, first_cap

    scenario = scenario_from_data(small_data("gpt-oss-20b-4xb200-sglang"))
    calibration = default_calibration()
    cap = first_cap(scenario)
    cut_late = 0
    for ticks in range(2, 60, 3):
        clock = itertools.count()
        monkeypatch.setattr(batches.time, "perf_counter", lambda clock=clock: float(next(clock)))
        candidates = generate(scenario, calibration)
        options, coverage = batches.refine(scenario, calibration, candidates, float(ticks), 0.0)
        monkeypatch.undo()
        cut_late += coverage.cut_by_time and coverage.rounds >= 1
        joined, fresh = options.unit_tables.get(cap), _unit_table(options, cap)
        assert joined is not None and fresh is not None and same_table(joined, fresh), ticks
    assert cut_late  # some cut came after a round's batches were timed


@pytest.mark.parametrize("cohort", [0.0, 0.4, 1.0])
def test_the_fills_dropped_are_never_faster_beside_any_decode_option(cohort: float) -> None:
    """`undominated_fills` keeps, at each count, a fill as fast as the fastest beside every decode option
    (concurrency C, decoding time Z), whatever caps the rate: its loads, the links' limits, or nothing."""
    from planner.formulation.units import undominated_fills

    rng = np.random.default_rng(11)
    conc, away = rng.integers(1, 400, 60).astype(float)[:, None], rng.uniform(0.05, 60.0, 60)[:, None]
    dropped = 0
    for _ in range(40):
        n, cols = 50, 5
        fill, transfer = rng.uniform(0.02, 3.0, n), rng.choice([0.0, 0.004, 0.03], n)
        count = rng.integers(0, 6, (n, cols))
        cap = rng.uniform(0.2, 30.0, n)[:, None] * count
        load = rng.choice([1.0, 0.9, 0.5], n)
        limit = rng.choice([np.inf, 4.0, 40.0], (n, cols))
        admitted = np.minimum(cap, np.minimum(load[:, None] * cap, limit))
        keep = undominated_fills(fill + transfer, cap, admitted, count >= 1)
        assert not (keep & (count < 1)).any()
        dropped += int((count >= 1).sum() - keep.sum())
        for col in range(cols):
            fastest = []
            for rows in (count[:, col] >= 1, keep[:, col]):
                ttft, _ = pair_figures(cap[rows, col][None], fill[rows][None], transfer[rows][None], conc, away,
                                       cohort, load[rows][None], limit[rows, col][None])
                fastest.append(ttft.min(axis=1) if rows.any() else np.full(conc.size, np.inf))
            assert fastest[1] == pytest.approx(fastest[0], rel=1e-12)
    assert dropped > 0.5 * 40 * 50 * 5 * 5 / 6  # most fills are dominated: the cut is worth its keep
