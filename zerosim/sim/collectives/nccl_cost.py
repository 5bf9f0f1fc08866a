"""What NCCL's tuner predicts for one (algorithm, protocol): a latency and an algorithm
bandwidth, and the time of a call of n bytes (tuning.cc ncclTopoGetAlgoTime):

    time = latency x (plateau, for Ring Simple AllReduce across nodes) + bytes / algbw
           x (1 / tree correction, for Tree AllReduce, by message size)

Latencies are NCCL's per-hop tables (nccl_tables) unless the scenario sets its own per-hop
latency, which then replaces the table's figure for every algorithm and protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zerosim.contract import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from zerosim.sim.collectives import nccl_tables as T
from zerosim.sim.collectives.comm import Comm


@dataclass(frozen=True)
class Cost:
    """NCCL's model of one (algorithm, protocol) on a communicator for one op."""

    algorithm: str
    protocol: str
    latency_us: float
    algbw_GBps: float
    """Algorithm bandwidth: bytes of the call per second (nccl-tests' algbw)."""
    tree_correction: bool = False
    plateau: float = 1.0
    """Latency multiplier once bytes / (channels x ranks) >= 64 (Ring Simple AllReduce)."""
    channels: int = 1
    """The channels NCCL sets up (comm->nChannels), which the plateau's threshold counts."""
    ranks: int = 1

    def latency_s(self, size_bytes: float) -> float:
        big = size_bytes / (self.channels * self.ranks) >= T.RING_PLATEAU_MIN_BYTES
        return self.latency_us * (self.plateau if big else 1.0) * 1e-6

    def bandwidth_s(self, size_bytes: float) -> float:
        """Seconds the bytes take at the algorithm bandwidth (tree-corrected)."""
        bw = self.algbw_GBps * (tree_correction(self.protocol, size_bytes)
                                if self.tree_correction else 1.0)
        return size_bytes / (bw * 1e9)

    def time_s(self, size_bytes: float) -> float:
        return self.latency_s(size_bytes) + self.bandwidth_s(size_bytes)


def tree_correction(protocol: str, size_bytes: float) -> float:
    """treeCorrectionFactor for the message size (none below 64 B or from 512 MiB)."""
    if size_bytes < 64:
        return 1.0
    k = int(math.log2(size_bytes // 64))
    return T.TREE_CORRECTION[protocol][k] if k < T.TREE_CORRECTION_END else 1.0


def intra_latency(comm: Comm, algorithm: str, protocol: str) -> float:
    """Per-hop latency inside a node (us): NCCL's NVLink row, or the scenario's."""
    if comm.intra_latency_us is not None:
        return comm.intra_latency_us
    return T.HW_LATENCY_US[T.NVLINK][algorithm][T.protocol_index(protocol)]


def inter_latency(comm: Comm, algorithm: str, protocol: str, row: str | None = None) -> float:
    """Per-hop latency between nodes (us); with one GPU per node NCCL uses the Tree row for
    every algorithm (tuning.cc line 387) unless `row` says which. NICs report no extra latency
    (IB: 0)."""
    if comm.inter_latency_us is not None:
        return comm.inter_latency_us
    if row is None:
        row = T.TREE if comm.ppn == 1 else algorithm
    return T.HW_LATENCY_US[T.NET][row][T.protocol_index(protocol)]


def base_latency(algorithm: str, protocol: str) -> float:
    return T.BASE_LATENCY_US[algorithm][T.protocol_index(protocol)]


def ll_max_bw(comm: Comm) -> float:
    """llMaxBw: by generation on one node, by the host's CPU vendor across nodes."""
    if comm.nodes == 1:
        return T.LL_MAX_BW_ONE_NODE[comm.generation]
    return T.LL_MAX_BW_NODES[comm.host_cpu][T.nodes_index(comm.nodes)]


def per_channel_bw(comm: Comm, graph) -> float:
    """A channel's speed for the bandwidth model: inside the node up to 2 nodes, else between."""
    return graph.bw_intra if comm.nodes <= 2 else graph.bw_inter


def steps(op: str, ranks: int) -> int:
    """nsteps of tuning.cc: 2(n-1) for AllReduce, n-1 for ReduceScatter/AllGather, else n."""
    if op == ALL_REDUCE:
        return 2 * (ranks - 1)
    return ranks - 1 if op in (REDUCE_SCATTER, ALL_GATHER) else ranks


def log2i(value: int) -> int:
    return value.bit_length() - 1
