"""Which configurations enter the deployment MILP at a TTFT cap and a Dinkelbach ratio.

A configuration is a candidate with an instance count. Every rule here is safe (it removes only
configurations that no optimal solution of that MILP uses):
- TTFT: a mixed candidate slower than the cap; a prefill configuration whose fill plus the shortest KV
  transfer passes the cap; a decode configuration that no prefill configuration can serve within the
  cap (capacity C / (eps + Z) or the cohort wait t_p + t_kv + k (C - 1) / (2 cap) breaks it);
- size: a configuration that leaves no room for the smallest instance of the other pool;
- bound (only when q is the exact ratio of a deployment within the cap, so the MILP's optimum is >= 0):
  a configuration whose most optimistic objective, osl x (rate bound) - q x (its GPUs + the fewest GPUs
  the other pool needs to match it), is negative (`_bounded`). Then, when the pair table exists (at most `PAIR_LIMIT`
  pairs), the exact bound: a configuration none of whose pairs within the cap reaches objective 0 (closed-form pair
  figures, `planner.formulation.pairs`). Packing is left to the MILP, so this bound is optimistic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.formulation.options import DecodeOption, DeploymentOptions, MixedOption, PrefillOption
from planner.formulation.pairs import CHUNK, ConfigArrays, PairTable, transfer_matrix

BOUND_TOL = 1e-9  # relative: keep configurations that tie with the incumbent
PAIR_TOL = 1e-6  # relative, for the pair table's float32 rates


@dataclass(frozen=True)
class Screened:
    mixed: list[MixedOption]
    prefill: list[tuple[PrefillOption, int]]
    decode: list[tuple[DecodeOption, int]]


def _prefill_configs(items: tuple[PrefillOption, ...], room: int) -> list[tuple[PrefillOption, int]]:
    return [(item, n) for item in items for n in range(1, item.most + 1) if n * item.gpus <= room]


def _decode_configs(items: tuple[DecodeOption, ...], room: int) -> list[tuple[DecodeOption, int]]:
    return [(item, n) for item in items for n in range(1, item.most + 1) if n * item.gpus <= room]


def screen(options: DeploymentOptions, eps_s: float | None, q: float, q_feasible: bool,
           pairs: PairTable | None = None) -> Screened:
    mixed = [m for m in options.mixed if eps_s is None or m.point.ttft_ms / 1e3 <= eps_s]
    if q_feasible:
        mixed = [m for m in mixed if m.point.tokens_per_s_per_gpu >= q * (1 - BOUND_TOL)]
    if not options.disaggregated:
        return Screened(mixed, [], [])
    shortest_transfer = min(options.kv_transfer_s.values())
    fills = [p for p in options.prefill if eps_s is None or p.fill_s + shortest_transfer <= eps_s]
    if not fills:
        return Screened(mixed, [], [])
    room = options.domains.gpus
    prefill = _prefill_configs(tuple(fills), room - min(d.gpus for d in options.decode))
    decode = _decode_configs(options.decode, room - min(p.gpus for p in fills))
    if eps_s is not None:
        decode = _servable(options, prefill, decode, eps_s)
    if q_feasible and prefill and decode:
        prefill, decode = _bounded(options, prefill, decode, eps_s, q)
    if pairs is not None and q_feasible and prefill and decode:
        prefill, decode = _pair_bounded(pairs, prefill, decode, eps_s, q)
    if not prefill or not decode:
        return Screened(mixed, [], [])
    return Screened(mixed, prefill, decode)


def _servable(options: DeploymentOptions, prefill: list[tuple[PrefillOption, int]],
              decode: list[tuple[DecodeOption, int]], eps_s: float) -> list[tuple[DecodeOption, int]]:
    arrays = ConfigArrays.of(prefill, decode)
    half_k, ok = options.cohort_fraction / 2.0, np.zeros(len(decode), dtype=bool)
    rows = max(1, CHUNK // max(1, len(decode)))
    for start in range(0, len(prefill), rows):
        block = slice(start, start + rows)
        cap, fill = arrays.cap[block, None], arrays.fill[block, None]
        transfer = transfer_matrix(options, arrays.size_y[block], arrays.size_z)
        queue_ok = cap * (eps_s + arrays.away[None, :]) >= arrays.conc[None, :] * (1 - 1e-9)
        cohort_ok = cap * (eps_s - fill - transfer) >= half_k * (arrays.conc[None, :] - 1) * (1 - 1e-9)
        ok |= (queue_ok & cohort_ok).any(axis=0)
    return [z for z, keep in zip(decode, ok, strict=True) if keep]


def _bounded(options: DeploymentOptions, prefill: list[tuple[PrefillOption, int]],
             decode: list[tuple[DecodeOption, int]], eps_s: float | None,
             q: float) -> tuple[list[tuple[PrefillOption, int]], list[tuple[DecodeOption, int]]]:
    """Per configuration, the most optimistic objective osl X - q (G_y + G_z) given what the other pool
    must at least hold: a prefill pool serving X needs cap >= X, hence >= gamma X GPUs (gamma: fewest
    GPU-seconds per fill of any prefill candidate), and under a cap eps a concurrency C needs
    cap >= k (C - 1) / (2 (eps - shortest fill and transfer)) for the cohort wait; a decode pool serving X
    holds C >= X (fill + transfer + Z) sequences, hence >= delta C GPUs (delta: fewest GPUs per slot)."""
    osl, a = float(options.output_tokens), ConfigArrays.of(prefill, decode)
    shortest = a.fill.min() + min(options.kv_transfer_s.values())
    gamma = min(p.gpus / p.capacity for p, _ in prefill)
    delta = min(d.gpus / d.slots for d, _ in decode)
    # decode configurations
    rate = np.minimum(a.conc / (shortest + a.away), a.cap.max())
    needed = np.zeros_like(a.conc)
    if eps_s is not None and eps_s > shortest:
        needed = options.cohort_fraction * (a.conc - 1.0) / (2.0 * (eps_s - shortest))
    best_z = np.maximum(*(osl * x - q * (a.gpus_z + np.maximum(a.gpus_y.min(), gamma * np.maximum(x, needed)))
                          for x in (rate, np.minimum(rate, needed))))
    keep_z = best_z >= -BOUND_TOL * q * a.gpus_z
    if not keep_z.any():
        return [], []
    # prefill configurations
    cycle = a.fill + min(options.kv_transfer_s.values()) + a.away[keep_z].min()
    fewest_z = a.gpus_z[keep_z].min()
    rate_y = np.minimum(a.cap, a.conc[keep_z].max() / cycle)
    knee = np.minimum(rate_y, fewest_z / (delta * cycle))  # where the decode pool's floor stops binding
    best_y = np.maximum(*(osl * x - q * (a.gpus_y + np.maximum(fewest_z, delta * x * cycle)) for x in (rate_y, knee)))
    keep_y = best_y >= -BOUND_TOL * q * a.gpus_y
    return ([y for y, k in zip(prefill, keep_y, strict=True) if k],
            [z for z, k in zip(decode, keep_z, strict=True) if k])


def _pair_bounded(pairs: PairTable, prefill: list[tuple[PrefillOption, int]],
                  decode: list[tuple[DecodeOption, int]], eps_s: float | None,
                  q: float) -> tuple[list[tuple[PrefillOption, int]], list[tuple[DecodeOption, int]]]:
    keep_y, keep_z = pairs.keep(eps_s, q, PAIR_TOL)
    return ([(p, n) for p, n in prefill if keep_y[pairs.index_y[(id(p), n)]]],
            [(d, n) for d, n in decode if keep_z[pairs.index_z[(id(d), n)]]])
