"""How far to trust a prediction: the cost model's error on serving runs its calibration was not fitted on,
chosen by what the bundled calibration's rows cover of a scenario.

The figures are the accuracy benchmark's (`python -m benchmarks accuracy`, held-out median and 90th-percentile
absolute percentage error of the mean TTFT and TPOT), copied into `data/calibration/expected_error.yaml` by
`python -m benchmarks expected-error --write` with the fingerprint of the calibration they were measured on.
Which figure applies:
- the scenario's model, every system of its cluster and its engine are in the calibration's rows: the error
  held out by campaign (a new engine build, system and serving mode of things the rows know: what a team's own
  deployment is most like);
- one of them is not (a catalog model, a GPU or the `generic` engine the rows lack): the error held out by that
  key (each model, system or engine of the rows predicted by a fit without it);
- several are not: the largest of those figures, each measured with one key held out at a time, so likely
  optimistic for the combination;
- a GPU generation without rows (AMD's today): no figure; its factors are priors, and no fold held out a whole
  generation (holding out H200 leaves H100's rows).
Assumptions: a model is known by its name alone (another precision of a known model counts as known); the
serving mode is never new (the rows have both); a calibration other than the bundled one (`plan calibrate`)
has no figures here: its own cross-validated error is in its header.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from costmodel.calibration import Calibration, default_calibration, fingerprint, generation_of
from costmodel.resolve import ResolvedScenario

KEYS = ("model", "system", "engine")  # what a scenario may bring that the calibration's rows lack
FIGURES = ("ttft_median_pct", "ttft_p90_pct", "tpot_median_pct", "tpot_p90_pct")
DATA_FILE = "expected_error.yaml"


@dataclass(frozen=True)
class ExpectedError:
    """The error to expect of a scenario's predictions, and why that figure."""

    held_out_by: tuple[str, ...]  # the accuracy benchmark's groupings the figures come from; () if none apply
    new: dict[str, tuple[str, ...]]  # key -> the scenario's values the calibration's rows lack
    figures: dict[str, float] | None  # FIGURES -> percent; None for a calibration without measured figures
    basis: str

    def to_dict(self) -> dict[str, Any]:
        figures = self.figures or {}
        return {"held_out_by": list(self.held_out_by), "new": {k: list(v) for k, v in self.new.items()},
                **{name: figures.get(name) for name in FIGURES}, "basis": self.basis}

    def text(self) -> str:
        """One line for the console."""
        return describe(self.to_dict())


def describe(error: dict[str, Any]) -> str:
    """One line saying an `expected_error` of the JSON (`ExpectedError.to_dict`)."""
    if error["ttft_median_pct"] is None:
        return f"expected error of the predictions: not measured ({error['basis']})"
    return (f"expected error of the predicted TTFT / TPOT: median {error['ttft_median_pct']:.0f}% / "
            f"{error['tpot_median_pct']:.0f}%, 1 in 10 beyond {error['ttft_p90_pct']:.0f}% / "
            f"{error['tpot_p90_pct']:.0f}% ({error['basis']})")


@functools.lru_cache(maxsize=1)
def bundled_figures() -> dict[str, Any]:
    """The committed figures (`data/calibration/expected_error.yaml`)."""
    text = resources.files("costmodel").joinpath("data", "calibration", DATA_FILE).read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def scenario_values(resolved: ResolvedScenario) -> dict[str, tuple[str, ...]]:
    """The scenario's model, systems and engine, as the calibration's rows name them."""
    return {"model": (resolved.architecture.name,),
            "system": tuple(sorted({group.system.name for group in resolved.groups})),
            "engine": (resolved.scenario.engine,)}


def expected_error(resolved: ResolvedScenario, calibration: Calibration | None = None) -> ExpectedError:
    """The held-out error that applies to `resolved` priced with `calibration` (the bundled one if None)."""
    data = bundled_figures()
    if calibration is not None and calibration != default_calibration() \
            and fingerprint(calibration)["sha256"] != data["calibration_sha256"]:
        return ExpectedError((), {}, None, "a calibration other than the bundled one; `plan calibrate` prints its "
                                           "cross-validated error and writes it in the calibration's header")
    covered: dict[str, list[str]] = data["covered"]
    unmeasured = sorted({generation_of(g.system) for g in resolved.groups} - set(data["generations"]))
    if unmeasured:
        return ExpectedError((), {}, None, f"the calibration's rows have no GPU of the {', '.join(unmeasured)} "
                                           "generation: its factors are kernel-microbenchmark priors, and no held-out "
                                           "fold measured a generation without rows")
    values = scenario_values(resolved)
    new = {key: tuple(v for v in values[key] if v not in covered[key]) for key in KEYS}
    new = {key: v for key, v in new.items() if v}
    if not new:
        return ExpectedError(("campaign",), {}, dict(data["held_out"]["campaign"]),
                             "held out by campaign: the calibration's rows have this model, system and engine")
    held_out = tuple(new)
    figures = {name: max(float(data["held_out"][key][name]) for key in held_out) for name in FIGURES}
    what = "; ".join(f"{key} {', '.join(v)}" for key, v in new.items())
    basis = f"held out by {' and by '.join(held_out)}: the calibration's rows have no {what}"
    if len(held_out) > 1:
        basis += " (the larger figure of each key held out alone: likely optimistic for both new at once)"
    return ExpectedError(held_out, new, figures, basis)
