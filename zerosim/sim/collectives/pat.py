"""PAT, Parallel Aggregated Trees, for all_gather and reduce_scatter at one GPU per node (S.
Jeaugey, "PAT: a new algorithm for all-gather and reduce-scatter operations at scale",
arXiv:2506.20252): a logarithmic number of network steps with log-sized buffers. NCCL enables
it only when every node holds one rank (tuning.cc ncclPatEnable, lines 215-223), Simple only.

With k channels of speed b (the tree graph, comm.tree_graph), n ranks on m = n nodes, a buffer of S bytes
(tuning.cc lines 288-434):

    busbw   = 0.75 k b
    algbw   = busbw                       (NCCL leaves non-ring all_gather/reduce_scatter as is)
    latency = base + floor(log2 m) a_net / 3.5 + 2.8 us x n
    time    = latency + S / algbw

a_net is NCCL's Tree network latency (one GPU per node exposes it fully).
"""

from __future__ import annotations

from zerosim.contract import ALL_GATHER, REDUCE_SCATTER
from zerosim.sim.collectives import nccl_tables as T
from zerosim.sim.collectives.comm import Comm
from zerosim.sim.collectives.nccl_cost import (Cost, base_latency, inter_latency, log2i,
                                               per_channel_bw)

# tuning.cc line 433: the part of PAT's latency still linear in the ranks, per rank (us).
PAT_US_PER_RANK = 2.8
# tuning.cc line 432: the logarithmic part pays a third and a half of a network hop per level.
PAT_NET_DIVISOR = 3.5


def pat_applies(comm: Comm) -> bool:
    return comm.ppn == 1 and comm.nodes > 1


def pat_cost(comm: Comm, op: str, protocol: str) -> Cost | None:
    if protocol != T.SIMPLE or op not in (REDUCE_SCATTER, ALL_GATHER) or not pat_applies(comm):
        return None
    graph = comm.tree
    bus = graph.channels * per_channel_bw(comm, graph) * T.PAT_FACTOR
    latency = (base_latency(T.PAT, protocol)
               + log2i(comm.nodes) * inter_latency(comm, T.PAT, protocol) / PAT_NET_DIVISOR
               + PAT_US_PER_RANK * comm.ranks)
    return Cost(T.PAT, protocol, latency, bus, ranks=comm.ranks)
