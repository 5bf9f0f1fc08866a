"""The host side of a GPU node, for offload: the link between a GPU and host memory, the CPU
cores that step the optimizer, and the node's NVMe drives. Each default is a data sheet or a
microbenchmark, cited beside it; docs/research/offload_hybrid.md has the sources in full.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from zerosim.units import GB

# PCIe x16, one direction, GB/s: 8 / 16 / 32 / 64 GT/s per lane x 16 lanes x 128/130 / 8 (PCI-SIG
# per-lane rates; 128b/130b encoding from Gen3 on; Gen6's FLIT mode taken at the same ratio).
PCIE_X16_GBPS = MappingProxyType({3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0})
# Pinned host<->device copies reach this fraction of it, one GPU alone, measured:
# Gen3 12.0 GB/s on a DGX-2 V100 (ZeRO-Infinity, arXiv:2104.07857, Fig. 2(b)): 0.76;
# Gen4 25.13 GB/s on an A100-SXM4-40GB (NVIDIA/nvbandwidth issue #42, 512 MiB-1 GiB): 0.80;
# Gen5 54.89 GB/s host to device, 1 GiB, on our H100 80GB HBM3 (Gen5 x16, torch 2.11, 2026-11-26;
# bench/h100/offload_microbench.py, profiles/h100/offload_microbench_2026-11-26.json: 55.00 the
# other way, 7.7 / 14.4 GB/s from pageable memory): 0.87, as an HGX H100 burn-in log's 55.3
# (nvbandwidth) says too. Gen6: none measured; Gen5's fraction.
PINNED_FRACTION = MappingProxyType({3: 0.76, 4: 0.80, 5: 0.87, 6: 0.87})

# CPU cores per node of the preset's reference node (vendor data sheets): DGX-2, 2x Intel Xeon
# Platinum 8168, 24 cores each, for 16 GPUs; DGX A100, 2x AMD EPYC 7742, 64 cores each, for 8;
# DGX H100 (and H200), 2x Intel Xeon Platinum 8480C, 56 cores each, for 8 (the DGX user guides
# cited in presets.py). cluster.cpu_cores_per_gpu overrides.
HOST_CORES_PER_NODE = MappingProxyType({"V100-32GB": (48, 16), "A100-40GB": (128, 8),
                                        "A100-80GB": (128, 8), "H100-80GB": (112, 8),
                                        "H200-141GB": (112, 8), "CPU": (2, 1)})

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
    """The reference node's cores shared by the GPUs the scenario puts on a node."""
    cores, _ = HOST_CORES_PER_NODE.get(gpu, (1, 1))
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
