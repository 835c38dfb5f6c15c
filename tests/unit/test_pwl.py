"""PWL fits of cost functions: the relative-error bound holds on every integer, curvature is right."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.pwl import CostFunction, FloatArray, PiecewiseLinear, fit_pwl

E, K = 256, 8  # routed experts, experts per token


def quadratic(x: FloatArray) -> FloatArray:
    return x + 1e-3 * x**2 + 5.0


def roofline(x: FloatArray) -> FloatArray:
    # Weight-load bound below the kink (x ~ 2000), compute bound above it, plus a fixed overhead.
    return np.maximum(2e-3, 1e-6 * x) + 1e-4


def experts_touched(x: FloatArray) -> FloatArray:
    return E * (1.0 - (1.0 - K / E) ** x)


def x_log_x(x: FloatArray) -> FloatArray:
    return x * np.log(x) + 100.0


def rel_error(p: PiecewiseLinear, f: CostFunction, x: FloatArray) -> FloatArray:
    y = f(x)
    return np.asarray(np.abs(p(x) - y) / y)


def every_integer(p: PiecewiseLinear) -> FloatArray:
    return np.arange(p.lo, p.hi + 1.0)


def lines_envelope(p: PiecewiseLinear, x: FloatArray, how: str) -> FloatArray:
    s, c = (np.asarray(v)[:, None] for v in zip(*p.lines(), strict=True))
    y = s * x[None, :] + c
    return np.asarray(y.max(axis=0) if how == "max" else y.min(axis=0))


def test_linear_function_needs_two_breakpoints() -> None:
    p = fit_pwl(lambda x: 2.0 * x + 3.0, 1, 10_000)
    assert p.breakpoints == (1.0, 10_000.0)
    assert p.segments == 1
    assert p.max_rel_error < 1e-12
    assert p.curvature == "linear" and p.is_convex and p.is_concave
    assert p.lines() == [pytest.approx((2.0, 3.0))]


@pytest.mark.parametrize(("f", "hi"), [(quadratic, 100_000), (roofline, 8192)])
def test_convex_within_bound_everywhere_and_max_of_lines(f: CostFunction, hi: int) -> None:
    p = fit_pwl(f, 1, hi)
    x = every_integer(p)
    err = rel_error(p, f, x)
    assert err.max() <= 0.01
    assert err.max() == pytest.approx(p.max_rel_error)
    assert p.curvature == "convex" and p.is_convex and not p.is_concave
    assert all(b == round(b) for b in p.breakpoints)
    np.testing.assert_allclose(lines_envelope(p, x, "max"), p(x), rtol=1e-9)


def test_roofline_breakpoint_lands_near_the_kink() -> None:
    p = fit_pwl(roofline, 1, 8192)
    assert p.segments == 2
    assert 1900 <= p.breakpoints[1] <= 2100


def test_saturating_expert_count_is_concave() -> None:
    p = fit_pwl(experts_touched, 1, 65_536)
    x = every_integer(p)
    assert rel_error(p, experts_touched, x).max() <= 0.01
    assert p.curvature == "concave" and p.is_concave and not p.is_convex
    np.testing.assert_allclose(lines_envelope(p, x, "min"), p(x), rtol=1e-9)


def test_sigmoid_step_is_mixed() -> None:
    p = fit_pwl(lambda x: 1.0 + 1.0 / (1.0 + np.exp(-(x - 500.0) / 50.0)), 1, 1000)
    assert p.curvature == "mixed"
    assert not p.is_convex and not p.is_concave
    assert p.max_rel_error <= 0.01


@pytest.mark.parametrize("f", [quadratic, experts_touched])
def test_tighter_tolerance_needs_more_breakpoints_and_meets_it(f: CostFunction) -> None:
    coarse = fit_pwl(f, 1, 65_536, rel_tol=0.01)
    fine = fit_pwl(f, 1, 65_536, rel_tol=0.001)
    assert fine.segments > coarse.segments
    assert rel_error(fine, f, every_integer(fine)).max() <= 0.001


def test_huge_domain_few_breakpoints_bound_on_random_sample() -> None:
    p = fit_pwl(x_log_x, 1, 10**7)
    assert p.segments < 60
    rng = np.random.default_rng(0)
    x = np.concatenate((rng.integers(1, 10**7, 200_000), np.arange(1, 1001))).astype(np.float64)
    assert rel_error(p, x_log_x, x).max() <= 0.01


def test_continuous_domain() -> None:
    p = fit_pwl(lambda x: 1.0 / x, 0.5, 1000.0, integer=False)
    x = np.geomspace(0.5, 1000.0, 50_000)
    assert rel_error(p, lambda x: 1.0 / x, x).max() <= 0.01
    assert p.curvature == "convex"


def test_non_positive_function_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"positive and finite.*f\(1\) = -9"):
        fit_pwl(lambda x: x - 10.0, 1, 100)
    with pytest.raises(ValueError, match="positive and finite"):
        fit_pwl(lambda x: np.where(x > 5e6, np.inf, x), 1, 10**7)


def test_bad_domain_and_out_of_domain_calls_raise() -> None:
    with pytest.raises(ValueError, match="lo < hi"):
        fit_pwl(quadratic, 10, 10)
    with pytest.raises(ValueError, match="integer bounds"):
        fit_pwl(quadratic, 1.5, 10)
    with pytest.raises(ValueError, match="check_points"):
        fit_pwl(quadratic, 1, 10, check_points=[11])
    p = fit_pwl(quadratic, 1, 1000)
    assert p(np.array([1.0, 1000.0])) == pytest.approx(quadratic(np.array([1.0, 1000.0])))
    for x in (0.5, 1000.5, np.nan):
        with pytest.raises(ValueError, match="outside the PWL domain"):
            p(x)


@settings(max_examples=60, deadline=None)
@given(
    a=st.floats(1e-3, 1e3),
    b=st.floats(0.0, 1e2),
    c=st.floats(0.0, 10.0),
    lo=st.integers(0, 1000),
    width=st.integers(1, 4000),
)
def test_convex_quadratics_meet_bound_at_every_integer(a: float, b: float, c: float, lo: int, width: int) -> None:
    def f(x: FloatArray) -> FloatArray:
        return a + b * x + c * x**2

    p = fit_pwl(f, lo, lo + width)
    assert p.breakpoints[0] == lo and p.breakpoints[-1] == lo + width
    assert rel_error(p, f, every_integer(p)).max() <= 0.01
    assert p.is_convex
