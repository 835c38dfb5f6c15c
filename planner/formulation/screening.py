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

import weakref
from dataclasses import dataclass

import numpy as np

from planner.formulation.options import DecodeOption, DeploymentOptions, MixedOption, PrefillOption
from planner.formulation.pairs import ConfigArrays, PairTable, pair_figures, transfer_matrix

BOUND_TOL = 1e-9  # relative: keep configurations that tie with the incumbent
DYNAMIC_PAIRS = 16_000_000  # pairs of bound-screened configurations worth a table of their own
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
           pairs: PairTable | None = None, pair_bound: bool = False) -> Screened:
    """Configurations for the MILP at cap `eps_s` and ratio `q` (module docstring). `pairs`: the table of
    the first cap's pairs; without one, `pair_bound` builds a table of the survivors of the cheaper
    rules when they form at most `DYNAMIC_PAIRS` pairs."""
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
    table = _decode_table(options)
    alive = table.gpus <= room - min(p.gpus for p in fills)
    if eps_s is not None:
        alive &= table.fastest <= eps_s * (1 + 1e-9)
    if q_feasible and prefill and alive.any():
        prefill, alive = _bounded(options, prefill, table, alive, eps_s, q)
    decode = [table.configs[i] for i in np.flatnonzero(alive)]
    if pairs is None and pair_bound and q_feasible and 0 < len(prefill) * len(decode) <= DYNAMIC_PAIRS:
        pairs = PairTable(options, prefill, decode)
    if pairs is not None and q_feasible and prefill and decode:
        prefill, decode = _pair_bounded(pairs, prefill, decode, eps_s, q)
    if not prefill or not decode:
        return Screened(mixed, [], [])
    return Screened(mixed, prefill, decode)


@dataclass(frozen=True)
class _DecodeTable:
    """Every decode configuration of an options object, as arrays (built once: screening runs per MILP)."""

    configs: list[tuple[DecodeOption, int]]
    conc: np.ndarray
    away: np.ndarray
    gpus: np.ndarray
    fastest: np.ndarray  # lowest TTFT any prefill configuration gives it (s)


_TABLES: weakref.WeakKeyDictionary[DeploymentOptions, _DecodeTable] = weakref.WeakKeyDictionary()


def _decode_table(options: DeploymentOptions) -> _DecodeTable:
    if options not in _TABLES:
        configs = _decode_configs(options.decode, options.domains.gpus)
        a = ConfigArrays.of([], configs)
        _TABLES[options] = _DecodeTable(configs, a.conc, a.away, a.gpus_z, _fastest_ttft(options, a))
    return _TABLES[options]


def _fastest_ttft(options: DeploymentOptions, a: ConfigArrays) -> np.ndarray:
    """Per decode configuration, the lowest TTFT any prefill configuration gives it. TTFT falls as the
    prefill pool grows, so for each prefill candidate only the most instances that fit beside the decode
    pool need checking: candidates x configurations, not pairs."""
    best = np.full(len(a.conc), np.inf)
    for p in options.prefill:
        count = np.minimum(p.most, (options.domains.gpus - a.gpus_z) // p.gpus)
        cap = np.maximum(count, 1) * p.capacity
        transfer = transfer_matrix(options, np.array([p.gpus]), a.size_z)[0]
        ttft, _ = pair_figures(cap, np.full_like(cap, p.fill_s), transfer, a.conc, a.away, options.cohort_fraction)
        best = np.where(count >= 1, np.minimum(best, ttft), best)
    return best


def _bounded(options: DeploymentOptions, prefill: list[tuple[PrefillOption, int]], table: _DecodeTable,
             alive: np.ndarray, eps_s: float | None,
             q: float) -> tuple[list[tuple[PrefillOption, int]], np.ndarray]:
    """Per configuration, the most optimistic objective osl X - q (G_y + G_z) given what the other pool
    must at least hold: a prefill pool serving X needs cap >= X, hence >= gamma X GPUs (gamma: fewest
    GPU-seconds per fill of any prefill candidate), and under a cap eps a concurrency C needs
    cap >= k (C - 1) / (2 (eps - shortest fill and transfer)) for the cohort wait; a decode pool serving X
    holds C >= X (fill + transfer + Z) sequences, hence >= delta C GPUs (delta: fewest GPUs per slot)."""
    osl, a = float(options.output_tokens), ConfigArrays.of(prefill, [])
    index = np.flatnonzero(alive)
    conc, away, gpus_z = table.conc[index], table.away[index], table.gpus[index]
    shortest = a.fill.min() + min(options.kv_transfer_s.values())
    gamma = min(p.gpus / p.capacity for p, _ in prefill)
    delta = float((gpus_z / conc).min())
    # decode configurations
    rate = np.minimum(conc / (shortest + away), a.cap.max())
    needed = np.zeros_like(conc)
    if eps_s is not None and eps_s > shortest:
        needed = options.cohort_fraction * (conc - 1.0) / (2.0 * (eps_s - shortest))
    best_z = np.maximum(*(osl * x - q * (gpus_z + np.maximum(a.gpus_y.min(), gamma * np.maximum(x, needed)))
                          for x in (rate, np.minimum(rate, needed))))
    keep_z = best_z >= -BOUND_TOL * q * gpus_z
    survivors = np.zeros_like(alive)
    survivors[index[keep_z]] = True
    if not keep_z.any():
        return [], survivors
    # prefill configurations
    cycle = a.fill + min(options.kv_transfer_s.values()) + away[keep_z].min()
    fewest_z = gpus_z[keep_z].min()
    rate_y = np.minimum(a.cap, conc[keep_z].max() / cycle)
    knee = np.minimum(rate_y, fewest_z / (delta * cycle))  # where the decode pool's floor stops binding
    best_y = np.maximum(*(osl * x - q * (a.gpus_y + np.maximum(fewest_z, delta * x * cycle)) for x in (rate_y, knee)))
    keep_y = best_y >= -BOUND_TOL * q * a.gpus_y
    return [y for y, k in zip(prefill, keep_y, strict=True) if k], survivors


def _pair_bounded(pairs: PairTable, prefill: list[tuple[PrefillOption, int]],
                  decode: list[tuple[DecodeOption, int]], eps_s: float | None,
                  q: float) -> tuple[list[tuple[PrefillOption, int]], list[tuple[DecodeOption, int]]]:
    keep_y, keep_z = pairs.keep(eps_s, q, PAIR_TOL)
    return ([(p, n) for p, n in prefill if keep_y[pairs.index_y[(id(p), n)]]],
            [(d, n) for d, n in decode if keep_z[pairs.index_z[(id(d), n)]]])
