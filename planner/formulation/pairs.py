"""Closed-form figures of prefill x decode configuration pairs, vectorised (numpy).

The same steady state as `costmodel.disaggregated.disaggregated_serving` (a test checks them equal): wait at
the prefill pool at = max(t_p, C / cap - (t_kv + Z), t_p + k (C - 1) / (2 cap)), TTFT = at + t_kv,
rate = C / (at + t_kv + Z). Used to screen configurations by exact pair bounds and to find incumbents
for the MILP; the MILP makes the choice, and `planner.deployment` gives the reported figures.
"""

from __future__ import annotations

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
    rate = conc / (at + elsewhere)
    admitted = None if load is None else load * cap
    if limit is not None:
        admitted = limit if admitted is None else np.minimum(admitted, limit)
    if admitted is not None:
        capped = rate > admitted
        rate = np.where(capped, admitted, rate)
        at = np.where(capped, conc / rate - elsewhere, at)
    return at + transfer, rate


def prefill_wait(cap: np.ndarray, fill: np.ndarray, elsewhere: np.ndarray, conc: np.ndarray,
                 cohort_fraction: float) -> np.ndarray:
    """`pair_figures`' wait at the prefill pool (before any admission cap), with `elsewhere` the transfer
    plus the decoding time: max(t_p, C / cap - elsewhere, t_p + k (C - 1) / (2 cap)). TTFT is this plus the
    transfer; at + elsewhere >= C / cap, so the rate C / (at + elsewhere) never exceeds cap (to rounding)."""
    steady = conc / cap - elsewhere
    bunched = fill + cohort_fraction * (conc - 1.0) / (2.0 * cap)
    at: np.ndarray = np.maximum(np.maximum(fill, steady), bunched)
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


class PairTable:
    """TTFT (float64) and request rate (float32) of every prefill x decode configuration pair, computed
    once per solve; pairs over the cluster's GPU count get an infinite TTFT. About 12 bytes per pair:
    `PAIR_LIMIT` pairs take at most about 400 MB."""

    def __init__(self, options: DeploymentOptions, prefill: list[tuple[PrefillOption, int]],
                 decode: list[tuple[DecodeOption, int]]) -> None:
        self.options, self.arrays = options, ConfigArrays.of(prefill, decode)
        self.index_y = {(id(p), n): i for i, (p, n) in enumerate(prefill)}
        self.index_z = {(id(d), n): j for j, (d, n) in enumerate(decode)}
        a = self.arrays
        self.ttft = np.empty((len(prefill), len(decode)))
        self.rate = np.empty((len(prefill), len(decode)), dtype=np.float32)
        for block in self._blocks():
            limit = link_limits(options, a.size_y[block, None], a.size_z[None, :], a.count_y[block, None],
                                a.count_z[None, :], a.kv_bytes)
            ttft, rate = pair_figures(a.cap[block, None], a.fill[block, None],
                                      transfer_matrix(options, a.size_y[block], a.size_z),
                                      a.conc[None, :], a.away[None, :], options.cohort_fraction,
                                      a.load[block, None] if (a.load < 1.0).any() else None, limit)
            room = self._gpus(block) <= options.domains.gpus if options.shared_domains else True  # else: own groups
            self.ttft[block] = np.where(room, ttft, np.inf)
            self.rate[block] = rate

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
        packing and proves it)."""
        best, where = -np.inf, None
        for block in self._blocks():
            ratio = np.where(self._within(block, eps_s, 0.0), self.rate[block] / self._gpus(block), -np.inf)
            flat = int(np.argmax(ratio))
            if ratio.flat[flat] > best:
                best, where = float(ratio.flat[flat]), ((block.start or 0) + flat // ratio.shape[1],
                                                        flat % ratio.shape[1])
        return where

    def keep(self, eps_s: float | None, q: float, tol: float) -> tuple[np.ndarray, np.ndarray]:
        """Configurations with a pair within the cap whose objective osl X - q G reaches -tol q G (the
        slack absorbs float32 rates: keeping extra configurations is always safe)."""
        osl = float(self.options.output_tokens)
        keep_y = np.zeros(len(self.arrays.prefill), dtype=bool)
        keep_z = np.zeros(len(self.arrays.decode), dtype=bool)
        for block in self._blocks():
            gpus = self._gpus(block)
            ok = self._within(block, eps_s, tol) & (osl * self.rate[block] - q * gpus >= -tol * q * gpus)
            keep_y[block] = ok.any(axis=1)
            keep_z |= ok.any(axis=0)
        return keep_y, keep_z
