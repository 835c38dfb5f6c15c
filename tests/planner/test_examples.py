"""Every example scenario solves at a small time limit, and `evaluate` reproduces its fastest and its
highest-throughput point."""

from __future__ import annotations

from pathlib import Path

import pytest

from costmodel.evaluate import evaluate
from planner.scenario import load_scenario
from planner.solve import SolveSettings, solve
from tests.conftest import SCENARIOS

EXAMPLES = sorted(p for p in SCENARIOS.glob("*.yaml") if not p.name.endswith(".layout.yaml"))
TIME_LIMIT_S = 8.0  # the batch search gets half; a larger front is not what this test checks


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_solves(path: Path) -> None:
    resolved = load_scenario(path)
    result = solve(resolved, SolveSettings("cpsat", TIME_LIMIT_S))
    assert result.front and result.status in ("optimal", "feasible")
    slo = resolved.scenario.slo
    for solved in (result.front[0], result.front[-1]):
        p = solved.point
        assert slo.ttft_ms is None or p.ttft_ms <= slo.ttft_ms
        assert slo.tpot_ms is None or p.tpot_ms <= slo.tpot_ms
        prediction = evaluate(resolved, p.layout)
        assert prediction.feasible and prediction.gpus == p.gpus <= resolved.gpus
        assert (prediction.ttft_ms, prediction.tokens_per_s_per_gpu) == pytest.approx(
            (p.ttft_ms, p.tokens_per_s_per_gpu_used), rel=1e-12)
