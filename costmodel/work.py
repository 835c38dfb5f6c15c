"""Work of one step on one GPU, and the shape of its time.

The cost model first counts work (FLOPs, HBM bytes, bytes on each link tier, collective calls, layers),
which depends only on the model, layout and step shape; `costmodel.pricing` then prices it with a
calibration. Keeping the two apart lets calibration fitting re-price the same work thousands of times.

Overlap rules (stated once, applied everywhere):
- within one operator, compute and HBM traffic overlap fully: its time is the larger of the two (roofline);
- operators run one after another: their times add;
- communication does not overlap computation, except the share `alltoall_overlap` of an engine's expert
  all-to-all that two-batch overlap hides behind the step's compute and HBM time (`costmodel.pricing`);
- each collective call pays a fixed latency on top of its bytes over bandwidth;
- each layer pays a fixed launch/sync overhead (a routed-expert layer a second one, for the small kernels
  of routing and token permutation), each step a fixed scheduling overhead, and each sequence in the step a
  fixed CPU cost (scheduling, input preparation, sampling).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

from costmodel.hardware import SystemSpec
from costmodel.precision import Dtype

OpClass = Literal["gemm", "attention"]
CollectiveKind = Literal["allreduce", "alltoall", "p2p"]
Tier = Literal["scaleup", "nic", "host", "storage"]


class Op(NamedTuple):
    """One operator class of a step on one GPU, summed over the layers it appears in. A named tuple, not a
    frozen dataclass: the cost model builds hundreds of thousands per solve, and a tuple is built about 3x
    faster (immutable all the same)."""

    name: str
    op_class: OpClass
    flops: float
    hbm_bytes: float
    peak_flops_per_s: float
    dtype: Dtype  # the format its efficiency is keyed by: what the tensor cores compute in, or a weight-only
    # kernel's storage format (it computes at the peak of the format it dequantises to)
    # A grouped GEMM (routed experts): bytes per stored weight element, from which pricing recovers the rows
    # each expert's weights serve, flops x bytes per element / (2 hbm_bytes), whatever the layers and batches
    # summed into the operator (`costmodel.pricing.grouped_gemm_share`); 0 for any other operator.
    group_element_bytes: float = 0.0


class Transfer(NamedTuple):
    """Bytes one GPU sends over one link tier in a step, in `calls` collective operations (a named tuple,
    as `Op`)."""

    name: str
    tier: Tier
    bytes: float
    calls: float
    kind: CollectiveKind = "p2p"
    ranks: int = 0  # all-reduce inside a scale-up domain: its group size (pricing picks the algorithm); else 0


@dataclass
class StepWork:
    """Everything one GPU does in one step of one pipeline stage."""

    ops: list[Op] = field(default_factory=list)
    transfers: list[Transfer] = field(default_factory=list)
    layers: int = 0
    seqs: float = 0.0  # sequences the step advances on this GPU (per-sequence scheduling and sampling)
    moe_layers: int = 0  # of `layers`: those with routed experts
    mla_layers: int = 0  # of `layers`: those with multi-head latent attention
    weight_only_layers: int = 0  # of `moe_layers`: experts the GPU dequantises (`Formats.weight_only_experts`)

    def copy(self, extra_transfers: Sequence[Transfer] = ()) -> StepWork:
        """A copy to add to (a cached step is shared), every field kept; `extra_transfers` appended."""
        return replace(self, ops=list(self.ops), transfers=[*self.transfers, *extra_transfers])

    def extend(self, other: StepWork) -> None:
        self.ops.extend(other.ops)
        self.transfers.extend(other.transfers)
        self.layers += other.layers
        self.seqs += other.seqs
        self.moe_layers += other.moe_layers
        self.mla_layers += other.mla_layers
        self.weight_only_layers += other.weight_only_layers

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def hbm_bytes(self) -> float:
        return sum(op.hbm_bytes for op in self.ops)


# Names of the terms a step time is made of, in report order.
TERMS = ("compute", "hbm_bandwidth", "scaleup_network", "scaleout_network", "host_link", "storage",
         "fixed_overheads")
_TIER_TERM: dict[str, str] = {"scaleup": "scaleup_network", "nic": "scaleout_network", "host": "host_link",
                              "storage": "storage"}


@dataclass(frozen=True)
class StepTime:
    """Priced step: seconds per term (see TERMS) and per operator or transfer name."""

    terms: dict[str, float]
    by_name: dict[str, float]

    @property
    def total_s(self) -> float:
        return sum(self.terms.values())

    @property
    def bottleneck(self) -> str:
        return max(TERMS, key=lambda term: self.terms[term])


def roofline_floor_s(work: StepWork, system: SystemSpec) -> float:
    """Physical lower bound: the larger of all FLOPs at peak and all HBM bytes at full bandwidth."""
    flops_s = sum(op.flops / op.peak_flops_per_s for op in work.ops)
    return max(flops_s, work.hbm_bytes / system.hbm_bandwidth_bytes_per_s)
