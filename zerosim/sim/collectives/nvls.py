"""NVLink SHARP (NVLS) on NVSwitch gen3 and later (H100, H200, B200): each GPU writes its data
to the switch, which reduces it and multicasts the result back, so a GPU moves about S each way
instead of a ring's 2(n-1)/n S. Across nodes, NVLSTree: NVLS inside each node, a tree between
them (tuning.cc lines 307-323 and 424-428).

With h heads (one per GPU of the node), NVLink speed b_i and speed between heads b_e (the NVLS
graph, comm.nvls_graph), efficiency e (0.85 on Hopper), a buffer of S bytes:

    per head  = min(b_i e (h-1)/h x 2, b_e)           all_reduce on one node (NVLS)
              = min(b_i e (h-1)/h (ppn-1)/ppn, b_e)    reduce_scatter, all_gather on one node
              = min(b_i e (h-1)/h x 2, b_e x (2 on 2 nodes), capNVLSTree)   NVLSTree
    busbw     = h x per head
    algbw     = busbw n / (2(n-1)) for all_reduce; busbw for reduce_scatter and all_gather
    latency   = a_NVLS (25 us over NVLink)                                   NVLS
              = a_NVLS + 2 floor(log2 m) a_net                              NVLSTree
    time      = latency + S / algbw

Simple protocol only. NVLS across nodes needs a CollNet (SHARP) plugin, which zerosim does
not model; NVLSTree is NCCL's algorithm there.
"""

from __future__ import annotations

from zerosim.contract import ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER
from zerosim.sim.collectives import nccl_tables as T
from zerosim.sim.collectives.comm import Comm
from zerosim.sim.collectives.nccl_cost import (Cost, base_latency, inter_latency, intra_latency,
                                               log2i, steps)


def _per_head(comm: Comm, op: str, tree: bool) -> float:
    graph, h = comm.nvls_graph, comm.nvls_graph.channels
    intra = graph.bw_intra * T.NVLS_EFFICIENCY[comm.generation] * (h - 1) / h
    intra *= 2.0 if op == ALL_REDUCE else (comm.ppn - 1) / comm.ppn
    inter = graph.bw_inter * (2.0 if tree and comm.nodes <= 2 else 1.0)
    if tree:
        return min(intra, inter, T.PER_CH_MAX_NVLS_TREE[comm.generation][T.nodes_index(comm.nodes)])
    return min(intra, inter)


def nvls_cost(comm: Comm, op: str, protocol: str) -> Cost | None:
    """NVLS on one node: all_reduce, reduce_scatter, all_gather."""
    if (protocol != T.SIMPLE or comm.nvls_graph is None or comm.nodes > 1
            or op not in (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER)):
        return None
    bus = comm.nvls_graph.channels * _per_head(comm, op, tree=False)
    algbw = bus * comm.ranks / steps(op, comm.ranks) if op == ALL_REDUCE else bus
    latency = intra_latency(comm, T.NVLS, protocol)  # replaces the base latency
    return Cost(T.NVLS, protocol, latency, algbw, ranks=comm.ranks)


def nvls_tree_cost(comm: Comm, op: str, protocol: str) -> Cost | None:
    """NVLSTree: all_reduce across nodes."""
    if protocol != T.SIMPLE or comm.nvls_graph is None or comm.nodes == 1 or op != ALL_REDUCE:
        return None
    bus = comm.nvls_graph.channels * _per_head(comm, op, tree=True)
    latency = (base_latency(T.NVLS_TREE, protocol) + intra_latency(comm, T.NVLS_TREE, protocol)
               + 2 * log2i(comm.nodes) * inter_latency(comm, T.NVLS_TREE, protocol))
    return Cost(T.NVLS_TREE, protocol, latency, bus * comm.ranks / steps(op, comm.ranks),
                ranks=comm.ranks)
