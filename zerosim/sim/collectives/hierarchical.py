"""Two-level collectives for multi-node clusters: rings inside each node over the fast link, one
ring per local GPU index across nodes over the slow one (NCCL's and Horovod's hierarchical
all-reduce). With g GPUs per node, m nodes, n = g m ranks and a buffer of S bytes, under gloo
(cluster.collective_library = "gloo") the walks run one after another:

    reduce_scatter  intra reduce-scatter of S, then inter reduce-scatter of S/g
    all_gather      inter all-gather of S/g, then intra all-gather of S
    all_reduce      intra reduce-scatter, inter reduce-scatter, inter all-gather, intra all-gather

Each rank sends (g-1)/g S + (m-1)/m S/g = (n-1)/n S per walk: the flat ring's bytes, but the slow
link sees only (m - 1) latencies per walk instead of (n - 1), and carries S/g of the buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zerosim.contract import RING_WALKS
from zerosim.sim.collectives.comm import Comm
from zerosim.sim.collectives.nccl_cost import Cost
from zerosim.sim.collectives.ring import Group, Phase
from zerosim.sim.collectives.nccl_tables import SIMPLE
from zerosim.sim.collectives.ring_nccl import ring_bus_bw, ring_cost
from zerosim.sim.network import INTER, INTRA


def is_applicable(group: Group) -> bool:
    """Whole nodes, more than one of them, more than one GPU each."""
    return group.nodes > 1 and group.gpus_per_node > 1 and group.size % group.gpus_per_node == 0


def hierarchical_phases(op: str, size_bytes: float, group: Group) -> list[Phase]:
    g, m = group.gpus_per_node, group.nodes
    n = g * m
    phases: list[Phase] = []
    for walk in RING_WALKS[op]:
        if walk in ("reduce_scatter", "scatter"):
            phases += [Phase(walk, INTRA, g - 1, size_bytes / g),
                       Phase(walk, INTER, m - 1, size_bytes / n)]
        else:  # all_gather, gather: the same two walks in reverse order
            phases += [Phase(walk, INTER, m - 1, size_bytes / n),
                       Phase(walk, INTRA, g - 1, size_bytes / g)]
    return phases


# ---- pipelined, on NCCL's links (cluster.collective_library = "nccl") ------------------------
#
# The same walks, with chunks flowing through them: while one chunk crosses the network,
# the next is reduced inside the node. Each tier's latencies add up, its bandwidth times
# overlap: with the intra-node ring's bus bandwidth B_i (NCCL's one-node ring, ring_nccl) and each
# GPU's share of the node's NICs B_e = nics x NIC / g, and w walks of the op (2 for all_reduce),
#
#     time = L_intra + L_inter + max(w (g-1)/g S / B_i, w (m-1)/m (S/g) / (B_e f))
#
# f is the protocol's share of a link (ring_nccl: 1/2 for LL, 0.92 for LL128, capped as NCCL caps
# them; 1 for Simple).
# L_intra is NCCL's ring latency over g ranks on one node, L_inter over m ranks on m nodes.
# It is not an NCCL algorithm (NCCL's own ring already crosses each node once per channel):
# it is there to compare with, by cluster.collective_algorithm = "hierarchical".


@dataclass(frozen=True)
class PipelinedCost:
    """The tuner's view of the pipelined hierarchy: the same questions as nccl_cost.Cost."""

    protocol: str
    intra: Cost
    """ring_nccl's cost of the op on one node of g ranks."""
    inter: Cost
    """ring_nccl's cost of the op across m nodes, one rank each (its latency only)."""
    gpus_per_node: int
    nodes: int
    walks: int
    nic_share_GBps: float
    """Each GPU's share of the node's NICs, times the protocol's share of a link."""
    algorithm: str = "hierarchical"

    def latency_s(self, size_bytes: float) -> float:
        return self.intra.latency_s(size_bytes) + self.inter.latency_s(size_bytes / self.gpus_per_node)

    def intra_s(self, size_bytes: float) -> float:
        return self.intra.bandwidth_s(size_bytes)

    def inter_s(self, size_bytes: float) -> float:
        g, m = self.gpus_per_node, self.nodes
        return self.walks * (m - 1) / m * size_bytes / g / (self.nic_share_GBps * 1e9)

    def bandwidth_s(self, size_bytes: float) -> float:
        return max(self.intra_s(size_bytes), self.inter_s(size_bytes))

    def time_s(self, size_bytes: float) -> float:
        return self.latency_s(size_bytes) + self.bandwidth_s(size_bytes)


def pipelined_cost(comm: Comm, op: str, protocol: str) -> PipelinedCost | None:
    """None where the hierarchy does not apply (one node, or one GPU per node)."""
    g, m = comm.ppn, comm.nodes
    if m == 1 or g == 1:
        return None
    inside = replace(comm, ranks=g, nodes=1)
    between = replace(comm, ranks=m, nodes=m, ppn=1)
    protocol_share = ring_bus_bw(between, protocol) / ring_bus_bw(between, SIMPLE)
    share = comm.nic_GBps * comm.nics / g * protocol_share
    return PipelinedCost(protocol, ring_cost(inside, op, protocol), ring_cost(between, op, protocol),
                         g, m, len(RING_WALKS[op]), share)
