"""Shared fixtures. `shared_dir` is the read-only reference data beside the checkout; tests that need
it skip cleanly when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SCENARIOS = REPO / "scenarios"


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED
