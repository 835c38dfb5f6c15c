"""`python -m benchmarks ceiling`: how much of the held-out-engine error a better guess of its factors could remove.

A held-out engine is predicted with factors taken from the other engines (`benchmarks.fit`: their mean, its
cohort fraction from those that schedule alike). Here each engine is held out in turn as in `python -m
benchmarks accuracy`, and its rows are predicted twice from the same fold's fit: as the accuracy benchmark
does, and with the engine's own values (from the fit on every row) of the named factors. The second is the
best any rule that guesses those factors from the other engines could do with today's cost model, so it says
whether a fold's shortfall lies in those factors or elsewhere (the factors the fold fits without the engine's
rows: GEMM, attention, HBM, collectives). The guessing rule itself is what `accuracy` measures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from benchmarks.accuracy import FastModel
from benchmarks.crossval import HeldOutPrediction, error_table, format_table
from benchmarks.fit import ENGINE_FIELDS, layout_was_guessed
from benchmarks.measurements import Measurement, default_measurements_path, load_measurements
from costmodel.calibration import Calibration

# The factors that shape TTFT alone (`costmodel.serving`): first-token latency, arrival bunching, the
# prompt hold under attention DP.
TTFT_FIELDS = ("prefill_layer_latency_s", "cohort_fraction", "dp_wait_steps")


def with_own_factors(fold: Calibration, full: Calibration, engines: Iterable[str],
                     fields: Sequence[str]) -> Calibration:
    """`fold` with each of `engines` taking `full`'s values of `fields` (the rest of its factors as `fold` has them)."""
    unknown = sorted(set(fields) - set(ENGINE_FIELDS))
    if unknown:
        raise ValueError(f"not engine factors: {', '.join(unknown)}; use some of {', '.join(ENGINE_FIELDS)}")
    own = {engine: fold.engine(engine).model_copy(update={f: getattr(full.engine(engine), f) for f in fields})
           for engine in engines}
    return fold.model_copy(update={"engines": fold.engines | own})


def held_out_predictions(rows: Sequence[Measurement], fields: Sequence[str]
                         ) -> tuple[list[HeldOutPrediction], list[HeldOutPrediction]]:
    """Per held-out engine's rows: (as `accuracy` predicts them, with the engine's own `fields`)."""
    model = FastModel.build(rows)
    full = model.fit(rows)
    plain: list[HeldOutPrediction] = []
    own: list[HeldOutPrediction] = []
    for engine in sorted({m.engine for m in rows}):
        fold = model.fit([m for m in rows if m.engine != engine])
        ceiling = with_own_factors(fold, full, [engine], fields)
        for calibration, out in ((fold, plain), (ceiling, own)):
            out.extend(HeldOutPrediction(m, "engine", engine, *model.predict(calibration, m))
                       for m in rows if m.engine == engine)
    return plain, own


def main(fields: Sequence[str] = TTFT_FIELDS) -> int:
    rows = [m for m in load_measurements(default_measurements_path()) if not layout_was_guessed(m)]
    plain, own = held_out_predictions(rows, fields)
    print(format_table(error_table(plain, ("engine",)), "held out by engine (as `accuracy`)"))
    print(format_table(error_table(own, ("engine",)), f"held out by engine, own {', '.join(fields)}"))
    return 0
