"""Piecewise-linear (PWL) forms of step-time functions, with a measured relative-error bound.

The MILP planner cannot use the exact cost functions (roofline maxima, saturating expert counts,
attention cost in KV tokens read), so each one is replaced by a PWL interpolant of a function
`f(x)` of one batch quantity `x` (tokens in a step, sequences in a decode batch, KV tokens read).

Why relative error
    Step times span orders of magnitude between x = 1 and x = 10^7, so an absolute bound is either
    meaningless at small x or needlessly tight at large x. A relative bound is also what SLAs speak
    (TTFT, TPOT) and it composes: if every positive term of a sum (or of a max) is within eps of its
    exact value, so is the sum (or the max). We bound |pwl(x) - f(x)| / f(x), hence f must be
    positive and finite on the domain; anything else raises ValueError.

Algorithm and guarantee
    Greedy furthest reach: from the current left breakpoint a, the segment end b is pushed as far
    right as possible (exponential search from the previous segment's length, then binary search to
    1/256 of the length) such that the chord from (a, f(a)) to (b, f(b)) is within rel_tol * 0.98
    of f on every integer of [a, b] (integer domains up to 200,000 points, or segments up to 4,096
    points); otherwise on a dense grid (129 linear points plus geometric spacing towards both
    ends, where relative error of typical cost functions concentrates). For convex or concave f the
    chord error grows monotonically as a segment widens, so greedy furthest reach gives the fewest
    breakpoints among interpolating PWLs, up to the search resolution and the 2% margin.

    A verification pass then measures the error on a check grid: every integer when the integer
    domain has at most 200,000 points -- every feasible x, so `max_rel_error` is then exact -- and
    otherwise about 200,000 log- and linearly-spaced points plus the caller's `check_points`. Where
    the bound is exceeded, the worst point of each offending segment becomes a breakpoint and the
    pass repeats (at most 64 times, then ValueError). On large or continuous domains the bound is
    therefore proven on the check grid only; the 2% margin absorbs smooth behaviour between points.

How the planner uses the result
    `curvature` comes from the slope sequence. A convex PWL is the max of its `lines()` on the
    domain, so a convex cost in a minimisation or on the left of a `<=` constraint is written as
    t >= slope_i * x + intercept_i for every segment: an epigraph with no binaries. Symmetrically, a
    concave PWL is the min of its lines, so a concave quantity that is maximised, or bounded from
    below, needs no binaries either. Any other use (concave cost minimised, or mixed curvature) needs
    segment selection: SOS2 weights over `breakpoints` or one binary per segment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Curvature = Literal["convex", "concave", "linear", "mixed"]
CostFunction = Callable[[FloatArray], FloatArray]

_MARGIN = 0.98  # greedy segments target 98% of rel_tol, so verification rarely needs to refine
_EXACT_DOMAIN = 200_000  # integer domains up to this many points are checked at every integer
_EXACT_SEGMENT = 4_096  # segments up to this many integers are checked at every integer
_SEGMENT_LINEAR = 129  # dense-grid points per long segment
_SEGMENT_GEOMETRIC = 48  # extra geometrically spaced points towards each end of a long segment
_CHECK_POINTS = 100_000  # per family (log-spaced, linear) in the check grid of large domains
_SEARCH_RESOLUTION = 256  # binary search stops at 1/256 of the segment length
_MAX_REFINE = 64  # verification passes before giving up
_MAX_BREAKPOINTS = 20_000  # a sane cost function never needs more; stops runaway fits
_SLOPE_RTOL = 1e-9  # slope changes below this (relative) are treated as zero curvature


@dataclass(frozen=True)
class PiecewiseLinear:
    """A PWL interpolant of a positive function on [breakpoints[0], breakpoints[-1]]."""

    breakpoints: tuple[float, ...]
    values: tuple[float, ...]
    max_rel_error: float
    curvature: Curvature

    def __post_init__(self) -> None:
        if len(self.breakpoints) < 2 or len(self.breakpoints) != len(self.values):
            raise ValueError("a PiecewiseLinear needs at least 2 breakpoints and one value per breakpoint")
        if not np.all(np.diff(self.breakpoints) > 0):
            raise ValueError("breakpoints must be strictly increasing")

    @property
    def lo(self) -> float:
        return self.breakpoints[0]

    @property
    def hi(self) -> float:
        return self.breakpoints[-1]

    @property
    def segments(self) -> int:
        return len(self.breakpoints) - 1

    @property
    def is_convex(self) -> bool:
        return self.curvature in ("convex", "linear")

    @property
    def is_concave(self) -> bool:
        return self.curvature in ("concave", "linear")

    def __call__(self, x: npt.ArrayLike) -> FloatArray:
        xa = np.asarray(x, dtype=np.float64)
        outside = ~((xa >= self.lo) & (xa <= self.hi))  # also catches NaN
        if np.any(outside):
            bad = xa[outside].ravel()[:5].tolist()
            raise ValueError(f"x outside the PWL domain [{self.lo:g}, {self.hi:g}]: {bad}")
        return np.asarray(np.interp(xa, self.breakpoints, self.values), dtype=np.float64)

    def slopes(self) -> FloatArray:
        return _slopes(np.asarray(self.breakpoints), np.asarray(self.values))

    def lines(self) -> list[tuple[float, float]]:
        """(slope, intercept) per segment: max of them is the PWL if convex, min if concave."""
        s = self.slopes()
        c = np.asarray(self.values[:-1]) - s * np.asarray(self.breakpoints[:-1])
        return [(float(a), float(b)) for a, b in zip(s, c, strict=True)]


def fit_pwl(
    f: CostFunction,
    lo: float,
    hi: float,
    *,
    rel_tol: float = 0.01,
    integer: bool = True,
    check_points: Iterable[float] | None = None,
) -> PiecewiseLinear:
    """Fit a PWL interpolant of `f` on [lo, hi] whose relative error is at most `rel_tol`.

    `f` is vectorised: it receives a float64 array and returns an array of the same shape, positive
    and finite on the domain. With `integer=True` the domain is the integers lo..hi and breakpoints are
    integers. Raises ValueError when the inputs are invalid or the bound cannot be met.
    """
    lo, hi = _check_domain(lo, hi, rel_tol, integer)
    sampler = _Sampler(f, lo, hi, integer)
    grid = _check_grid(lo, hi, integer, check_points)
    f_grid = sampler(grid)  # validates positivity over the whole check grid up front
    bps = _greedy(sampler, lo, hi, rel_tol * _MARGIN, integer)
    bps, vals, err = _verify_and_refine(sampler, bps, grid, f_grid, rel_tol)
    return PiecewiseLinear(
        breakpoints=tuple(float(b) for b in bps),
        values=tuple(float(v) for v in vals),
        max_rel_error=err,
        curvature=_classify(bps, vals),
    )


def _check_domain(lo: float, hi: float, rel_tol: float, integer: bool) -> tuple[float, float]:
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"PWL domain must be finite with lo < hi, got [{lo}, {hi}]")
    if not (0.0 < rel_tol < 1.0):
        raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol}")
    if integer and (float(lo) != round(lo) or float(hi) != round(hi)):
        raise ValueError(f"integer PWL domain needs integer bounds, got [{lo}, {hi}]")
    return float(lo), float(hi)


class _Sampler:
    """Evaluates f as float64, validating positivity; small integer domains are tabulated once."""

    def __init__(self, f: CostFunction, lo: float, hi: float, integer: bool) -> None:
        self._f = f
        self._lo = lo
        self._table: FloatArray | None = None
        if integer and hi - lo <= _EXACT_DOMAIN:
            self._table = self._evaluate(np.arange(lo, hi + 1.0))

    @property
    def tabulated(self) -> bool:
        return self._table is not None

    def __call__(self, x: FloatArray) -> FloatArray:
        if self._table is not None:
            return self._table[np.rint(x - self._lo).astype(np.int64)]
        return self._evaluate(x)

    def _evaluate(self, x: FloatArray) -> FloatArray:
        y = np.asarray(self._f(x), dtype=np.float64)
        if y.shape != x.shape:
            raise ValueError(f"f must be vectorised: input shape {x.shape}, output shape {y.shape}")
        bad = ~(np.isfinite(y) & (y > 0.0))
        if np.any(bad):
            i = int(np.argmax(bad))
            raise ValueError(
                f"f must be positive and finite on the PWL domain (relative error is undefined "
                f"otherwise): f({x[i]:g}) = {y[i]:g}"
            )
        return y


def _slopes(bps: FloatArray, vals: FloatArray) -> FloatArray:
    return np.asarray(np.diff(vals) / np.diff(bps), dtype=np.float64)


def _segment_grid(a: float, b: float, integer: bool, exact: bool) -> FloatArray:
    """Points at which a chord over [a, b] is checked (both ends included)."""
    d = b - a
    if integer and (exact or d <= _EXACT_SEGMENT):
        return np.arange(a, b + 1.0)
    # Geometric spacing towards both ends: near the left end f is smallest relative to its change.
    u = np.geomspace(1e-6, 1.0, _SEGMENT_GEOMETRIC)
    t = np.concatenate((np.linspace(0.0, 1.0, _SEGMENT_LINEAR), u, 1.0 - u))
    x = a + d * t
    if integer:
        x = np.rint(x)
    x[0], x[-1] = a, b
    return np.unique(np.clip(x, a, b))


def _chord_ok(sampler: _Sampler, a: float, b: float, tol: float, integer: bool) -> bool:
    x = _segment_grid(a, b, integer, sampler.tabulated)
    y = sampler(x)
    chord = y[0] + (y[-1] - y[0]) * (x - a) / (b - a)
    return bool(np.max(np.abs(chord - y) / y) <= tol)


def _furthest_end(sampler: _Sampler, a: float, hi: float, d0: float, tol: float, integer: bool) -> float:
    """Largest segment length from `a` whose chord meets `tol`: exponential, then binary search."""
    span = hi - a
    # Shortest segment tried: one integer step, or one that float rounding still keeps above `a`.
    d_min = 1.0 if integer else max(span * 1e-9, 64.0 * float(np.finfo(np.float64).eps) * max(abs(a), abs(hi)))

    def ok(d: float) -> bool:
        if integer and d <= 1.0:
            return True  # no integer lies strictly inside a unit segment
        return _chord_ok(sampler, a, hi if d >= span else a + d, tol, integer)

    def half(d: float) -> float:
        return float(np.floor(d / 2.0)) if integer else d / 2.0

    d = min(max(d0, d_min), span)
    if ok(d):
        good = d
        while good < span:
            d = min(2.0 * good, span)
            if not ok(d):
                break
            good = d
        if good >= span:
            return hi
        bad = d
    else:
        bad, good = d, d_min
        while (d := half(bad)) > d_min:
            if ok(d):
                good = d
                break
            bad = d
    while bad - good > max(1.0 if integer else 0.0, good / _SEARCH_RESOLUTION):
        mid = float(np.floor((good + bad) / 2.0)) if integer else (good + bad) / 2.0
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return a + good


def _greedy(sampler: _Sampler, lo: float, hi: float, tol: float, integer: bool) -> FloatArray:
    bps = [lo]
    d0 = 1.0 if integer else (hi - lo) / 1024.0
    while bps[-1] < hi:
        if len(bps) > _MAX_BREAKPOINTS:
            raise ValueError(f"PWL fit needs more than {_MAX_BREAKPOINTS} breakpoints: is f smooth enough?")
        b = _furthest_end(sampler, bps[-1], hi, d0, tol, integer)
        d0 = b - bps[-1]
        bps.append(b)
    return np.asarray(bps, dtype=np.float64)


def _check_grid(lo: float, hi: float, integer: bool, check_points: Iterable[float] | None) -> FloatArray:
    """Every integer of small integer domains, else ~200k log- and linearly spaced points."""
    if integer and hi - lo <= _EXACT_DOMAIN:
        grid = np.arange(lo, hi + 1.0)
    else:
        lin = np.linspace(lo, hi, _CHECK_POINTS)
        # Log spacing resolves small x, where relative error of typical cost functions concentrates.
        if lo > 0:
            log = np.geomspace(lo, hi, _CHECK_POINTS)
        else:
            log = lo + np.geomspace(1e-9 * (hi - lo), hi - lo, _CHECK_POINTS)
        grid = np.concatenate((lin, log))
        grid = np.clip(np.rint(grid) if integer else grid, lo, hi)
    if check_points is not None:
        extra = np.asarray(list(check_points), dtype=np.float64)
        if np.any(~((extra >= lo) & (extra <= hi))):
            raise ValueError(f"check_points must lie in the PWL domain [{lo:g}, {hi:g}]")
        grid = np.concatenate((grid, extra))
    return np.unique(grid)


def _verify_and_refine(
    sampler: _Sampler, bps: FloatArray, grid: FloatArray, f_grid: FloatArray, rel_tol: float
) -> tuple[FloatArray, FloatArray, float]:
    """Measure the error on the check grid; split offending segments at their worst point."""
    for _ in range(_MAX_REFINE):
        vals = sampler(bps)
        err = np.abs(np.interp(grid, bps, vals) - f_grid) / f_grid
        worst = float(np.max(err))
        if worst <= rel_tol:
            return bps, vals, worst
        new = _worst_per_segment(bps, grid, err, rel_tol)
        new = new[~np.isin(new, bps)]
        if new.size == 0:
            break  # the worst points are breakpoints already: f is not a function of x alone
        bps = np.union1d(bps, new)
        if bps.size > _MAX_BREAKPOINTS:
            break
    raise ValueError(
        f"PWL fit cannot meet rel_tol={rel_tol:g} on [{bps[0]:g}, {bps[-1]:g}] "
        f"(worst relative error {worst:.3g} with {bps.size} breakpoints): is f continuous?"
    )


def _worst_per_segment(bps: FloatArray, grid: FloatArray, err: FloatArray, rel_tol: float) -> FloatArray:
    idx = np.flatnonzero(err > rel_tol)
    seg = np.clip(np.searchsorted(bps, grid[idx], side="right") - 1, 0, bps.size - 2)
    order = np.lexsort((-err[idx], seg))  # by segment, worst first within a segment
    _, first = np.unique(seg[order], return_index=True)
    return np.asarray(grid[idx[order[first]]], dtype=np.float64)


def _classify(bps: FloatArray, vals: FloatArray) -> Curvature:
    """Curvature from slope changes, ignoring changes at the level of rounding noise."""
    s = _slopes(bps, vals)
    if s.size < 2:
        return "linear"
    ds = np.diff(s)
    lengths = np.diff(bps)
    # Relative tolerance on slopes plus the slope error that float rounding of the values can cause.
    noise = 8.0 * np.finfo(np.float64).eps * float(np.max(np.abs(vals))) / np.minimum(lengths[:-1], lengths[1:])
    tol = _SLOPE_RTOL * np.maximum(np.abs(s[:-1]), np.abs(s[1:])) + noise
    up, down = bool(np.any(ds > tol)), bool(np.any(ds < -tol))
    if up and down:
        return "mixed"
    if up:
        return "convex"
    return "concave" if down else "linear"
