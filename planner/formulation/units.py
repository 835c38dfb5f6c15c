"""Cluster accounting: every disaggregated deployment of one prefill and one decode pool, in closed form.

Under `cluster` GPU accounting the ranked figure is the deployment's tokens/s over the cluster's GPUs, a
constant: maximising it is maximising the rate X. For a prefill candidate p, a decode candidate d and D
decode instances, more prefill instances never lower X nor raise TTFT: X = min(cap, C / (A + k (C - 1) /
(2 cap))) grows with cap = P mu_p, the wait at the prefill pool max(t_p, C / cap - E, t_p + k (C - 1) /
(2 cap)) shrinks, and a pool sized for part of its rate admits tier_load x cap, which grows too
(`costmodel.disaggregated.split_serving`). So the most prefill instances that fit beside the decode pool,
P_max(p, d, D), dominate every smaller count: the space collapses from (p, P, d, D) to (p, d, D), which
at 64 racks is about 14 M triples, computed here in numpy blocks with the same closed form as the cost
model (`pairs.pair_figures`, tested equal). Two exact cuts come first: at each decode count, a fill option
that another of no slower bare fill dominates in capacity and admitted rate is never faster beside any decode
option (`undominated_fills`); and beside one decode option at one count every fill lies on one curve, rate =
C / (TTFT + Z), so only the fastest (with its near-ties) can reach the front (`_best_fills`). Ten
attention-DP degrees on the 64-rack mixed fleet: 667 M triples, 94 M after the first cut, 0.1 M on the front.

P_max comes from the MILP's packing rows (`model._define_packing`), exact when instance sizes divide each
other (powers of two); otherwise each triple's count is lowered until the exact packer accepts it.

The table keeps, per block, only the triples that no other triple of the block beats in both TTFT and
rate (with a relative tolerance, so near-ties stay), then the same over the survivors: what remains is
the front of the disaggregated space (fattened by the tolerance), from which the sweep takes its
incumbents and the MILP its configurations at each TTFT cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from costmodel.resolve import ResolvedScenario
from planner.formulation.options import DecodeOption, DeploymentOptions, PrefillOption
from planner.formulation.pairs import link_limits, pair_figures
from planner.pareto import binned_front
from planner.placement import Domains, divisible, fits, packing_rows

KEEP_TOL = 1e-6  # relative: triples within this of the block's best rate at their TTFT are kept
BLOCK = 2_000_000  # triples per numpy block (memory: ~10 arrays of this many float64)


@dataclass(frozen=True)
class UnitTable:
    """The disaggregated front of `options` under cluster accounting, as arrays sorted by TTFT: per entry
    the TTFT (s), the rate (requests/s), the prefill option and count, the decode option and count."""

    ttft: np.ndarray
    rate: np.ndarray
    prefill: np.ndarray  # index into options.prefill
    prefills: np.ndarray
    decode: np.ndarray  # index into options.decode
    decodes: np.ndarray
    best_rate: np.ndarray  # running maximum of `rate` along TTFT: the best within each entry's TTFT

    def best_within(self, eps_s: float | None) -> int | None:
        """Index of the highest-rate entry with TTFT <= eps (None when none is within it)."""
        end = len(self.ttft) if eps_s is None else int(np.searchsorted(self.ttft, eps_s * (1 + 1e-12), "right"))
        if end == 0:
            return None
        return int(np.argmax(self.rate[:end]))

    def near_best(self, eps_s: float | None, tol: float) -> np.ndarray:
        """Indices of entries within the cap whose rate is within `tol` (relative) of the best there."""
        end = len(self.ttft) if eps_s is None else int(np.searchsorted(self.ttft, eps_s * (1 + 1e-12), "right"))
        if end == 0:
            return np.zeros(0, dtype=int)
        best = float(self.best_rate[end - 1])
        return np.flatnonzero(self.rate[:end] >= best * (1 - tol))


def first_cap(resolved: ResolvedScenario) -> float | None:
    """The first (largest) TTFT cap, s: the SLO's (None without one). The sweep's tables are built within it,
    and the batch search's, which the sweep takes (`join_tables`)."""
    slo = resolved.scenario.slo.ttft_ms
    return None if slo is None else slo / 1e3


def unit_table(options: DeploymentOptions, first_cap_s: float | None) -> UnitTable | None:
    """The table of `options`' shared structure within the first TTFT cap (None without one); kept on the
    options object (the batch search leaves there the table it joined from its rounds', `join_tables`)."""
    if first_cap_s not in options.unit_tables:
        options.unit_tables[first_cap_s] = _unit_table(options, first_cap_s)
    return cast(UnitTable | None, options.unit_tables[first_cap_s])


@dataclass(frozen=True)
class TableEntries:
    """A unit table's entries with their options named by candidate (`id` of each option's candidate, kept
    alive by its candidate set) instead of by index: valid in any options built from the same candidates."""

    ttft: np.ndarray
    rate: np.ndarray
    prefill: np.ndarray  # candidate ids
    prefills: np.ndarray
    decode: np.ndarray  # candidate ids
    decodes: np.ndarray
    kv_bytes: float  # the KV a request moves, as `_block` takes it for the link limits: its options' most

    @staticmethod
    def of(table: UnitTable, options: DeploymentOptions) -> TableEntries:
        prefill = np.array([id(p.candidate) for p in options.prefill], dtype=np.int64)
        decode = np.array([id(d.candidate) for d in options.decode], dtype=np.int64)
        return TableEntries(table.ttft, table.rate, prefill[table.prefill], table.prefills, decode[table.decode],
                            table.decodes, _kv_bytes(options.prefill))


def join_tables(options: DeploymentOptions, parts: list[TableEntries], cap_s: float | None) -> bool:
    """Leave on `options` (for `unit_table`) its table within `cap_s` joined from the tables, within the same
    cap, of option sets that together hold every pair of its fill and decode options (the batch search's
    rounds: each round's new fills with every decode option, its earlier fills with the new decode options);
    False where the parts' link limits took another KV size than `options`' would (not joined).

    The entries are `unit_table`'s (to rounding), and at most near-ties of them besides: a part's table drops
    only entries one of its entries beats by more than KEEP_TOL, or whose fill another of the part dominates
    (`undominated_fills`), and the best rate at or below any TTFT is reached by an entry no part drops; a fill
    dominated by one of a later round stays with its entries where they are within KEEP_TOL of that one's (a
    fresh build drops them). A fill option the options have since pruned
    (`planner.formulation.options._prune_prefill`: as fast, no less capacity, admitted load or KV) is matched
    entry by entry by the option that pruned it, so its entries are dropped. Exact ties may come in another
    order than `unit_table`'s (the same in every run)."""
    if options.links and any(part.kv_bytes != _kv_bytes(options.prefill) for part in parts):
        return False
    options.unit_tables[cap_s] = _joined(options, parts)
    return True


def _joined(options: DeploymentOptions, parts: list[TableEntries]) -> UnitTable | None:
    if not parts:
        return None
    index_p = {id(p.candidate): i for i, p in enumerate(options.prefill)}
    index_d = {id(d.candidate): i for i, d in enumerate(options.decode)}
    columns = [np.concatenate([getattr(part, name) for part in parts]) for name in
               ("ttft", "rate", "prefill", "prefills", "decode", "decodes")]
    prefill = np.array([index_p.get(c, -1) for c in columns[2].tolist()], dtype=np.int64)
    decode = np.array([index_d.get(c, -1) for c in columns[4].tolist()], dtype=np.int64)
    known = (prefill >= 0) & (decode >= 0)
    if not known.any():
        return None
    ttft, rate, count_p, count_d = (columns[i][known] for i in (0, 1, 3, 5))
    keep = _front_mask(ttft, rate)
    return UnitTable(ttft[keep], rate[keep], prefill[known][keep], count_p[keep], decode[known][keep],
                     count_d[keep], np.maximum.accumulate(rate[keep]))


def _kv_bytes(prefill: tuple[PrefillOption, ...] | list[PrefillOption]) -> float:
    return max((p.kv_bytes for p in prefill), default=0.0)


def _unit_table(options: DeploymentOptions, first_cap_s: float | None) -> UnitTable | None:
    if not options.prefill or not options.decode:
        return None
    prefill = list(options.prefill)
    exact = options.decode_domains is not None or divisible(
        [p.gpus for p in prefill] + [d.gpus for d in options.decode], options.domains)
    groups: dict[tuple[int, int], list[int]] = {}
    for index, d in enumerate(options.decode):  # decode options of one size and count limit share P_max
        groups.setdefault((d.gpus, d.most), []).append(index)
    parts = []
    for (size, most), members in sorted(groups.items()):
        counts = _decode_counts(options, prefill, size, most)
        if counts.size == 0:
            continue
        count_p = _prefill_counts(options, prefill, size, counts, exact)
        fills = _Fills.of(options, prefill, size, counts, count_p)
        if fills is None:
            continue
        rows = max(1, BLOCK // fills.row.size)
        for start in range(0, len(members), rows):
            part = _block(options, fills, members[start:start + rows], counts, count_p, first_cap_s)
            if part is not None:
                parts.append(part)
    if not parts:
        return None
    columns = [np.concatenate([part[i] for part in parts]) for i in range(6)]
    keep = _front_mask(columns[0], columns[1])
    ttft, rate, p, count_p, d, count_d = (column[keep] for column in columns)
    return UnitTable(ttft, rate, p, count_p, d, count_d, np.maximum.accumulate(rate))


def _decode_counts(options: DeploymentOptions, prefill: list[PrefillOption], size: int, most: int) -> np.ndarray:
    counts = np.arange(1, most + 1)
    if options.decode_domains is not None:  # on another group: the fills' room does not depend on it
        return counts
    smallest = min(p.gpus for p in prefill)
    return np.asarray(counts[counts * size <= options.domains.gpus - smallest])


def _prefill_counts(options: DeploymentOptions, prefill: list[PrefillOption], size: int, counts: np.ndarray,
                    divisible: bool) -> np.ndarray:
    """P_max per prefill option (rows) and decode count (columns)."""
    gpus_p = np.array([p.gpus for p in prefill])
    most_p = np.array([p.most for p in prefill])
    if options.decode_domains is not None:
        return np.asarray(np.broadcast_to(most_p[:, None], (len(prefill), counts.size)).copy())
    count_p = np.minimum(most_p[:, None], most_beside(gpus_p, size, counts, options.domains))
    if not divisible:
        count_p = _packed_counts(gpus_p, size, counts, count_p, options.domains)
    return np.asarray(count_p)


def _block(options: DeploymentOptions, fills: _Fills, members: list[int], counts: np.ndarray, count_p: np.ndarray,
           cap_s: float | None) -> tuple[np.ndarray, ...] | None:
    """The triples of decode options `members` (one size) with `fills`, the fill options at each count that
    no other beats beside any decode option: axes (decode option, fill pair)."""
    decode = [options.decode[i] for i in members]
    conc = np.array([d.slots for d in decode], dtype=float)[:, None] * counts[fills.col][None, :]
    away = np.array([d.decoding_s for d in decode])[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ttft, rate = pair_figures(fills.cap[None], fills.fill[None], fills.transfer[None], conc, away,
                                  options.cohort_fraction, None if fills.load is None else fills.load[None],
                                  None if fills.limit is None else fills.limit[None])
    ok = np.isfinite(ttft)
    if cap_s is not None:
        ok &= ttft <= cap_s * (1 + 1e-12)
    if not ok.any():
        return None
    ok &= _best_fills(rate, ok, fills.col)
    which, pairs = np.nonzero(ok)
    rows, cols = fills.row[pairs], fills.col[pairs]
    ttft_k, rate_k = ttft[which, pairs], np.asarray(rate, dtype=float)[which, pairs]
    coarse = np.flatnonzero(binned_front(ttft_k, rate_k, KEEP_TOL))
    which, rows, cols, ttft_k, rate_k = which[coarse], rows[coarse], cols[coarse], ttft_k[coarse], rate_k[coarse]
    keep = _front_mask(ttft_k, rate_k)
    which, rows, cols = which[keep], rows[keep], cols[keep]
    return (ttft_k[keep], rate_k[keep], rows, count_p[rows, cols], np.asarray(members)[which], counts[cols])


@dataclass(frozen=True)
class _Fills:
    """The (fill option, count column) pairs of a block that no other pair of the same column beats, in
    row-major order (`row`, `col`), with their per-pair constants for `pair_figures`."""

    row: np.ndarray
    col: np.ndarray
    cap: np.ndarray  # requests/s of the fill pool: capacity x P_max
    fill: np.ndarray
    transfer: np.ndarray
    load: np.ndarray | None  # share of cap admitted (None: all, every option)
    limit: np.ndarray | None  # rate the links carry (None: no link taken)

    @staticmethod
    def of(options: DeploymentOptions, prefill: list[PrefillOption], size: int, counts: np.ndarray,
           count_p: np.ndarray) -> _Fills | None:
        cap = np.array([p.capacity for p in prefill])[:, None] * count_p
        fill = np.array([p.fill_s for p in prefill])
        load = np.array([p.load for p in prefill])
        transfer = np.array([options.kv_transfer_s[(p.gpus, size)] for p in prefill])
        gpus_p = np.array([p.gpus for p in prefill])[:, None]
        limit = link_limits(options, gpus_p, np.array(size), count_p.astype(float), counts[None, :].astype(float),
                            _kv_bytes(prefill))
        limit = None if limit is None else np.broadcast_to(limit, cap.shape)
        loaded = bool((load < 1.0).any())
        admitted = cap if not loaded else load[:, None] * cap
        admitted = admitted if limit is None else np.minimum(admitted, limit)
        keep = undominated_fills(fill + transfer, cap, np.minimum(cap, admitted), count_p >= 1)
        row, col = np.nonzero(keep)
        if row.size == 0:
            return None
        return _Fills(row, col, cap[row, col], fill[row], transfer[row], load[row] if loaded else None,
                      None if limit is None else limit[row, col])


def undominated_fills(alone: np.ndarray, cap: np.ndarray, admitted: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mask of the (fill option, count column) pairs `valid` that no other of their column dominates beside
    every decode option. Beside C sequences decoding for Z, a fill pool's TTFT is max(alone + k (C - 1) /
    (2 cap), C / admitted - Z) (`pair_figures`; alone = fill + KV transfer, admitted <= cap the rate it
    takes), so a pair with no more `alone` and at least the other's cap and admitted rate is never slower, and
    (on one rate = C / (TTFT + Z) curve) never carries less. Sufficient, and cheap: a pair is dropped when
    one of no more `alone` (earlier in a stable sort, so of equals the first stays) admits at least its cap
    (whence its cap and admitted rate are no less either); exact where nothing caps the rate (admitted =
    cap)."""
    order = np.argsort(alone, kind="stable")
    taken = np.where(valid, admitted, -np.inf)[order]
    before = np.maximum.accumulate(taken, axis=0)
    before = np.vstack([np.full((1, taken.shape[1]), -np.inf), before[:-1]])
    keep = np.empty_like(valid)
    keep[order] = valid[order] & (before < cap[order])
    return keep


def _best_fills(rate: np.ndarray, ok: np.ndarray, col: np.ndarray) -> np.ndarray:
    """Of the entries `ok` (decode option, fill pair), those whose rate is within KEEP_TOL of the best of their
    decode option and count (`col`, the pair's count column). A decode option at a count serves C sequences
    that each cycle through TTFT and its decoding time Z, so every fill beside it lies on rate = C / (TTFT + Z)
    (`pair_figures`, capped rates included): the fill with the most rate has the least TTFT, and the others
    it beats by more than KEEP_TOL are what `_front_mask` drops (the front is the same; a cheap cut first)."""
    order = np.argsort(col, kind="stable")
    grouped = np.where(ok, rate, -np.inf)[:, order]
    starts = np.flatnonzero(np.diff(col[order], prepend=-1))
    best = np.maximum.reduceat(grouped, starts, axis=1)
    spread = np.empty_like(grouped)
    spread[:, order] = np.repeat(best, np.diff(np.append(starts, col.size)), axis=1)
    return np.asarray(rate >= spread * (1 - KEEP_TOL))


def _front_mask(ttft: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Entries no faster-or-equal entry beats by more than KEEP_TOL in rate, as a mask in TTFT order
    (the arrays are returned sorted by TTFT by the caller's indexing)."""
    order = np.lexsort((-rate, ttft))
    sorted_rate = rate[order]
    before = np.concatenate(([-np.inf], np.maximum.accumulate(sorted_rate)[:-1]))
    keep = sorted_rate >= before * (1 - KEEP_TOL)
    return np.asarray(order[keep])


def most_beside(size_p: np.ndarray, size_d: int, counts: np.ndarray, domains: Domains) -> np.ndarray:
    """Most prefill instances of each size in `size_p` (rows) beside `counts` decode instances of `size_d`
    (columns), by the packing rows (`planner.placement.packing_rows`): exact when sizes divide each other."""
    sizes, which = np.unique(np.asarray(size_p, dtype=np.int64), return_inverse=True)  # few sizes, many options
    per_size = [_most_of_size(int(size), size_d, counts, domains) for size in sizes]
    if not per_size:
        return np.empty((0, counts.size), dtype=np.int64)
    return np.asarray(np.stack(per_size).astype(np.int64)[np.reshape(which, -1)])


def _most_of_size(size: int, size_d: int, counts: np.ndarray, domains: Domains) -> np.ndarray:
    rows = packing_rows(domains, [size, size_d])
    limits = [(row.rhs - row.weight(size_d) * counts) // row.weight(size) for row in rows if row.weight(size) > 0]
    bound = np.min(np.stack(limits), axis=0) if limits else np.zeros_like(counts)
    fits_d = np.all(np.stack([row.weight(size_d) * counts <= row.rhs for row in rows]), axis=0)
    return np.where(fits_d, np.maximum(bound, 0), 0)


def _packed_counts(size_p: np.ndarray, size_d: int, counts: np.ndarray, count_p: np.ndarray,
                   domains: Domains) -> np.ndarray:
    """Sizes that do not divide each other: lower each count until the exact packer accepts it, once per
    size (fewer instances fit where more do, so an option's count is the least of its own and its size's,
    and no more than beside fewer decode instances: `counts` ascend, and the rows' counts `count_p` do not
    grow along them, so the bound never cuts below min(count_p, the packer's largest))."""
    result = count_p.copy()
    for size in np.unique(size_p).tolist():
        if divisible([size, size_d], domains):
            continue  # the packing rows, whence count_p, are exact for this pair: the packer accepts them
        rows = np.flatnonzero(size_p == size)
        beside_fewer = int(result[rows].max(initial=0))
        for col, count_d in enumerate(counts.tolist()):
            n = min(int(result[rows, col].max()), beside_fewer)
            while n >= 1 and not fits([(size, n), (size_d, count_d)], domains):
                n -= 1
            result[rows, col] = np.minimum(result[rows, col], n)
            beside_fewer = n
    return result


def selection_of(table: UnitTable, options: DeploymentOptions, entry: int) -> tuple[PrefillOption, int,
                                                                                      DecodeOption, int]:
    return (options.prefill[int(table.prefill[entry])], int(table.prefills[entry]),
            options.decode[int(table.decode[entry])], int(table.decodes[entry]))
