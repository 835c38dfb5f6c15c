"""`python -m benchmarks own-calibration`: the campaigns it calibrates on and checks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from benchmarks.own_calibration import MIN_CAMPAIGN_ROWS, _cross_validation_check, campaigns


def _row(engine: str, version: str, row_id: str) -> Any:
    return SimpleNamespace(engine=engine, engine_version=version, system="h200-sxm", serving="aggregated", id=row_id)


def test_campaigns_group_by_build_and_keep_those_with_enough_rows() -> None:
    rows = ([_row("vllm", "0.18.0", f"b{i:02d}") for i in range(MIN_CAMPAIGN_ROWS, 0, -1)]
            + [_row("vllm", "0.19.0", f"c{i}") for i in range(MIN_CAMPAIGN_ROWS - 1)]
            + [_row("trtllm", "", f"a{i:02d}") for i in range(MIN_CAMPAIGN_ROWS + 2)])
    found = campaigns(cast(Any, rows))
    assert list(found) == [("trtllm", "", "h200-sxm", "aggregated"), ("vllm", "0.18.0", "h200-sxm", "aggregated")]
    vllm = found[("vllm", "0.18.0", "h200-sxm", "aggregated")]
    assert [rows[i].id for i in vllm] == sorted(rows[i].id for i in vllm)  # halves alternate by row id
    assert len(vllm) == MIN_CAMPAIGN_ROWS


def test_the_cross_validation_check_compares_estimate_and_checked_error() -> None:
    """Gaps 2, 10 and 4 points in TTFT (checked 12 > 10 + 5 once); campaigns without an estimate left out."""
    table = [{"cv_ttft_pct": 10.0, "own_ttft_pct": 12.0, "cv_tpot_pct": 5.0, "own_tpot_pct": 4.0},
             {"cv_ttft_pct": 20.0, "own_ttft_pct": 30.0, "cv_tpot_pct": 6.0, "own_tpot_pct": 6.5},
             {"cv_ttft_pct": 30.0, "own_ttft_pct": 26.0, "cv_tpot_pct": 7.0, "own_tpot_pct": 13.0},
             {"own_ttft_pct": 99.0, "own_tpot_pct": 99.0}]
    assert _cross_validation_check(table) == {
        "campaigns": 3, "median_abs_gap_ttft_pts": 4.0, "ttft_within_5_pts": 2,
        "median_abs_gap_tpot_pts": 1.0, "tpot_within_5_pts": 2}
    assert _cross_validation_check(table[3:]) == {"campaigns": 0}  # no estimate: no figures (no NaN in the JSON)
