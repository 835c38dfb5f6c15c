"""Closed-form figures of prefill x decode configuration pairs, vectorised (numpy).

The same steady state as `costmodel.disaggregated.disaggregated_serving` (a test checks them equal): wait at
the prefill pool at = max(t_p, C / cap - (t_kv + Z), t_p + k (C - 1) / (2 cap)), TTFT = at + t_kv,
rate = C / (at + t_kv + Z). Used to screen configurations by exact pair bounds and to find incumbents
for the MILP; the MILP makes the choice, and `planner.deployment` gives the reported figures.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from planner.formulation.options import DecodeOption, DeploymentOptions, PrefillOption

PAIR_LIMIT = 32_000_000  # pairs in the table (~400 MB); beyond, the MILP works on the weakly screened set
CHUNK = 250_000  # pairs per numpy block (memory)


@dataclass(frozen=True)
class ConfigArrays:
    """Per-configuration constants as arrays (prefill: y, decode: z)."""

    prefill: list[tuple[PrefillOption, int]]
    decode: list[tuple[DecodeOption, int]]
    cap: np.ndarray
    fill: np.ndarray
    load: np.ndarray
    gpus_y: np.ndarray
    size_y: np.ndarray
    conc: np.ndarray
    away: np.ndarray
    gpus_z: np.ndarray
    size_z: np.ndarray
    count_y: np.ndarray
    count_z: np.ndarray
    kv_bytes: float  # per request, the fill options' (one request shape per block)

    @staticmethod
    def of(prefill: list[tuple[PrefillOption, int]], decode: list[tuple[DecodeOption, int]]) -> ConfigArrays:
        return ConfigArrays(
            prefill, decode,
            cap=np.array([p.capacity * n for p, n in prefill], dtype=float),
            fill=np.array([p.fill_s for p, _ in prefill], dtype=float),
            load=np.array([p.load for p, _ in prefill], dtype=float),
            gpus_y=np.array([p.gpus * n for p, n in prefill], dtype=float),
            size_y=np.array([p.gpus for p, _ in prefill], dtype=int),
            conc=np.array([d.slots * n for d, n in decode], dtype=float),
            away=np.array([d.decoding_s for d, _ in decode], dtype=float),
            gpus_z=np.array([d.gpus * n for d, n in decode], dtype=float),
            size_z=np.array([d.gpus for d, _ in decode], dtype=int),
            count_y=np.array([n for _, n in prefill], dtype=float),
            count_z=np.array([n for _, n in decode], dtype=float),
            kv_bytes=max((p.kv_bytes for p, _ in prefill), default=1.0),
        )


def transfer_matrix(options: DeploymentOptions, size_y: np.ndarray, size_z: np.ndarray) -> np.ndarray:
    sizes_y, inverse_y = np.unique(size_y, return_inverse=True)
    sizes_z, inverse_z = np.unique(size_z, return_inverse=True)
    table = np.array([[options.kv_transfer_s[(int(a), int(b))] for b in sizes_z] for a in sizes_y])
    return table[np.ix_(inverse_y, inverse_z)]


def pair_figures(cap: np.ndarray, fill: np.ndarray, transfer: np.ndarray, conc: np.ndarray, away: np.ndarray,
                 cohort_fraction: float, load: np.ndarray | None = None,
                 limit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT s, requests/s) of every pair; cap, fill and load are columns (y), conc and away rows (z).
    `load`: the share of cap the prefill pool admits (`Pool.tier_load`; None: all of it); `limit`: the rate
    the NICs and uplinks carry the KV at (`link_limits`; None: no limit)."""
    elsewhere = transfer + away
    at = prefill_wait(cap, fill, elsewhere, conc, cohort_fraction)
    # in place from here: the arrays are large (millions of pairs), and temporaries cost
    rate = np.add(at, elsewhere, out=np.empty(np.broadcast_shapes(np.shape(at), np.shape(elsewhere))))
    np.divide(conc, rate, out=rate)
    admitted = None if load is None else load * cap
    if limit is not None:
        admitted = limit if admitted is None else np.minimum(admitted, limit)
    if admitted is not None:
        capped = rate > admitted
        rate = np.where(capped, admitted, rate)
        at = np.where(capped, conc / rate - elsewhere, at)
    at += transfer
    return at, rate


def prefill_wait(cap: np.ndarray, fill: np.ndarray, elsewhere: np.ndarray, conc: np.ndarray,
                 cohort_fraction: float) -> np.ndarray:
    """`pair_figures`' wait at the prefill pool (before any admission cap), with `elsewhere` the transfer
    plus the decoding time: max(t_p, C / cap - elsewhere, t_p + k (C - 1) / (2 cap)). TTFT is this plus the
    transfer; at + elsewhere >= C / cap, so the rate C / (at + elsewhere) never exceeds cap (to rounding)."""
    shape = np.broadcast_shapes(np.shape(cap), np.shape(fill), np.shape(elsewhere), np.shape(conc))
    # in place on two arrays of the full shape (three times faster than the expression's temporaries, the same
    # bits): steady = C / cap - elsewhere, bunched = fill + k (C - 1) / (2 cap)
    at: np.ndarray = np.divide(conc, cap, out=np.empty(shape))
    at -= elsewhere
    bunched = np.subtract(conc, 1.0, out=np.empty(shape))
    bunched *= cohort_fraction
    bunched /= 2.0 * cap
    bunched += fill
    np.maximum(at, fill, out=at)
    np.maximum(at, bunched, out=at)
    return at


def link_limits(options: DeploymentOptions, size_y: np.ndarray, size_z: np.ndarray, count_y: np.ndarray,
                count_z: np.ndarray, kv_bytes: float) -> np.ndarray | None:
    """Most requests/s the links carry per pair (`costmodel.disaggregated.kv_link_rate`), broadcast over the
    arrays' shapes; None where no size pair takes the NICs."""
    if not options.links or kv_bytes <= 0:  # no link taken, or no KV to move
        return None
    sizes_y, sizes_z = np.unique(size_y), np.unique(size_z)
    egress = np.array([[options.links.get((int(a), int(b)), (np.inf, np.inf))[0] for b in sizes_z] for a in sizes_y])
    ingress = np.array([[options.links.get((int(a), int(b)), (np.inf, np.inf))[1] for b in sizes_z] for a in sizes_y])
    iy, iz = np.searchsorted(sizes_y, size_y), np.searchsorted(sizes_z, size_z)
    with np.errstate(invalid="ignore"):
        out = np.minimum(count_y * size_y * egress[iy, iz], count_z * size_z * ingress[iy, iz]) / kv_bytes
    return np.asarray(np.where(np.isnan(out), np.inf, out))


def pair_block(options: DeploymentOptions, y: ConfigArrays, rows: slice, z: ConfigArrays,
               loaded: bool) -> tuple[np.ndarray, np.ndarray]:
    """TTFT (infinite where the pair passes the shared domains' GPUs) and rate of the prefill configurations
    `rows` of `y` against every decode configuration of `z` (`loaded`: cap rates by the rows' loads)."""
    limit = link_limits(options, y.size_y[rows, None], z.size_z[None, :], y.count_y[rows, None], z.count_z[None, :],
                        y.kv_bytes)
    ttft, rate = pair_figures(y.cap[rows, None], y.fill[rows, None], transfer_matrix(options, y.size_y[rows], z.size_z),
                              z.conc[None, :], z.away[None, :], options.cohort_fraction,
                              y.load[rows, None] if loaded else None, limit)
    gpus = y.gpus_y[rows, None] + z.gpus_z[None, :]
    room = gpus <= options.domains.gpus if options.shared_domains else True  # else: their own groups
    return np.where(room, ttft, np.inf), rate


def kept(ttft: np.ndarray, rate: np.ndarray, gpus: np.ndarray, eps_s: float | None, osl: float, q: float,
         tol: float) -> np.ndarray:
    """Pairs within the cap whose objective osl X - q G reaches -tol q G (the slack absorbs float32 rates:
    keeping extra configurations is always safe)."""
    cap = np.inf if eps_s is None else eps_s * (1 + tol)
    ok: np.ndarray = (ttft <= cap) & (osl * rate - q * gpus >= -tol * q * gpus)
    return ok


class PairTable:
    """TTFT (float64) and request rate (float32) of every prefill x decode configuration pair, computed
    once per solve; pairs over the cluster's GPU count get an infinite TTFT. About 12 bytes per pair:
    `PAIR_LIMIT` pairs take at most about 400 MB."""

    def __init__(self, options: DeploymentOptions, prefill: list[tuple[PrefillOption, int]],
                 decode: list[tuple[DecodeOption, int]]) -> None:
        self.options, self.arrays = options, ConfigArrays.of(prefill, decode)
        self.index_y = {(id(p), n): i for i, (p, n) in enumerate(prefill)}
        self.index_z = {(id(d), n): j for j, (d, n) in enumerate(decode)}
        self._asked = 0  # `best_ratio`'s questions so far, and its staircase (from the second on)
        self._stairs: tuple[list[float], list[tuple[int, int]]] | None = None
        a = self.arrays
        self.ttft = np.empty((len(prefill), len(decode)))
        self.rate = np.empty((len(prefill), len(decode)), dtype=np.float32)
        loaded = bool((a.load < 1.0).any())
        for block in self._blocks():
            self.ttft[block], self.rate[block] = pair_block(options, a, block, a, loaded)

    def _blocks(self) -> list[slice]:
        rows = max(1, CHUNK // max(1, len(self.arrays.decode)))
        return [slice(start, start + rows) for start in range(0, len(self.arrays.prefill), rows)]

    def _gpus(self, block: slice) -> np.ndarray:
        gpus: np.ndarray = self.arrays.gpus_y[block, None] + self.arrays.gpus_z[None, :]
        return gpus

    def _within(self, block: slice, eps_s: float | None, slack: float) -> np.ndarray:
        cap = np.inf if eps_s is None else eps_s * (1 + slack)
        within: np.ndarray = self.ttft[block] <= cap
        return within

    def best_ratio(self, eps_s: float | None) -> tuple[int, int] | None:
        """The pair with the most tokens/s per GPU within the cap (an incumbent: the MILP still checks
        packing and proves it); the first in row-major order among equals. From the second question on, by
        bisection in the table's staircase (`_staircase`), which gives the same pair."""
        self._asked += 1
        if self._asked == 2:
            self._stairs = self._staircase()
        if self._stairs is not None:
            times, picks = self._stairs
            at = bisect.bisect_right(times, np.inf if eps_s is None else eps_s)
            return picks[at - 1] if at else None
        best, where = -np.inf, None
        for block in self._blocks():
            ratio = np.where(self._within(block, eps_s, 0.0), self.rate[block] / self._gpus(block), -np.inf)
            flat = int(np.argmax(ratio))
            if ratio.flat[flat] > best:
                best, where = float(ratio.flat[flat]), ((block.start or 0) + flat // ratio.shape[1],
                                                        flat % ratio.shape[1])
        return where

    def _staircase(self) -> tuple[list[float], list[tuple[int, int]]] | None:
        """`best_ratio`'s answer for every cap: (TTFTs ascending, the pair answering any cap from that TTFT
        up to the next). The answer within cap c is the pair of most ratio among those of TTFT <= c, the
        first in row-major order among equals: a function of that set alone, so it is found by adding the
        pairs by TTFT, and only the pairs that lead some row block for some cap can be it (a block's leader
        for c has the most ratio among the block's pairs added so far). None where a figure is NaN (its
        `argmax` would differ) or the table is empty."""
        if not len(self.arrays.prefill) or not len(self.arrays.decode):
            return None
        width = len(self.arrays.decode)
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (TTFT, ratio, flat index) of the leaders
        for block in self._blocks():
            ttft = self.ttft[block].ravel()
            ratio = (self.rate[block] / self._gpus(block)).ravel()
            if np.isnan(ttft).any() or np.isnan(ratio).any():
                return None
            order = np.argsort(ttft)
            ranked = ratio[order]
            lead = (ranked == np.maximum.accumulate(ranked)) & (ranked > -np.inf)
            found.append((ttft[order[lead]], ranked[lead], (block.start or 0) * width + order[lead]))
        ttft, ratio, flat = (np.concatenate(parts) for parts in zip(*found, strict=True))
        order = np.argsort(ttft)
        times: list[float] = []
        picks: list[tuple[int, int]] = []
        value, index = -np.inf, -1
        for t, v, i in zip(ttft[order].tolist(), ratio[order].tolist(), flat[order].tolist(), strict=True):
            if v > value or (v == value and i < index):
                value, index = v, i
                times.append(t)
                picks.append((i // width, i % width))
        return times, picks

    def keep(self, eps_s: float | None, q: float, tol: float) -> tuple[np.ndarray, np.ndarray]:
        """Configurations with a pair within the cap whose objective osl X - q G reaches -tol q G (the
        slack absorbs float32 rates: keeping extra configurations is always safe)."""
        osl = float(self.options.output_tokens)
        keep_y = np.zeros(len(self.arrays.prefill), dtype=bool)
        keep_z = np.zeros(len(self.arrays.decode), dtype=bool)
        for block in self._blocks():
            ok = kept(self.ttft[block], self.rate[block], self._gpus(block), eps_s, osl, q, tol)
            keep_y[block] = ok.any(axis=1)
            keep_z |= ok.any(axis=0)
        return keep_y, keep_z


class PairColumns:
    """A `PairTable` that persists across screens: every prefill configuration of `rows` with the
    decode configurations asked for so far (columns, computed once each, at most `limit` pairs kept). Each
    pair's figures are those a `PairTable` of any subset holding the pair gives, to the bit (the same
    elementwise operations), so `keep` on a subset is `PairTable(subset).keep`. Valid only where the
    subset's table would not depend on which rows it holds: no row runs below its full load (a table with
    one such row caps every row's rate by its load) and one KV size per request (the table's `kv_bytes` is
    the rows' largest): `of` checks that."""

    def __init__(self, options: DeploymentOptions, rows: ConfigArrays, limit: int) -> None:
        self.options, self.rows, self.limit, self.width = options, rows, limit, len(rows.prefill)
        self.column: dict[tuple[int, int], int] = {}  # decode configuration -> its slot in the stores below
        self.free: list[int] = []  # slots not holding a decode configuration
        # a slot per decode configuration (the table transposed): its GPUs, the last `keep` call that asked
        # for it (`asked`: the calls so far), its figures against every row
        self.gpus_z = np.empty(0)
        self.asked, self.used = 0, np.zeros(0, dtype=np.int64)
        self.ttft = np.empty((0, self.width))
        self.rate = np.empty((0, self.width), dtype=np.float32)

    @staticmethod
    def of(options: DeploymentOptions, rows: ConfigArrays, limit: int) -> PairColumns | None:
        """Columns over the prefill configurations of `rows` (None where they may not, `PairColumns`)."""
        prefill = rows.prefill
        if not prefill or any(p.load < 1.0 for p, _ in prefill) or len({p.kv_bytes for p, _ in prefill}) > 1:
            return None
        return PairColumns(options, rows, limit)

    def keep(self, rows: np.ndarray, decode: list[tuple[DecodeOption, int]], eps_s: float | None, q: float,
             tol: float) -> tuple[np.ndarray, np.ndarray] | None:
        """`PairTable(options, prefill, decode).keep(eps_s, q, tol)` for the prefill configurations `rows`
        (positions in `self.rows`, ascending); None where the decode configurations take more than `limit`
        pairs against every row."""
        if not len(rows) or len(decode) * self.width > self.limit:
            return None
        cols = self._columns(decode)
        osl, width = float(self.options.output_tokens), self.width
        chosen = np.zeros(width, dtype=bool)
        chosen[rows] = True
        keep_y = np.zeros(width, dtype=bool)
        keep_z = np.zeros(len(decode), dtype=bool)
        step = max(1, CHUNK // max(1, width))
        for start in range(0, len(cols), step):
            at = cols[start:start + step]
            gpus = self.rows.gpus_y[None, :] + self.gpus_z[at, None]
            ok = kept(self.ttft[at], self.rate[at], gpus, eps_s, osl, q, tol) & chosen
            keep_z[start:start + step] = ok.any(axis=1)
            keep_y |= ok.any(axis=0)
        return keep_y[rows], keep_z

    def _columns(self, decode: list[tuple[DecodeOption, int]]) -> np.ndarray:
        """The slots of `decode`, computing those not kept yet (when the stores would pass `limit` pairs, the
        slots least recently asked for are reused first)."""
        keys = [(id(d), n) for d, n in decode]
        missing = [(d, n) for (d, n), key in zip(decode, keys, strict=True) if key not in self.column]
        self.asked += 1
        if missing:
            most = max(1, self.limit // self.width)  # slots the limit allows
            short = len(missing) - len(self.free) - (most - len(self.gpus_z))
            if short > 0:  # reuse the slots least recently asked for (none asked now: `keep` checks the count)
                asked = set(keys)
                others = sorted((int(self.used[slot]), slot) for key, slot in self.column.items() if key not in asked)
                dropped = {slot for _, slot in others[:short]}
                self.free += dropped
                self.column = {key: slot for key, slot in self.column.items() if slot not in dropped}
            if len(missing) > len(self.free):  # grow the stores (doubling, within the limit)
                size = min(most, max(len(self.gpus_z) + len(missing) - len(self.free), 2 * len(self.gpus_z)))
                self.free += range(len(self.gpus_z), size)
                grow = size - len(self.gpus_z)
                self.ttft = np.concatenate([self.ttft, np.empty((grow, self.width))])
                self.rate = np.concatenate([self.rate, np.empty((grow, self.width), dtype=np.float32)])
                self.gpus_z = np.concatenate([self.gpus_z, np.empty(grow)])
                self.used = np.concatenate([self.used, np.zeros(grow, dtype=np.int64)])
            slots = [self.free.pop() for _ in missing]
            self._add(missing, np.array(slots, dtype=np.intp))
            self.column.update({(id(d), n): slot for (d, n), slot in zip(missing, slots, strict=True)})
        at = np.array([self.column[key] for key in keys], dtype=np.intp)
        self.used[at] = self.asked
        return at

    def _add(self, decode: list[tuple[DecodeOption, int]], slots: np.ndarray) -> None:
        """`PairTable.__init__`'s figures for the new decode configurations against every row, into `slots`."""
        step = max(1, CHUNK // max(1, self.width))
        for start in range(0, len(decode), step):
            z = ConfigArrays.of([], decode[start:start + step])
            ttft, rate = pair_block(self.options, self.rows, slice(None), z, False)  # `of`: no row below full load
            at = slots[start:start + step]
            self.ttft[at], self.rate[at] = ttft.T, rate.T
            self.gpus_z[at] = z.gpus_z
