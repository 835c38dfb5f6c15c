"""Closed-form figures of prefill x decode configuration pairs, vectorised (numpy).

The same steady state as `costmodel.serving.disaggregated_serving` (a test checks them equal): wait at
the prefill pool at = max(t_p, C / cap - (t_kv + Z), t_p + k (C - 1) / (2 cap)), TTFT = at + t_kv,
rate = C / (at + t_kv + Z). Used to screen configurations by exact pair bounds and to find incumbents
for the MILP; the MILP makes the choice, and `planner.deployment` gives the reported figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.formulation.options import DecodeOption, DeploymentOptions, PrefillOption

PAIR_LIMIT = 4_000_000  # pairs evaluated per screening; beyond, the MILP works on the weakly screened set
CHUNK = 250_000  # pairs per numpy block (memory)


@dataclass(frozen=True)
class ConfigArrays:
    """Per-configuration constants as arrays (prefill: y, decode: z)."""

    prefill: list[tuple[PrefillOption, int]]
    decode: list[tuple[DecodeOption, int]]
    cap: np.ndarray
    fill: np.ndarray
    gpus_y: np.ndarray
    size_y: np.ndarray
    conc: np.ndarray
    away: np.ndarray
    gpus_z: np.ndarray
    size_z: np.ndarray

    @staticmethod
    def of(prefill: list[tuple[PrefillOption, int]], decode: list[tuple[DecodeOption, int]]) -> ConfigArrays:
        return ConfigArrays(
            prefill, decode,
            cap=np.array([p.capacity * n for p, n in prefill], dtype=float),
            fill=np.array([p.fill_s for p, _ in prefill], dtype=float),
            gpus_y=np.array([p.gpus * n for p, n in prefill], dtype=float),
            size_y=np.array([p.gpus for p, _ in prefill], dtype=int),
            conc=np.array([d.slots * n for d, n in decode], dtype=float),
            away=np.array([d.decoding_s for d, _ in decode], dtype=float),
            gpus_z=np.array([d.gpus * n for d, n in decode], dtype=float),
            size_z=np.array([d.gpus for d, _ in decode], dtype=int),
        )


def transfer_matrix(options: DeploymentOptions, size_y: np.ndarray, size_z: np.ndarray) -> np.ndarray:
    sizes_y, inverse_y = np.unique(size_y, return_inverse=True)
    sizes_z, inverse_z = np.unique(size_z, return_inverse=True)
    table = np.array([[options.kv_transfer_s[(int(a), int(b))] for b in sizes_z] for a in sizes_y])
    return table[np.ix_(inverse_y, inverse_z)]


def pair_figures(cap: np.ndarray, fill: np.ndarray, transfer: np.ndarray, conc: np.ndarray, away: np.ndarray,
                 cohort_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT s, requests/s) of every pair; cap and fill are columns (y), conc and away rows (z)."""
    elsewhere = transfer + away
    steady = conc / cap - elsewhere
    bunched = fill + cohort_fraction * (conc - 1.0) / (2.0 * cap)
    at = np.maximum(np.maximum(fill, steady), bunched)
    return at + transfer, conc / (at + elsewhere)


def best_pair_values(options: DeploymentOptions, arrays: ConfigArrays, eps_s: float | None,
                     q: float) -> tuple[np.ndarray, np.ndarray, tuple[int, int] | None]:
    """Per y and per z the best Dinkelbach objective osl X - q G over pairs within the cap (-inf if
    none), and the best pair overall."""
    osl = float(options.output_tokens)
    best_y = np.full(len(arrays.prefill), -np.inf)
    best_z = np.full(len(arrays.decode), -np.inf)
    best, where = -np.inf, None
    rows = max(1, CHUNK // max(1, len(arrays.decode)))
    for start in range(0, len(arrays.prefill), rows):
        block = slice(start, start + rows)
        transfer = transfer_matrix(options, arrays.size_y[block], arrays.size_z)
        ttft, rate = pair_figures(arrays.cap[block, None], arrays.fill[block, None], transfer,
                                  arrays.conc[None, :], arrays.away[None, :], options.cohort_fraction)
        value = osl * rate - q * (arrays.gpus_y[block, None] + arrays.gpus_z[None, :])
        if eps_s is not None:
            value = np.where(ttft <= eps_s, value, -np.inf)
        value = np.where(arrays.gpus_y[block, None] + arrays.gpus_z[None, :] <= options.domains.gpus, value, -np.inf)
        best_y[block] = value.max(axis=1)
        best_z = np.maximum(best_z, value.max(axis=0))
        flat = int(np.argmax(value))
        if value.flat[flat] > best:
            best, where = float(value.flat[flat]), (start + flat // value.shape[1], flat % value.shape[1])
    return best_y, best_z, where


def best_ratio_pair(options: DeploymentOptions, arrays: ConfigArrays, eps_s: float | None) -> tuple[int, int] | None:
    """The pair with the most tokens/s per GPU within the cap and the cluster's GPU count (an incumbent:
    the MILP still checks packing and proves it)."""
    best, where = -np.inf, None
    rows = max(1, CHUNK // max(1, len(arrays.decode)))
    for start in range(0, len(arrays.prefill), rows):
        block = slice(start, start + rows)
        transfer = transfer_matrix(options, arrays.size_y[block], arrays.size_z)
        ttft, rate = pair_figures(arrays.cap[block, None], arrays.fill[block, None], transfer,
                                  arrays.conc[None, :], arrays.away[None, :], options.cohort_fraction)
        gpus = arrays.gpus_y[block, None] + arrays.gpus_z[None, :]
        ratio = np.where(gpus <= options.domains.gpus, rate / gpus, -np.inf)
        if eps_s is not None:
            ratio = np.where(ttft <= eps_s, ratio, -np.inf)
        flat = int(np.argmax(ratio))
        if ratio.flat[flat] > best:
            best, where = float(ratio.flat[flat]), (start + flat // ratio.shape[1], flat % ratio.shape[1])
    return where
