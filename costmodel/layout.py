"""Layout schema: a concrete deployment, what `plan solve` outputs and `plan evaluate` takes.

Scripts depend on these names; later placement details (stages, expert replicas, node and rack
assignment) are added as optional fields and never rename these.

Numbers are bounded as in `costmodel.scenario` (degrees and replicas at most MAX_GPUS, batch at most
MAX_BATCH).

GPU accounting: one instance holds tp x dp_attention x pp GPUs; its expert layers use the same GPUs
as moe_tp x moe_ep per stage, so tp x dp_attention must equal moe_tp x moe_ep.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, model_validator

from costmodel.scenario import GROUP_NAME, MAX_BATCH, MAX_GPUS, GpuCount, SchemaVersion, StrictModel

PoolRole = Literal["mixed", "prefill", "midfill", "decode"]
# a composite layout: several independent deployments side by side (e.g. one per inventory group)
LayoutServing = Literal["aggregated", "disaggregated", "composite"]
# a deployment holds at least one GPU: a composite has at most as many deployments as the cluster has GPUs (the
# planner's have one per group, or one per instance size on a group)
MAX_DEPLOYMENTS = MAX_GPUS
DISAGGREGATED_ROLES = (["decode", "prefill"], ["decode", "midfill", "prefill"])
FILL_ROLES: tuple[PoolRole, ...] = ("mixed", "prefill", "midfill")  # pools that run fills


class Pool(StrictModel):
    """Identical instances serving one role."""

    role: PoolRole = Field(
        description="mixed (aggregated serving), prefill, midfill or decode. A midfill pool (multi-turn sessions, "
        "disaggregated) runs the turns that follow a gap, the prefill pool then only sessions' first turns."
    )
    group: str | None = Field(
        None, pattern=GROUP_NAME,
        description="The cluster inventory group whose GPUs run the pool (omitted: the cluster's only group).",
    )
    deployment: Annotated[int, Field(ge=0, lt=MAX_DEPLOYMENTS)] = Field(
        0, description="Composite layouts: the independent deployment the pool belongs to (0, 1, ...). Pools with "
        "the same number serve together (one mixed pool, or fill pools and a decode pool); each deployment "
        "serves its own share of the requests behind one router.",
    )
    replicas: GpuCount = Field(1, description="Identical instances in this pool.")
    tp: GpuCount = Field(1, description="Attention tensor parallelism per attention-DP rank.")
    dp_attention: GpuCount = Field(1, description="Attention data-parallel ranks per instance.")
    pp: GpuCount = Field(1, description="Pipeline stages.")
    moe_tp: GpuCount = Field(1, description="Expert tensor parallelism.")
    moe_ep: GpuCount = Field(1, description="Expert parallelism.")
    batch: Annotated[int, Field(gt=0, le=MAX_BATCH)] = Field(
        description="Concurrent sequences per instance (all its attention-DP ranks together)."
    )
    kv_store: bool = Field(
        False, description="Multi-turn sessions, the pool that holds idle contexts (mixed, prefill, or midfill when "
        "there is one): what its HBM, host DRAM and local SSD cannot hold waits in the cluster's shared KV store "
        "(true) or is recomputed (false)."
    )
    cpu_offload_gb: float = Field(
        0.0, ge=0.0, le=4096.0,
        description="Weights each GPU keeps in host DRAM instead of HBM, GiB (vLLM's and SGLang's --cpu-offload-gb): "
        "they free HBM for KV and are streamed to the GPU over its host link at every step.",
    )
    tier_load: float = Field(
        1.0, gt=0.0, le=1.0,
        description="Multi-turn sessions, disaggregated prefill or midfill pools: the share of the pool's full rate "
        "its KV tiers are sized for; the deployment admits no more turns than that (lower: smaller idle "
        "populations, faster fetches, a capped rate).",
    )

    @model_validator(mode="after")
    def _gpus_add_up(self) -> Pool:
        attention, experts = self.tp * self.dp_attention, self.moe_tp * self.moe_ep
        if attention != experts:
            raise ValueError(
                f"GPUs per pipeline stage differ: tp x dp_attention = {self.tp} x {self.dp_attention} = "
                f"{attention} but moe_tp x moe_ep = {self.moe_tp} x {self.moe_ep} = {experts}; "
                "make the two products equal"
            )
        if self.tier_load != 1.0 and self.role not in ("prefill", "midfill"):
            raise ValueError("tier_load applies to disaggregated prefill and midfill pools; leave it at 1")
        if self.kv_store and self.role == "decode":
            raise ValueError("kv_store applies to the pools that run fills (mixed, prefill, midfill), not to decode")
        return self

    @property
    def gpus_per_instance(self) -> int:
        return self.tp * self.dp_attention * self.pp

    @property
    def gpus(self) -> int:
        return self.gpus_per_instance * self.replicas


class Layout(StrictModel):
    """Pools of instances: one `mixed` pool when aggregated, a `prefill` and a `decode` pool when not (and,
    for multi-turn sessions, optionally a `midfill` pool for the turns after the first). A `composite` layout
    is several such deployments side by side, its pools numbered by `deployment`: a router sends each
    deployment the share of the requests it serves (`parts`)."""

    schema_version: SchemaVersion = Field(1, description="Layout format version; this release reads 1.")
    serving: LayoutServing = Field(description="aggregated, disaggregated, or composite (several independent "
                                                "deployments, their pools numbered by `deployment`).")
    pools: Annotated[list[Pool], Field(min_length=1)] = Field(description="The pools of instances.")

    @model_validator(mode="after")
    def _roles_match_serving(self) -> Layout:
        numbers = sorted({pool.deployment for pool in self.pools})
        if numbers != list(range(len(numbers))):
            raise ValueError(f"pools' deployment numbers are {numbers}; number the deployments 0, 1, ... in turn")
        if self.serving == "composite" and len(numbers) < 2:
            raise ValueError("composite serving needs at least two deployments (pools with deployment 0 and 1); "
                             "with one, say aggregated or disaggregated")
        if self.serving != "composite" and len(numbers) > 1:
            raise ValueError(f"{len(numbers)} deployments (pools numbered by deployment) need serving: composite")
        for number in numbers:
            roles = sorted(pool.role for pool in self.pools if pool.deployment == number)
            serving = self.serving if self.serving != "composite" else _serving_of(roles)
            allowed = [["mixed"]] if serving == "aggregated" else list(DISAGGREGATED_ROLES)
            if roles not in allowed:
                expected = " or ".join(str(a) for a in allowed)
                where = f" (deployment {number})" if len(numbers) > 1 else ""
                raise ValueError(f"{serving} serving needs pools with roles {expected}, found {roles}{where}")
        return self

    @property
    def parts(self) -> tuple[Layout, ...]:
        """The independent deployments: the layout itself, or each deployment of a composite one on its own
        (its pools numbered 0)."""
        if self.serving != "composite":
            return (self,)
        count = 1 + max(pool.deployment for pool in self.pools)
        return tuple(_part(self, number) for number in range(count))

    def pool_indices(self, deployment: int) -> list[int]:
        """The indices in `pools` of one deployment's pools (the order of that deployment's `parts` entry)."""
        return [i for i, pool in enumerate(self.pools) if pool.deployment == deployment]

    @classmethod
    def composed(cls, parts: list[Layout]) -> Layout:
        """The parts side by side (one part: itself; a composite part's deployments each count as one)."""
        flat = [single for part in parts for single in part.parts]
        if len(flat) == 1:
            return flat[0]
        pools = [pool.model_copy(update={"deployment": number}) for number, part in enumerate(flat)
                 for pool in part.pools]
        return cls(serving="composite", pools=pools)

    @property
    def split_fills(self) -> bool:
        """A midfill pool runs sessions' later turns, the prefill pool their first turns."""
        return any(pool.role == "midfill" for pool in self.pools)

    @property
    def gpus(self) -> int:
        """Every GPU the layout holds, all pools included."""
        return sum(pool.gpus for pool in self.pools)

    def pool(self, role: PoolRole) -> Pool:
        for candidate in self.pools:
            if candidate.role == role:
                return candidate
        raise KeyError(role)


def _serving_of(roles: Sequence[str]) -> Literal["aggregated", "disaggregated"]:
    return "aggregated" if "mixed" in roles else "disaggregated"


def _part(layout: Layout, number: int) -> Layout:
    pools = [pool.model_copy(update={"deployment": 0}) for pool in layout.pools if pool.deployment == number]
    return Layout(serving=_serving_of([pool.role for pool in pools]), pools=pools)
