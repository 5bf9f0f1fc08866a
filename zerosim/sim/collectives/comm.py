"""An NCCL communicator as NCCL's tuner sees it: ranks, nodes, GPUs per node, the GPU generation,
and the channels its topology search would find for each algorithm's graph.

A channel is one ring (or tree) that NCCL runs on its own SM; NCCL runs many at once and
spreads them over a GPU's NVLinks and the node's NICs. Each channel crosses links whose
bandwidth it shares with the other channels on them, and a channel's speed is the smallest share
of a link it crosses. NCCL's search (src/graph/search.cc, ncclTopoCompute) finds its channels by
trying per-channel speeds from a fixed ladder, highest first, and keeping the most bandwidth
(channels x speed) the links can carry; it then doubles the channels at half the speed where
fast (ncclTopoDupChannels). `ring_graph` and `nvls_graph` are our reading of that search for the
two-tier clusters zerosim describes (every GPU of a node on one NVSwitch, NICs shared evenly by
the GPUs): not NCCL's code, the same arithmetic on the same tables (nccl_tables).

    one node       channels at speed s: floor(C / s), C = the GPU's NVLink bandwidth as NCCL
                   rates it (links x NCCL's per-link figure)
    several nodes  channels at speed s <= NIC (min of the NIC and its PCIe link): at most
                   floor(NIC / s) per NIC, and the ppn - 1 of every ppn hops that stay inside
                   the node must fit the NVLinks: channels x s x (ppn - 1) / ppn <= C
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from zerosim.sim.collectives import nccl_tables as T
from zerosim.units import GB


@dataclass(frozen=True)
class Graph:
    """What NCCL's search found for one algorithm: channels and their speed (GB/s each)."""

    channels: int
    bw_intra: float
    bw_inter: float


@dataclass(frozen=True)
class Comm:
    """A communicator over `ranks` ranks, `ppn` per node, on `nodes` nodes."""

    ranks: int
    nodes: int
    ppn: int
    generation: str
    nvlink_GBps: float
    """One GPU's NVLink bandwidth, one direction, as NCCL rates it (its per-link figure)."""
    nic_GBps: float
    """One NIC as a channel reaches it: the NIC, capped by its PCIe link (NCCL's figure)."""
    nics: int
    nvls: bool
    """NVLink SHARP available (and the group has more than one GPU per node)."""
    host_cpu: str = "intel"
    intra_latency_us: float | None = None
    """The scenario's per-hop latency inside a node; None: NCCL's table."""
    inter_latency_us: float | None = None

    @classmethod
    def of(cls, hardware, ranks: int, ppn: int, node_gpus: int | None = None) -> "Comm":
        """`node_gpus`: the GPUs of a node when this communicator has only `ppn` of them and
        node_gpus / ppn like it run at once (hybrid sharding's replica groups): it gets its
        share of the node's NICs (whole NICs, or a part of one's bandwidth)."""
        f = hardware.fabric
        ratio = T.NVLINK_PER_LINK_GBPS[f.generation] / T.NVLINK_DATASHEET_PER_LINK_GBPS[f.generation]
        nic = min(f.nic_bytes_per_s / GB, T.PCIE_X16_GBPS[f.pcie_gen])
        nics = f.nics_per_node
        if node_gpus is not None and ppn < node_gpus:
            share = nics * ppn / node_gpus
            nics, nic = (int(share), nic) if share >= 1 else (1, nic * share)
        return cls(ranks=ranks, nodes=-(-ranks // ppn), ppn=ppn, generation=f.generation,
                   nvlink_GBps=hardware.intra.bandwidth_bytes_per_s / GB * ratio,
                   nic_GBps=nic, nics=nics, nvls=f.nvlink_sharp and ppn > 1,
                   host_cpu=f.host_cpu,
                   intra_latency_us=_us(hardware.intra.latency_s),
                   inter_latency_us=_us(hardware.inter.latency_s))

    # The graphs are searched once per communicator (NCCL searches once, at init); the tuner
    # asks for them for every (algorithm, protocol) it prices.
    @cached_property
    def ring(self) -> Graph:
        return ring_graph(self)

    @cached_property
    def tree(self) -> Graph:
        """The tree graph (Tree and PAT run on it)."""
        return tree_graph(self)

    @cached_property
    def channels(self) -> int:
        """The channels NCCL sets up after its search (comm->nChannels): the ring graph's twice,
        and twice again on Hopper and later across nodes when they are few and fast."""
        ring = self.ring
        channels = min(T.COMM_CHANNELS_MAX, 2 * ring.channels)
        if (self.generation in ("hopper", "blackwell") and self.nodes > 1
                and ring.bw_intra > T.HOPPER_MORE_CHANNELS_GBPS
                and channels < T.HOPPER_MORE_CHANNELS_BELOW):
            channels = min(T.COMM_CHANNELS_MAX, 2 * channels)
        return channels

    @cached_property
    def nvls_graph(self) -> Graph | None:
        return nvls_graph(self) if self.nvls else None


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e6


def _ladder(comm: Comm, multi_node: bool) -> tuple[float, ...]:
    if multi_node:
        return T.SPEEDS_INTER.get(comm.generation, T.SPEEDS_INTER_DEFAULT)
    return T.SPEEDS_INTRA.get(comm.generation, T.SPEEDS_INTRA_DEFAULT)


def _fits(total: float, speed: float) -> int:
    """Channels of `speed` that `total` carries (rounding as NCCL's SUB_ROUND: to 1e-3)."""
    return math.floor(round(total / speed, 3))


def _ring_channels(comm: Comm, speed: float) -> int:
    if comm.nodes == 1:
        return min(T.MAX_RING_CHANNELS, _fits(comm.nvlink_GBps, speed))
    channels = min(T.MAX_RING_CHANNELS, comm.nics * _fits(comm.nic_GBps, speed))
    if comm.ppn > 1:  # the hops inside the node
        channels = min(channels, _fits(comm.nvlink_GBps * comm.ppn / (comm.ppn - 1), speed))
    return channels


def ring_graph(comm: Comm) -> Graph:
    multi = comm.nodes > 1
    limit = comm.nic_GBps if multi else comm.nvlink_GBps  # the search's maxBw
    speeds = [s for s in _ladder(comm, multi) if s <= limit] or [_ladder(comm, multi)[-1]]
    best_channels, best_speed = 0, 0.0
    for speed in speeds:
        if best_channels and speed / best_speed <= T.SPEED_DROP_LIMIT:
            break
        channels = _ring_channels(comm, speed)
        if channels * speed > best_channels * best_speed:
            best_channels, best_speed = channels, speed
        if best_channels * best_speed >= comm.nvlink_GBps:  # search.cc: >= system->totalBw
            break
    if best_channels == 0:  # slower than the slowest rung: one channel at what the link gives
        best_channels, best_speed = 1, limit
    return _dup(comm, best_channels, best_speed)


def _dup(comm: Comm, channels: int, speed: float) -> Graph:
    hopper_on = comm.generation in ("hopper", "blackwell")
    if speed < T.DUP_MIN_GBPS or (hopper_on and speed < T.DUP_MIN_GBPS_HOPPER
                                  and channels > T.DUP_MAX_CHANNELS_SLOW):
        return Graph(channels, speed, speed)
    doubled = min(2 * channels, T.MAX_RING_CHANNELS)
    speed /= -(-doubled // channels)
    return Graph(doubled, speed, speed)


def tree_graph(comm: Comm) -> Graph:
    """The tree search keeps the ring's channels (init.cc lines 1184-1185), finds the fastest
    rung they fit at, then (its second pass, search.cc lines 1279-1282) raises the speed inside
    nodes rung by rung while it stays below twice the speed between them and the NVLinks carry
    it. Up to two nodes the tuner prices the tree by that inside speed."""
    k, multi = comm.ring.channels, comm.nodes > 1
    ladder = _ladder(comm, multi)
    fits = [i for i, s in enumerate(ladder) if _tree_fits(comm, k, s, inter=multi)]
    if not fits:
        return comm.ring
    i = fits[0]
    speed = intra = ladder[i]
    while i > 0 and intra < 2 * speed and _tree_fits(comm, k, ladder[i - 1], inter=False):
        i -= 1
        intra = ladder[i]
    return Graph(k, intra, speed)


def _tree_fits(comm: Comm, channels: int, speed: float, inter: bool) -> bool:
    """`channels` at `speed` fit the NVLinks (a chain visits each GPU once per channel) and,
    with `inter`, the NICs."""
    nvlink = comm.ppn == 1 or channels * speed <= comm.nvlink_GBps + 1e-9
    if not inter:
        return nvlink
    return nvlink and speed <= comm.nic_GBps and channels <= comm.nics * _fits(comm.nic_GBps, speed)


def nvls_graph(comm: Comm) -> Graph | None:
    """One head (channel) per GPU of the node (across nodes, one per NIC), all found at one speed
    (search.cc lines 1124-1138): the fastest rung the node's NVLinks carry, a head's own GPU
    charged twice, so h heads at s need (h + 1) s; across nodes a NIC must carry it too."""
    multi = comm.nodes > 1
    heads = min(T.MAX_NVLS_HEADS, comm.ppn, comm.nics if multi else comm.ppn)
    if heads < 2:
        return None
    ladder = _ladder(comm, multi)
    for i, speed in enumerate(ladder):
        fits = (heads + 1) * speed <= comm.nvlink_GBps + 1e-9
        if multi:
            fits = fits and speed <= comm.nic_GBps
        if fits:
            return Graph(heads, speed, _nvls_inter(comm, ladder, i))
    return None


def _nvls_inter(comm: Comm, ladder: tuple[float, ...], i: int) -> float:
    """Pass 2 of the NVLS search (search.cc lines 1272-1278) raises the speed between heads,
    rung by rung, while it is below twice the speed inside the node (across nodes: while the
    NIC carries it)."""
    speed = inter = ladder[i]
    while i > 0 and inter < 2 * speed:
        if comm.nodes > 1 and ladder[i - 1] > comm.nic_GBps:
            break
        i -= 1
        inter = ladder[i]
    return inter
