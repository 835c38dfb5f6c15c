"""Scenario schema: the deployment question a user asks.

Structural validation only (pydantic, strict, unknown keys rejected). Resolution of names against the
catalogs and cross-field semantic checks live in `costmodel.resolve`. The schema lives in `costmodel`
rather than `planner` so that `costmodel.evaluate(scenario, layout)` can be typed without the cost model
importing the planner (layering rule of the architecture guide).

Units: token counts in tokens, times in the unit their name ends with (`_ms`, `_s`), rates per second.
Every field carries a `description`; `plan schema` prints them as JSON Schema.

Bounds: every number has a physically meaningful range (below), checked before any work, so that no input
makes a figure infinite or NaN, overflows, or makes the planner's work grow without limit; NaN and infinity
are refused everywhere. The ranges are far beyond any real deployment: MAX_GPUS GPUs in one cluster,
MAX_TOKENS tokens in one request (the model's own context is checked too), a year of think or pause time.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import WithJsonSchema

from costmodel.calibration import HOLDS_PROMPTS_UNDER_DP, EngineName
from costmodel.lengths import Lengths, LengthSpec, parse_spec

DtypeName = Literal["bf16", "fp8", "fp4", "int4"]
KvDtypeName = Literal["bf16", "fp8"]
ServingMode = Literal["aggregated", "disaggregated"]
SolverName = Literal["cpsat", "highs", "cbc"]
CacheTier = Literal["hbm", "host_dram", "ssd"]

MAX_GPUS = 32_768  # GPUs in one cluster (455 NVL72 racks); the planner's work grows with it
MAX_TOKENS = 10_000_000  # tokens per request or turn; above any model's context (checked on its own)
MAX_BATCH = 1_048_576  # concurrent sequences per instance
MAX_SECONDS = 3.2e7  # a year: think and pause times, solver time limits
MAX_RATE = 1e9  # requests or sessions per second
MIN_RATE = 1e-6  # a smaller rate would make "deployments needed" figures underflow to nothing
MAX_BYTES = 1e18  # an exabyte of KV store
MAX_SEED = 2**31 - 1  # solvers take a signed 32-bit seed
MAX_THREADS = 256  # solver threads; CP-SAT refuses a model with far more workers, HiGHS aborts

PositiveInt = Annotated[int, Field(gt=0)]
GpuCount = Annotated[int, Field(gt=0, le=MAX_GPUS)]
TokenCount = Annotated[int, Field(gt=0, le=MAX_TOKENS)]
_BOTH_MODES: tuple[ServingMode, ...] = ("aggregated", "disaggregated")
Degrees = Annotated[list[GpuCount], Field(min_length=1, max_length=32)]


def _not_bool(value: object) -> object:
    """`true` and `1.0` equal 1 in Python, and strict mode lets them through a Literal[1]: refuse them."""
    if isinstance(value, bool | float):
        raise ValueError(f"schema_version is the whole number 1, not {str(value).lower()}; write 1")
    return value


SchemaVersion = Annotated[Literal[1], BeforeValidator(_not_bool)]


class StrictModel(BaseModel):
    """Frozen, strict, and closed: a misspelt key is an error, never silently ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class Precision(StrictModel):
    """Storage formats. Omitted fields take the model's native format (from its config.json)."""

    weights: DtypeName | None = Field(
        None, description="Format of attention, dense FFN, shared-expert, embedding and head weights."
    )
    experts: DtypeName | None = Field(
        None, description="Format of routed-expert weights; defaults to `weights` when that is given."
    )
    kv_cache: KvDtypeName = Field("bf16", description="Format of the KV cache (bf16 or fp8).")
    activations: Literal["bf16", "fp8"] = Field(
        "bf16",
        description="Format of activations sent in all-to-all dispatch and pipeline hops "
        "(fp8 dispatch as in DeepEP; combine stays bf16).",
    )
    expert_activations: Literal["bf16", "fp8"] | None = Field(
        None,
        description="Activations that MXFP4 routed experts (gpt-oss, Kimi K3 checkpoints) pair with on NVIDIA fp4 "
        "tensor cores, which set the rate they compute at: fp8 (MXFP8, SGLang's default on Blackwell) or bf16 "
        "(vLLM's). Default: the fp4 rate, which the bundled calibration fits. Hopper GPUs of the cluster run these "
        "experts weight-only in bf16 whatever it says; refused for other expert formats (they compute as stored) "
        "and for clusters without NVIDIA fp4 tensor cores.",
    )


class KvStore(StrictModel):
    """A shared KV store (a disaggregated memory pool or a storage cluster reached over the NICs) that
    holds the idle contexts of multi-turn sessions which the fill pool's own HBM, host DRAM and local SSD
    cannot. No system in the catalog comes with one, so it has no default: give it to plan with one."""

    capacity_bytes: float = Field(
        ge=1e6, le=MAX_BYTES, description="Bytes the store can hold for KV, all of it usable."
    )
    bandwidth_bytes_per_s: float = Field(
        ge=1e6, le=1e16,
        description="Read bandwidth the store sustains to the whole cluster, bytes/s (its aggregate limit; "
        "each GPU reads it through its own NIC)."
    )


OVERRIDES_HELP = (
    "Replace any system field by name, in SI units "
    "(e.g. {hbm_capacity_bytes: 1.2e11, nic_bandwidth_bytes_per_s: 1.0e11}); host DRAM and local SSD, the "
    "KV tiers of multi-turn sessions, are host_dram_bytes_per_node, ssd_capacity_bytes_per_node and "
    "ssd_bandwidth_bytes_per_s_per_node; peak_flops_per_s takes a mapping by format ({fp8: 2.0e+15}), merged "
    "into the system's. Values must lie in physical ranges (bandwidths 1e6-1e15 B/s, capacities 1e6-1e17 B, "
    "latencies 1e-9-1 s, FLOP/s 1e9-1e18)."
)
Overrides = dict[str, float | int | str | dict[str, float]]
MAX_GROUPS = 16  # inventory groups; every ordered pair of them is a prefill/decode structure the planner solves
GROUP_NAME = r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$"
# A GPU (r<R>/n<N>/g<G>), a whole node (r<R>/n<N>) or a whole rack (r<R>), from 0: what an inventory marks busy
UNAVAILABLE_ID = r"^r[0-9]{1,5}(/n[0-9]{1,3}(/g[0-9]{1,3})?)?$"


def _unavailable_id(text: str) -> str:
    if re.fullmatch(UNAVAILABLE_ID, text) is None:
        raise ValueError(f"{text!r} is not a GPU, node or rack id; write r<rack>/n<node>/g<gpu> (one GPU), "
                         "r<rack>/n<node> (a whole node) or r<rack> (a whole rack), numbered from 0")
    return text


UnavailableId = Annotated[str, AfterValidator(_unavailable_id),
                          WithJsonSchema({"type": "string", "pattern": UNAVAILABLE_ID})]


def _one_count(owner: str, counts: dict[str, int | None]) -> None:
    given = [k for k, v in counts.items() if v is not None]
    if len(given) != 1:
        raise ValueError(f"{owner}give exactly one of gpus, nodes or racks (found {', '.join(given) or 'none'})")


class InventoryGroup(StrictModel):
    """GPUs of one system type that the cluster owns: racks of nodes of GPUs, numbered from 0 in the
    order the count gives them (rack r holds nodes 0.. of `gpus_per_rack / gpus_per_node`; a GPU count that
    is not a whole number of nodes ends in a partial node)."""

    name: str = Field(pattern=GROUP_NAME, description="Group name used in GPU ids (`<name>/r0/n1/g2`) and output.")
    system: str = Field(description="System catalog name, e.g. h200-sxm or gb200-nvl72 (`plan catalog systems`).")
    gpus: GpuCount | None = Field(None, description="Number of GPUs (the last node may be partial).")
    nodes: GpuCount | None = Field(None, description="Number of nodes (trays of `gpus_per_node` GPUs).")
    racks: GpuCount | None = Field(None, description="Number of racks (`gpus_per_rack` GPUs each).")
    overrides: Overrides = Field(default_factory=dict, description=OVERRIDES_HELP)
    unavailable: list[UnavailableId] = Field(
        default_factory=list, max_length=MAX_GPUS,
        description="GPUs that are busy or failed, as `r<R>/n<N>/g<G>` (rack, node within the rack, GPU "
        "within the node, from 0), or a whole node `r<R>/n<N>` or rack `r<R>`: no instance is placed on them.",
    )

    @model_validator(mode="after")
    def _count(self) -> InventoryGroup:
        _one_count(f"group {self.name}: ", {"gpus": self.gpus, "nodes": self.nodes, "racks": self.racks})
        return self


class Network(StrictModel):
    """The scale-out network above the racks. Each GPU has its own NIC (`nic_bandwidth_bytes_per_s` of its
    system); a rack's uplink carries what leaves the rack, shared equally by the rack's GPUs under load."""

    oversubscription: float = Field(
        1.0, ge=1.0, le=64.0,
        description="Rack uplink = the sum of the rack's NICs divided by this (1: non-blocking; 2-4 typical).",
    )
    uplink_bytes_per_s: float | None = Field(
        None, ge=1e6, le=1e16,
        description="Rack uplink per direction, bytes/s; replaces the NIC sum / oversubscription when given.",
    )


class Cluster(StrictModel):
    """The GPUs the planner may use: one system and a count (`system` with one of `gpus`, `nodes`, `racks`),
    or an `inventory` of groups of several systems with busy or failed GPUs."""

    system: str | None = Field(
        None, description="System catalog name, e.g. h200-sxm or gb200-nvl72 (`plan catalog systems`)."
    )
    gpus: GpuCount | None = Field(
        None, description=f"Number of GPUs (the last node may be partial); at most {MAX_GPUS}."
    )
    nodes: GpuCount | None = Field(None, description="Number of nodes (trays of `gpus_per_node` GPUs).")
    racks: GpuCount | None = Field(None, description="Number of racks (`gpus_per_rack` GPUs each).")
    overrides: Overrides = Field(default_factory=dict, description=OVERRIDES_HELP)
    inventory: list[InventoryGroup] | None = Field(
        None, min_length=1, max_length=MAX_GROUPS,
        description="Groups of GPUs by system, instead of `system` and a count: "
        "[{name, system, racks | nodes | gpus, overrides, unavailable}, ...].",
    )
    network: Network = Field(default_factory=Network, description="Rack uplinks (oversubscription).")
    kv_store: KvStore | None = Field(None, description="Optional shared KV store (multi-turn sessions).")

    @model_validator(mode="after")
    def _one_form(self) -> Cluster:
        shorthand = [k for k in ("system", "gpus", "nodes", "racks") if getattr(self, k) is not None]
        if self.inventory is not None:
            if shorthand or self.overrides:
                extra = ", ".join(shorthand + (["overrides"] if self.overrides else []))
                raise ValueError(f"give either inventory or system with a count, not both (found inventory and "
                                 f"{extra}); move them into an inventory group")
            names = [g.name for g in self.inventory]
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"inventory group names must differ: {', '.join(repeated)} repeated")
            return self
        if self.system is None:
            raise ValueError("give system with one of gpus, nodes or racks, or an inventory of groups")
        _one_count("", {"gpus": self.gpus, "nodes": self.nodes, "racks": self.racks})
        return self


class Speculative(StrictModel):
    """Speculative decoding (MTP heads or a draft model). Acceptance depends on the data, hence here."""

    method: Literal["none", "mtp", "draft"] = Field(
        "none", description="none, mtp (the model's own MTP layers) or draft."
    )
    draft_tokens: int = Field(1, ge=1, le=16, description="Tokens proposed per decode step.")
    acceptance_rate: float = Field(
        0.7, ge=0.0, le=1.0, description="Probability that each proposed token is accepted (independent per token)."
    )


class TurnLength(StrictModel):
    """One kind of turn of a session and how often it occurs."""

    share: float = Field(gt=0, le=1, description="Fraction of turns of this kind (the shares add up to 1).")
    input_tokens: TokenCount = Field(description="New input tokens of such a turn.")
    output_tokens: TokenCount = Field(description="Generated tokens of such a turn.")


class Sessions(StrictModel):
    """Multi-turn sessions (agents, long chats): each turn appends new input to the session's context,
    which waits between turns in some KV tier (HBM, host DRAM, SSD) or is recomputed."""

    arrival_rate_per_s: float = Field(
        ge=MIN_RATE, le=MAX_RATE, description="New sessions per second across the cluster."
    )
    turns: int = Field(gt=0, le=100_000, description="Turns per session.")
    system_prompt_tokens: int = Field(
        0, ge=0, le=MAX_TOKENS, description="Context before the first turn (system prompt, repository map), tokens."
    )
    think_time_s: float = Field(
        5.0, ge=0.0, le=MAX_SECONDS,
        description="Mean gap between a turn's answer and the next turn (tool calls, reading), s."
    )
    pause_probability: float = Field(
        0.0, ge=0.0, le=1.0, description="Chance that the gap after a turn is a pause instead of a think."
    )
    pause_s: float = Field(3600.0, gt=0, le=MAX_SECONDS, description="Mean pause duration, s.")
    turn_lengths: Annotated[list[TurnLength], Field(min_length=1, max_length=16)] | None = Field(
        None,
        description="A small distribution of turn lengths (input and output tokens with their shares); the "
        "workload's input_tokens and output_tokens are then its means, rounded (omit them or give those).",
    )

    @model_validator(mode="after")
    def _shares_add_up(self) -> Sessions:
        if self.turn_lengths is not None:
            total = sum(kind.share for kind in self.turn_lengths)
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"turn_lengths shares add up to {total:g}; make them add up to 1")
        return self

    def mean_lengths(self) -> tuple[int, int] | None:
        """(input, output) tokens per turn of `turn_lengths`, rounded to whole tokens (None without it)."""
        if self.turn_lengths is None:
            return None
        mean_in = sum(k.share * k.input_tokens for k in self.turn_lengths)
        mean_out = sum(k.share * k.output_tokens for k in self.turn_lengths)
        return max(1, round(mean_in)), max(1, round(mean_out))


def _lengths_schema(schema: dict[str, Any]) -> None:
    """JSON Schema: input_tokens and output_tokens take a whole number or a distribution, as written
    (after validation they hold the number, the distribution beside it in input_lengths / output_lengths)."""
    properties = schema["properties"]
    for key, spread in (("input_tokens", "input_lengths"), ("output_tokens", "output_lengths")):
        number = {k: v for k, v in properties[key].items() if k not in ("description", "title")}
        # the forms side by side (`LengthSpec` picks one by the value's shape: a list or a mapping)
        properties[spread]["anyOf"] = [member for form in properties[spread]["anyOf"]
                                       for member in form.get("oneOf", [form])]
        forms = [form for form in properties[spread]["anyOf"] if form.get("type") != "null"]
        properties[key] = {"anyOf": [number, *forms], "description": properties[key]["description"],
                           "title": properties[key]["title"]}


class Workload(StrictModel):
    """What each request looks like and how many are in flight."""

    model_config = ConfigDict(**StrictModel.model_config, json_schema_extra=_lengths_schema)

    input_tokens: TokenCount = Field(
        description="New input tokens per request (excluding `cached_tokens`), or their distribution: a list of "
        "{share, tokens}, {mean, range_ratio} (vLLM's random lengths) or {max, range_ratio} (SGLang's); the "
        "field then holds the mean, rounded, and `input_lengths` the distribution."
    )
    output_tokens: TokenCount = Field(
        description="Generated tokens per request, or their distribution (as for input_tokens; `output_lengths`)."
    )
    input_lengths: LengthSpec | None = Field(
        None, description="Distribution of input_tokens (set from input_tokens when that is given as one). Drawn "
        "independently of output lengths."
    )
    output_lengths: LengthSpec | None = Field(None, description="Distribution of output_tokens (as input_lengths).")
    cached_tokens: int = Field(
        0, ge=0, le=MAX_TOKENS,
        description="Earlier context already held as KV (multi-turn); > 0 makes the fill a midfill."
    )
    cached_tier: CacheTier = Field(
        "hbm", description="Where the cached context lives before the turn: hbm, host_dram or ssd."
    )
    prefix_hit_rate: float = Field(
        0.0, ge=0.0, le=1.0, description="Fraction of `input_tokens` found in a shared prefix cache (not recomputed)."
    )
    concurrency: Annotated[int, Field(gt=0, le=1_000_000_000)] | None = Field(
        None, description="Closed loop: requests in flight across the cluster. None = the planner chooses."
    )
    arrival_rate_per_s: float | None = Field(
        None, ge=MIN_RATE, le=MAX_RATE, description="Open loop: request arrival rate across the cluster, requests/s."
    )
    routing_skew: float = Field(
        0.0,
        ge=0.0,
        le=3.0,
        description="Zipf exponent of expert popularity per layer (0 = uniform routing, as in synthetic "
        "benchmarks; 0.5 reproduces the busiest/mean EP-rank load of 1.56 measured on DeepSeek-R1 EP32 "
        "real traffic without EPLB).",
    )
    speculative: Speculative = Field(default_factory=Speculative, description="Speculative decoding.")
    sessions: Sessions | None = Field(
        None,
        description="Multi-turn sessions: input_tokens and output_tokens are then per turn, the cached context "
        "and its KV tiers follow from the sessions (leave cached_tokens at 0).",
    )

    @model_validator(mode="before")
    @classmethod
    def _lengths_from_distributions(cls, data: object) -> object:
        """A distribution given as input_tokens / output_tokens moves to input_lengths / output_lengths and
        leaves its mean, rounded, in its place (given both, the number must be that mean), so that
        everything sized by one request length (the planner's ranges, reports) sees the mean."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key, spread in (("input_tokens", "input_lengths"), ("output_tokens", "output_lengths")):
            value = data.get(key)
            if isinstance(value, list | dict):
                if data.get(spread) is not None:
                    raise ValueError(f"{key} is a distribution and {spread} is given too: give it once")
                data[spread], value = value, None
                del data[key]
            raw = data.get(spread)
            if raw is None:
                continue
            try:
                lengths = Lengths.of(parse_spec(raw), output=key == "output_tokens")
            except (ValidationError, ValueError):  # reported by the field's own validation
                data.setdefault(key, 1)
                continue
            mean = max(1, round(lengths.mean))
            given = data.setdefault(key, mean)
            if given != mean:
                raise ValueError(f"{key} is {given} but the mean of {spread} is {mean}: omit {key} or make it {mean}")
        return data

    @model_validator(mode="before")
    @classmethod
    def _lengths_from_turns(cls, data: object) -> object:
        """With `sessions.turn_lengths`, input_tokens and output_tokens default to its means (and must
        equal them when given), so everything downstream sees one mean turn."""
        if not isinstance(data, dict) or data.get("sessions") is None:
            return data
        try:
            sessions = Sessions.model_validate(data["sessions"])
        except ValidationError:  # reported where it belongs, by the field's own validation
            raw = data["sessions"]
            if isinstance(raw, dict) and raw.get("turn_lengths") is not None:
                # the lengths would come from turn_lengths: no "missing" noise next to its own error
                data = {"input_tokens": 1, "output_tokens": 1, **data}
            return data
        means = sessions.mean_lengths()
        if means is None:
            return data
        data = dict(data)
        for key, mean in zip(("input_tokens", "output_tokens"), means, strict=True):
            given = data.setdefault(key, mean)
            if given != mean:
                raise ValueError(f"{key} is {given} but the mean of sessions.turn_lengths is {mean}: "
                                 f"omit {key} or make it {mean}")
        return data

    @model_validator(mode="after")
    def _one_load_driver(self) -> Workload:
        if self.concurrency is not None and self.arrival_rate_per_s is not None:
            raise ValueError("give at most one of concurrency (closed loop) or arrival_rate_per_s (open loop)")
        if self.sessions is not None and self.cached_tokens:
            raise ValueError("with sessions the cached context follows from the turns: set cached_tokens to 0")
        if self.sessions is not None and (self.input_lengths is not None or self.output_lengths is not None):
            raise ValueError("with sessions give the lengths' distribution as sessions.turn_lengths, not as "
                             "input_tokens / output_tokens distributions")
        new = self.input_tokens * (1.0 - self.prefix_hit_rate)
        if new < 1.0:  # a fill computes at least the last token; zero new tokens divided the chunking by zero
            raise ValueError(f"prefix_hit_rate {self.prefix_hit_rate:g} of {self.input_tokens} input tokens leaves "
                             f"{new:g} to compute; leave at least one (prefix_hit_rate <= "
                             f"{1 - 1 / self.input_tokens:.6g})")
        return self


    @property
    def input_distribution(self) -> Lengths:
        """Input lengths (new tokens before prefix hits): the distribution, or the one length."""
        if self.input_lengths is None:
            return Lengths.fixed(self.input_tokens)
        return Lengths.of(self.input_lengths)

    @property
    def output_distribution(self) -> Lengths:
        if self.output_lengths is None:
            return Lengths.fixed(self.output_tokens)
        return Lengths.of(self.output_lengths, output=True)

    @property
    def mean_output_tokens(self) -> float:
        """Generated tokens per request on average, exact (output_tokens is the mean rounded)."""
        return float(self.output_tokens) if self.output_lengths is None else self.output_distribution.mean

    @property
    def longest_request_tokens(self) -> int:
        """Cached + input + output tokens of the longest request the lengths allow."""
        return self.cached_tokens + self.input_distribution.largest + self.output_distribution.largest


class Slo(StrictModel):
    """Service-level targets on mean latencies. Omit one to leave it unconstrained."""

    ttft_ms: float | None = Field(
        None, gt=0, le=1e3 * MAX_SECONDS, description="Largest mean time to first token, ms."
    )
    tpot_ms: float | None = Field(
        None, gt=0, le=1e3 * MAX_SECONDS, description="Largest mean time per output token after the first, ms."
    )


class Search(StrictModel):
    """What the planner may choose, and how hard it may try."""

    serving: Annotated[list[ServingMode], Field(min_length=1)] = Field(
        default_factory=lambda: list(_BOTH_MODES),
        description="Serving modes to consider.",
    )
    solver: SolverName = Field("cpsat", description="MILP backend: cpsat (OR-Tools), highs or cbc.")
    time_limit_s: float = Field(60.0, ge=0.1, le=MAX_SECONDS,
                                description="Wall-clock limit of the whole solve, s (at least 0.1, as --time-limit).")
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="Random seed (0 to 2^31 - 1); same scenario and seed give the same plans."
    )
    threads: Annotated[int, Field(gt=0, le=MAX_THREADS)] | None = Field(
        None, description=f"Solver threads, 1 to {MAX_THREADS}; None = 1 (deterministic)."
    )
    front_resolution: float | Literal["auto", "exact"] = Field(
        "auto",
        description="How finely the front is resolved. 'auto' (default): at most 60 points, refined where the "
        "most hypervolume can hide until the front is certified within 0.05% of the exact front's hypervolume; "
        "'exact': every non-dominated point; a number r in [0, 0.5): a TTFT step of r x the TTFT range (the "
        "SLO, else the best-throughput point's TTFT), every exact point then within that much TTFT of a "
        "returned point with at least its throughput. The output states what the front certifies.",
    )
    front_points: Annotated[int, Field(ge=2, le=100_000)] | Literal["all"] = Field(
        60,
        description="'auto' resolution: the most points of the front (default 60, a front people can read); "
        "'all': as many as certifying it within 0.05% of the exact front's hypervolume takes (100-400 on fronts "
        "over every integer batch).",
    )
    batch_tolerance: float = Field(
        0.01, ge=0.0, le=0.2,
        description="Batches between the timed ones are searched until no untimed batch could beat the front "
        "by more than this share (a point's gap at most; 'exact' resolution: 0). Smaller: more batches timed.",
    )
    gpu_accounting: Literal["cluster", "used"] = Field(
        "cluster",
        description="Throughput per GPU divides by every GPU of the cluster (cluster: the user owns them, so "
        "plans fill it with replicas where that raises throughput) or only by the GPUs a deployment holds (used).",
    )
    composite: bool = Field(
        True,
        description="Cluster accounting on an inventory of several groups: deployments on disjoint groups may run "
        "side by side behind one router (a composite layout), so no group stays idle where it could serve; false: "
        "one deployment (one structure) per plan.",
    )
    tp: Degrees | None = Field(None, description="Allowed attention tensor-parallel degrees (None = powers of 2).")
    dp_attention: Degrees | None = Field(None, description="Allowed attention data-parallel degrees.")
    pp: Degrees | None = Field(None, description="Allowed pipeline depths.")
    moe_tp: Degrees | None = Field(None, description="Allowed expert tensor-parallel degrees.")
    moe_ep: Degrees | None = Field(None, description="Allowed expert-parallel degrees.")
    max_batch: Annotated[int, Field(gt=0, le=MAX_BATCH)] | None = Field(
        None, description="Largest batch per instance the planner may pick."
    )
    redundant_experts: int = Field(
        0, ge=0, le=4096,
        description="Extra expert slots per expert-parallel group for replicas of hot experts (at most the model's "
        "routed experts).",
    )
    split_hybrid_groups: bool = Field(
        False, description="Allow pipeline stage boundaries inside a hybrid layer group."
    )
    separate_midfill: bool = Field(
        True, description="Multi-turn sessions, disaggregated serving: also consider a separate midfill pool for the "
        "turns after the first (the prefill pool then runs only first turns)."
    )
    objective: Literal["tokens_per_gpu", "usd_per_million_tokens"] = Field(
        "tokens_per_gpu",
        description="What ranks deployments where systems or prices differ (plan compare, plan sweep: the best "
        "point per TTFT band and per case): tokens/s per GPU (highest first) or USD per million tokens (lowest "
        "first, from `economics`). On one system at one price the two rank a front alike.",
    )

    @model_validator(mode="after")
    def _resolution_in_range(self) -> Search:
        value = self.front_resolution
        if not isinstance(value, str) and not 0.0 <= value < 0.5:
            raise ValueError("front_resolution: give 'auto', 'exact' or a number in [0, 0.5)")
        return self


PriceOrPerSystem = Annotated[float, Field(gt=0, le=1e4)] | dict[str, Annotated[float, Field(gt=0, le=1e4)]]
PowerOrPerSystem = Annotated[float, Field(ge=0, le=1e5)] | dict[str, Annotated[float, Field(ge=0, le=1e5)]]


class Economics(StrictModel):
    """Prices and power behind `usd_per_million_tokens` and `tokens_per_s_per_mw` of every front point.
    Omitted fields take the defaults of `costmodel/data/economics.yaml` (each with its source)."""

    usd_per_gpu_hour: PriceOrPerSystem | None = Field(
        None, description="USD per GPU-hour: one number for the cluster's system, or a mapping by system name "
        "({b200-sxm: 4.5, gb200-nvl72: 6.0}; systems left out keep their default).",
    )
    node_w_per_gpu: PowerOrPerSystem | None = Field(
        None, description="Non-GPU power per GPU (CPUs, NICs, switches, fans), W: a number or a mapping by "
        "system name. The GPU's own TDP is the system's power_w (cluster.overrides may change it).",
    )
    pue: float | None = Field(
        None, ge=1.0, le=3.0, description="Power usage effectiveness of the facility (facility / IT power)."
    )


class Scenario(StrictModel):
    """A deployment question: this model, on this cluster, for this workload, under these targets."""

    schema_version: SchemaVersion = Field(description="Scenario format version; this release reads 1.")
    name: str = Field(min_length=1, max_length=200, description="Short name, used in reports and output files.")
    model: str = Field(
        min_length=1, max_length=4096,
        description="Catalog id or alias (`plan catalog models`), or a path to a Hugging Face config.json or "
        "a model YAML written by `plan import-hf`, relative to the scenario file.",
    )
    precision: Precision = Field(default_factory=Precision, description="Storage formats.")
    cluster: Cluster = Field(description="The GPUs available.")
    workload: Workload = Field(description="The requests to serve.")
    slo: Slo = Field(default_factory=Slo, description="Latency targets.")
    search: Search = Field(default_factory=Search, description="Planner options.")
    engine: EngineName = Field("generic", description="Serving engine the plan is for: trtllm, vllm, sglang, generic.")
    prefill_batch_tokens: int | None = Field(
        None, ge=1, le=1_048_576,
        description="Prompt tokens per attention-DP rank in one prefill batch of an aggregated pool of a "
        "prefill-first engine (SGLang: its --chunked-prefill-size divided by the attention-DP degree, which "
        "`plan export` launches). Default: SGLang's default for the GPU per rank, 8192 under 160 GiB of HBM and "
        "16384 from it. Prefill pools of disaggregated serving keep 8192 per rank.",
    )
    attention_dp_balance: bool = Field(
        False,
        description="TensorRT-LLM: the launch balances context requests across attention-DP ranks "
        "(attention_dp_config enable_balance, as NVIDIA's DeepSeek throughput configurations set it), so a prompt "
        "in an aggregated pool with attention DP is held back for the fitted number of decode steps. `plan export` "
        "does not write attention_dp_config: add it to the launch when setting this.",
    )
    economics: Economics = Field(default_factory=Economics, description="GPU-hour prices, power and PUE.")

    @field_validator("attention_dp_balance")
    @classmethod
    def _balance_for_trtllm(cls, value: bool, info: ValidationInfo) -> bool:
        _engine_option(value, info, HOLDS_PROMPTS_UNDER_DP, "is TensorRT-LLM's context balancing",
                       "dispatches each request to a rank at once", "trtllm")
        return value

    @field_validator("prefill_batch_tokens")
    @classmethod
    def _prefill_batch_for_sglang(cls, value: int | None, info: ValidationInfo) -> int | None:
        _engine_option(value is not None, info, {"sglang"}, "sets SGLang's prefill batch",
                       "runs prompts on decode steps", "sglang")
        return value


def _engine_option(used: object, info: ValidationInfo, engines: Collection[str], what: str, instead: str,
                   engine_to_set: str) -> None:
    """A top-level option one engine's launch has: refused, naming the field, for any other engine (the engine
    field is declared before the options, so validated first; absent, it is reported already)."""
    engine = info.data.get("engine")
    if used and engine is not None and engine not in engines:
        raise ValueError(f"{what}, but engine {engine} {instead}: remove {info.field_name} or set engine: "
                         f"{engine_to_set}")
