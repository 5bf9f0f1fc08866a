"""NCCL's ring with channels: k rings at once, each carrying 1/k of the buffer over its own path
through the node's NVLinks and NICs (comm.ring_graph finds k and each channel's speed b).

With n ranks on m nodes, nsteps = 2(n-1) for all_reduce and n-1 for reduce_scatter and
all_gather (n for broadcast and reduce), and a buffer of S bytes (tuning.cc lines 288-412):

    busbw   = k b                            (Simple)
            = min(k b / 2, llMax)            (LL: 4 bytes of flag per 4 of data)
            = min(0.92 k b, k capLL128)      (LL128)
    algbw   = busbw n / nsteps               (all_reduce: busbw n / (2(n-1)), nccl-tests' factor)
    latency = base + (nsteps - s_net) max(a_intra, o) + s_net a_net
              s_net = 2(m-1) for all_reduce, m-1 for reduce_scatter and all_gather (0 on one
              node); o = the host's network overhead (1 us Intel, 2 us AMD) across nodes, x3
              for Simple, a floor under every step inside a node
    time    = latency (x 1.4 for Simple all_reduce across nodes once S / (C n) >= 64, C the
              channels NCCL sets up: the ring's plateau) + S / algbw

Broadcast and reduce are one pipelined chain: latency = base + a, a the Ring row of the link
(NVLink on one node, the network across nodes), algbw = busbw.
"""

from __future__ import annotations

from zerosim.contract import ALL_REDUCE, BROADCAST, REDUCE
from zerosim.sim.collectives import nccl_tables as T
from zerosim.sim.collectives.comm import Comm
from zerosim.sim.collectives.nccl_cost import (Cost, base_latency, inter_latency, intra_latency,
                                               ll_max_bw, per_channel_bw, steps)


def ring_bus_bw(comm: Comm, protocol: str) -> float:
    graph = comm.ring
    bus = graph.channels * per_channel_bw(comm, graph)
    if protocol == T.LL:
        return min(ll_max_bw(comm), bus * T.RING_LL_FACTOR)
    if protocol == T.LL128:
        cap = T.PER_CH_MAX_RING_LL128[comm.generation][T.nodes_index(comm.nodes)]
        return min(bus * T.LL128_FACTOR, graph.channels * cap)
    return bus


def ring_cost(comm: Comm, op: str, protocol: str) -> Cost:
    n, m = comm.ranks, comm.nodes
    nsteps = steps(op, n)
    latency = base_latency(T.RING, protocol)
    if op in (BROADCAST, REDUCE):  # tuning.cc line 395: the Ring row, even at one GPU per node
        latency += (intra_latency(comm, T.RING, protocol) if m == 1
                    else inter_latency(comm, T.RING, protocol, row=T.RING))
    else:
        overhead = 0.0
        if m > 1:
            overhead = T.NET_OVERHEAD_US[comm.host_cpu] * (T.SIMPLE_NET_OVERHEAD_FACTOR
                                                           if protocol == T.SIMPLE else 1.0)
        net_steps = 0 if m == 1 else (2 * (m - 1) if op == ALL_REDUCE else m - 1)
        intra = max(intra_latency(comm, T.RING, protocol), overhead)
        latency += (nsteps - net_steps) * intra + net_steps * inter_latency(comm, T.RING, protocol)
    plateau = T.RING_PLATEAU[comm.generation] if (
        protocol == T.SIMPLE and op == ALL_REDUCE and m > 1) else 1.0
    return Cost(T.RING, protocol, latency, ring_bus_bw(comm, protocol) * n / nsteps,
                plateau=plateau, channels=comm.channels, ranks=n)
