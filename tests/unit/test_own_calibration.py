"""`python -m benchmarks own-calibration`: the campaigns it calibrates on and checks."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from benchmarks.own_calibration import MIN_CAMPAIGN_ROWS, campaigns


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
