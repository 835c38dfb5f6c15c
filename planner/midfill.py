"""Which pool runs the midfills of a disaggregated multi-turn plan, and why.

The MILP searches both structures (`planner.formulation.model`): one prefill pool for every turn's fill
(shared), or a first-turn prefill pool beside a midfill pool for the turns after a gap (separate), and
picks the better at each TTFT. The reason given with each point quantifies the other structure with a
cheap upper bound at the point's TTFT: the best closed-form pair of the shared structure, or the best
optimistic pair of the separate one (`planner.formulation.screening.split_ratio_bound`). Both ignore
packing and the shared KV store, so they can sit above what a packed deployment reaches.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from costmodel.serving import turn_share
from planner.formulation.options import DeploymentOptions
from planner.formulation.pairs import PAIR_LIMIT, PairTable
from planner.formulation.screening import TooManyPairs, screen, split_ratio_bound
from planner.solve import SolveResult
from planner.sweep_result import SolvedPoint

_TABLES: weakref.WeakKeyDictionary[DeploymentOptions, PairTable | None] = weakref.WeakKeyDictionary()


def _shared_table(options: DeploymentOptions, slo_s: float | None) -> PairTable | None:
    """The shared structure's pairs within the TTFT SLO, built once per solve (every point's TTFT is within
    it, and a lower cap screens out only configurations none of whose pairs meets it); raises TooManyPairs
    beyond `PAIR_LIMIT` pairs."""
    if options not in _TABLES:
        screened = screen(options, slo_s, 0.0, False)
        if len(screened.prefill) * len(screened.decode) > PAIR_LIMIT:
            raise TooManyPairs
        _TABLES[options] = PairTable(options, screened.prefill, screened.decode) if screened.prefill else None
    return _TABLES[options]


def shared_ratio_bound(options: DeploymentOptions, eps_s: float, slo_s: float | None = None) -> float | None:
    """Most tokens/s per GPU of one fill pool for every turn within the cap, before packing (None when
    no pair is within it); raises TooManyPairs when the pairs are too many to tabulate."""
    table = _shared_table(options, slo_s)
    if table is None:
        return None
    where = table.best_ratio(eps_s)
    if where is None:
        return None
    i, j = where
    gpus = float(table.arrays.gpus_y[i] + table.arrays.gpus_z[j])
    return float(options.output_tokens * np.float64(table.rate[i, j]) / gpus)


def midfill_choice(result: SolveResult, solved: SolvedPoint) -> dict[str, Any] | None:
    """For a disaggregated point of a sessions scenario: `pool` (shared or separate), the share of fills
    that are first turns, the other structure's bound at this TTFT, and a sentence saying why."""
    sessions, layout = result.resolved.scenario.workload.sessions, solved.point.layout
    if sessions is None or layout.serving != "disaggregated" or result.options is None:
        return None
    options, share = result.options, turn_share(result.resolved.scenario.workload, "first")
    eps, ratio = solved.point.ttft_ms / 1e3 * (1 + 1e-9), solved.point.tokens_per_s_per_gpu_used
    slo = result.resolved.scenario.slo.ttft_ms
    separate = layout.split_fills
    if separate:
        other = "one fill pool for every turn"
        try:
            bound = shared_ratio_bound(options, eps, None if slo is None else max(eps, slo / 1e3))
        except TooManyPairs:
            return _unquoted("separate", share, other)
    elif options.split is None:
        reason = ("a separate midfill pool was not searched (search.separate_midfill is false)"
                  if sessions.turns > 1 else "sessions of one turn have no midfills")
        return {"pool": "shared", "first_turn_share": share, "alternative_bound": None,
                "why": f"shared: {reason}"}
    else:
        other = "a separate midfill pool"
        try:
            bound = split_ratio_bound(options, eps)
        except TooManyPairs:
            return _unquoted("shared", share, other)
    kind = "separate" if separate else "shared"
    if bound is None:
        tail = f"no deployment with {other} reaches this TTFT"
    else:
        tail = (f"{other} reaches at most {bound:.1f} tok/s per GPU used at this TTFT (bound before packing), "
                f"{ratio:.1f} here")
    return {"pool": kind, "first_turn_share": share, "alternative_bound": bound,
            "why": f"{kind} (first turns are {share:.0%} of fills): {tail}"}


def _unquoted(kind: str, share: float, other: str) -> dict[str, Any]:
    """The choice without the other structure's bound, its pairs too many to tabulate."""
    return {"pool": kind, "first_turn_share": share, "alternative_bound": None,
            "why": f"{kind} (first turns are {share:.0%} of fills): the MILP found it better than {other} "
                   "(no bound quoted: too many configuration pairs to tabulate)"}
