"""Collectives on the simulated cluster: which algorithm (and protocol) runs each call, and the
phases it moves its bytes in.

Each algorithm is a module beside this one with its closed form in its docstring: ring.py (the
α-β ring of gloo, and the mechanics that move any phases over the links), ring_nccl.py (NCCL's
ring with channels), tree.py, nvls.py (NVLS and NVLSTree), pat.py, hierarchical.py. Under NCCL,
tuner.py prices every candidate as NCCL's tuner does and keeps the fastest; `Collectives.choose`
turns the choice into phases whose time on idle links is exactly that closed form, and which
share links with whatever else runs (network.py). Pricing phases from a calibration profile is
zerosim.sim.costs; one collective alone, with nccl-tests' figures, is zerosim.sim.collective_bench.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerosim.contract import RING_WALKS
from zerosim.errors import InputError
from zerosim.sim.collectives import tuner
from zerosim.sim.collectives.comm import Comm
from zerosim.sim.collectives.hierarchical import PipelinedCost, hierarchical_phases, is_applicable
from zerosim.sim.collectives.nccl_tables import (CONNECTION_BUFFER_BYTES, NVLS, RING_PEERS,
                                                TREE_PEERS)
from zerosim.sim.collectives.ring import FLAT, Group, Phase, bytes_sent_per_rank, ring_phases
from zerosim.sim.network import INTER, INTRA


def choose_algorithm(requested: str, group: Group) -> str:
    """gloo: "auto" is hierarchical where it applies (several whole nodes of several GPUs),
    else ring."""
    if requested == "auto":
        return "hierarchical" if is_applicable(group) else "ring"
    if requested == "hierarchical" and not is_applicable(group):
        raise InputError(
            f"cluster.collective_algorithm = 'hierarchical' needs several whole nodes of several "
            f"GPUs, but the group is {group.size} rank(s) at {group.gpus_per_node} per node "
            f"({group.size} / {group.gpus_per_node} = {group.size / group.gpus_per_node:.4g} nodes)")
    return requested


def phases_of(op: str, size_bytes: float, group: Group, algorithm: str) -> list[Phase]:
    """gloo: the phases of `op` over a buffer of size_bytes on `group` under `algorithm`."""
    if group.size == 1:
        return []
    if algorithm == "hierarchical":
        return hierarchical_phases(op, size_bytes, group)
    return ring_phases(op, size_bytes, group)


@dataclass(frozen=True)
class Choice:
    """How one call runs: the algorithm, NCCL's protocol (None under gloo), and its phases."""

    algorithm: str
    protocol: str | None
    phases: list[Phase]

    @property
    def label(self) -> str:
        return self.algorithm if self.protocol is None else f"{self.algorithm}/{self.protocol}"


class Collectives:
    """The cluster's collective library on one group of ranks."""

    def __init__(self, scenario, group: Group, node_gpus: int | None = None) -> None:
        """`node_gpus`: a subgroup's node size, so that it gets its share of the NICs (Comm.of)."""
        c = scenario.cluster
        self.group, self.hardware = group, c.hardware
        self.library = c.collective_library
        self.algorithm, self.protocol = c.collective_algorithm, c.collective_protocol
        self.comm = None
        if self.library == "gloo":
            self.algorithm = choose_algorithm(c.collective_algorithm, group)
        elif group.size > 1:
            self.comm = Comm.of(self.hardware, group.size, group.gpus_per_node, node_gpus)
            tuner.check(self.comm, self.algorithm, self.protocol)

    @property
    def flat(self) -> bool:
        """A flat ring whose links differ by rank (gloo's ring across nodes)."""
        return self.library == "gloo" and self.algorithm == "ring"

    @property
    def buffer_bytes(self) -> int:
        """Device memory NCCL's connections hold (nccl_tables.CONNECTION_BUFFER_BYTES per
        receiving peer and channel); none under gloo or alone. NVLS buffers are not counted."""
        if self.comm is None:
            return 0
        peers = RING_PEERS + (TREE_PEERS if self.comm.nodes > 1 else 0)
        return self.comm.channels * peers * CONNECTION_BUFFER_BYTES

    def choose(self, op: str, size_bytes: float) -> Choice:
        if self.comm is None:  # gloo, or a group of one
            name = self.algorithm if self.library == "gloo" else "none"
            return Choice(name, None, phases_of(op, size_bytes, self.group, self.algorithm))
        cost = tuner.choose(self.comm, op, size_bytes, self.algorithm, self.protocol)
        return Choice(cost.algorithm, cost.protocol, self._phases(op, size_bytes, cost))

    def _phases(self, op: str, size_bytes: float, cost) -> list[Phase]:
        """Ring-shaped walks (n - 1 steps of S/n each: nccl-tests' bus bytes) whose latency and
        transfer times add up to the cost's closed form on idle links."""
        k, walks = self.group.size, RING_WALKS[op]
        if isinstance(cost, PipelinedCost):
            return [self._pipelined(op, size_bytes, cost)]
        scope = INTRA if self.group.nodes == 1 or cost.algorithm == NVLS else INTER
        steps = len(walks) * (k - 1)
        chunk = size_bytes / k
        scale = self._link_scale(scope, cost.bandwidth_s(size_bytes), steps * chunk)
        latency = cost.latency_s(size_bytes) / steps
        return [Phase(walk, scope, k - 1, chunk, latency, scale) for walk in walks]

    def _pipelined(self, op: str, size_bytes: float, cost: PipelinedCost) -> Phase:
        """One intra-node phase and one inter-node phase alongside: the latencies first, then
        both tiers' transfers at once."""
        g, m, w = cost.gpus_per_node, cost.nodes, cost.walks
        walk = "+".join(RING_WALKS[op])
        inter_chunk, intra_chunk = size_bytes / (g * m), size_bytes / g
        inter_steps, intra_steps = w * (m - 1), w * (g - 1)
        inter = Phase(walk, INTER, inter_steps, inter_chunk, 0.0, self._link_scale(
            INTER, cost.inter_s(size_bytes), inter_steps * inter_chunk))
        return Phase(walk, INTRA, intra_steps, intra_chunk,
                     cost.latency_s(size_bytes) / intra_steps,
                     self._link_scale(INTRA, cost.intra_s(size_bytes), intra_steps * intra_chunk),
                     alongside=(inter,))

    def _link_scale(self, scope: str, seconds: float, sent_bytes: float) -> float:
        """Phase.link_scale that makes sent_bytes take `seconds` on an idle link of `scope`; 1
        for a phase that sends nothing (a zero-size collective: its latency alone)."""
        if sent_bytes == 0:
            return 1.0
        tier = self.hardware.intra if scope == INTRA else self.hardware.inter
        return tier.bandwidth_bytes_per_s * seconds / sent_bytes


__all__ = ["FLAT", "Choice", "Collectives", "Group", "Phase", "bytes_sent_per_rank",
           "choose_algorithm", "phases_of"]
