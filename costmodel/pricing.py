"""Pricing step work with a calibration: the one place where work becomes time.

Overlap rules (see `costmodel.work`): per operator the roofline max of compute and HBM time; operators,
transfers and fixed overheads add. Works are flattened into numpy arrays, so pricing one work (with a
per-operator breakdown, for reports) and re-pricing every measurement's work thousands of times (for
calibration fitting) run the same code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from costmodel.calibration import Calibration, EngineFactors, generation_of
from costmodel.hardware import SystemSpec
from costmodel.precision import Dtype
from costmodel.work import TERMS, CollectiveKind, StepTime, StepWork

_TIERS = ("scaleup", "nic", "host", "storage")
_TIER_TERM = (2, 3, 4, 5)  # column of each tier in TERMS
_KINDS: tuple[CollectiveKind, ...] = ("allreduce", "alltoall", "p2p")
_DTYPES = tuple(Dtype)
_DTYPE_INDEX = {d: i for i, d in enumerate(_DTYPES)}
_TIER_INDEX = {t: i for i, t in enumerate(_TIERS)}
_KIND_INDEX = {k: i for i, k in enumerate(_KINDS)}

# All-reduce algorithms inside a scale-up domain, as (bytes sent relative to ring's 2 (n-1)/n of the payload,
# sequential steps per call, each paying the call latency), for n ranks. Engines pick by message size
# (TRT-LLM AllReduceStrategy AUTO, vLLM custom all-reduce, NCCL's tuner); pricing takes the fastest, so the
# time is concave and nondecreasing in the message size.
# - one-shot: every rank sends its whole payload to every peer, (n-1) P = ring bytes x n/2, one step;
# - two-shot: reduce-scatter then all-gather over direct links, ring bytes, two steps;
# - ring: ring bytes, 2 (n-1) steps;
# - NVLS (NVLink SHARP, NVIDIA switches only): the switch reduces; all-reduce bus bandwidth about 480 GB/s
#   against ring's 360 on H100 (NVIDIA developer blog on NCCL 2.17 NVLS, 2023): ring bytes x 360/480, two steps.
ALL_REDUCE_ALGORITHMS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "one_shot": (lambda n: n / 2.0, lambda n: np.ones_like(n)),
    "two_shot": (lambda n: np.ones_like(n), lambda n: 2.0 * np.ones_like(n)),
    "ring": (lambda n: np.ones_like(n), lambda n: 2.0 * (n - 1.0)),
    "nvls": (lambda n: 0.75 * np.ones_like(n), lambda n: 2.0 * np.ones_like(n)),
}


def grouped_gemm_share(rows: np.ndarray, ridge_rows: np.ndarray, efficiency: np.ndarray,
                       load_exposed: float) -> np.ndarray:
    """Share of its format's GEMM efficiency a grouped GEMM (MoE routed experts) reaches when each expert's
    weights serve `rows` rows (tile padding included; 0: not a grouped GEMM, share 1). Each expert's weight
    tiles are loaded for its own rows only, and a short group cannot hide the load behind its few MMAs:
    the share `load_exposed` (k) of the load, at peak HBM bandwidth, adds to the multiplies. Time per
    expert 2 rows params / (P e) + k params b / B (peak P FLOP/s at GEMM efficiency e, b bytes per weight,
    B bytes/s), so the share is rows / (rows + k e ridge_rows), with the ridge point in rows
    P b / (2 B) where loading an expert's weights takes as long as multiplying them at peak: about 200-330
    rows on H100, H200 and B200 in every format (the peak grows as the element narrows). The exposed load
    depends on the HBM bandwidth alone, so a GPU with more of every resource is never slower. k = 0: the
    load hidden (the roofline max alone); 1: not overlapped at all; up to 1 / HBM efficiency (1.3-2): not
    overlapped at the bandwidth streaming kernels reach. DeepGEMM grouped FP8 GEMMs on H800 (K06, ridge
    295 rows) reach 1346/1214 TFLOPS with 8192 rows per group, 1233/925 with 1024 and 932/815 with 256,
    against 1520 for its best dense shape (e = 0.77): shares 0.8-0.9, 0.6-0.8 and 0.54-0.61, about what
    k = 0.7-1.0 gives for short groups (k = 0.85: 0.97, 0.84, 0.56), which most serving steps' experts
    are. k is fitted (`costmodel.fitting`)."""
    if load_exposed <= 0:
        return np.ones_like(rows)
    grouped = rows > 0
    return np.where(grouped, rows / np.where(grouped, rows + load_exposed * efficiency * ridge_rows, 1.0), 1.0)


class Pricer(Protocol):
    """Turns step work into step time; knows the system, engine and calibration."""

    @property
    def calibration(self) -> Calibration: ...

    @property
    def engine(self) -> str: ...

    def price(self, work: StepWork) -> StepTime: ...

    def on(self, system: SystemSpec) -> Pricer:
        """This pricer for works run on `system` (a pool of another inventory group)."""
        ...


class WorkTable:
    """Many step works flattened into arrays, each tagged with its system and engine."""

    def __init__(self, works: Sequence[StepWork], systems: Sequence[SystemSpec], engines: Sequence[str]) -> None:
        self.works = list(works)
        self.systems = list(systems)
        self.index = {id(work): i for i, work in enumerate(self.works)}
        self.engines = list(engines)
        # engine factors are looked up once per distinct engine and spread by this index (`_per_engine`)
        self.engine_names = sorted(set(self.engines))
        positions = {name: i for i, name in enumerate(self.engine_names)}
        self.engine_of = np.fromiter(map(positions.__getitem__, self.engines), dtype=np.int64, count=len(self.engines))
        # a table's works run on a few systems: what depends on the system only is looked up once per system
        system_index = _first_seen(self.systems)
        distinct = list({id(system): system for system in self.systems}.values())
        self.system_of = system_index  # each work's distinct system
        self.system_generations = [generation_of(system) for system in distinct]
        self.generations = [self.system_generations[i] for i in system_index.tolist()]  # each work's
        # operators and transfers are named tuples: transposed by zip, their fields become columns
        ops = [op for work in self.works for op in work.ops]
        self.op_work = np.repeat(np.arange(len(self.works), dtype=np.int64), [len(w.ops) for w in self.works])
        names, classes, flops, hbm_bytes, peaks, dtypes, group_bytes = zip(*ops, strict=True) if ops else ((),) * 7
        self.op_names = list(names)
        self.op_gemm = np.fromiter(map("gemm".__eq__, classes), dtype=bool, count=len(classes))
        self.op_dtype = np.fromiter(map(_DTYPE_INDEX.__getitem__, dtypes), dtype=np.int64, count=len(dtypes))
        self.op_flops = np.array(flops, dtype=float)
        self.op_bytes = np.array(hbm_bytes, dtype=float)
        self.op_peak = np.array(peaks, dtype=float)
        # rows each weight of a grouped GEMM serves (0: not a grouped GEMM): 2 x rows x params FLOPs over
        # params x element bytes read
        element = np.array(group_bytes, dtype=float)
        self.op_group_rows = np.where((element > 0) & (self.op_bytes > 0),
                                      self.op_flops * element / (2.0 * np.maximum(self.op_bytes, 1e-300)), 0.0)
        transfers = [t for work in self.works for t in work.transfers]
        self.tr_work = np.repeat(np.arange(len(self.works), dtype=np.int64), [len(w.transfers) for w in self.works])
        names, tiers, sizes, calls, kinds, ranks = zip(*transfers, strict=True) if transfers else ((),) * 6
        self.tr_names = list(names)
        self.tr_tier = np.fromiter(map(_TIER_INDEX.__getitem__, tiers), dtype=np.int64, count=len(tiers))
        self.tr_kind = np.fromiter(map(_KIND_INDEX.__getitem__, kinds), dtype=np.int64, count=len(kinds))
        self.tr_bytes = np.array(sizes, dtype=float)
        self.tr_calls = np.array(calls, dtype=float)
        self.tr_ranks = np.array(ranks, dtype=float)
        nvls = np.array([s.vendor == "nvidia" and s.scaleup_topology == "switch" for s in distinct], dtype=bool)
        self.tr_nvls = nvls[system_index[self.tr_work]] if transfers else np.zeros(0, dtype=bool)
        self.layers = np.array([work.layers for work in self.works], dtype=float)
        self.moe_layers = np.array([work.moe_layers for work in self.works], dtype=float)
        self.mla_layers = np.array([work.mla_layers for work in self.works], dtype=float)
        self.weight_only_layers = np.array([work.weight_only_layers for work in self.works], dtype=float)
        self.seqs = np.array([work.seqs for work in self.works], dtype=float)
        self.hbm_bw = np.array([s.hbm_bandwidth_bytes_per_s for s in distinct], dtype=float)[system_index]
        # a grouped GEMM's ridge point in rows: peak x bytes per weight / (2 x HBM bytes/s) (`grouped_gemm_share`)
        self.op_ridge_rows = self.op_peak * element / (2.0 * self.hbm_bw[self.op_work])
        self.tier_bw = np.array([_tier_bandwidths(s) for s in distinct], dtype=float).reshape(len(distinct), 4)[
            system_index]

    def op_seconds(self, calibration: Calibration) -> tuple[np.ndarray, np.ndarray]:
        """(seconds, compute-bound?) of every operator."""
        factors = [calibration.generations[g] for g in self.system_generations]  # per distinct system
        gemm = np.array([[f.gemm(d) for d in _DTYPES] for f in factors]).reshape(len(factors), len(_DTYPES))[
            self.system_of]
        attention = np.array([f.attention_efficiency for f in factors])[self.system_of]
        hbm = self.hbm_bw * np.array([f.hbm_efficiency for f in factors])[self.system_of]
        efficiency = np.where(self.op_gemm, gemm[self.op_work, self.op_dtype], attention[self.op_work])
        efficiency = efficiency * grouped_gemm_share(self.op_group_rows, self.op_ridge_rows, efficiency,
                                                     calibration.grouped_gemm_load_exposed)
        t_compute = self.op_flops / (self.op_peak * efficiency)
        t_memory = self.op_bytes / hbm[self.op_work]
        return np.maximum(t_compute, t_memory), t_compute >= t_memory

    def transfer_seconds(self, calibration: Calibration) -> np.ndarray:
        kinds = [calibration.collectives[k] for k in _KINDS]
        scaleup = np.array([k.efficiency for k in kinds])[self.tr_kind]
        efficiency = np.where(self.tr_tier == _TIER_INDEX["scaleup"], scaleup, calibration.nic_efficiency)
        latency = np.array([k.latency_s for k in kinds])[self.tr_kind]
        bandwidth = self.tier_bw[self.tr_work, self.tr_tier] * efficiency
        # every call across the NIC pays the RDMA hop beyond its kind's latency (host and storage links do not)
        latency = latency + np.where(self.tr_tier == _TIER_INDEX["nic"], calibration.nic_latency_s, 0.0)
        seconds = self.tr_bytes / bandwidth + self.tr_calls * latency
        grouped = self.tr_ranks > 1
        if grouped.any():
            n, size, calls = self.tr_ranks[grouped], self.tr_bytes[grouped] / bandwidth[grouped], self.tr_calls[grouped]
            options = [share(n) * size + steps(n) * calls * latency[grouped]
                       for name, (share, steps) in ALL_REDUCE_ALGORITHMS.items() if name != "nvls"]
            nvls_share, nvls_steps = ALL_REDUCE_ALGORITHMS["nvls"]
            nvls = np.where(self.tr_nvls[grouped], nvls_share(n) * size + nvls_steps(n) * calls * latency[grouped],
                            np.inf)
            seconds[grouped] = np.minimum(np.min(options, axis=0), nvls)
        return np.asarray(seconds)

    def overlapped_transfer_seconds(self, calibration: Calibration, busy: np.ndarray) -> np.ndarray:
        """Transfer seconds left after engines hide part of the expert all-to-all behind compute
        (two-batch overlap): hidden = overlap x min(all-to-all time, compute and HBM time) per step."""
        moved = self.transfer_seconds(calibration)
        alltoall = self.tr_kind == _KINDS.index("alltoall")
        total = np.bincount(self.tr_work[alltoall], moved[alltoall], minlength=len(self.works))
        overlap = self._per_engine(calibration, lambda e: e.alltoall_overlap)
        hidden = overlap * np.minimum(total, busy)
        keep = 1.0 - hidden / np.where(total > 0, total, 1.0)
        return np.asarray(np.where(alltoall, moved * keep[self.tr_work], moved))

    def _per_engine(self, calibration: Calibration, factor: Callable[[EngineFactors], float]) -> np.ndarray:
        """One engine factor of each work, looked up once per distinct engine."""
        values = np.array([factor(calibration.engine(name)) for name in self.engine_names], dtype=float)
        return values[self.engine_of]

    def price(self, calibration: Calibration) -> np.ndarray:
        """Seconds per term (columns in TERMS order) for every work."""
        return self.priced(calibration)[0]

    def priced(self, calibration: Calibration) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(seconds per term for every work, seconds of every operator, seconds of every transfer)."""
        n = len(self.works)
        seconds, compute_bound = self.op_seconds(calibration)
        terms = np.zeros((n, len(TERMS)))
        terms[:, 0] = np.bincount(self.op_work, np.where(compute_bound, seconds, 0.0), minlength=n)
        terms[:, 1] = np.bincount(self.op_work, np.where(compute_bound, 0.0, seconds), minlength=n)
        moved = self.overlapped_transfer_seconds(calibration, terms[:, 0] + terms[:, 1])
        for tier, column in enumerate(_TIER_TERM):
            mask = self.tr_tier == tier
            terms[:, column] = np.bincount(self.tr_work[mask], moved[mask], minlength=n)
        engine = functools.partial(self._per_engine, calibration)
        terms[:, 6] = (self.layers * engine(lambda e: e.layer_overhead_s)
                       + self.moe_layers * engine(lambda e: e.moe_layer_overhead_s)
                       + self.mla_layers * engine(lambda e: e.mla_layer_overhead_s)
                       + self.weight_only_layers * engine(lambda e: e.weight_only_layer_overhead_s)
                       + engine(lambda e: e.step_overhead_s)
                       + self.seqs * engine(lambda e: e.seq_overhead_s))
        return terms, seconds, moved


def _first_seen(items: Sequence[object]) -> np.ndarray:
    """Each item's index among the distinct items (by identity), in order of first appearance."""
    seen: dict[int, int] = {}
    return np.fromiter((seen.setdefault(id(item), len(seen)) for item in items), dtype=np.int64, count=len(items))


def _tier_bandwidths(system: SystemSpec) -> tuple[float, float, float, float]:
    """Raw bytes/s per GPU of each tier; local SSDs are shared by the GPUs of a node."""
    return (system.scaleup_bandwidth_bytes_per_s, system.nic_bandwidth_bytes_per_s,
            system.host_link_bandwidth_bytes_per_s, system.ssd_bandwidth_bytes_per_s_per_gpu)


def price(work: StepWork, system: SystemSpec, calibration: Calibration, engine: str) -> StepTime:
    """Time of one step, with seconds per operator and transfer name."""
    table = WorkTable([work], [system], [engine])
    all_terms, seconds, moved = table.priced(calibration)
    terms = all_terms[0]
    by_name: dict[str, float] = {}
    for name, value in zip(table.op_names + table.tr_names, np.concatenate([seconds, moved]).tolist(), strict=True):
        by_name[name] = by_name.get(name, 0.0) + value
    by_name["fixed_overheads"] = float(terms[6])
    return StepTime(terms=dict(zip(TERMS, terms.tolist(), strict=True)), by_name=by_name)


@dataclass(frozen=True)
class DirectPricer:
    """Prices each work as it comes, with a per-operator breakdown."""

    system: SystemSpec
    calibration: Calibration
    engine: str

    def price(self, work: StepWork) -> StepTime:
        return price(work, self.system, self.calibration, self.engine)

    def on(self, system: SystemSpec) -> Pricer:
        same = system is self.system or system == self.system
        return self if same else DirectPricer(system, self.calibration, self.engine)


@dataclass(frozen=True)
class TablePricer:
    """Looks up works priced in bulk by a WorkTable (no per-operator breakdown)."""

    table: WorkTable
    terms: np.ndarray
    calibration: Calibration
    engine: str

    def price(self, work: StepWork) -> StepTime:
        index = self.table.index.get(id(work))
        if index is None:  # a work the table was not built with: priced directly, on the table's one system
            systems = {system.name: system for system in self.table.systems}
            if len(systems) != 1:
                raise KeyError("work not in a table of several systems: build the table with every work")
            return price(work, next(iter(systems.values())), self.calibration, self.engine)
        row = self.terms[index]
        return StepTime(terms=dict(zip(TERMS, row.tolist(), strict=True)), by_name={})

    def on(self, system: SystemSpec) -> Pricer:
        return self  # the table holds each work's own system
