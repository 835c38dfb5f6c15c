"""The 200-case study on 2 workers: progress lines with an ETA, an interrupt (exit 130) after some cases,
and a rerun that solves only the cases not finished before it (slow: several minutes on 2 cores)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STUDY = REPO / "studies" / "qwen3-30b-200-cases.yaml"


@pytest.mark.slow
def test_200_cases_resume_after_an_interrupt(tmp_path: Path) -> None:
    out = tmp_path / "q200"
    command = [sys.executable, "-c", "from planner.cli import main; main()", "sweep", str(STUDY), "--out", str(out),
               "--jobs", "2", "--format", "json"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    cases = out / "cases"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(list(cases.glob("*.json")) if cases.exists() else []) < 20:
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: the whole process group, as a terminal sends it
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    assert "ETA" in err and "[1/200]" in err
    finished = {p.stem for p in cases.glob("*.json")}
    assert len(finished) >= 20
    assert not list(cases.glob(".*.partial"))  # no half-written result
    start = time.monotonic()
    second = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert summary["run"]["cases_cached"] == len(finished)
    assert summary["run"]["cases_solved"] == 200 - len(finished)
    assert summary["totals"]["cases"] == 200
    assert {c["hash"] for c in summary["cases"]} >= finished
    print(f"first run interrupted after {len(finished)} cases; rerun solved {200 - len(finished)} in "
          f"{time.monotonic() - start:.0f} s")
