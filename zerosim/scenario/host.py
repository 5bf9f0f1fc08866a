"""The host side of a GPU node, for offload: the link between a GPU and host memory, the CPU
cores that step the optimizer, and the node's NVMe drives. Each default is a data sheet or a
microbenchmark, cited beside it or in the hardware catalogue (zerosim/hardware/: the node's
cores, pcie.py's link rates); docs/research/offload_hybrid.md has the sources in full.
"""

from __future__ import annotations

from dataclasses import dataclass

from zerosim.hardware import DEVICES
from zerosim.hardware.pcie import PCIE_X16_GBPS, PINNED_FRACTION
from zerosim.units import GB

# DeepSpeed's CPU-Adam, elements per second per core: ZeRO-Offload (Ren et al. 2021,
# arXiv:2101.06840) Table 4 times one Adam step of 1, 2, 4, 8 and 10 billion fp32 parameters on
# the DGX-2's two Xeon Platinum 8168 (0.22, 0.51, 1.03, 2.41, 2.57 s); the least-squares line
# through the origin is 0.2721 s per billion = 3.675e9 elements/s over the box's 48 cores. The
# paper does not say how many threads ran: taking all 48 makes this the per-core rate at the
# least; it is a microbenchmark, not a training run. For scale, torch's fused CPU Adam on our
# H100 box's 16-core Xeon (AVX-512; the same profile) ran 1067 M elements/s on one thread and
# 5052 on 16 (316 per thread: host memory bandwidth, not cores, bounds it there); set
# cluster.cpu_adam_Melements_per_s_per_core for a host you have measured.
CPU_ADAM_MELEMENTS_PER_S_PER_CORE = 76.6


@dataclass(frozen=True)
class Host:
    """Per GPU, in SI: its link to host memory (each direction), its CPU cores' Adam rate, and
    its share of the node's NVMe bandwidth."""

    h2d_bytes_per_s: float
    d2h_bytes_per_s: float
    adam_elements_per_s: float
    nvme_read_bytes_per_s: float | None
    nvme_write_bytes_per_s: float | None


def default_host_link_GBps(pcie_gen: int) -> float:
    """One direction of a GPU's x16 link as pinned copies reach it (PINNED_FRACTION)."""
    return PCIE_X16_GBPS[pcie_gen] * PINNED_FRACTION[pcie_gen]


def default_cores_per_gpu(gpu: str, gpus_per_node: int) -> float:
    """The reference node's cores (its record's host_cores) shared by the GPUs the scenario puts
    on a node."""
    device = DEVICES.get(gpu)
    cores = 1 if device is None else device.node.host_cores
    return cores / gpus_per_node


def host_of(cluster) -> Host:
    """From a ClusterConfig: the host link shared by gpus_per_host_link GPUs that copy at once,
    the cores per GPU at CPU-Adam's rate, and the NVMe rates split over the node's GPUs."""
    link = cluster.host_link_GBps or default_host_link_GBps(cluster.pcie_gen)
    per_gpu = link * GB / cluster.gpus_per_host_link
    cores = cluster.cpu_cores_per_gpu or default_cores_per_gpu(cluster.gpu, cluster.gpus_per_node)
    rate = cluster.cpu_adam_Melements_per_s_per_core * 1e6 * cores

    def nvme(value):
        return None if value is None else value * GB / cluster.gpus_per_node

    return Host(per_gpu, per_gpu, rate, nvme(cluster.nvme_read_GBps),
                nvme(cluster.nvme_write_GBps))
