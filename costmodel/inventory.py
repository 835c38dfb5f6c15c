"""The GPUs a cluster owns: groups of one system type, numbered rack / node / GPU, with busy or failed GPUs.

Numbering (`r<R>/n<N>/g<G>`, from 0): a group's GPUs are filled in order, rack by rack and node by node, so
GPU k sits in rack k // gpus_per_rack, node (k mod gpus_per_rack) // gpus_per_node of that rack, slot
k mod gpus_per_node. A count that is not a whole number of nodes ends in a partial node (and rack).

Scale-up domains are consecutive nodes of one rack (`scaleup_domain_gpus / gpus_per_node` of them: one
node on HGX boards, the whole rack on NVL72). A domain is complete when every one of its GPUs is installed
and available; an instance larger than a domain takes whole complete domains, an instance within a domain
any free GPUs of one domain (the scale-up switch connects every pair).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from costmodel.hardware import SystemSpec

GPU_ID = re.compile(r"^r(\d+)/n(\d+)/g(\d+)$")

GpuIndex = tuple[int, int, int]  # (rack, node within the rack, GPU within the node)


@dataclass(frozen=True)
class Domain:
    """One scale-up domain: its rack, and its available GPUs as (node, GPU) within the rack."""

    rack: int
    free: tuple[tuple[int, int], ...]
    complete: bool

    @property
    def capacity(self) -> int:
        return len(self.free)


@dataclass(frozen=True)
class ClusterGroup:
    """GPUs of one system type. `named` is False for the one-group shorthand `{system, gpus}`: its pools
    carry no group name in layouts."""

    name: str
    system: SystemSpec
    installed: int
    unavailable: frozenset[GpuIndex] = frozenset()
    named: bool = False
    uplink_bytes_per_s: float = math.inf  # per rack and direction (`Network`; inf: non-blocking)

    @property
    def gpus(self) -> int:
        """Available GPUs: installed, less the busy or failed ones."""
        return self.installed - len(self.unavailable)

    @property
    def nodes(self) -> int:
        return -(-self.installed // self.system.gpus_per_node)

    @property
    def racks(self) -> int:
        return -(-self.installed // self.system.gpus_per_rack)

    @property
    def domains_per_rack(self) -> int:
        return self.system.gpus_per_rack // self.system.scaleup_domain_gpus

    def index_of(self, k: int) -> GpuIndex:
        """Rack, node and slot of the group's k-th installed GPU."""
        system = self.system
        return (k // system.gpus_per_rack, k % system.gpus_per_rack // system.gpus_per_node, k % system.gpus_per_node)

    def gpu_id(self, index: GpuIndex) -> str:
        return f"{self.name}/r{index[0]}/n{index[1]}/g{index[2]}"

    @cached_property
    def domains(self) -> tuple[Domain, ...]:
        """Every domain with an available GPU, in rack order."""
        system = self.system
        size = system.scaleup_domain_gpus
        per_domain_nodes = size // system.gpus_per_node
        free: dict[tuple[int, int], list[tuple[int, int]]] = {}
        installed: dict[tuple[int, int], int] = {}
        for k in range(self.installed):
            rack, node, gpu = self.index_of(k)
            key = (rack, node // per_domain_nodes)
            installed[key] = installed.get(key, 0) + 1
            if (rack, node, gpu) not in self.unavailable:
                free.setdefault(key, []).append((node, gpu))
        return tuple(Domain(key[0], tuple(gpus), installed[key] == size and len(gpus) == size)
                     for key, gpus in sorted(free.items()))

    @cached_property
    def complete_per_rack(self) -> tuple[int, ...]:
        """Complete domains in each rack."""
        counts = [0] * self.racks
        for domain in self.domains:
            counts[domain.rack] += domain.complete
        return tuple(counts)

    @property
    def uplink_share_bytes_per_s(self) -> float:
        """A GPU's share of its rack's uplink when every GPU of the rack sends across it (fair share)."""
        return self.uplink_bytes_per_s / self.system.gpus_per_rack


UNAVAILABLE_ID = re.compile(r"^r(\d+)(?:/n(\d+)(?:/g(\d+))?)?$")


def parse_unavailable_id(text: str) -> tuple[int, int | None, int | None] | None:
    """(rack, node or None for the whole rack, GPU or None for the whole node) of an inventory's busy id."""
    match = UNAVAILABLE_ID.match(text)
    if match is None:
        return None
    rack, node, gpu = match.groups()
    return int(rack), None if node is None else int(node), None if gpu is None else int(gpu)


def parse_gpu_id(text: str) -> GpuIndex | None:
    match = GPU_ID.match(text)
    if match is None:
        return None
    rack, node, gpu = (int(g) for g in match.groups())
    return rack, node, gpu


def uplink_bytes_per_s(system: SystemSpec, oversubscription: float, uplink: float | None) -> float:
    """A rack's uplink per direction: given, or the sum of its NICs over the oversubscription ratio (inf at
    1:1, where the uplink never limits a GPU below its own NIC)."""
    if uplink is not None:
        return uplink
    if oversubscription <= 1.0:
        return math.inf
    return system.gpus_per_rack * system.nic_bandwidth_bytes_per_s / oversubscription
