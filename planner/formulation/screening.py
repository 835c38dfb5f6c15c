"""Which configurations enter the deployment MILP at a TTFT cap and a Dinkelbach ratio.

A configuration is a candidate with an instance count. Every rule here is safe (it removes only
configurations that no optimal solution of that MILP uses):
- TTFT: a mixed candidate slower than the cap; a prefill configuration whose fill plus the shortest KV
  transfer passes the cap; a decode configuration that no prefill configuration can serve within the
  cap (capacity C / (eps + Z) or the cohort wait t_p + t_kv + k (C - 1) / (2 cap) breaks it);
- size: a configuration that leaves no room for the smallest instance of the other pool;
- bound (only when q is the exact ratio of a deployment within the cap, so the MILP's optimum is >= 0):
  a configuration whose most optimistic objective, osl x (rate bound) - q x (its GPUs + the fewest GPUs
  the other pool needs to match it), is negative (`_bounded`). Then, when the pair table exists (at most
  `PAIR_LIMIT` pairs), the exact bound: a configuration none of whose pairs within the cap reaches objective
  0 (closed-form pair figures, `planner.formulation.pairs`). Packing is left to the MILP, so this bound is
  optimistic.
With a separate midfill pool (sessions), a second structure: first-turn and midfill configurations are
screened by TTFT and size only (each with the other group's shortest share), and a decode configuration
is kept when either structure may use it: for this one, a lower bound on its TTFT (shortest fill and
transfer, largest capacity) and an optimistic objective (`_split_bounded`); the pair rules apply to the
shared structure's pairs only.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from planner.formulation.options import DecodeOption, DeploymentOptions, MixedOption, PrefillOption
from planner.formulation.pairs import ConfigArrays, PairColumns, PairTable, pair_figures, transfer_matrix
from planner.formulation.units import UnitTable

BOUND_TOL = 1e-9  # relative: keep configurations that tie with the incumbent
EPS_TOL = 1e-12  # relative slack of the TTFT screens: sums in another order differ in the last bits
DYNAMIC_PAIRS = 16_000_000  # pairs of bound-screened configurations worth a table of their own
PAIR_TOL = 1e-6  # relative, for the pair table's float32 rates


@dataclass(frozen=True)
class Screened:
    mixed: list[MixedOption]
    prefill: list[tuple[PrefillOption, int]]
    decode: list[tuple[DecodeOption, int]]
    first: list[tuple[PrefillOption, int]] = field(default_factory=list)
    midfill: list[tuple[PrefillOption, int]] = field(default_factory=list)


def _prefill_configs(items: tuple[PrefillOption, ...], room: int) -> list[tuple[PrefillOption, int]]:
    return [(item, n) for item in items for n in range(1, item.most + 1) if n * item.gpus <= room]


def _decode_configs(items: tuple[DecodeOption, ...], room: int) -> list[tuple[DecodeOption, int]]:
    return [(item, n) for item in items for n in range(1, item.most + 1) if n * item.gpus <= room]


def screen(options: DeploymentOptions, eps_s: float | None, q: float, q_feasible: bool,
           pairs: PairTable | None = None, pair_bound: bool = False, columns: PairColumns | None = None) -> Screened:
    """Configurations for the MILP at cap `eps_s` and ratio `q` (module docstring). `pairs`: the table of
    the first cap's pairs; without one, `pair_bound` builds a table of the survivors of the cheaper
    rules when they form at most `DYNAMIC_PAIRS` pairs, or reads their pairs from `columns` (`pair_columns`:
    the same figures, kept across the screens of a sweep) where it holds them."""
    mixed = [m for m in options.mixed if eps_s is None or m.point.ttft_ms / 1e3 <= eps_s]
    if q_feasible:
        mixed = [m for m in mixed if m.point.tokens_per_s_per_gpu >= q * (1 - BOUND_TOL)]
    if not options.disaggregated:
        return Screened(mixed, [], [])
    room = options.fill_room(min(d.gpus for d in options.decode))
    picked = np.array([eps_s is None or p.fill_s + min(options.kv_transfer_s.values()) <= eps_s * (1 + EPS_TOL)
                       for p in options.prefill], dtype=bool)
    fills = [p for p, k in zip(options.prefill, picked, strict=True) if k]
    universe = _fill_table(options)
    rows = np.flatnonzero(picked[universe.owner]) if len(universe.owner) else np.zeros(0, dtype=np.intp)
    prefill = [universe.configs[i] for i in rows]  # `_prefill_configs(fills, room)`: the table's rows of `fills`
    first, midfill = _split_configs(options, eps_s, room)
    if not prefill and not midfill:
        return Screened(mixed, [], [])
    table = _decode_table(options)
    fewest = [min(p.gpus for p in fills)] if prefill else []
    fewest += [min(p.gpus for p, _ in first) + min(p.gpus for p, _ in midfill)] if midfill else []
    alive = table.gpus <= options.decode_room_gpus(min(fewest))
    if eps_s is not None:
        alive &= table.fastest <= eps_s * (1 + 1e-9)
    shared, split = (alive.copy() if prefill else np.zeros_like(alive)), (alive.copy() if midfill else
                                                                          np.zeros_like(alive))
    if q_feasible and prefill and shared.any():
        rows, shared = _bounded(options, universe, rows, table, shared, eps_s, q)
        prefill = [universe.configs[i] for i in rows]
    if q_feasible and midfill and split.any():
        split = _split_bounded(options, first, midfill, table, split, q)
    if pair_bound and midfill and split.any() and (len(first) + len(midfill)) * int(split.sum()) <= DYNAMIC_PAIRS:
        first, midfill, split = _split_pair_bounded(options, first, midfill, table, split, eps_s, q, q_feasible)
    decode = [table.configs[i] for i in np.flatnonzero(shared)]
    if pairs is None and pair_bound and q_feasible and 0 < len(prefill) * len(decode) <= DYNAMIC_PAIRS:
        held = None
        if columns is not None and columns.rows.prefill is universe.configs:  # the columns' rows are the table's
            held = columns.keep(rows, decode, eps_s, q, PAIR_TOL)
        if held is None:
            pairs = PairTable(options, prefill, decode)
        else:
            prefill = [universe.configs[i] for i in rows[held[0]]]
            decode = [z for z, k in zip(decode, held[1], strict=True) if k]
    if pairs is not None and q_feasible and prefill and decode:
        prefill, decode = _pair_bounded(pairs, prefill, decode, eps_s, q)
    if not prefill:
        decode = []
    if not split.any():
        first, midfill = [], []
    else:  # decode configurations either structure may use, in the table's order
        kept = {(id(d), n) for d, n in decode} | {(id(table.configs[i][0]), table.configs[i][1])
                                                   for i in np.flatnonzero(split)}
        decode = [(d, n) for d, n in table.configs if (id(d), n) in kept]
    if not decode:
        return Screened(mixed, [], [])
    return Screened(mixed, prefill, decode, first, midfill)


def pair_columns(options: DeploymentOptions) -> PairColumns | None:
    """The dynamic pair tables' figures kept across a sweep's screens (`screen`'s `columns`): every prefill
    configuration any cap's screen can keep (those that leave room for the smallest decode instance), with
    the decode configurations screens ask for, at most `DYNAMIC_PAIRS` pairs held at once. None where the
    block has no shared structure or its tables depend on their rows (`PairColumns.of`)."""
    if not options.prefill or not options.decode:
        return None
    return PairColumns.of(options, _fill_table(options).arrays, DYNAMIC_PAIRS)


def _split_configs(options: DeploymentOptions, eps_s: float | None,
                   room: int) -> tuple[list[tuple[PrefillOption, int]], list[tuple[PrefillOption, int]]]:
    """First-turn and midfill configurations of a separate midfill pool: each with the other group's
    shortest share of fill and transfer within the cap, and room for the other group's smallest instance."""
    if options.split is None:
        return [], []
    kept = []
    for group, other in (options.split, options.split[::-1]):
        least = min(o.gpus for o in other.options)
        shortest = min(group.transfer_s.values())
        items = tuple(o for o in group.options
                      if eps_s is None
                      or group.share * (o.fill_s + shortest) + other.shortest_s <= eps_s * (1 + EPS_TOL))
        kept.append(_prefill_configs(items, room - least))
    return (kept[0], kept[1]) if kept[0] and kept[1] else ([], [])


@dataclass(frozen=True)
class _DecodeTable:
    """Every decode configuration of an options object, as arrays (built once: screening runs per MILP)."""

    configs: list[tuple[DecodeOption, int]]
    conc: np.ndarray
    away: np.ndarray
    gpus: np.ndarray
    fastest: np.ndarray  # lowest TTFT any prefill configuration gives it (s)


_TABLES: weakref.WeakKeyDictionary[DeploymentOptions, _DecodeTable] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class _FillTable:
    """Every shared-structure prefill configuration any cap's screen may keep (`_prefill_configs` of every
    prefill candidate, with room for the smallest decode instance), as arrays (built once per options)."""

    configs: list[tuple[PrefillOption, int]]
    arrays: ConfigArrays
    owner: np.ndarray  # per configuration, its candidate's position in `options.prefill`
    per_request: np.ndarray  # per configuration, its candidate's GPU-seconds per fill (gpus / capacity)


_FILLS: weakref.WeakKeyDictionary[DeploymentOptions, _FillTable] = weakref.WeakKeyDictionary()


def _fill_table(options: DeploymentOptions) -> _FillTable:
    if options not in _FILLS:
        room = options.fill_room(min(d.gpus for d in options.decode)) if options.decode else 0
        configs, owner = [], []
        for position, item in enumerate(options.prefill):
            held = _prefill_configs((item,), room)
            configs += held
            owner += [position] * len(held)
        _FILLS[options] = _FillTable(configs, ConfigArrays.of(configs, []), np.array(owner, dtype=np.intp),
                                     np.array([p.gpus / p.capacity for p, _ in configs], dtype=float))
    return _FILLS[options]


def _decode_table(options: DeploymentOptions) -> _DecodeTable:
    if options not in _TABLES:
        configs = _decode_configs(options.decode, options.decode_room.gpus)
        a = ConfigArrays.of([], configs)
        _TABLES[options] = _DecodeTable(configs, a.conc, a.away, a.gpus_z, _fastest_ttft(options, a))
    return _TABLES[options]


def _fastest_ttft(options: DeploymentOptions, a: ConfigArrays) -> np.ndarray:
    """Per decode configuration, the lowest TTFT any prefill configuration gives it. TTFT falls as the
    prefill pool grows, so for each prefill candidate only the most instances that fit beside the decode
    pool need checking: candidates x configurations, not pairs. With a separate midfill pool, a lower
    bound for that structure too: its shortest fill and transfer with its largest capacity."""
    best = np.full(len(a.conc), np.inf)
    if options.split is not None:
        cap = np.full(len(a.conc), min(group.capacity_bound for group in options.split))
        shortest = np.full(len(a.conc), sum(group.shortest_s for group in options.split))
        ttft, _ = pair_figures(cap, shortest, np.zeros_like(cap), a.conc, a.away, options.cohort_fraction)
        best = np.asarray(ttft, dtype=float)  # fill and transfer folded together: the same TTFT
    for p in options.prefill:
        count = np.minimum(p.most, options.fill_room(a.gpus_z) // p.gpus)
        cap = np.maximum(count, 1) * p.capacity
        transfer = transfer_matrix(options, np.array([p.gpus]), a.size_z)[0]
        ttft, _ = pair_figures(cap, np.full_like(cap, p.fill_s), transfer, a.conc, a.away, options.cohort_fraction)
        best = np.where(count >= 1, np.minimum(best, ttft), best)
    return best


def _bounded(options: DeploymentOptions, universe: _FillTable, rows: np.ndarray, table: _DecodeTable,
             alive: np.ndarray, eps_s: float | None, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration, the most optimistic objective osl X - q (G_y + G_z) given what the other pool
    must at least hold: a prefill pool serving X needs cap >= X, hence >= gamma X GPUs (gamma: fewest
    GPU-seconds per fill of any prefill candidate), and under a cap eps a concurrency C needs
    cap >= k (C - 1) / (2 (eps - shortest fill and transfer)) for the cohort wait; a decode pool serving X
    holds C >= X (fill + transfer + Z) sequences, hence >= delta C GPUs (delta: fewest GPUs per slot)."""
    osl, every = float(options.output_tokens), universe.arrays
    a = _Rows(every.cap[rows], every.fill[rows], every.gpus_y[rows])  # the configurations `rows` of the table
    index = np.flatnonzero(alive)
    conc, away, gpus_z = table.conc[index], table.away[index], table.gpus[index]
    shortest = a.fill.min() + min(options.kv_transfer_s.values())
    gamma = float(universe.per_request[rows].min())
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
        return rows[:0], survivors
    # prefill configurations
    cycle = a.fill + min(options.kv_transfer_s.values()) + away[keep_z].min()
    fewest_z = gpus_z[keep_z].min()
    rate_y = np.minimum(a.cap, conc[keep_z].max() / cycle)
    knee = np.minimum(rate_y, fewest_z / (delta * cycle))  # where the decode pool's floor stops binding
    best_y = np.maximum(*(osl * x - q * (a.gpus_y + np.maximum(fewest_z, delta * x * cycle)) for x in (rate_y, knee)))
    keep_y = best_y >= -BOUND_TOL * q * a.gpus_y
    return rows[keep_y], survivors


@dataclass(frozen=True)
class _Rows:
    """Some prefill configurations' arrays (`_bounded`)."""

    cap: np.ndarray
    fill: np.ndarray
    gpus_y: np.ndarray


def _split_bounded(options: DeploymentOptions, first: list[tuple[PrefillOption, int]],
                   midfill: list[tuple[PrefillOption, int]], table: _DecodeTable, alive: np.ndarray,
                   q: float, target: float = 0.0) -> np.ndarray:
    """Decode configurations that may beat q with a separate midfill pool: osl X - q (G_z + G_fill) at
    its most optimistic, X <= min(C / (shortest fill and transfer + Z), largest split capacity) and the
    fill pools holding at least the fewest GPUs of each, or gamma X GPUs (gamma: fewest GPU-seconds per
    request, share-weighted over the two pools)."""
    assert options.split is not None
    osl, index = float(options.output_tokens), np.flatnonzero(alive)
    conc, away, gpus_z = table.conc[index], table.away[index], table.gpus[index]
    groups = options.split
    shortest = sum(group.shortest_s for group in groups)
    cap = min(max(p.capacity * n for p, n in items) / group.share for items, group in zip((first, midfill), groups,
                                                                                          strict=True))
    gamma = sum(group.share * min(p.gpus / p.capacity for p, _ in items)
                for items, group in zip((first, midfill), groups, strict=True))
    fewest = min(p.gpus * n for p, n in first) + min(p.gpus * n for p, n in midfill)
    rate = np.minimum(conc / (shortest + away), cap)
    knee = np.minimum(rate, fewest / gamma)
    best = np.maximum(*(osl * x - q * (gpus_z + np.maximum(fewest, gamma * x)) for x in (rate, knee)))
    survivors = np.zeros_like(alive)
    survivors[index[best >= target - BOUND_TOL * (q * gpus_z + target)]] = True
    return survivors


def _split_pair_bounded(options: DeploymentOptions, first: list[tuple[PrefillOption, int]],
                        midfill: list[tuple[PrefillOption, int]], table: _DecodeTable, alive: np.ndarray,
                        eps_s: float | None, q: float, q_feasible: bool, target: float = 0.0
                        ) -> tuple[list[tuple[PrefillOption, int]], list[tuple[PrefillOption, int]], np.ndarray]:
    """Exact-figure bounds for the separate-midfill structure, pair by pair (`_optimistic_split_pairs`): a
    configuration, or a decode configuration, with no optimistic pair within the cap (and, with q, reaching
    objective 0) is in no deployment that is."""
    index = np.flatnonzero(alive)
    keep_z = np.zeros(len(index), dtype=bool)
    kept: list[list[tuple[PrefillOption, int]]] = []
    for pairs in _optimistic_split_pairs(options, first, midfill, table, index):
        ok = pairs.within(options, eps_s)
        if q_feasible:
            ok &= pairs.may_beat(float(options.output_tokens), q, target)
        kept.append([y for y, k in zip(pairs.items, np.asarray(ok.any(axis=1)), strict=True) if k])
        keep_z |= ok.any(axis=0)
    survivors = np.zeros_like(alive)
    survivors[index[keep_z]] = True
    if not kept[0] or not kept[1]:
        return [], [], np.zeros_like(alive)
    return kept[0], kept[1], survivors


@dataclass(frozen=True)
class _OptimisticPairs:
    """One fill group's configurations (rows) with decode configurations (columns): TTFT lower bounds and
    rate upper bounds; the deployment's GPUs at rate x are at least base + max(floor, per_rate x) (the
    other fill pool's fewest GPUs, or what its share of x needs at its best GPU-seconds per request)."""

    items: list[tuple[PrefillOption, int]]
    ttft: np.ndarray
    rate: np.ndarray
    base: np.ndarray
    floor: float
    per_rate: float

    def gpus(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.base + np.maximum(self.floor, self.per_rate * x))

    def within(self, options: DeploymentOptions, eps_s: float | None) -> np.ndarray:
        cap = np.inf if eps_s is None else eps_s * (1 + PAIR_TOL)
        return np.asarray((self.ttft <= cap) & (self.base + self.floor <= options.domains.gpus))

    def may_beat(self, osl: float, q: float, target: float = 0.0) -> np.ndarray:
        """osl x - q G(x) can reach `target` for some x up to the rate bound (checked at the bound and the
        knee); target 0 with the Dinkelbach q, or the incumbent's tokens/s with q = 0 (cluster accounting)."""
        knee = np.minimum(self.rate, self.floor / self.per_rate if self.per_rate > 0 else np.inf)
        best = np.maximum(*(osl * x - q * self.gpus(x) for x in (self.rate, knee)))
        return np.asarray(best >= target - PAIR_TOL * (q * self.gpus(self.rate) + target))

    def best_ratio(self, options: DeploymentOptions, ok: np.ndarray) -> float:
        """Most tokens/s per GPU among the pairs in `ok` (the ratio grows with x; x stops where the
        GPUs fill the cluster)."""
        room = (options.domains.gpus - self.base) / self.per_rate if self.per_rate > 0 else np.inf
        x = np.minimum(self.rate, np.maximum(room, 0.0))
        ratio = np.where(ok, options.output_tokens * x / self.gpus(x), -np.inf)
        return float(np.max(ratio)) if ratio.size else -np.inf


def _optimistic_split_pairs(options: DeploymentOptions, first: list[tuple[PrefillOption, int]],
                            midfill: list[tuple[PrefillOption, int]], table: _DecodeTable,
                            index: np.ndarray) -> list[_OptimisticPairs]:
    """Per fill group of the separate-midfill structure, each of its configurations with every decode
    configuration in `index`, the other fill pool at its best (largest capacity, shortest fill and
    transfer, fewest GPUs or fewest GPU-seconds per request). The structure's figures are the single-pool
    closed form with the share-weighted fill and transfer and the tighter capacity
    (`costmodel.disaggregated.split_serving`), which only improve as capacity grows and fill and transfer shrink:
    these bound every deployment that holds the configuration and the decode configuration."""
    assert options.split is not None
    conc, away, gpus_z = table.conc[index], table.away[index], table.gpus[index]
    size_z = np.array([table.configs[i][0].gpus for i in index])
    result = []
    for items, others, (group, other) in ((first, midfill, options.split), (midfill, first, options.split[::-1])):
        a = ConfigArrays.of(items, [])
        best_cap = max(p.capacity * n for p, n in others) / other.share
        other_fill = other.share * min(p.fill_s for p, _ in others)
        sizes = sorted({p.gpus for p, _ in others})
        sizes_y, at_y = np.unique(a.size_y, return_inverse=True)
        sizes_z, at_z = np.unique(size_z, return_inverse=True)
        other_transfer = np.array([min(other.transfer_s[(s, int(z))] for s in sizes) for z in sizes_z])[at_z]
        own = np.array([[group.transfer_s[(int(y), int(z))] for z in sizes_z] for y in sizes_y])
        own_transfer = own[np.ix_(at_y, at_z)].reshape(len(items), len(size_z))
        cap = np.minimum(a.cap / group.share, best_cap)[:, None]
        fill = (group.share * a.fill + other_fill)[:, None]
        transfer = group.share * own_transfer + other.share * other_transfer[None, :]
        ttft, rate = pair_figures(cap, fill, transfer, conc[None, :], away[None, :], options.cohort_fraction)
        result.append(_OptimisticPairs(
            items, np.asarray(ttft), np.asarray(rate), a.gpus_y[:, None] + gpus_z[None, :],
            floor=float(min(p.gpus * n for p, n in others)),
            per_rate=other.share * min(p.gpus / p.capacity for p, _ in others)))
    return result


class TooManyPairs(Exception):
    """More configuration pairs than a bound's limit: the bound is not tabulated (a report says so)."""


# Pairs (fill configurations of both groups x decode configurations) `split_ratio_bound` tabulates at most: a
# report's bound, computed for each point, at about 40 bytes a pair in its arrays. Beyond it the point's report
# quotes no bound. Measured: gpt-oss-120b sessions on 16 MI300X racks, disaggregated, held 9,857 x 52,171 = 514
# million pairs, 69 s and several GB for one point's sentence, in a solve of 8 s.
SPLIT_BOUND_PAIR_LIMIT = 4_000_000


def split_ratio_bound(options: DeploymentOptions, eps_s: float | None) -> float | None:
    """Most tokens/s per GPU any deployment with a separate midfill pool can reach within the cap (an
    upper bound from the optimistic pairs; None when none is within it); raises TooManyPairs beyond
    `SPLIT_BOUND_PAIR_LIMIT` pairs."""
    screened = screen(options, eps_s, 0.0, False)
    if not screened.midfill:
        return None
    table = _decode_table(options)
    keys = {(id(d), n) for d, n in screened.decode}
    index = np.array([i for i, (d, n) in enumerate(table.configs) if (id(d), n) in keys], dtype=int)
    if (len(screened.first) + len(screened.midfill)) * len(index) > SPLIT_BOUND_PAIR_LIMIT:
        raise TooManyPairs
    pairs = _optimistic_split_pairs(options, screened.first, screened.midfill, table, index)
    # every deployment holds a first-turn configuration: the first group's pairs already bound them all
    best = min(p.best_ratio(options, p.within(options, eps_s)) for p in pairs)
    return None if math.isinf(best) else best


def _pair_bounded(pairs: PairTable, prefill: list[tuple[PrefillOption, int]],
                  decode: list[tuple[DecodeOption, int]], eps_s: float | None,
                  q: float) -> tuple[list[tuple[PrefillOption, int]], list[tuple[DecodeOption, int]]]:
    keep_y, keep_z = pairs.keep(eps_s, q, PAIR_TOL)
    return ([(p, n) for p, n in prefill if keep_y[pairs.index_y[(id(p), n)]]],
            [(d, n) for d, n in decode if keep_z[pairs.index_z[(id(d), n)]]])


def screen_cluster(options: DeploymentOptions, units: UnitTable | None, eps_s: float | None,
                   target: float) -> Screened:
    """Configurations for the cluster-accounting MILP at cap `eps_s` (objective: tokens/s, q = 0), given
    an incumbent of `target` tokens/s within the cap. Safe: an aggregated option below the target, or a
    shared-structure configuration in no triple of the unit table that reaches it within the cap, is in
    no deployment that beats the incumbent (`planner.formulation.units`: every (p, P, d, D) is matched by
    (p, P_max, d, D)); the separate-midfill structure keeps what its optimistic bounds cannot rule out."""
    osl = float(options.output_tokens)
    mixed = [m for m in options.mixed if (eps_s is None or m.point.ttft_ms / 1e3 <= eps_s)
             and m.point.tokens_per_s >= target * (1 - BOUND_TOL)]
    if not options.disaggregated:
        return Screened(mixed, [], [])
    prefill: dict[tuple[int, int], tuple[PrefillOption, int]] = {}
    decode: dict[tuple[int, int], tuple[DecodeOption, int]] = {}
    if units is not None:
        for i in units.near_best(eps_s, PAIR_TOL):
            if osl * float(units.rate[i]) >= target * (1 - PAIR_TOL):
                p, count_p = int(units.prefill[i]), int(units.prefills[i])
                d, count_d = int(units.decode[i]), int(units.decodes[i])
                prefill[(p, count_p)] = (options.prefill[p], count_p)
                decode[(d, count_d)] = (options.decode[d], count_d)
    room = options.fill_room(min(d.gpus for d in options.decode))
    first, midfill = _split_configs(options, eps_s, room)
    if midfill:
        table = _decode_table(options)
        fewest = min(p.gpus for p, _ in first) + min(p.gpus for p, _ in midfill)
        alive = table.gpus <= options.decode_room_gpus(fewest)
        if eps_s is not None:
            alive &= table.fastest <= eps_s * (1 + 1e-9)
        split = _split_bounded(options, first, midfill, table, alive, 0.0, target) if alive.any() else alive
        if split.any() and (len(first) + len(midfill)) * int(split.sum()) <= DYNAMIC_PAIRS:
            first, midfill, split = _split_pair_bounded(options, first, midfill, table, split, eps_s, 0.0, True,
                                                        target)
        if split.any():
            position = {id(d): i for i, d in enumerate(options.decode)}
            for i in np.flatnonzero(split):
                option, count = table.configs[i]
                decode.setdefault((position[id(option)], count), (option, count))
        else:
            first, midfill = [], []
    ordered = [decode[key] for key in sorted(decode)]
    shared = [prefill[key] for key in sorted(prefill)]
    if not ordered or (not shared and not midfill):
        return Screened(mixed, [], [])
    return Screened(mixed, shared, ordered, first, midfill)
