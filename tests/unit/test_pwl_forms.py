"""Piecewise-linear forms of the four modes: at most 1% relative error at every integer of the domain."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.calibration import default_calibration
from costmodel.evaluate import pool_context
from costmodel.pwl_forms import MODES, Mode, exact_step_times, mode_form
from costmodel.serving import RequestShape
from tests.unit.test_costmodel import layout, scenario

CASES = {
    "deepseek-h200-dp8": (scenario(cached_tokens=16000, cached_tier="host_dram"), layout()),
    "qwen3-h100-tp8": (scenario(model="qwen3-235b", system="h100-sxm", cached_tokens=8000),
                       layout(tp=8, dp=1, ep=8)),
}
UPPER: dict[Mode, int] = {"prefill": 4096, "midfill": 4096, "decode_attention": 512, "decode_experts": 512}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_form_within_one_percent_everywhere(case: str, mode: Mode) -> None:
    resolved, candidate = CASES[case]
    ctx = pool_context(resolved, candidate.pools[0])
    request = RequestShape.of(resolved.scenario.workload)
    tier = resolved.scenario.workload.cached_tier
    form = mode_form(ctx, mode, UPPER[mode], request, default_calibration(), "generic", tier=tier)
    xs = np.arange(1, UPPER[mode] + 1, dtype=float)
    exact = exact_step_times(ctx, mode, xs, request, default_calibration(), "generic", tier)
    worst = float(np.max(np.abs(form.pwl(xs) - exact) / exact))
    assert worst <= 0.01
    assert form.pwl.segments < 40
    assert np.all(np.diff(exact) >= -1e-12 * exact[:-1])  # every mode is monotone in its batch


def test_decode_attention_is_convex() -> None:
    resolved, candidate = CASES["deepseek-h200-dp8"]
    ctx = pool_context(resolved, candidate.pools[0])
    form = mode_form(ctx, "decode_attention", 512, RequestShape.of(resolved.scenario.workload),
                     default_calibration(), "generic")
    assert form.pwl.is_convex
