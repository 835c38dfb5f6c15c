"""The economics of a deployment: what its tokens cost, what they take in power, and how it uses HBM.

- **Price**: `usd_per_million_tokens = usd_per_gpu_hour / (tokens/s per GPU x 3,600) x 1e6`, per GPU paid
  for: the ranked tokens/s per GPU divides by the GPUs the scenario's accounting pays for (`cluster`: every
  GPU of the cluster; `used`: those the deployment holds), so the two figures share one denominator.
- **Power**: provisioned facility power per GPU, `(GPU TDP + node_w_per_gpu) x PUE`, where node_w_per_gpu
  is the system's non-GPU power (CPUs, NICs, switches, fans) per GPU; `tokens_per_s_per_mw` is tokens/s
  per GPU over that power in MW. GPUs left idle hold their provisioned power, as in a data hall.
- **HBM** (DOMAIN.md, "bandwidth earns, capacity costs"): over the GPUs paid for, the share of HBM
  capacity the deployment fills (weights, KV, states, workspace, the engines' reserve), the time-averaged
  share of HBM bandwidth it moves, and the stranded HBM: bytes of HBM that hold nothing (each GPU's free
  HBM and every idle GPU's whole HBM).

Defaults per system, each with its source, are in `data/economics.yaml`; a scenario overrides them under
`economics:`. Pure arithmetic over the cost model: no solver, no planner.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from costmodel.calibration import Calibration
from costmodel.disaggregated import FillStation, split_serving
from costmodel.errors import CatalogError, ScenarioError
from costmodel.evaluate import plan_layout
from costmodel.hardware import GB, SystemSpec, canonical_system_name
from costmodel.layout import Layout
from costmodel.pricing import DirectPricer
from costmodel.resolve import ResolvedScenario
from costmodel.scenario import Economics, Scenario
from costmodel.serving import PhaseTime, PoolTiming, time_pool, turn_share

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6
W_PER_MW = 1e6


@functools.cache
def _data() -> dict[str, Any]:
    text = resources.files("costmodel").joinpath("data", "economics.yaml").read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def priced_systems() -> tuple[str, ...]:
    """Systems with default prices and power (every system of the catalog)."""
    return tuple(sorted(_data()["systems"]))


@dataclass(frozen=True)
class Rates:
    """What one GPU of a system costs per hour and draws, with where each number comes from."""

    system: str
    usd_per_gpu_hour: float
    usd_source: str
    gpu_w: float  # TDP, from the system (cluster.overrides may change it)
    node_w_per_gpu: float
    power_source: str
    pue: float
    pue_source: str

    @property
    def facility_w_per_gpu(self) -> float:
        """Provisioned facility power per GPU: (GPU TDP + its share of the node) x PUE, W."""
        return (self.gpu_w + self.node_w_per_gpu) * self.pue

    def to_dict(self) -> dict[str, Any]:
        return {"system": self.system, "usd_per_gpu_hour": self.usd_per_gpu_hour, "usd_source": self.usd_source,
                "gpu_w": self.gpu_w, "node_w_per_gpu": self.node_w_per_gpu, "pue": self.pue,
                "facility_w_per_gpu": self.facility_w_per_gpu, "power_source": self.power_source,
                "pue_source": self.pue_source}


def _override(value: float | dict[str, float] | None, system: str) -> float | None:
    if isinstance(value, dict):
        return value.get(system)
    return value


def rates(system: SystemSpec, economics: Economics | None = None) -> Rates:
    """The system's default rates with the scenario's `economics` overrides applied."""
    entry = _data()["systems"].get(system.name)
    if entry is None:
        raise CatalogError(f"no prices for system '{system.name}' in costmodel/data/economics.yaml")
    economics = economics or Economics()
    price = _override(economics.usd_per_gpu_hour, system.name)
    node = _override(economics.node_w_per_gpu, system.name)
    return Rates(
        system=system.name,
        usd_per_gpu_hour=float(entry["usd_per_gpu_hour"]) if price is None else price,
        usd_source=str(entry["usd_source"]) if price is None else "scenario override",
        gpu_w=system.power_w,
        node_w_per_gpu=float(entry["node_w_per_gpu"]) if node is None else node,
        power_source=str(entry["power_source"]) if node is None else "scenario override (node power)",
        pue=float(_data()["pue"]) if economics.pue is None else economics.pue,
        pue_source=str(_data()["pue_source"]) if economics.pue is None else "scenario override",
    )


def _catalog_name(name: str) -> str | None:
    """The catalog id an alias or spelling (h200, GB200_NVL72) stands for; None where it is none."""
    try:
        return canonical_system_name(name)
    except CatalogError:
        return None


def check_economics(scenario: Scenario) -> None:
    """Per-system overrides must name catalog systems: a misspelt name would silently price at the default."""
    known = priced_systems()
    for field in ("usd_per_gpu_hour", "node_w_per_gpu"):
        value = getattr(scenario.economics, field)
        if isinstance(value, dict):
            for name in value:
                if name not in known:
                    meant = _catalog_name(name)
                    hint = f" ('{name}' is {meant}: write that)" if meant in known else ""
                    raise ScenarioError(f"unknown system '{name}'{hint}; give prices by catalog name: "
                                        f"{', '.join(known)}", f"economics.{field}.{name}")


def usd_per_million_tokens(tokens_per_s_per_gpu: float, usd_per_gpu_hour: float) -> float:
    """Dollars per million generated tokens for a GPU that costs `usd_per_gpu_hour` and yields
    `tokens_per_s_per_gpu`."""
    if tokens_per_s_per_gpu <= 0:
        raise ValueError("a deployment that generates no tokens has no price per token")
    return usd_per_gpu_hour / (tokens_per_s_per_gpu * SECONDS_PER_HOUR) * TOKENS_PER_MILLION


def tokens_per_s_per_mw(tokens_per_s_per_gpu: float, facility_w_per_gpu: float) -> float:
    """Tokens/s per MW of provisioned facility power."""
    return tokens_per_s_per_gpu * W_PER_MW / facility_w_per_gpu


@dataclass(frozen=True)
class HbmUse:
    """HBM over the GPUs paid for: filled share, time-averaged bandwidth share, stranded bytes."""

    capacity_utilisation: float
    bandwidth_utilisation: float
    stranded_bytes: float


def _phase_share(phase: PhaseTime, system: SystemSpec) -> float:
    """Share of the GPU's HBM bandwidth one step of `phase` moves (its slowest pipeline stage)."""
    return phase.work.hbm_bytes / (phase.max_s * system.hbm_bandwidth_bytes_per_s)


def mixed_phase_seconds(timing: PoolTiming) -> tuple[float, float]:
    """(seconds in prompt-carrying steps, seconds in decode-only steps) of one round of a mixed pool
    (`PoolTiming.prompt_s`; the decode-only part includes the decode step each arrival waits out and any
    attention-DP hold, `PoolTiming.dp_wait_s`, during which the other sequences decode). The two
    add up to the round, `timing.cycle_s`."""
    return timing.prompt_s, timing.cycle_s - timing.prompt_s


def _busy_bandwidth(timing: PoolTiming) -> float:
    """Bandwidth share of a pool's GPUs while it works (time-weighted over its steps)."""
    system = timing.plan.ctx.system
    if timing.fill is not None:
        return _phase_share(timing.fill, system)
    assert timing.decode is not None
    if timing.mixed is None:
        return _phase_share(timing.decode, system)
    mixed_s, decode_s = mixed_phase_seconds(timing)
    weighted = mixed_s * _phase_share(timing.mixed, system) + decode_s * _phase_share(timing.decode, system)
    return weighted / (mixed_s + decode_s)


def _busy_shares(resolved: ResolvedScenario, layout: Layout, timings: list[PoolTiming],
                 calibration: Calibration) -> list[float]:
    """Share of time each pool works: mixed and decode pools always (closed loop, batch full); a fill pool
    of disaggregated serving as much as the deployment's rate asks of its capacity."""
    if layout.serving == "aggregated":
        return [1.0] * len(timings)
    workload = resolved.scenario.workload
    decode = next(t for t in timings if t.plan.pool.role == "decode")
    stations = {id(t): FillStation(t, t.plan.pool.replicas, turn_share(workload, t.plan.turns))
                for t in timings if t is not decode}
    _, _, rate, _ = split_serving(list(stations.values()), decode, decode.plan.pool.replicas, calibration,
                                  resolved.scenario.engine)
    return [1.0 if t is decode else min(1.0, rate / stations[id(t)].capacity) for t in timings]


Paid = tuple[tuple[SystemSpec, int], ...]  # GPUs paid for, by system: (system, count)


def hbm_use(resolved: ResolvedScenario, layout: Layout, paid: Paid, calibration: Calibration) -> HbmUse:
    """HBM capacity filled, bandwidth moved and HBM stranded by `layout` over the GPUs `paid` for (those the
    scenario's accounting pays for, by system; the GPUs the layout leaves idle count as empty and unused).
    Memory per GPU is that of each pool's most loaded pipeline stage; bandwidth that of its slowest stage's
    steps, each pool on its own group's system."""
    paid_gpus = sum(count for _, count in paid)
    if paid_gpus < layout.gpus:
        raise ValueError(f"the layout holds {layout.gpus} GPUs but only {paid_gpus} are paid for")
    pricer = DirectPricer(resolved.system, calibration, resolved.scenario.engine)
    timings: list[PoolTiming] = []
    shares: list[float] = []
    for part in layout.parts:  # a composite layout: each deployment's pools busy at its own rate
        own = [time_pool(pool, pricer) for pool in plan_layout(resolved, part, pricer).pools]
        timings += own
        shares += _busy_shares(resolved, part, own, calibration)
    capacity = sum(count * system.hbm_capacity_bytes for system, count in paid)
    used = sum(t.plan.pool.gpus * min(t.plan.memory.total, t.plan.memory.capacity) for t in timings)
    moved = sum(t.plan.pool.gpus * share * _busy_bandwidth(t) for t, share in zip(timings, shares, strict=True))
    return HbmUse(capacity_utilisation=used / capacity, bandwidth_utilisation=moved / paid_gpus,
                  stranded_bytes=capacity - used)


@dataclass(frozen=True)
class PointEconomics:
    """The economics of one deployment (a front point)."""

    usd_per_million_tokens: float
    tokens_per_s_per_mw: float
    usd_per_hour: float  # of the GPUs paid for
    facility_kw: float  # provisioned, of the GPUs paid for
    paid_gpus: int
    hbm: HbmUse

    def to_dict(self) -> dict[str, Any]:
        return {"usd_per_hour": self.usd_per_hour, "facility_kw": self.facility_kw, "paid_gpus": self.paid_gpus,
                "hbm_capacity_utilisation": self.hbm.capacity_utilisation,
                "hbm_bandwidth_utilisation": self.hbm.bandwidth_utilisation,
                "stranded_hbm_gb": self.hbm.stranded_bytes / GB}


def point_economics(resolved: ResolvedScenario, layout: Layout, tokens_per_s_per_gpu: float, paid: Paid,
                    calibration: Calibration) -> PointEconomics:
    """Economics of `layout` yielding `tokens_per_s_per_gpu` per GPU paid for (`paid`: the GPUs by system;
    each system's GPUs at its own price and power)."""
    paid_gpus = sum(count for _, count in paid)
    each = [(rates(system, resolved.scenario.economics), count) for system, count in paid]
    usd_per_hour = sum(rate.usd_per_gpu_hour * count for rate, count in each)
    facility_w = sum(rate.facility_w_per_gpu * count for rate, count in each)
    return PointEconomics(
        usd_per_million_tokens=usd_per_million_tokens(tokens_per_s_per_gpu, usd_per_hour / paid_gpus),
        tokens_per_s_per_mw=tokens_per_s_per_mw(tokens_per_s_per_gpu, facility_w / paid_gpus),
        usd_per_hour=usd_per_hour,
        facility_kw=facility_w / 1e3,
        paid_gpus=paid_gpus,
        hbm=hbm_use(resolved, layout, paid, calibration),
    )
