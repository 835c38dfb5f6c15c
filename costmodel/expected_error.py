"""How far to trust a prediction: the cost model's error on serving runs its calibration was not fitted on,
chosen by what the bundled calibration's rows cover of a scenario.

The figures are the accuracy benchmark's (`python -m benchmarks accuracy`, held-out median and 90th-percentile
absolute percentage error of the mean TTFT and TPOT), copied into `data/calibration/expected_error.yaml` by
`python -m benchmarks expected-error --write` with the fingerprint of the calibration they were measured on.
Which figure applies (each over the rows of the scenario's engine where the rows have it: the engines' errors
differ, TTFT held out by campaign 18.1% for vLLM, 27.1% for TRT-LLM, 35.8% for SGLang):
- the scenario's model, the systems of its deployment and its engine are in the calibration's rows: the error
  held out by campaign (a new engine build, system and serving mode of things the rows know: what a team's
  own deployment is most like);
- one of them is not (a catalog model, a GPU or the `generic` engine the rows lack): the error held out by that
  key (each model, system or engine of the rows predicted by a fit without it);
- several are not: the largest of those figures, each measured with one key held out at a time, so likely
  optimistic for the combination;
- a GPU generation without rows (AMD's today): no figure; its factors are priors, and no fold held out a whole
  generation (holding out H200 leaves H100's rows).
A deployment whose pools run on several systems counts as a new system (no row did that); a system with
`overrides` is new; a model file equal to a catalog model of the rows is that model. Assumptions: a model is
known by its catalog entry (Qwen3-235B-A22B in bf16 is not the FP8 checkpoint the rows ran); the serving mode
is never new (the rows have both); a GPU name the catalog does not know is read as `generation_of` reads
it; a calibration other than the bundled one (`plan calibrate`) has no figures here: its own cross-validated
error is in its header.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

import yaml

from costmodel.architecture import Architecture
from costmodel.calibration import (
    MX_ACTIVATION_NAMES,
    MX_EXPERT_ACTIVATIONS_ASSUMED,
    Calibration,
    default_calibration,
    fingerprint,
    generation_of,
    mx_activations,
    mx_rate_gap,
)
from costmodel.errors import CostModelError
from costmodel.hardware import SystemSpec, load_system, system_names
from costmodel.layout import Layout
from costmodel.models import load_model
from costmodel.precision import Dtype
from costmodel.resolve import ResolvedScenario

KEYS = ("model", "system", "engine")  # what a scenario may bring that the calibration's rows lack
FIGURES = ("ttft_median_pct", "ttft_p90_pct", "tpot_median_pct", "tpot_p90_pct")
DATA_FILE = "expected_error.yaml"


@dataclass(frozen=True)
class ExpectedError:
    """The error to expect of a scenario's predictions, and why that figure."""

    held_out_by: tuple[str, ...]  # the accuracy benchmark's folds the figures come from; () if none apply
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
        return f"error to expect of the predicted mean TTFT / TPOT: not measured ({error['basis']})"
    return (f"error to expect of the predicted mean TTFT / TPOT (either way; tokens/s per GPU follows TPOT): "
            f"median {error['ttft_median_pct']:.0f}% / {error['tpot_median_pct']:.0f}%, 1 in 10 beyond "
            f"{error['ttft_p90_pct']:.0f}% / {error['tpot_p90_pct']:.0f}% ({error['basis']})")


@functools.lru_cache(maxsize=1)
def bundled_figures() -> dict[str, Any]:
    """The committed figures (`data/calibration/expected_error.yaml`)."""
    text = resources.files("costmodel").joinpath("data", "calibration", DATA_FILE).read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def scenario_values(resolved: ResolvedScenario, systems: Sequence[SystemSpec]) -> dict[str, tuple[str, ...]]:
    """The scenario's model, systems and engine, as the calibration's rows name them: a model file equal to a
    catalog model the rows ran is that model; a system with overrides is new."""
    return {"model": (_model_name(resolved.architecture),),
            "system": tuple(sorted({_system_name(system) for system in systems})),
            "engine": (resolved.scenario.engine,)}


def _model_name(architecture: Architecture) -> str:
    covered: list[str] = bundled_figures()["covered"]["model"]
    for name in covered:
        known = _catalog_architecture(name)
        if architecture == known or architecture.model_copy(update={"name": name}) == known:
            return name
    return architecture.name


@functools.lru_cache(maxsize=32)
def _catalog_architecture(name: str) -> Architecture | None:
    try:
        return load_model(name)
    except CostModelError:  # a model of the rows the catalog lacks: matched by name alone
        return None


def _system_name(system: SystemSpec) -> str:
    catalog = system.name in system_names() and load_system(system.name) == system
    return system.name if catalog else f"{system.name} (overridden)"


def expected_error(resolved: ResolvedScenario, calibration: Calibration | None = None,
                   systems: Sequence[SystemSpec] | None = None, decode_batches: Sequence[int] = ()) -> ExpectedError:
    """The held-out error that applies to `resolved` priced with `calibration` (the bundled one if None), on
    `systems`: those a deployment's pools run on (every system of the cluster if None); its basis also names
    what the figure does not cover (`noted`), `decode_batches` the deployments it is for
    (`decode_batch_per_rank` of each)."""
    systems = list(systems) if systems else [group.system for group in resolved.groups]
    batches = decode_batches if is_bundled(calibration) else ()
    return noted(held_out_error(resolved, calibration, systems), resolved, systems, batches)


def is_bundled(calibration: Calibration | None) -> bool:
    """`calibration` is the bundled one (None: the bundled one), whose rows the packaged figures describe."""
    return calibration is None or calibration == default_calibration() \
        or fingerprint(calibration)["sha256"] == bundled_figures()["calibration_sha256"]


def noted(trust: ExpectedError, resolved: ResolvedScenario, systems: Sequence[SystemSpec],
          decode_batches: Sequence[int] = ()) -> ExpectedError:
    """`trust` with its basis followed by what the held-out figures cannot show on `systems`: MXFP4 experts
    priced faster than the engines run them (`microscaled_note`), and deployments that decode larger batches
    per attention rank than the bundled calibration's rows did (`batch_note`; `decode_batches`: each
    deployment's `decode_batch_per_rank`)."""
    notes = [note for note in (microscaled_note(resolved, systems), batch_note(resolved, decode_batches)) if note]
    return replace(trust, basis=f"{trust.basis}. Also: {'; '.join(notes)}") if notes else trust


def decode_batch_per_rank(layout: Layout, max_batches: Sequence[int] | None = None) -> int:
    """The most sequences one attention-DP rank of a decoding pool (mixed or decode) of `layout` holds, every
    deployment's of a composite; `max_batches`: each pool's largest batch that fits, in the order of its
    deployments' pools, where a pool asked for more runs that (`plan evaluate`); 0 without a decoding pool."""
    pools = [pool for part in layout.parts for pool in part.pools]
    caps = [pool.batch for pool in pools] if max_batches is None else list(max_batches)
    return max((math.ceil(min(pool.batch, cap) / pool.dp_attention) for pool, cap in zip(pools, caps, strict=True)
                if pool.role in ("mixed", "decode")), default=0)


def batch_note(resolved: ResolvedScenario, decode_batches: Sequence[int]) -> str:
    """Where deployments decode more sequences per attention rank (`decode_batches`, one a deployment) than the
    bundled calibration's rows of the scenario's engine did (all rows' for an engine they lack): there the
    per-sequence step cost the rows fit is extrapolated. Empty elsewhere, and for packaged figures that do not
    record the rows' batches."""
    largest: dict[str, int] | None = bundled_figures().get("largest_batch_per_rank")
    if not largest:
        return ""
    engine = resolved.scenario.engine
    measured = largest.get(engine, largest["all"])
    beyond = [batch for batch in decode_batches if batch > measured]
    if not beyond:
        return ""
    which = "this deployment decodes" if len(decode_batches) == 1 else \
        f"{len(beyond)} of the {len(decode_batches)} deployments decode{'s' if len(beyond) == 1 else ''}"
    rows = f"the calibration's rows of {engine}" if engine in largest else "the calibration's rows"
    return (f"{which} up to {max(beyond)} sequences per attention rank, beyond the {measured} of {rows}: the "
            "per-sequence step cost they fit is extrapolated there (`python -m benchmarks published` checks it against "
            "TRT-LLM's offline throughput at such batches)")


def microscaled_note(resolved: ResolvedScenario, systems: Sequence[SystemSpec]) -> str:
    """Where MXFP4 experts run on NVIDIA fp4 tensor cores, the rate the engine computes them at against the fp4
    rate the cost model prices (`costmodel.calibration.mx_rate_gap`); empty elsewhere."""
    engine = resolved.scenario.engine
    gaps = [gap for gap in (mx_rate_gap(system, engine) for system in systems) if gap is not None]
    if not resolved.microscaled_experts or not gaps:
        return ""
    how = "; ".join(f"{name} computes such experts with {MX_ACTIVATION_NAMES[dtype]} activations by default"
                    + (" (assumed)" if name in MX_EXPERT_ACTIVATIONS_ASSUMED else "")
                    for name, dtype in mx_activations(engine).items())
    chosen = resolved.scenario.precision.expert_activations
    if chosen is not None:
        fallback = " (bf16 in vLLM's decode pools with expert parallelism over attention DP, whose batched input " \
            "its MXFP8 kernels do not take)" if chosen == "fp8" and engine == "vllm" else ""
        return (f"the routed experts are MXFP4, priced on NVIDIA fp4 tensor cores with "
                f"{MX_ACTIVATION_NAMES[Dtype(chosen)]} activations as precision.expert_activations sets{fallback}; "
                f"{how}; the bundled calibration's gpt-oss rows (older engine builds) fit the fp4 rate best")
    return (f"the routed experts are MXFP4, priced at the fp4 tensor-core rate, which the bundled calibration's "
            f"gpt-oss rows (older engine builds) fit best; {how}; the fp4 rate is up to {max(gaps):.3g}x "
            "theirs: figures where those GEMMs are compute-bound (prefill above all) may be optimistic")


def held_out_error(resolved: ResolvedScenario, calibration: Calibration | None,
                   systems: Sequence[SystemSpec]) -> ExpectedError:
    """The accuracy benchmark's held-out figures that apply (`expected_error` without its notes)."""
    data = bundled_figures()
    if not is_bundled(calibration):
        return ExpectedError((), {}, None, "a calibration other than the bundled one; `plan calibrate` prints its "
                                           "cross-validated error and writes it in the calibration's header")
    unmeasured = sorted({generation_of(system) for system in systems} - set(data["generations"]))
    if unmeasured:
        return ExpectedError((), {}, None, f"the calibration's rows have no GPU of the {', '.join(unmeasured)} "
                                           "generation: its factors are kernel-microbenchmark priors, and no held-out "
                                           "fold measured a generation without rows")
    covered: dict[str, list[str]] = data["covered"]
    values = scenario_values(resolved, systems)
    new = {key: tuple(v for v in values[key] if v not in covered[key]) for key in KEYS}
    if len(values["system"]) > 1:  # no row ran one deployment's pools on different GPUs
        new["system"] = (" + ".join(values["system"]) + " in one deployment",)
    new = {key: v for key, v in new.items() if v}
    engine = resolved.scenario.engine
    folds = tuple(new) or ("campaign",)
    figures = {name: max(float(_fold_figures(data, fold, engine)[name]) for fold in folds) for name in FIGURES}
    engine_note = f", over {engine}'s rows" if "engine" not in new else ""
    if not new:
        return ExpectedError(folds, {}, figures, f"held out by campaign{engine_note}: the calibration's rows have "
                                                 "this model, system and engine")
    what = "; ".join(f"{key} {', '.join(v)}" for key, v in new.items())
    basis = f"held out by {' and by '.join(folds)}{engine_note}: the calibration's rows have no {what}"
    if engine == "generic":
        basis += " (generic is the default engine: set `engine:` to trtllm, vllm or sglang if you run one)"
    if len(folds) > 1:
        basis += "; the larger figure of each held out alone: likely optimistic for these new together"
    return ExpectedError(folds, new, figures, basis)


def _fold_figures(data: dict[str, Any], fold: str, engine: str) -> dict[str, float]:
    """A fold's figures over the rows of `engine` where the rows have it, else over all its rows."""
    by_rows: dict[str, dict[str, float]] = data["held_out"][fold]
    return by_rows.get(engine, by_rows["all"])
