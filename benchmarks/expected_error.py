"""`python -m benchmarks expected-error [--write]`: copy the accuracy benchmark's committed held-out figures
(`accuracy_baseline.json`: by model, system, engine; `accuracy_campaign.json`: by campaign) into the package
(`costmodel/data/calibration/expected_error.yaml`), which `plan solve` and `plan evaluate` quote as the error to
expect of their predictions (`costmodel.expected_error`). Rerun after `accuracy --json` or `fit --write`: the
file records the calibration it was measured on, and a test fails when they differ."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from costmodel.calibration import default_calibration, fingerprint, generation_of
from costmodel.expected_error import DATA_FILE, FIGURES, KEYS
from costmodel.hardware import load_system

HERE = Path(__file__).parent
BASELINE = HERE / "accuracy_baseline.json"
CAMPAIGN = HERE / "accuracy_campaign.json"
TARGET = HERE.parent / "costmodel" / "data" / "calibration" / DATA_FILE


def _pooled(rows: list[dict[str, Any]], group: str = "all") -> dict[str, float]:
    """The figures of a table's rows of `group` (`all`: every held-out row pooled), rounded to 0.1 point."""
    pooled = {r["metric"]: r for r in rows if r["group"] == group}
    values = {f"{m}_{stat}_pct": pooled[m][f"{stat}_ape_pct"] for m in ("ttft", "tpot") for stat in ("median", "p90")}
    return {name: round(float(values[name]), 1) for name in FIGURES}


def figures(baseline: dict[str, Any], campaign: dict[str, Any], calibration_sha256: str) -> dict[str, Any]:
    """The packaged file's content: which models, systems and engines the rows cover (the groups held out
    in turn), and each grouping's held-out figures, pooled over all its rows and over each engine's (not for
    the engine grouping: it applies to engines the rows lack)."""
    held_out = baseline["held_out"]
    covered = {key: sorted({r["group"] for r in held_out[key]} - {"all"}) for key in KEYS}
    generations = sorted({generation_of(load_system(name)) for name in covered["system"]})
    folds = {"campaign": campaign["held_out_by_engine"]["campaign"],
             **{key: baseline["held_out_by_engine"][key] for key in KEYS}}
    return {"calibration_sha256": calibration_sha256, "rows": int(baseline["rows"]), "covered": covered,
            "generations": generations, "largest_batch_per_rank": baseline["largest_batch_per_rank"],
            "held_out": {key: {"all": _pooled(rows),
                               **({} if key == "engine" else {e: _pooled(rows, e) for e in covered["engine"]})}
                         for key, rows in folds.items()}}


def render(data: dict[str, Any]) -> str:
    """The YAML text, with a header saying where it comes from."""
    lines = ["# Error to expect of the cost model's predictions (costmodel/expected_error.py), written by",
             "# `python -m benchmarks expected-error --write` from benchmarks/accuracy_baseline.json and",
             "# benchmarks/accuracy_campaign.json (do not edit by hand). Percent: median and 90th-percentile absolute",
             "# error of the mean TTFT and TPOT over the rows predicted by a fit without their group (model, system,",
             "# engine, campaign), all or one engine's; `covered`: the groups the calibration's rows have,",
             "# `generations` the GPU generations of their systems.",
             f"calibration_sha256: {data['calibration_sha256']}  # fingerprint of default.yaml the figures hold for",
             f"rows: {data['rows']}",
             "covered:"]
    lines += [f"  {key}: {json.dumps(values)}" for key, values in data["covered"].items()]
    lines.append(f"generations: {json.dumps(data['generations'])}  # of the covered systems")
    lines.append(f"largest_batch_per_rank: {json.dumps(data['largest_batch_per_rank'])}  # sequences on one attention "
                 "rank of a decoding pool, by engine")
    lines.append("held_out:  # by fold: pooled over all its rows, and over each engine's")
    for key, by_rows in data["held_out"].items():
        lines.append(f"  {key}:")
        lines += [f"    {rows}: {json.dumps(values)}" for rows, values in by_rows.items()]
    return "\n".join(lines) + "\n"


def committed_text() -> str:
    """What the packaged file should hold, from the committed accuracy figures and calibration."""
    baseline = json.loads(BASELINE.read_text("utf-8"))
    campaign = json.loads(CAMPAIGN.read_text("utf-8"))
    return render(figures(baseline, campaign, fingerprint(default_calibration())["sha256"]))


def main(write: bool) -> int:
    text = committed_text()
    if write:
        TARGET.write_text(text, "utf-8")
        print(f"wrote {TARGET}")
    else:
        print(text, end="")
    return 0
