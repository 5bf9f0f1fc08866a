"""NCCL's double binary tree for all_reduce (NCCL 2.4 and later): inside each node a chain
through its ppn GPUs; across the m nodes two complementary binary trees, each carrying half of
the buffer, so that every node sends and receives the buffer once each way (NVIDIA, "Massively
Scale Your Deep Learning Training with NCCL 2.4", 2019). Data reduces up the trees and is
broadcast back down: latency grows with log2(m), not with n.

With k channels of speed b (the tree graph, comm.tree_graph: inside nodes up to 2 nodes, else
between them) and a buffer of S bytes (tuning.cc lines 288-416):

    busbw   = min(0.92 k b, k capTree)                 then, by protocol:
              LL: min(busbw / 3.8, llMax);  LL128: min(busbw x (7/9 on one node, else
              120/128), k capTreeLL128);  Simple: as is
    algbw   = busbw / 2
    latency = base + 2 ((ppn - 1) a_intra + floor(log2 m) a_net)
    time    = latency + S / (algbw x c(S))

c(S) is NCCL's tree correction factor for the message size (nccl_tables.TREE_CORRECTION).
"""

from __future__ import annotations

from zerosim.contract import ALL_REDUCE
from zerosim.sim.collectives import nccl_tables as T
from zerosim.sim.collectives.comm import Comm
from zerosim.sim.collectives.nccl_cost import (Cost, base_latency, inter_latency, intra_latency,
                                               ll_max_bw, log2i, per_channel_bw)


def tree_bus_bw(comm: Comm, protocol: str) -> float:
    graph, gen, col = comm.tree, comm.generation, T.nodes_index(comm.nodes)
    k = graph.channels
    bus = min(k * per_channel_bw(comm, graph) * T.TREE_AR_FACTOR, k * T.PER_CH_MAX_TREE[gen][col])
    if protocol == T.LL:
        return min(bus * T.TREE_LL_FACTOR, ll_max_bw(comm))
    if protocol == T.LL128:
        factor = T.TREE_LL128_ONE_NODE if comm.nodes == 1 else T.TREE_LL128_NODES
        return min(bus * factor, k * T.PER_CH_MAX_TREE_LL128[gen][col])
    return bus


def tree_cost(comm: Comm, op: str, protocol: str) -> Cost | None:
    if op != ALL_REDUCE:
        return None
    latency = base_latency(T.TREE, protocol) + 2 * (
        (comm.ppn - 1) * intra_latency(comm, T.TREE, protocol)
        + log2i(comm.nodes) * inter_latency(comm, T.TREE, protocol))
    return Cost(T.TREE, protocol, latency, tree_bus_bw(comm, protocol) / 2,
                tree_correction=True, channels=comm.channels, ranks=comm.ranks)
