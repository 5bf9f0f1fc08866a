"""Node systems: the box a GPU comes in, one record each: its GPUs, switch, NICs, PCIe and host.

A GPU's record (gpus.py) names the typical node built around it; a scenario takes that node's
links, NICs and host side unless it sets its own. Link bandwidths are per GPU, per direction
(what a ring step can push one way): vendors quote NVLink bidirectionally, so the figure here is
half theirs.

A GPU node leaves the per-step latencies to NCCL's own tables
(zerosim.sim.collectives.nccl_tables): NCCL prices a hop by link type, algorithm and protocol,
so one number would be wrong for most of them. A scenario that sets `intra_node_latency_us` /
`inter_node_latency_us` replaces NCCL's per-hop figure for every algorithm and protocol. The CPU
box is gloo over loopback, whose ring steps cost one latency each.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Node:
    """One node system. GB/s are 1e9 B/s, one direction."""

    name: str
    gpus: int
    """GPUs in the node (on the CPU box: processes standing in for them)."""
    intra_node_GBps: float
    """Per GPU, one direction, to the other GPUs of the node: NVLink through the node's
    NVSwitch (half the vendor's bidirectional figure); loopback on the CPU box."""
    intra_node_latency_us: float | None = None
    """Per hop inside the node; None: NCCL's tables."""
    nics: int
    """NICs that carry collectives between nodes (cluster.nics_per_node overrides)."""
    nic_GBps: float
    """One NIC, one direction (a 400 Gb/s NIC is 50 GB/s)."""
    inter_node_latency_us: float | None = None
    """Per hop between nodes; None: NCCL's tables."""
    nvlink_sharp: bool
    """NVLink SHARP (NVLS): the NVSwitch reduces in the switch (NVSwitch gen3 on)."""
    pcie_gen: int
    """PCIe generation between a GPU and its NIC, and to host memory (x16)."""
    host_cpu: str
    """The host CPUs' vendor, "intel" or "amd" (NCCL's tuner charges AMD hosts more)."""
    host_cores: int
    rack_scale: bool = False
    """One NVLink domain of a whole rack (GB200 NVL72): its preset fills gpus_per_node with it,
    where an 8-GPU server's leaves the scenario's."""
    """CPU cores of the node's host, all sockets (cluster.cpu_cores_per_gpu overrides)."""

    @property
    def gpus_per_nic(self) -> int:
        """GPUs sharing one NIC."""
        return self.gpus // self.nics

    @property
    def inter_node_GBps(self) -> float:
        """Per GPU, one direction: its share of the node's NICs."""
        return self.nic_GBps * self.nics / self.gpus


# The ZeRO paper's cluster (§10.1): DGX-2 nodes, NVLink2 through NVSwitch gen1 (6 links x 25
# GB/s one way = 150; NVIDIA DGX-2 datasheet) and "800 Gbps internode" = 8 EDR 100 Gb/s NICs
# per 16-GPU node -> 6.25 GB/s per GPU (DGX-2 has 8 NICs for 16 GPUs: DGX-2 datasheet); PCIe
# Gen3 (V100 SXM2 datasheet); two Intel Xeon Platinum 8168, 24 cores each (DGX-2 datasheet).
DGX_2 = Node(name="DGX-2", gpus=16, intra_node_GBps=150.0, nics=8, nic_GBps=12.5,
             nvlink_sharp=False, pcie_gen=3, host_cpu="intel", host_cores=48)

# DGX-1 with V100: 8 GPUs in an NVLink2 hybrid cube-mesh, no switch: each V100 has 6 links x 25
# GB/s one way = 150 (a pair shares one or two links, 25 or 50 GB/s); four EDR 100 Gb/s
# InfiniBand NICs per node = 12.5 GB/s each; PCIe Gen3; two Intel Xeon E5-2698 v4, 20 cores each
# (NVIDIA, "NVIDIA DGX-1 With Tesla V100 System Architecture", WP-08437-002_v01, sec. 2, 3.1,
# 3.3; docs/research/fsdp1_amp_v100.md C.4). NCCL's rings over the mesh reach less than 150 per
# direction; no citable nccl-tests figure for DGX-1V was found, so 150 is an upper bound.
DGX_1V = Node(name="DGX-1 (V100)", gpus=8, intra_node_GBps=150.0, nics=4, nic_GBps=12.5,
              nvlink_sharp=False, pcie_gen=3, host_cpu="intel", host_cores=40)

# DGX A100: NVLink3 600 GB/s bidirectional = 300 one way (12 links x 25; NVIDIA A100
# datasheet, https://www.nvidia.com/en-us/data-center/a100/), NVSwitch gen2 without NVLink
# SHARP; one HDR 200 Gb/s NIC per GPU = 25 GB/s; PCIe Gen4; two AMD EPYC 7742, 64 cores each
# (DGX A100 user guide, https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html).
DGX_A100 = Node(name="DGX A100", gpus=8, intra_node_GBps=300.0, nics=8, nic_GBps=25.0,
                nvlink_sharp=False, pcie_gen=4, host_cpu="amd", host_cores=128)

# DGX H100: NVLink4 900 GB/s bidirectional = 450 one way (18 links x 25), NVSwitch gen3 with
# NVLink SHARP (https://www.nvidia.com/en-us/data-center/nvlink/); one NDR 400 Gb/s
# ConnectX-7 per GPU = 50 GB/s and two Intel Xeon Platinum 8480C, 56 cores each (DGX H100 user
# guide, https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html); PCIe Gen5.
# DGX H200 is the same node with H200s (gpus.py).
DGX_H100 = Node(name="DGX H100", gpus=8, intra_node_GBps=450.0, nics=8, nic_GBps=50.0,
                nvlink_sharp=True, pcie_gen=5, host_cpu="intel", host_cores=112)

# DGX B200 (DGX B200 User Guide, docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200
# .html): 8 B200 through two NVSwitch gen5 (NVLink 5, 18 links x 50 GB/s per direction = 900
# GB/s: Blackwell Architecture Technical Brief v2.1 p. 10), NVLink SHARP (Blackwell data sheet
# p. 9); 8 single-port ConnectX-7 at 400 Gb/s, one per GPU (two BlueField-3 for storage and
# management aside); PCIe Gen5; 2 x Xeon Platinum 8570, 56 cores each.
DGX_B200 = Node(name="DGX B200", gpus=8, intra_node_GBps=900.0, nics=8, nic_GBps=50.0,
                nvlink_sharp=True, pcie_gen=5, host_cpu="intel", host_cores=112)

# GB200 NVL72 (DGX GB200 User Guide, docs.nvidia.com/dgx/dgxgb200-user-guide/hardware.html): one
# NVLink 5 domain of 72 GPUs through nine NVLink switch trays (900 GB/s per GPU per direction),
# expressed as one 72-GPU node; each 4-GPU compute tray has 4 ConnectX-7 at 400 Gb/s (one per
# GPU) and 2 Grace CPUs of 72 cores (2,592 cores a rack). host_cpu takes "intel" or "amd" only:
# Grace is neither; NCCL prices any CPU but AMD's alike (tuning.cc), as "intel" here.
GB200_NVL72 = Node(name="GB200 NVL72", gpus=72, intra_node_GBps=900.0, nics=72, nic_GBps=50.0,
                   nvlink_sharp=True, pcie_gen=5, host_cpu="intel", host_cores=2592,
                   rack_scale=True)

# Processes on one CPU box talking gloo over loopback: placeholders of the right order of
# magnitude, meant to be replaced by `zero-real calibrate`. gloo's ring pays each step's
# latency; no NVLink, no NCCL.
CPU_BOX = Node(name="CPU box", gpus=1, intra_node_GBps=2.0, intra_node_latency_us=50.0, nics=1,
               nic_GBps=1.0, inter_node_latency_us=100.0, nvlink_sharp=False, pcie_gen=3,
               host_cpu="intel", host_cores=2)
