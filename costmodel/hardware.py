"""GPU system catalog: one frozen `SystemSpec` per bundled file in `costmodel/data/systems/`.

Every quantity is in SI base units (bytes, bytes/s, FLOP/s, W, s). Bandwidths are per GPU and per
direction unless the field name says per node; FLOP/s are dense tensor-core peaks. Each YAML file gives
the source or derivation of every number beside it and, in `sources`, a short source per field.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from costmodel.errors import CatalogError
from costmodel.precision import Dtype

# Decimal units are what datasheets quote; binary units are what nvidia-smi and DIMMs report.
GB = 10**9
TB = 10**12
MiB = 2**20
GiB = 2**30
TiB = 2**40

# Short names users type, mapped to catalog ids (after lower-casing and "_" -> "-").
ALIASES: dict[str, str] = {
    "h100": "h100-sxm",
    "h200": "h200-sxm",
    "b200": "b200-sxm",
    "b300": "b300-sxm",
    "gb200": "gb200-nvl72",
    "gb300": "gb300-nvl72",
}

_SYSTEMS_PACKAGE = "costmodel"
_SYSTEMS_SUBDIR = ("data", "systems")
_OVERRIDE_SOURCE = "scenario override"
# Relative slack when comparing derived bandwidths (535.5 = 7 x 76.5 is not exact in binary floats).
_REL_TOL = 1e-9


class SystemSpec(BaseModel):
    """One GPU system type: per-GPU compute and memory, node/rack packing, and the link tiers."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str = Field(min_length=1, description="Catalog id, e.g. h200-sxm.")
    description: str = Field(description="One line on what the system is.")
    vendor: Literal["nvidia", "amd"] = Field(description="GPU vendor.")
    gpu_name: str = Field(min_length=1, description="Marketing name of the GPU.")

    peak_flops_per_s: dict[Dtype, float] = Field(
        description="Dense tensor-core peak per GPU, FLOP/s, by compute format. int4 appears only where "
        "the GPU has int4 tensor cores; int4 weight-only GEMMs otherwise run at the activation format."
    )
    hbm_capacity_bytes: float = Field(description="Usable HBM per GPU, bytes.")
    hbm_bandwidth_bytes_per_s: float = Field(description="HBM bandwidth per GPU, bytes/s.")

    gpus_per_node: int = Field(description="GPUs per node (HGX board or NVL72 compute tray).")
    gpus_per_rack: int = Field(description="GPUs per rack.")
    scaleup_domain_gpus: int = Field(description="GPUs in one scale-up (NVLink / xGMI) domain.")

    scaleup_topology: Literal["switch", "mesh"] = Field(
        description="switch: any pair gets the full bandwidth; mesh: a pair gets one point-to-point link."
    )
    scaleup_bandwidth_bytes_per_s: float = Field(
        description="Scale-up bandwidth per GPU per direction, bytes/s (mesh: all links used at once)."
    )
    scaleup_peer_bandwidth_bytes_per_s: float = Field(
        description="Scale-up bandwidth between one GPU pair per direction, bytes/s."
    )
    scaleup_latency_s: float = Field(description="Per-operation latency on the scale-up fabric, s.")

    nic_bandwidth_bytes_per_s: float = Field(
        description="Scale-out NIC bandwidth per GPU per direction, bytes/s."
    )
    network_latency_s: float = Field(description="Per-operation latency on the scale-out network, s.")

    host_dram_bytes_per_node: float = Field(description="Host (CPU) memory per node, bytes.")
    host_link_bandwidth_bytes_per_s: float = Field(
        description="GPU <-> host bandwidth per GPU per direction, bytes/s (PCIe or NVLink-C2C share)."
    )
    ssd_capacity_bytes_per_node: float = Field(description="Local NVMe capacity per node, bytes.")
    ssd_bandwidth_bytes_per_s_per_node: float = Field(
        description="Local NVMe read bandwidth per node, bytes/s."
    )

    power_w: float = Field(description="GPU TDP, W.")

    sources: dict[str, str] = Field(description="Numeric field name -> short source of its value.")

    @field_validator("peak_flops_per_s", mode="before")
    @classmethod
    def _dtype_keys(cls, value: object) -> object:
        """Turn YAML string keys into `Dtype`: strict mode would refuse a plain str as an enum."""
        if not isinstance(value, Mapping):
            return value
        known = ", ".join(d.value for d in Dtype)
        converted: dict[Dtype, object] = {}
        for key, flops in value.items():
            try:
                converted[Dtype(key)] = flops
            except ValueError:
                raise ValueError(f"unknown compute format {key!r}; use one of {known}") from None
        return converted

    @model_validator(mode="after")
    def _check_semantics(self) -> SystemSpec:
        _check_positive(self)
        _check_flops(self)
        _check_packing(self)
        _check_scaleup(self)
        _check_sources(self)
        return self

    @property
    def nodes_per_rack(self) -> int:
        """Nodes in one rack."""
        return self.gpus_per_rack // self.gpus_per_node

    @property
    def ssd_bandwidth_bytes_per_s_per_gpu(self) -> float:
        """A GPU's share of its node's local SSDs, read through its host link."""
        return min(self.ssd_bandwidth_bytes_per_s_per_node / self.gpus_per_node, self.host_link_bandwidth_bytes_per_s)

    @property
    def compute_dtypes(self) -> tuple[Dtype, ...]:
        """Formats the tensor cores run natively, in `Dtype` order."""
        return tuple(d for d in Dtype if d in self.peak_flops_per_s)

    def peak_flops(self, dtype: Dtype | str) -> float:
        """Dense peak FLOP/s per GPU in `dtype`; a format the GPU cannot compute in is a CatalogError."""
        try:
            key = Dtype(dtype)
        except ValueError:
            key = None
        if key is None or key not in self.peak_flops_per_s:
            supported = ", ".join(d.value for d in self.compute_dtypes)
            raise CatalogError(
                f"system {self.name} has no {dtype} tensor-core peak; it supports {supported} "
                "(int4 weight-only layers compute in the activation format)"
            )
        return self.peak_flops_per_s[key]


def _scalar_numeric_fields() -> tuple[str, ...]:
    return tuple(n for n, f in SystemSpec.model_fields.items() if f.annotation in (int, float))


# Fields that hold numbers and so must cite a source.
NUMERIC_FIELDS: tuple[str, ...] = ("peak_flops_per_s", *_scalar_numeric_fields())


# Physical ranges in SI units, by the kind of field, that every system (bundled or overridden) must lie in:
# wide enough for any GPU of the next decade, narrow enough that no figure derived from them overflows or
# divides to infinity (an HBM bandwidth of 1e-300 B/s gave an infinite TTFT).
FLOPS_RANGE = (1e9, 1e18)  # FLOP/s per GPU; B200 fp4 dense is 9e15


def physical_range(field: str) -> tuple[float, float]:
    """(smallest, largest) allowed value of a numeric system field."""
    if "bytes_per_s" in field:
        return 1e6, 1e15  # 1 MB/s .. 1 PB/s; HBM3e is 8e12 per GPU
    if "bytes" in field:
        return 1e6, 1e17  # 1 MB .. 100 PB; a node's SSDs hold about 1e14
    if field.endswith("_s"):
        return 1e-9, 1.0  # latencies: 1 ns .. 1 s
    if field.endswith("_w"):
        return 1.0, 1e5
    return 1, 65_536  # GPUs per node, rack or scale-up domain


def _check_positive(spec: SystemSpec) -> None:
    for field in _scalar_numeric_fields():
        value, (low, high) = getattr(spec, field), physical_range(field)
        if not (math.isfinite(value) and low <= value <= high):
            raise ValueError(f"{field} must lie between {low:g} and {high:g} (SI units), got {value!r}")


def _check_flops(spec: SystemSpec) -> None:
    low, high = FLOPS_RANGE
    for dtype, flops in spec.peak_flops_per_s.items():
        if not (math.isfinite(flops) and low <= flops <= high):
            raise ValueError(
                f"peak_flops_per_s.{dtype.value} must be a FLOP/s figure between {low:g} and {high:g}, got {flops!r}"
            )
    # bf16 is the fallback compute format of every layer, so every GPU must state it.
    if Dtype.BF16 not in spec.peak_flops_per_s:
        raise ValueError("peak_flops_per_s must include bf16 (the fallback compute format)")


def _check_packing(spec: SystemSpec) -> None:
    if spec.gpus_per_rack % spec.gpus_per_node:
        raise ValueError(
            f"gpus_per_rack ({spec.gpus_per_rack}) must be a multiple of gpus_per_node ({spec.gpus_per_node})"
        )
    if spec.scaleup_domain_gpus % spec.gpus_per_node:
        raise ValueError(
            f"scaleup_domain_gpus ({spec.scaleup_domain_gpus}) must be a whole number of nodes "
            f"(a multiple of gpus_per_node = {spec.gpus_per_node})"
        )
    if spec.gpus_per_rack % spec.scaleup_domain_gpus:
        raise ValueError(
            f"scaleup_domain_gpus ({spec.scaleup_domain_gpus}) must divide gpus_per_rack "
            f"({spec.gpus_per_rack}); a scale-up domain does not span racks"
        )


def _check_scaleup(spec: SystemSpec) -> None:
    total, peer = spec.scaleup_bandwidth_bytes_per_s, spec.scaleup_peer_bandwidth_bytes_per_s
    if spec.scaleup_topology == "switch":
        if not math.isclose(peer, total, rel_tol=_REL_TOL):
            raise ValueError(
                f"scaleup_peer_bandwidth_bytes_per_s ({peer:g}) must equal scaleup_bandwidth_bytes_per_s "
                f"({total:g}) for a switch topology; use scaleup_topology: mesh for point-to-point links"
            )
        return
    links = spec.scaleup_domain_gpus - 1  # a full mesh has one link to every other GPU
    if peer > total * (1 + _REL_TOL) or total > peer * links * (1 + _REL_TOL):
        raise ValueError(
            f"mesh bandwidths are inconsistent: need scaleup_peer_bandwidth_bytes_per_s ({peer:g}) <= "
            f"scaleup_bandwidth_bytes_per_s ({total:g}) <= peer x {links} links ({peer * links:g})"
        )


def _check_sources(spec: SystemSpec) -> None:
    missing = [f for f in NUMERIC_FIELDS if not spec.sources.get(f, "").strip()]
    if missing:
        raise ValueError(f"sources lacks an entry for {', '.join(missing)}; cite a source or derivation")
    stray = sorted(set(spec.sources) - set(NUMERIC_FIELDS))
    if stray:
        raise ValueError(
            f"sources names unknown field(s) {', '.join(stray)}; "
            f"keys must be among {', '.join(NUMERIC_FIELDS)}"
        )


# --- catalog ---------------------------------------------------------------------------------------------


def _systems_dir() -> Traversable:
    directory = resources.files(_SYSTEMS_PACKAGE)
    for part in _SYSTEMS_SUBDIR:
        directory = directory / part
    return directory


@functools.lru_cache(maxsize=1)
def system_names() -> tuple[str, ...]:
    """Catalog ids of the bundled systems, sorted."""
    files = (p.name for p in _systems_dir().iterdir() if p.name.endswith(".yaml"))
    return tuple(sorted(f.removesuffix(".yaml") for f in files))


def canonical_system_name(name: str) -> str:
    """Catalog id for `name`: case-insensitive, "_" read as "-", short aliases such as h200 or gb200."""
    key = name.strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    if key not in system_names():
        aliases = ", ".join(f"{a} -> {c}" for a, c in ALIASES.items())
        raise CatalogError(
            f"unknown system {name!r}; known systems: {', '.join(system_names())} (aliases: {aliases})"
        )
    return key


def load_system(name: str) -> SystemSpec:
    """The bundled `SystemSpec` called `name` (see `canonical_system_name` for accepted spellings)."""
    return _load_bundled(canonical_system_name(name))


@functools.cache
def _load_bundled(key: str) -> SystemSpec:
    filename = f"{key}.yaml"
    try:
        raw = yaml.safe_load((_systems_dir() / filename).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"cannot read system file {filename}: {exc}") from exc
    if not isinstance(raw, dict):
        raise CatalogError(f"system file {filename} must hold a mapping of field: value")
    _reject_quoted_numbers(raw, filename)
    if raw.get("name") != key:
        raise CatalogError(f"system file {filename} must have name: {key} (found {raw.get('name')!r})")
    return _validate(raw, f"system file {filename}")


_NUMBER_LIKE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _reject_quoted_numbers(raw: Mapping[str, Any], filename: str) -> None:
    """Catch `8.0e12`, which PyYAML (YAML 1.1) reads as a string, with a message that says the fix."""
    flops = raw.get("peak_flops_per_s")
    candidates = {f: raw.get(f) for f in NUMERIC_FIELDS if f != "peak_flops_per_s"}
    if isinstance(flops, Mapping):
        candidates.update({f"peak_flops_per_s.{k}": v for k, v in flops.items()})
    for field, value in candidates.items():
        if isinstance(value, str) and _NUMBER_LIKE.fullmatch(value.strip()):
            raise CatalogError(
                f"{filename}: {field} is the string {value!r}; write a YAML float with a dot and a signed "
                "exponent, e.g. 8.0e+12 (PyYAML reads 8.0e12 as a string)"
            )


def _validate(data: Mapping[str, Any], where: str) -> SystemSpec:
    try:
        return SystemSpec.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'system'}: {err['msg']}" for err in exc.errors()
        )
        raise CatalogError(f"{where} is invalid: {problems}") from exc


IDENTITY_FIELDS = frozenset({"name", "vendor", "gpu_name"})  # what the catalog names a system by


def with_overrides(spec: SystemSpec, overrides: Mapping[str, object]) -> SystemSpec:
    """A copy of `spec` with fields replaced by name, re-validated.

    A mapping given for `peak_flops_per_s` is merged into the existing one. Overridden numeric fields get
    the source "scenario override" unless `sources` is overridden too.
    """
    valid = tuple(SystemSpec.model_fields)
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise CatalogError(
            f"unknown system field(s) {', '.join(unknown)} in overrides for {spec.name}; "
            f"valid fields: {', '.join(valid)}"
        )
    identity = sorted(set(overrides) & IDENTITY_FIELDS)
    if identity:  # a renamed system would be priced, reported and exported as the other one (its name's rates)
        raise CatalogError(
            f"{', '.join(identity)} cannot be overridden: the catalog knows a system by it (rates, reports and "
            "launch files would name the other system); choose that system instead, or override figures such as "
            "hbm_capacity_bytes"
        )
    data: dict[str, Any] = spec.model_dump()
    data.update(overrides)
    flops = overrides.get("peak_flops_per_s")
    if isinstance(flops, Mapping):
        # Dtype is a StrEnum, so "fp8" and Dtype.FP8 are the same key; unknown keys fail validation.
        data["peak_flops_per_s"] = {**spec.peak_flops_per_s, **flops}
    if "sources" not in overrides:
        data["sources"] = {**spec.sources, **{f: _OVERRIDE_SOURCE for f in overrides if f in NUMERIC_FIELDS}}
    try:
        return SystemSpec.model_validate(data)
    except ValidationError as exc:
        if len(overrides) > 1:  # the first override invalid on its own raises, named (its line in the scenario)
            for name, value in overrides.items():
                with_overrides(spec, {name: value})
        only = next(iter(overrides)) if len(overrides) == 1 else None
        checks = "; ".join(str(error["msg"]).removeprefix("Value error, ") for error in exc.errors())
        raise CatalogError(f"{checks} (system {spec.name} with overrides {', '.join(overrides)})", only) from None
