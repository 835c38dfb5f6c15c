"""Pricing step work: one work at a time (with a per-operator breakdown), or many at once with numpy.

Both follow the overlap rules of `costmodel.work`; a test checks they agree. The vectorised form lets
calibration fitting re-price the work of every measurement thousands of times without rebuilding it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from costmodel.calibration import Calibration, generation_of
from costmodel.hardware import SystemSpec
from costmodel.work import TERMS, StepTime, StepWork, price

_TIERS = ("scaleup", "nic", "host", "storage")
_TERM_OF_TIER = (2, 3, 4, 5)  # index into TERMS


class Pricer(Protocol):
    """Turns step work into step time; knows the system, engine and calibration."""

    @property
    def calibration(self) -> Calibration: ...

    @property
    def engine(self) -> str: ...

    def price(self, work: StepWork) -> StepTime: ...


@dataclass(frozen=True)
class DirectPricer:
    """Prices each work as it comes, with a per-operator breakdown."""

    system: SystemSpec
    calibration: Calibration
    engine: str

    def price(self, work: StepWork) -> StepTime:
        return price(work, self.system, self.calibration, self.engine)


class WorkTable:
    """Many step works flattened into arrays, each tagged with its system and engine."""

    def __init__(self, works: Sequence[StepWork], systems: Sequence[SystemSpec], engines: Sequence[str]) -> None:
        self.works = list(works)
        self.index = {id(work): i for i, work in enumerate(self.works)}
        self.systems = list(systems)
        self.engines = list(engines)
        ops = [(i, op) for i, work in enumerate(self.works) for op in work.ops]
        self.op_work = np.array([i for i, _ in ops], dtype=np.int64)
        self.op_gemm = np.array([op.op_class == "gemm" for _, op in ops], dtype=bool)
        self.op_flops = np.array([op.flops for _, op in ops])
        self.op_bytes = np.array([op.hbm_bytes for _, op in ops])
        self.op_peak = np.array([op.peak_flops_per_s for _, op in ops])
        transfers = [(i, t) for i, work in enumerate(self.works) for t in work.transfers]
        self.tr_work = np.array([i for i, _ in transfers], dtype=np.int64)
        self.tr_tier = np.array([_TIERS.index(t.tier) for _, t in transfers], dtype=np.int64)
        self.tr_bytes = np.array([t.bytes for _, t in transfers])
        self.tr_calls = np.array([t.calls for _, t in transfers])
        self.layers = np.array([work.layers for work in self.works], dtype=float)
        self.generations = [generation_of(system) for system in self.systems]
        self.hbm_bw = np.array([s.hbm_bandwidth_bytes_per_s for s in self.systems])
        self.tier_bw = np.array([_raw_tier_bandwidths(s) for s in self.systems])  # (works, tiers)

    def price(self, calibration: Calibration) -> np.ndarray:
        """Seconds per term (columns in TERMS order) for every work."""
        n = len(self.works)
        gen = [calibration.generations[g] for g in self.generations]
        gemm_eff = np.array([g.gemm_efficiency for g in gen])[self.op_work]
        attn_eff = np.array([g.attention_efficiency for g in gen])[self.op_work]
        hbm_bw = (self.hbm_bw * np.array([g.hbm_efficiency for g in gen]))[self.op_work]
        t_compute = self.op_flops / (self.op_peak * np.where(self.op_gemm, gemm_eff, attn_eff))
        t_memory = self.op_bytes / hbm_bw
        terms = np.zeros((n, len(TERMS)))
        compute_bound = t_compute >= t_memory
        terms[:, 0] = np.bincount(self.op_work, np.where(compute_bound, t_compute, 0.0), minlength=n)
        terms[:, 1] = np.bincount(self.op_work, np.where(compute_bound, 0.0, t_memory), minlength=n)
        efficiency = np.array([calibration.scaleup_efficiency] + [calibration.nic_efficiency] * 3)
        bandwidth = self.tier_bw[self.tr_work, self.tr_tier] * efficiency[self.tr_tier]
        seconds = self.tr_bytes / bandwidth + self.tr_calls * calibration.collective_latency_s
        for tier, column in enumerate(_TERM_OF_TIER):
            mask = self.tr_tier == tier
            terms[:, column] = np.bincount(self.tr_work[mask], seconds[mask], minlength=n)
        engines = [calibration.engine(e) for e in self.engines]
        terms[:, 6] = (self.layers * np.array([e.layer_overhead_s for e in engines])
                       + np.array([e.step_overhead_s for e in engines]))
        return terms


def _raw_tier_bandwidths(system: SystemSpec) -> tuple[float, float, float, float]:
    ssd = system.ssd_bandwidth_bytes_per_s_per_node / system.gpus_per_node
    return (system.scaleup_bandwidth_bytes_per_s, system.nic_bandwidth_bytes_per_s,
            system.host_link_bandwidth_bytes_per_s, min(ssd, system.host_link_bandwidth_bytes_per_s))


@dataclass(frozen=True)
class TablePricer:
    """Looks up works priced in bulk by a WorkTable (no per-operator breakdown)."""

    table: WorkTable
    terms: np.ndarray
    calibration: Calibration
    engine: str

    def price(self, work: StepWork) -> StepTime:
        row = self.terms[self.table.index[id(work)]]
        return StepTime(terms=dict(zip(TERMS, row.tolist(), strict=True)), by_name={})
