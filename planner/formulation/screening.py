"""Which configurations enter the deployment MILP at a TTFT cap and a Dinkelbach ratio.

A configuration is a candidate with an instance count. Every rule here is safe (it removes only
configurations that no optimal solution of that MILP uses):
- TTFT: a mixed candidate slower than the cap; a prefill configuration whose fill plus the shortest KV
  transfer passes the cap; a decode configuration that no prefill configuration can serve within the
  cap (capacity C / (eps + Z) or the cohort wait t_p + t_kv + k (C - 1) / (2 cap) breaks it);
- size: a configuration that leaves no room for the smallest instance of the other pool;
- bound (only when q is the exact ratio of a deployment within the cap, so the MILP's optimum is >= 0):
  a configuration whose most optimistic objective, osl x (rate bound) - q x (its GPUs + the smallest
  other pool), is negative. Rate bounds: a prefill configuration's capacity; a decode configuration's
  C / (shortest fill + shortest transfer + Z). Then, when there are at most `PAIR_LIMIT` pairs, the
  exact bound: a configuration none of whose pairs within the cap reaches objective 0 (closed-form pair
  figures, `planner.formulation.pairs`). Packing is left to the MILP, so this bound is optimistic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.formulation.options import DecodeOption, DeploymentOptions, MixedOption, PrefillOption
from planner.formulation.pairs import PAIR_LIMIT, ConfigArrays, best_pair_values

BOUND_TOL = 1e-9  # relative: keep configurations that tie with the incumbent


@dataclass(frozen=True)
class Screened:
    mixed: list[MixedOption]
    prefill: list[tuple[PrefillOption, int]]
    decode: list[tuple[DecodeOption, int]]


def _configs(items: tuple[PrefillOption, ...] | tuple[DecodeOption, ...], room: int) -> list[tuple[object, int]]:
    return [(item, n) for item in items for n in range(1, item.most + 1) if n * item.gpus <= room]


def screen(options: DeploymentOptions, eps_s: float | None, q: float, q_feasible: bool,
           pair_screening: bool = True) -> Screened:
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
    prefill = _configs(tuple(fills), room - min(d.gpus for d in options.decode))
    decode = _configs(options.decode, room - min(p.gpus for p in fills))
    if eps_s is not None:
        decode = _servable(options, prefill, decode, eps_s)  # type: ignore[arg-type]
    if q_feasible and prefill and decode:
        prefill, decode = _bounded(options, prefill, decode, q)  # type: ignore[arg-type]
    if pair_screening and q_feasible and prefill and decode and len(prefill) * len(decode) <= PAIR_LIMIT:
        prefill, decode = _pair_bounded(options, prefill, decode, eps_s, q)  # type: ignore[arg-type]
    if not prefill or not decode:
        return Screened(mixed, [], [])
    return Screened(mixed, prefill, decode)  # type: ignore[arg-type]


def _arrays(prefill: list[tuple[PrefillOption, int]],
            decode: list[tuple[DecodeOption, int]]) -> tuple[np.ndarray, ...]:
    cap = np.array([p.capacity * n for p, n in prefill])
    fill = np.array([p.fill_s for p, _ in prefill])
    conc = np.array([float(d.slots * n) for d, n in decode])
    away = np.array([d.decoding_s for d, _ in decode])
    return cap, fill, conc, away


def _servable(options: DeploymentOptions, prefill: list[tuple[PrefillOption, int]],
              decode: list[tuple[DecodeOption, int]], eps_s: float) -> list[tuple[DecodeOption, int]]:
    cap, fill, conc, away = _arrays(prefill, decode)
    transfer = np.array([[options.kv_transfer_s[(p.gpus, d.gpus)] for d, _ in decode] for p, _ in prefill])
    half_k = options.cohort_fraction / 2.0
    queue_ok = cap[:, None] * (eps_s + away[None, :]) >= conc[None, :] * (1 - 1e-9)
    cohort_ok = cap[:, None] * (eps_s - fill[:, None] - transfer) >= half_k * (conc[None, :] - 1) * (1 - 1e-9)
    ok = (queue_ok & cohort_ok).any(axis=0)
    return [z for z, keep in zip(decode, ok, strict=True) if keep]


def _bounded(options: DeploymentOptions, prefill: list[tuple[PrefillOption, int]],
             decode: list[tuple[DecodeOption, int]],
             q: float) -> tuple[list[tuple[PrefillOption, int]], list[tuple[DecodeOption, int]]]:
    osl = float(options.output_tokens)
    cap, fill, conc, away = _arrays(prefill, decode)
    rate_z = conc / (fill.min() + min(options.kv_transfer_s.values()) + away)
    gpus_y = np.array([p.gpus * n for p, n in prefill], dtype=float)
    gpus_z = np.array([d.gpus * n for d, n in decode], dtype=float)
    keep_z = osl * np.minimum(rate_z, cap.max()) - q * (gpus_z + gpus_y.min()) >= -BOUND_TOL * q * gpus_z
    keep_y = osl * np.minimum(cap, rate_z[keep_z].max(initial=0.0)) - q * (gpus_y + gpus_z[keep_z].min(
        initial=0.0)) >= -BOUND_TOL * q * gpus_y
    return ([y for y, k in zip(prefill, keep_y, strict=True) if k],
            [z for z, k in zip(decode, keep_z, strict=True) if k])


def _pair_bounded(options: DeploymentOptions, prefill: list[tuple[PrefillOption, int]],
                  decode: list[tuple[DecodeOption, int]], eps_s: float | None,
                  q: float) -> tuple[list[tuple[PrefillOption, int]], list[tuple[DecodeOption, int]]]:
    arrays = ConfigArrays.of(prefill, decode)
    best_y, best_z, _ = best_pair_values(options, arrays, eps_s, q)
    keep_y = best_y >= -BOUND_TOL * q * arrays.gpus_y
    keep_z = best_z >= -BOUND_TOL * q * arrays.gpus_z
    return ([y for y, k in zip(prefill, keep_y, strict=True) if k],
            [z for z, k in zip(decode, keep_z, strict=True) if k])
