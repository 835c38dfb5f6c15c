"""Fit the cost model's calibration to serving measurements, deterministically: the least-squares fit behind
the bundled calibration (`python -m benchmarks fit`, from a checkout) and behind `plan calibrate` (a user's own
measurements, starting from the bundled calibration).

What is fitted (nothing per model or per row):
- per GPU generation present in the data: GEMM efficiency per compute format, attention and HBM
  efficiencies (fractions of peak), each bounded below by its predecessor generation's achieved rate
  (`_generation_floor`);
- scale-up and scale-out collective efficiencies, the fixed latency of one collective step, and what a step
  across the NIC pays beyond it;
- the share of a grouped GEMM's (MoE routed experts') weight load not hidden behind its multiplies
  (`costmodel.pricing.grouped_gemm_share`), one factor for every GPU;
- per engine present in the data: fixed overhead per layer, per routed-expert layer, per step and per sequence
  per step, the share
  of the expert all-to-all hidden behind compute, the first-token latency per layer, and the cohort fraction
  of closed-loop arrivals (see `costmodel.serving`).
Generations absent from the training rows, or with fewer than `MIN_GENERATION_ROWS` of them, keep their
priors; engines absent from them (and `generic`),
or with fewer than `MIN_ENGINE_ROWS` of them, take the mean of the fitted engines, which is how a held-out
engine is predicted; but their cohort fraction is that of the fitted engines that schedule prompts as they do,
where there are any (`costmodel.calibration.SCHEDULING`: vLLM and TRT-LLM piggyback prompts on decode steps,
SGLang runs them first), else the one their policy implies (`POLICY_COHORT`: prefill first keeps a cohort),
and their first-token latency that of the fitted engines that run prefills as they do, where there are any
(`costmodel.calibration.PREFILL_EXECUTION`: vLLM compiled, SGLang and TRT-LLM eager).
Averaged over all engines, a held-out vLLM or TRT-LLM took SGLang's bunching into its
mean (cohort fraction 0.38-0.39 against their own 0.18-0.20 then) and its TTFT held out was over-predicted 1.3-2.4x.

Loss: robust least squares on log(predicted / measured) of TTFT and TPOT of every training row, with a
bounded (arctan) loss on those errors (`LOSS_SCALE`, `TTFT_SCALE`, `_bounded`), plus a weak pull of each
factor towards its prior (`PRIOR_WEIGHT`), by scipy's trust-region reflective method from the priors, with
fixed settings: the same data gives the same calibration, bit for bit. Each factor is confined to its
physical range (`BOUNDS`, with the evidence for each range), so that a factor cannot absorb a term the model lacks.

Engines and generations the rows leave out, or have too few rows of, take what a held-out one would (above)
when fitting the bundled calibration; a user's own calibration (`plan calibrate`, `absent="prior"`) keeps
the starting calibration's values for them instead: a few vLLM runs say nothing new about TRT-LLM.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
from scipy.optimize import least_squares

from costmodel.calibration import (
    HOLDS_PROMPTS_UNDER_DP,
    POLICY_COHORT,
    PREFILL_EXECUTION,
    SCHEDULING,
    Calibration,
    EngineFactors,
    GenerationFactors,
    generation_of,
    prior_calibration,
)
from costmodel.evaluate import LayoutPlan, plan_layout, serving_latencies
from costmodel.hardware import SystemSpec, load_system, system_names
from costmodel.layout import Layout
from costmodel.precision import Dtype
from costmodel.pricing import TablePricer, WorkTable
from costmodel.resolve import compute_dtype, resolve
from costmodel.scenario import Scenario
from costmodel.work import StepWork

Absent = Literal["mean", "prior"]


class MeasuredRun(Protocol):
    """One measured serving run: its scenario and layout documents (as `Scenario` and `Layout` validate them)
    and what it measured."""

    @property
    def engine(self) -> str: ...
    @property
    def system(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def scenario(self) -> dict[str, Any]: ...
    @property
    def layout(self) -> dict[str, Any]: ...
    @property
    def ttft_ms(self) -> float: ...
    @property
    def tpot_ms(self) -> float: ...


GENERATION_FIELDS = ("attention_efficiency", "hbm_efficiency")
COLLECTIVE_FIELDS = ("collectives.allreduce.efficiency", "collectives.allreduce.latency_s",
                     "collectives.alltoall.efficiency", "collectives.alltoall.latency_s", "nic_efficiency",
                     "nic_latency_s")
GROUPED_FIELD = "grouped_gemm_load_exposed"  # fitted when the rows run routed experts (MoE models)
# Engine overheads of layer kinds only some models have, with the step count (`StepWork`) that pays each: fitted
# for an engine only when its rows pay them (`unexercised_overheads`).
LAYER_KIND_FIELDS = {"mla_layer_overhead_s": "mla_layers", "weight_only_layer_overhead_s": "weight_only_layers"}
ENGINE_FIELDS = ("layer_overhead_s", "moe_layer_overhead_s", "mla_layer_overhead_s", "weight_only_layer_overhead_s",
                 "step_overhead_s", "seq_overhead_s", "alltoall_overlap",
                 "prefill_layer_latency_s", "dp_wait_steps", "cohort_fraction")
# The rows carry variation no column records: engine versions (pairs of one layout across versions differ by
# more than 12% in TPOT in 44% of cases, README), speculative decoding, scheduler settings. A bounded loss on
# the rows' log errors (arctan, `_bounded`: an error's pull fades beyond the scale and a row never costs more
# than pi/2 x scale^2) lets a row no setting of the factors explains stop pulling them; soft-L1's linear tail
# let a few such rows move a generation's factors (B200 held out: Blackwell's HBM efficiency fitted 0.53 on the
# GB200 rows, whose TRT-LLM Qwen3-32B rows measure 8 ms TPOT at concurrency 1 and 42 ms at 2; B200 TPOT held
# out 21.5% with soft-L1, 11.7% with arctan). Scale 0.25 in log TPOT (28%); TTFT, whose unrecorded variation
# (arrival bunching) is larger (in sample median APE 23% against 10-12%), counts its log error over 1.5 times
# that. Chosen among 1, 1.5 and 2 by the held-out accuracy (`python -m benchmarks accuracy`, one-off runs
# with the loss on every residual): 1 put H100 held out at TTFT 35% (22.4% with 1.5), 2 in-sample TTFT at
# 23.2% (22.6%).
LOSS_SCALE = 0.25
TTFT_SCALE = 1.5
# Weak pull of each factor towards its kernel-microbenchmark prior (on the fit's logit scale): two logit units
# away costs about what one row off by 25% costs. It decides only where the rows leave directions flat (a
# format a few rows exercise, GEMM against attention efficiency on prefill-heavy rows), which otherwise
# land wherever the optimiser's path ends, often at a bound.
PRIOR_WEIGHT = 0.1
# Stop when an iteration improves the loss, or moves the factors, by less than 0.01% (relative): further
# digits change no reported figure and cost minutes per fit.
FIT_TOLERANCE = 1e-4
# Fewest training rows from which an engine's own factors are fitted: its nine or ten factors (ENGINE_FIELDS;
# the prompt hold only for TRT-LLM) need about three rows each, spread over batch and lengths, to be told
# apart. An engine with fewer rows is predicted as a held-out engine is (the fitted engines' mean, or the
# alike engines' for the cohort fraction and first-token latency). It decides one fold today: holding out
# aggregated serving leaves vLLM one disaggregated row, from which its cohort fraction fitted to 0.82 (0.16 on
# all rows then) and its aggregated TTFT held out was over-predicted 2-3x.
MIN_ENGINE_ROWS = 20
# Fewest training rows from which a GPU generation's factors (its GEMM formats, attention and HBM) are fitted;
# with fewer it keeps its priors. It decides one fold today: holding out aggregated serving left 12 Hopper rows
# (five of them H100 TRT-LLM decode at TP16 across two nodes), from which Hopper's fp8 GEMMs fitted to 0.34 of
# peak and its HBM to 0.55 (0.71 and 0.80 on all rows then), and every Hopper group of the held-out rows was
# TPOT over-predicted (aggregated TPOT held out 22.2%; 15.8% with this rule, one-off run).
MIN_GENERATION_ROWS = 20


def fitted_generations(rows: Sequence[MeasuredRun]) -> list[str]:
    """GPU generations with enough training rows for their factors to be fitted (`MIN_GENERATION_ROWS`)."""
    counts = Counter(generation_of(load_system(m.system)) for m in rows)
    return sorted(g for g, n in counts.items() if n >= MIN_GENERATION_ROWS)


def fitted_engines(rows: Sequence[MeasuredRun]) -> list[str]:
    """Engines with enough training rows for their own factors (`MIN_ENGINE_ROWS`); all of them when none has."""
    counts = Counter(m.engine for m in rows)
    return sorted(e for e, n in counts.items() if n >= MIN_ENGINE_ROWS) or sorted(counts)


def unexercised_overheads(planned: PlannedRows, engines: Sequence[str]) -> frozenset[tuple[str, str]]:
    """(engine, factor) pairs of the layer-kind overheads (`LAYER_KIND_FIELDS`) that no step of the engine's rows
    pays: not free factors of the fit, they keep their priors (today vLLM runs no MLA model here, SGLang no
    weight-only experts)."""
    table = planned.table
    used = np.isin(np.arange(len(table.works)), list(planned.work_ids))
    engine_of = np.array(table.engine_names)[table.engine_of]
    return frozenset((e, f) for e in engines for f, count in LAYER_KIND_FIELDS.items()
                     if not np.any(getattr(table, count)[used & (engine_of == e)] > 0))


def _works(plan: LayoutPlan) -> list[StepWork]:
    return [work for pool in plan.pools for work in pool.works()]


@dataclass
class PlannedRows:
    """Measurements with their planned work, flattened once for fast re-pricing."""

    rows: list[MeasuredRun]
    plans: list[LayoutPlan]
    table: WorkTable
    work_ids: set[int]  # table rows of the works these rows use

    @staticmethod
    def build(rows: Sequence[MeasuredRun], plans: Sequence[LayoutPlan] | None = None) -> PlannedRows:
        """`plans`: the rows' planned layouts where the caller has them (scenarios read from files, with
        paths relative to them); else planned from the rows' documents."""
        if plans is None:
            plans = [plan_layout(resolve(Scenario.model_validate(m.scenario)), Layout.model_validate(m.layout))
                     for m in rows]
        works, systems, engines = [], [], []
        for plan in plans:
            for work in _works(plan):
                works.append(work)
                systems.append(plan.resolved.system)
                engines.append(plan.resolved.scenario.engine)
        return PlannedRows(list(rows), list(plans), WorkTable(works, systems, engines), set(range(len(works))))

    def subset(self, keep: Sequence[int]) -> PlannedRows:
        """The same table (work ids stay valid) restricted to some rows."""
        plans = [self.plans[i] for i in keep]
        ids = {self.table.index[id(work)] for plan in plans for work in _works(plan)}
        return PlannedRows([self.rows[i] for i in keep], plans, self.table, ids)

    def predict(self, calibration: Calibration) -> np.ndarray:
        """(rows, 2) array of predicted TTFT and TPOT in ms; nan where a prediction failed."""
        terms = self.table.price(calibration)
        out = np.full((len(self.rows), 2), np.nan)
        for i, plan in enumerate(self.plans):
            pricer = TablePricer(self.table, terms, calibration, plan.resolved.scenario.engine)
            ttft, tpot = serving_latencies(plan, pricer)
            out[i] = (ttft * 1e3, tpot * 1e3)
        return out

    def measured(self) -> np.ndarray:
        return np.array([(m.ttft_ms, m.tpot_ms) for m in self.rows])


@dataclass(frozen=True)
class ParameterSpace:
    """Which calibration numbers are free, and how a vector maps to a Calibration."""

    generations: tuple[str, ...]
    gemm_formats: tuple[tuple[str, str], ...]  # (generation, compute format) pairs the rows exercise
    engines: tuple[str, ...]
    prior: Calibration
    grouped: bool = True  # the rows run grouped GEMMs (routed experts): their exposed weight load is fitted
    unexercised: frozenset[tuple[str, str]] = frozenset()  # (engine, layer-kind overhead) no row of it pays
    absent: Absent = "mean"  # engines not fitted: as a held-out engine is predicted, or the prior's values

    @staticmethod
    def for_rows(planned: PlannedRows, prior: Calibration, absent: Absent = "mean") -> ParameterSpace:
        table = planned.table
        formats = {(table.generations[w], str(tuple(Dtype)[d])) for w, d, gemm in
                   zip(table.op_work.tolist(), table.op_dtype.tolist(), table.op_gemm.tolist(), strict=True)
                   if gemm and w in planned.work_ids}
        generations = fitted_generations(planned.rows)
        formats = {(g, d) for g, d in formats if g in generations}
        engines = fitted_engines(planned.rows)
        grouped = bool(np.any((table.op_group_rows > 0) & np.isin(table.op_work, list(planned.work_ids))))
        return ParameterSpace(tuple(generations), tuple(sorted(formats)), tuple(engines), prior, grouped,
                              unexercised_overheads(planned, engines), absent)

    def names(self) -> list[str]:
        names = [f"generations.{g}.gemm_efficiency.{d}" for g, d in self.gemm_formats]
        names += [f"generations.{g}.{f}" for g in self.generations for f in GENERATION_FIELDS]
        names += list(COLLECTIVE_FIELDS)
        names += [GROUPED_FIELD] if self.grouped else []
        return names + [f"engines.{e}.{f}" for e in self.engines for f in ENGINE_FIELDS
                        if (f != "dp_wait_steps" or e in HOLDS_PROMPTS_UNDER_DP) and (e, f) not in self.unexercised]

    def initial(self) -> np.ndarray:
        data = self.prior.model_dump()
        return np.array([_to_free(name, _lookup(data, name)) for name in self.names()])

    def calibration(self, vector: np.ndarray, fitted_on: str) -> Calibration:
        data = self.prior.model_dump()
        for name, value in zip(self.names(), vector, strict=True):
            _assign(data, name, _from_free(name, float(value)))
        for name, value in zip(self.names(), vector, strict=True):  # newer generations' floors, once all are set
            floor = _generation_floor(data, name)
            if floor is not None:
                _assign(data, name, _from_free(name, float(value), floor))
        _raise_to_floors(data, set(self.names()))
        fitted = {e: EngineFactors.model_validate(data["engines"][e]) for e in self.engines}
        # A layer-kind overhead no row of a fitted engine pays keeps its prior, and counts at it in the mean a
        # held-out engine takes: one or two engines' fitted values spread as wide as the prior's doubt (MLA:
        # TRT-LLM 46 us, SGLang 9 us), and the prior shrinks them. Measured: the mean of only the engines whose
        # rows pay it gave held out by engine TPOT 11.8% -> 12.0% (SGLang 9.3% -> 10.6%, vLLM 13.7% -> 14.1%).
        mean = {f: float(np.mean([getattr(e, f) for e in fitted.values()])) for f in ENGINE_FIELDS} if fitted else {}
        # (no fitted engine: nothing to average, every engine keeps its prior)
        for engine in set(data["engines"]) - set(self.engines) if self.absent == "mean" and fitted else ():
            # The cohort fraction of the fitted engines that schedule prompts as this one does, where there are
            # any (`costmodel.calibration.SCHEDULING`), else what its policy implies (`POLICY_COHORT`); the
            # first-token latency of those that run prefills as it does (`PREFILL_EXECUTION`); the other
            # factors, and engines of no known policy, the mean of the fitted engines.
            cohort = _alike_mean(fitted, SCHEDULING, engine, "cohort_fraction")
            cohort = cohort if cohort is not None else POLICY_COHORT.get(SCHEDULING.get(engine, ""))
            first = _alike_mean(fitted, PREFILL_EXECUTION, engine, "prefill_layer_latency_s")
            # an engine holding prompts under attention DP waits as the fitted ones that do (else its prior);
            # the others not at all
            hold = _alike_mean(fitted, _HOLDING, engine, "dp_wait_steps")
            hold = hold if hold is not None else self.prior.engine(engine).dp_wait_steps
            wait = {"dp_wait_steps": hold if engine in HOLDS_PROMPTS_UNDER_DP else 0.0}
            data["engines"][engine] = (mean | wait | ({"cohort_fraction": cohort} if cohort is not None else {})
                                       | ({"prefill_layer_latency_s": first} if first is not None else {}))
        data["fitted_on"] = fitted_on
        return Calibration.model_validate(data)


_HOLDING = dict.fromkeys(HOLDS_PROMPTS_UNDER_DP, "holds")  # one policy: holds prompts under attention DP


def _alike_mean(fitted: dict[str, EngineFactors], policies: Mapping[str, str], engine: str, field: str) -> float | None:
    """Mean `field` of the fitted engines whose policy (in `policies`) is `engine`'s; None where there are none."""
    policy = policies.get(engine)
    alike = [getattr(e, field) for name, e in fitted.items() if policy is not None and policies.get(name) == policy]
    return float(np.mean(alike)) if alike else None


def _lookup(data: dict[str, object], name: str) -> float:
    node: object = data
    for part in name.split("."):
        assert isinstance(node, dict)
        node = node[part]
    assert isinstance(node, float | int)
    return float(node)


def _assign(data: dict[str, object], name: str, value: float) -> None:
    *path, last = name.split(".")
    node: object = data
    for part in path:
        assert isinstance(node, dict)
        node = node[part]
    assert isinstance(node, dict)
    node[last] = value


# Physical range of each fitted factor (by the last part of its name; GEMM efficiencies are named by
# format). A factor is fitted as lo + (hi - lo) x sigmoid(free) so the fit cannot leave its range:
# - GEMMs: large-M kernels reach 0.6-0.8 of peak (DeepGEMM 775-1520 TF of 1979, K06); below 0.25 or
#   above 0.9 is not a GEMM but a missing term;
# - attention: 0.15 (sparse FP8 decode, 350 TF of 2250 on B200, K05) to 0.85;
# - HBM streaming: 0.7 to 0.95: decode streams weights and KV in long sequential reads, which the references
#   measure at 0.8-0.9 of peak (FlashMLA decode 3000 of 3350 GB/s, K05; aiconfigurator's empirical scaling
#   0.8 for GB200; GEMV about 0.8); 0.7 leaves room for kernels they miss. The floor was 0.5 until session 18:
#   holding out H100 left Hopper's factors to the H200 rows, from which the fit traded HBM efficiency (0.69)
#   against fp8 GEMMs (0.86, against 0.47 on all rows) once MiniMax-M2's q/k-norm all-reduce entered, and
#   H100's memory-bound decode rows were TPOT over-predicted (H100 held out 9.8% -> 14.7%; 9.5% with 0.7);
# - collectives: 0.4 to 0.95 of link bandwidth (DeepEP and NCCL reach 0.75-0.8 of NVLink, K01, and TRT-LLM's
#   one-sided all-to-all 0.8 on NVL72, K04; small messages pay their latency, fitted apart), 2-200 us per call.
#   The all-to-all fits at or near its 0.4 floor (0.42 in default.yaml): a term is missing there, not established
#   which. Candidates: the busiest receiving rank (real routing puts 2.56x the mean on it without EPLB, K07;
#   the model applies load imbalance to the experts' compute, not to dispatch and combine: on the synthetic
#   benchmark tokens its sampling share is 1.0-1.2, too little alone), DeepEP low-latency mode's per-token
#   cost (K02: 77-194 us to dispatch 128 tokens at EP 8-256, far above bytes over bandwidth), and the ranks'
#   synchronisation at every dispatch;
#   a step across the NIC 0 to 200 us beyond its scale-up latency (RDMA through the NIC and the library's
#   proxy; DeepEP's low-latency dispatch of 128 tokens takes 77 us at EP 8 and 118-194 us at EP 16-256, K02);
#   the NIC from 0.5: RDMA transfers of MB-sized KV pages and expert payloads reach most of the line rate
#   (DeepEP RDMA 43-58 of 50 GB/s, K01); with the first-token latency in the model the fit would take the
#   NIC to 0.12-0.21 to lengthen disaggregated TTFTs, a slowness that would steer plans away from NICs;
# - fixed overheads: up to 100 us per layer and 100 us more per routed-expert layer (5-7 extra kernels at
#   up to 15 us each when launched eagerly), 20 ms per step and 50 us per sequence per step (vLLM V0's
#   Python scheduler and sampler at its slowest); cohort fraction 0 to 1; all-to-all
#   hidden behind compute 0 to 0.9 (two-batch overlap hides most of it at best, E07/E08); a prompt held
#   under attention DP 0 to 100 decode steps (TRT-LLM's attention_dp_config waits up to timeout_iters, whose
#   values the calibration rows do not record: 100 is an assumption, about twice the fitted 41);
# - first-token latency per layer: 0 to 2 ms, what dispatching an eager (no CUDA graph) context layer of
#   about 40 kernels can cost the host at up to 50 us per PyTorch op: 120 ms a request for a 61-layer model;
#   the data would go further (DeepSeek-R1/V3 at concurrency 4 measure 156-365 ms where their prefill kernels
#   take 45-90 ms), but what lies beyond is no per-layer cost we can name;
# - grouped GEMMs: 0.7 to 2 of the expert-weight load at peak HBM bandwidth exposed
#   (`costmodel.pricing.grouped_gemm_share`): 1 is the load not overlapped at all, 1 / HBM efficiency (at most
#   1 / 0.7, its floor) the same at the bandwidth streaming kernels reach; 0.7 is the best a measured kernel
#   hides (DeepGEMM's grouped FP8 GEMMs on H800, K06: 0.7-1.0), assuming the engines' MoE kernels (CUTLASS,
#   Triton fused_moe, DeepGEMM itself) hide no more than DeepGEMM measured does. Free
#   down to 0, the fit took it to 0.38 once routed-expert layers paid their own fixed cost, and lowered
#   Blackwell's GEMM efficiencies to match (fp8 0.42, fp4 0.49: a B200 fp8 GEMM 1.16x an H100's against
#   2.3x in peak), to lengthen Blackwell MoE prefills; bounded, 0.92 and fp8 0.63, fp4 0.84 then (session
#   12; with the bounded loss 0.73, fp8 0.56, fp4 0.75; session 15's refit 0.76, fp8 0.54, fp4 0.72: default.yaml).
BOUNDS: dict[str, tuple[float, float]] = {
    "bf16": (0.25, 0.9), "fp8": (0.25, 0.9), "fp4": (0.25, 0.9), "int4": (0.25, 0.9),
    "attention_efficiency": (0.15, 0.85), "hbm_efficiency": (0.7, 0.95),
    "efficiency": (0.4, 0.95), "nic_efficiency": (0.5, 0.95), "latency_s": (2e-6, 2e-4),
    "nic_latency_s": (0.0, 2e-4),
    "layer_overhead_s": (0.0, 1e-4), "moe_layer_overhead_s": (0.0, 1e-4), "mla_layer_overhead_s": (0.0, 1e-4),
    "weight_only_layer_overhead_s": (0.0, 1e-4), "step_overhead_s": (0.0, 2e-2),
    "seq_overhead_s": (0.0, 5e-5), "dp_wait_steps": (0.0, 100.0),
    "cohort_fraction": (0.0, 1.0), "prefill_layer_latency_s": (0.0, 2e-3),
    "alltoall_overlap": (0.0, 0.9),
    GROUPED_FIELD: (0.7, 1.0 / 0.7),
}


# Floors of single factors where our own kernel measurements bound what the engines' kernels reach, so that the
# fit cannot take a factor below every kernel to stand in for a term the model lacks. Hopper prefill attention:
# cuDNN's FlashAttention-3-class kernels reach 0.51-0.67 of the bf16 peak on an H200 at 2K-16K tokens a sequence
# (benchmarks/kernel_measurements/h200.json prefill_attention; priors.yaml), FlashMLA 0.59-0.67 on H800 (K05);
# floor 0.50. Without it the fit on every row stopped at 0.26 (a chunk of a mixed step slower than its kernels
# carried there; session 37, docs/calibration-log.md), and with it lands at 0.53. Blackwell has no measurement
# of ours (a 0.50 floor there too, by analogy, cost in-sample TPOT 8.3% -> 8.6%: not set).
MEASURED_FLOORS: dict[str, float] = {"generations.hopper.attention_efficiency": 0.50}


def factor_bounds(name: str) -> tuple[float, float]:
    """(low, high) of a fitted factor by its full name: its kind's physical range (`BOUNDS`), raised to a kernel-
    measured floor where there is one (`MEASURED_FLOORS`)."""
    low, high = BOUNDS[name.split(".")[-1]]
    return max(low, MEASURED_FLOORS.get(name, low)), high


def _to_free(name: str, value: float) -> float:
    lo, hi = factor_bounds(name)
    share = min(max((value - lo) / (hi - lo), 1e-4), 1 - 1e-4)
    return math.log(share / (1 - share))


def _from_free(name: str, value: float, floor: float | None = None) -> float:
    lo, hi = factor_bounds(name)
    lo = min(max(lo, floor or lo), hi)
    return lo + (hi - lo) / (1.0 + math.exp(-value))


# A newer GPU generation runs its predecessor's kernels (same tile shapes, more SMs, higher clocks, wider
# tensor cores): B200 has 148 SMs at up to 1.965 GHz against H100's 132 at 1.98 GHz, and twice the dense
# tensor FLOP/clock per SM in every format. So what a kernel achieves there, in FLOP/s or bytes/s, is at
# least what it achieves on the predecessor: the newer generation's efficiency is bounded below by the older
# one's achieved rate over the newer peak. Without it, formats the data barely exercise (bf16 on Blackwell:
# 7 GB200 rows) can fit below Hopper's achieved rate and misrank hardware (issue 13).
PREDECESSOR: dict[str, str] = {"blackwell": "hopper", "cdna4": "cdna3"}


def _generation_floor(data: dict[str, object], name: str) -> float | None:
    """Lower bound of a generation factor from its predecessor's achieved rate (None: no bound applies)."""
    parts = name.split(".")
    if parts[0] != "generations" or parts[1] not in PREDECESSOR:
        return None
    newer, older = parts[1], PREDECESSOR[parts[1]]
    older_rate = max((_peak_rate(s, parts[2:]) for s in _systems(older)), default=0.0)
    newer_rate = min((_peak_rate(s, parts[2:]) for s in _systems(newer)), default=0.0)
    if older_rate <= 0 or newer_rate <= 0:
        return None  # a generation without systems in the catalog
    older_factors = data["generations"]
    assert isinstance(older_factors, dict)
    if parts[2] == "gemm_efficiency":  # a format the predecessor never calibrated runs at its bf16 figure
        achieved = GenerationFactors.model_validate(older_factors[older]).gemm(Dtype(parts[3]))
    else:
        achieved = _lookup(data, ".".join(["generations", older, *parts[2:]]))
    return achieved * older_rate / newer_rate


def _raise_to_floors(data: dict[str, Any], free: set[str]) -> None:
    """Factors of a newer generation the fit leaves at their starting values, raised to their predecessor's
    achieved rate where the fit refit that predecessor factor past them (a calibration on H100 runs alone must
    not leave B200 slower than H100: `_generation_floor`)."""
    for newer, older in PREDECESSOR.items():
        factors = data["generations"].get(newer)
        if factors is None or older not in data["generations"]:
            continue
        names = [f"generations.{newer}.gemm_efficiency.{d}" for d in factors["gemm_efficiency"]]
        names += [f"generations.{newer}.{f}" for f in GENERATION_FIELDS]
        for name in names:
            if name in free or _predecessor_factor(data, name, newer, older) not in free:
                continue
            floor = _generation_floor(data, name)
            if floor is not None and _lookup(data, name) < floor:
                _assign(data, name, min(floor, factor_bounds(name)[1]))


def _predecessor_factor(data: dict[str, Any], name: str, newer: str, older: str) -> str:
    """The predecessor's factor a newer generation's factor is floored by (a GEMM format the predecessor has
    no figure for runs at its bf16 one: `_generation_floor`)."""
    older_name = name.replace(f"generations.{newer}.", f"generations.{older}.", 1)
    parts = older_name.split(".")
    if parts[2] == "gemm_efficiency" and parts[3] not in data["generations"][older]["gemm_efficiency"]:
        return f"generations.{older}.gemm_efficiency.bf16"
    return older_name


def _peak_rate(system: SystemSpec, factor: list[str]) -> float:
    """The peak a generation factor is a fraction of: FLOP/s of the GEMM format (of the format a weight-only
    kernel dequantises it to, where the GPU cannot compute in it), bf16 FLOP/s for attention, HBM bytes/s for
    streaming."""
    if factor[0] == "gemm_efficiency":
        return system.peak_flops_per_s.get(compute_dtype(Dtype(factor[1]), system), 0.0)
    if factor[0] == "attention_efficiency":
        return system.peak_flops_per_s.get(Dtype.BF16, 0.0)
    return system.hbm_bandwidth_bytes_per_s


def _systems(generation: str) -> list[SystemSpec]:
    return [s for s in (load_system(n) for n in system_names()) if generation_of(s) == generation]


def _bounded(errors: np.ndarray) -> np.ndarray:
    """Log errors mapped so that their squares are the arctan loss, LOSS_SCALE^2 arctan((e / LOSS_SCALE)^2):
    e near 0, at most LOSS_SCALE sqrt(pi / 2) in size. Applied to the rows' errors alone, so that the pull
    towards the priors stays quadratic however far a factor moves (scipy's `loss=` would bound it too)."""
    squared = np.arctan((errors / LOSS_SCALE) ** 2)
    return np.asarray(np.sign(errors) * LOSS_SCALE * np.sqrt(squared))


def fit(planned: PlannedRows, prior: Calibration | None = None, max_evaluations: int = 400,
        absent: Absent = "mean", label: str | None = None) -> Calibration:
    """Least-squares calibration on `planned` rows, starting from (and pulled towards) `prior`, the
    kernel-microbenchmark priors by default; `absent`: what engines the rows do not fit get (module
    docstring); `label`: the calibration's `fitted_on`."""
    prior = prior or prior_calibration()
    space = ParameterSpace.for_rows(planned, prior, absent)
    measured = np.log(planned.measured())
    label = label or f"{len(planned.rows)} serving measurements"

    start = space.initial()

    def residuals(vector: np.ndarray) -> np.ndarray:
        predicted = planned.predict(space.calibration(vector, label))
        errors = np.log(np.where(np.isfinite(predicted) & (predicted > 0), predicted, 1e-3)) - measured
        errors = _bounded(errors / np.array([TTFT_SCALE, 1.0]))  # columns: TTFT, TPOT
        return np.concatenate([errors.ravel(), PRIOR_WEIGHT * (vector - start)])

    result = least_squares(residuals, start, method="trf",
                           max_nfev=max_evaluations, x_scale=1.0, diff_step=1e-3, ftol=FIT_TOLERANCE,
                           xtol=FIT_TOLERANCE)
    return space.calibration(result.x, label)

