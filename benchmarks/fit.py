"""The bundled calibration: `costmodel.fitting` fitted to the rows of ../shared/calibration/serving_measurements.csv
whose layouts are fully known, written to costmodel/data/calibration/default.yaml with each factor's provenance.

Rows whose layout had to be guessed (disaggregated runs without worker counts) are excluded from the fit
and from the headline accuracy, and reported on their own. The method, loss, bounds and the rules for
engines and generations with too few rows: `costmodel.fitting`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from benchmarks.measurements import Measurement, default_measurements_path, load_measurements
from costmodel.calibration import Calibration, generation_of
from costmodel.fitting import GROUPED_FIELD, PlannedRows, fit, fitted_engines, fitted_generations, unexercised_overheads
from costmodel.hardware import load_system
from costmodel.models import load_model


def layout_was_guessed(measurement: Measurement) -> bool:
    return any("num_workers" in note for note in measurement.assumptions)


CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "costmodel" / "data" / "calibration" / "default.yaml"


def provenance(rows: Sequence[Measurement]) -> dict[str, str]:
    """Which rows each fitted factor was learned from, for the comment beside it."""
    by_generation: dict[str, set[str]] = {}
    by_engine: dict[str, int] = {}
    for m in rows:
        by_generation.setdefault(generation_of(load_system(m.system)), set()).add(m.system)
        by_engine[m.engine] = by_engine.get(m.engine, 0) + 1
    notes = {}
    generations, engines = set(fitted_generations(rows)), set(fitted_engines(rows))
    for generation, systems in by_generation.items():
        count = sum(1 for m in rows if m.system in systems)
        notes[generation] = (f"fitted on {count} rows of {', '.join(sorted(systems))}" if generation in generations
                             else f"{count} rows of {', '.join(sorted(systems))}, too few to fit: priors")
    for engine, count in by_engine.items():
        notes[engine] = (f"fitted on {count} rows served by {engine}" if engine in engines
                         else f"{count} rows served by {engine}, too few to fit: mean of the fitted engines "
                              "(cohort fraction: of those that schedule alike; first-token latency: of those that "
                              "prefill alike)")
    return notes


def calibration_yaml(calibration: Calibration, rows: Sequence[Measurement],
                     unexercised: frozenset[tuple[str, str]] = frozenset()) -> str:
    """The calibration file, every fitted factor with the data it came from (`unexercised`: the layer-kind
    overheads of fitted engines that kept their priors, `ParameterSpace.unexercised`)."""
    notes = provenance(rows)
    for engine, field in sorted(unexercised):
        notes[engine] += f"; {field}: prior (no row of it runs that layer kind)"
    data = calibration.model_dump(mode="json")
    lines = [
        "# Calibration of the cost model, written by `python -m benchmarks fit` (do not edit by hand).",
        f"# Data: {len(rows)} rows of ../shared/calibration/serving_measurements.csv (layouts fully known);",
        "# method and loss: costmodel/fitting.py. Factors not fitted keep the kernel-microbenchmark priors.",
        "schema_version: 1",
        f"fitted_on: {json.dumps(data['fitted_on'])}",
        "generations:",
    ]
    for generation, factors in data["generations"].items():
        lines.append(f"  {generation}:  # {notes.get(generation, 'not in the serving data: prior from priors.yaml')}")
        gemm = ", ".join(f"{dtype}: {value:.6g}" for dtype, value in factors.pop("gemm_efficiency").items())
        lines.append(f"    gemm_efficiency: {{{gemm}}}  # formats the data does not exercise keep their prior")
        lines += [f"    {name}: {value:.6g}" for name, value in factors.items()]
    lines.append(f"collectives:  # all-reduce and all-to-all fitted on all {len(rows)} rows; p2p: prior")
    for kind, factors in data["collectives"].items():
        lines.append(f"  {kind}: {{efficiency: {factors['efficiency']:.6g}, latency_s: {factors['latency_s']:.6g}}}")
    lines.append(f"nic_efficiency: {data['nic_efficiency']:.6g}  # fitted on all {len(rows)} rows")
    lines.append(f"nic_latency_s: {data['nic_latency_s']:.6g}  # fitted on all {len(rows)} rows")
    moe_models = {name for name in {m.model for m in rows} if load_model(name).moe_layers > 0}
    moe = sum(1 for m in rows if m.model in moe_models)
    lines.append(f"{GROUPED_FIELD}: {data[GROUPED_FIELD]:.6g}  # share of expert-weight loads exposed; "
                 f"fitted on all {len(rows)} rows ({moe} of MoE models)")
    lines.append("engines:")
    for engine, factors in data["engines"].items():
        note = notes.get(engine, "not in the data: mean of the fitted engines (cohort fraction by scheduling policy, "
                         "first-token latency by prefill execution, where known; prompt hold under attention DP "
                         "only for engines that balance)")
        values = ", ".join(f"{name}: {value:.6g}" for name, value in factors.items())
        lines.append(f"  {engine}: {{{values}}}  # {note}")
    return "\n".join(lines) + "\n"


def main(write: bool = False) -> int:
    rows = [m for m in load_measurements(default_measurements_path()) if not layout_was_guessed(m)]
    planned = PlannedRows.build(rows)
    calibration = fit(planned)
    text = calibration_yaml(calibration, rows, unexercised_overheads(planned, fitted_engines(rows)))
    if write:
        CALIBRATION_FILE.write_text(text, encoding="utf-8")
        print(f"wrote {CALIBRATION_FILE}")
    else:
        print(text, end="")
    return 0
