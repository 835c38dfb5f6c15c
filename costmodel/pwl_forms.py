"""Piecewise-linear forms of each mode's step time, for the MILP planner.

For one pool (model, layout, formats, calibration) and one request shape, each mode's step time is a
function of one integer batch quantity per attention-DP rank, all else fixed:

- prefill, midfill: x = new tokens per rank in the step. Dense parts are convex (per operator
  max(weight read, FLOPs), each affine in x); routed experts are not: the weight bytes of distinct
  experts touched saturate (concave) and the busiest-rank sampling imbalance adds a concave sqrt(x)
  term, so the sum is usually "mixed": segment selection (SOS2 over the breakpoints).
- decode_attention: x = sequences per rank. KV read and attention FLOPs are affine in x; with the
  projections' roofline maxima the form is convex (often a single line): an epigraph, no binaries.
- decode_experts: x = sequences per rank. Distinct experts touched, E (1 - (1 - k/E)^B), saturate:
  concave pieces joined by roofline kinks, "mixed" in general. All forms are monotone in x, so an SLO
  cap t(x) <= c is simply x <= t^-1(c), a bound; as a cost to minimise they need segment selection.

The curvature actually found is reported with each form (`PiecewiseLinear.curvature`), and a test
checks the 1% bound at every integer of each domain. The exact values come from the same step-work
builders and pricing as `evaluate`, priced in bulk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from costmodel.calibration import Calibration
from costmodel.modes import DECODE_ATTENTION_OPS, DECODE_EXPERT_OPS, PoolContext, decode_work, midfill_work
from costmodel.pricing import WorkTable
from costmodel.pwl import PiecewiseLinear, fit_pwl
from costmodel.serving import RequestShape
from costmodel.work import StepWork

Mode = Literal["prefill", "midfill", "decode_attention", "decode_experts"]
MODES: tuple[Mode, ...] = ("prefill", "midfill", "decode_attention", "decode_experts")
VARIABLES: dict[Mode, str] = {
    "prefill": "new tokens per rank per step",
    "midfill": "new tokens per rank per step",
    "decode_attention": "sequences per rank",
    "decode_experts": "sequences per rank",
}


@dataclass(frozen=True)
class ModeForm:
    mode: Mode
    variable: str
    pwl: PiecewiseLinear


def _only(work: StepWork, names: frozenset[str]) -> StepWork:
    """The part of a step made of the named operators and transfers (no per-layer overheads); the
    per-sequence overhead goes with decode attention, the part that also counts sequences."""
    return StepWork(ops=[op for op in work.ops if op.name in names],
                    transfers=[t for t in work.transfers if t.name in names], layers=0,
                    seqs=work.seqs if names == DECODE_ATTENTION_OPS else 0.0)


def _builder(ctx: PoolContext, mode: Mode, request: RequestShape,
             tier: Literal["hbm", "host_dram", "ssd"]) -> Callable[[int, float], StepWork]:
    if mode == "prefill":
        return lambda stage, x: midfill_work(ctx, stage, x / request.new, request.new, 0.0)
    if mode == "midfill":
        fetch = ((tier, request.cached),) if tier != "hbm" else ()
        return lambda stage, x: midfill_work(ctx, stage, x / request.new, request.new, request.cached, fetch)
    names = DECODE_ATTENTION_OPS if mode == "decode_attention" else DECODE_EXPERT_OPS
    return lambda stage, x: _only(decode_work(ctx, stage, x, request.mid_context, 1.0 + request.draft), names)


def exact_step_times(ctx: PoolContext, mode: Mode, xs: np.ndarray, request: RequestShape,
                     calibration: Calibration, engine: str,
                     tier: Literal["hbm", "host_dram", "ssd"] = "hbm") -> np.ndarray:
    """Step time (s) of `mode` at each x, on the slowest pipeline stage."""
    build = _builder(ctx, mode, request, tier)
    stages = len(ctx.stages)
    works = [build(stage, float(x)) for x in xs for stage in range(stages)]
    table = WorkTable(works, [ctx.system] * len(works), [engine] * len(works))
    totals = table.price(calibration).sum(axis=1)
    return np.asarray(totals.reshape(len(xs), stages).max(axis=1))


def mode_form(ctx: PoolContext, mode: Mode, upper: int, request: RequestShape, calibration: Calibration,
              engine: str, rel_tol: float = 0.01, tier: Literal["hbm", "host_dram", "ssd"] = "hbm") -> ModeForm:
    """PWL of `mode`'s step time over x = 1..upper with relative error at most `rel_tol` at every integer."""
    xs = np.arange(1, upper + 1, dtype=float)
    exact = exact_step_times(ctx, mode, xs, request, calibration, engine, tier)

    def lookup(x: np.ndarray) -> np.ndarray:
        return np.asarray(exact[np.rint(x).astype(np.int64) - 1])

    return ModeForm(mode, VARIABLES[mode], fit_pwl(lookup, 1, upper, rel_tol=rel_tol, integer=True))
