"""`python -m benchmarks ceiling`: held-out error with the engines' own values of some of their factors.

A held-out engine is predicted with factors taken from the other engines (`benchmarks.fit`: their mean; its
cohort fraction from those that schedule alike, its first-token latency from those that run prefills alike);
in the other folds an engine's factors are fitted without the held-out rows where `MIN_ENGINE_ROWS` remain
(with aggregated serving held out, from disaggregated rows alone), else guessed as a held-out engine's are
(vLLM, one disaggregated row, when aggregated serving is held out). Here each group of a key (engine by
default) is held out in turn as in `python -m benchmarks accuracy`, and its rows are predicted twice from the
same fold's fit: as the accuracy benchmark does, and with their engines' own values (from the fit on every
row) of the named factors. The second is a reference, not a bound (the own values were fitted beside the
full fit's shared factors and for its loss, so another guess could do better on a fold): it says whether a
fold's shortfall lies mostly in those engine factors or elsewhere (what the fold fits without the held-out
rows: GEMM, attention and HBM efficiencies, collectives, the NIC, the grouped-GEMM share, and the engine
factors not named). How the fold guesses or fits them is what `accuracy` measures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from benchmarks.accuracy import FastModel
from benchmarks.crossval import HeldOutPrediction, error_table, format_table
from benchmarks.fit import layout_was_guessed
from benchmarks.measurements import Measurement, default_measurements_path, load_measurements
from costmodel.calibration import Calibration
from costmodel.fitting import ENGINE_FIELDS

# The factors that chiefly shape TTFT (`costmodel.serving`): first-token latency, arrival bunching, the prompt
# hold under attention DP. TPOT sees the bunching too, through the closed-loop round ((round - TTFT) / (osl - 1)).
TTFT_FIELDS = ("prefill_layer_latency_s", "cohort_fraction", "dp_wait_steps")


def check_fields(fields: Sequence[str]) -> tuple[str, ...]:
    """The named engine factors, stripped; ValueError naming any that is not one (or none at all)."""
    names = tuple(f.strip() for f in fields if f.strip())
    unknown = sorted(set(names) - set(ENGINE_FIELDS))
    if unknown or not names:
        raise ValueError(f"not engine factors: {', '.join(unknown) or '(none given)'}; "
                         f"use some of {', '.join(ENGINE_FIELDS)}")
    return names


def with_own_factors(fold: Calibration, full: Calibration, engines: Iterable[str],
                     fields: Sequence[str]) -> Calibration:
    """`fold` with each of `engines` taking `full`'s values of `fields`; its other factors as `fold` predicts it
    (`generic`'s where `fold` has no entry for it). ValueError where `full` has no entry for an engine."""
    fields = check_fields(fields)
    missing = sorted(set(engines) - set(full.engines))
    if missing:
        raise ValueError(f"the full calibration has no factors of {', '.join(missing)}")
    own = {engine: fold.engine(engine).model_copy(update={f: getattr(full.engine(engine), f) for f in fields})
           for engine in engines}
    return fold.model_copy(update={"engines": fold.engines | own})


def held_out_predictions(rows: Sequence[Measurement], fields: Sequence[str], key: str = "engine"
                         ) -> tuple[list[HeldOutPrediction], list[HeldOutPrediction]]:
    """Per held-out group of `key`: its rows as `accuracy` predicts them, and with their engines' own `fields`;
    the folds are `benchmarks.crossval.leave_group_out`'s (groups sorted, the rest of the rows in their order)."""
    groups = sorted({m.group(key) for m in rows})
    if len(groups) < 2:
        raise ValueError(f"leave-group-out by {key!r} needs at least two groups, found {groups}")
    model = FastModel.build(rows)
    full = model.fit(rows)
    plain: list[HeldOutPrediction] = []
    own: list[HeldOutPrediction] = []
    for group in groups:
        held = [m for m in rows if m.group(key) == group]
        fold = model.fit([m for m in rows if m.group(key) != group])
        ceiling = with_own_factors(fold, full, sorted({m.engine for m in held}), fields)
        for calibration, out in ((fold, plain), (ceiling, own)):
            out.extend(HeldOutPrediction(m, key, group, *model.predict(calibration, m)) for m in held)
    return plain, own


def main(fields: Sequence[str] = TTFT_FIELDS, key: str = "engine") -> int:
    fields = check_fields(fields)  # before minutes of fitting
    rows = [m for m in load_measurements(default_measurements_path()) if not layout_was_guessed(m)]
    plain, own = held_out_predictions(rows, fields, key)
    print(format_table(error_table(plain, (key,)), f"held out by {key} (as `accuracy`)"))
    print(format_table(error_table(own, (key,)), f"held out by {key}, own {', '.join(fields)}"))
    return 0
