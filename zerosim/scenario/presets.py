"""GPU presets: a catalogued GPU and its node (zerosim.hardware) as the [cluster] keys they fill.

A scenario names one with `[cluster] gpu = ...` and may override any single value; the figures
and their sources are the records' (zerosim/hardware/gpus.py, nodes.py). Latencies are left
unset on GPU nodes: NCCL's own tables price each hop (zerosim/hardware/nodes.py says why).
"""

from __future__ import annotations

import re
from types import MappingProxyType

from zerosim.hardware import DEVICES, Gpu


def cluster_keys(gpu: Gpu) -> dict[str, object]:
    """The [cluster] keys every device fills, from its record and its node's (None: unset)."""
    node = gpu.node
    return {"hbm_GiB": gpu.hbm_GiB, "peak_tflops": gpu.peak_dense_16bit_tflops,
            "hbm_bandwidth_GBps": gpu.hbm_GBps,
            "intra_node_bandwidth_GBps": node.intra_node_GBps,
            "intra_node_latency_us": node.intra_node_latency_us,
            "inter_node_bandwidth_GBps": node.inter_node_GBps,
            "inter_node_latency_us": node.inter_node_latency_us,
            "collective_library": gpu.collective_library, "nvlink_sharp": node.nvlink_sharp,
            "pcie_gen": node.pcie_gen, "host_cpu": node.host_cpu,
            **({"gpus_per_node": node.gpus} if node.rack_scale else {})}


GPU_PRESETS = MappingProxyType({name: cluster_keys(gpu) for name, gpu in DEVICES.items()})


def preset_of_hardware(hardware: str | None) -> str | None:
    """The catalogue's GPU a run's hardware names ("NVIDIA H100 80GB HBM3 x1": H100-80GB), by
    family and capacity, or by family alone where the catalogue holds one of it ("NVIDIA H200"
    as torch names it: H200-141GB); None for a CPU box or a GPU the catalogue does not hold."""
    words = set(re.findall(r"[A-Z0-9]+", (hardware or "").upper()))
    if words & OTHER_FORMS:  # an H100 PCIe or NVL is not the SXM part the record is
        return None
    gpus = [name for name in GPU_PRESETS if "-" in name]
    for parts in (lambda name: name.split("-"), lambda name: name.split("-")[:1]):
        named = [name for name in gpus if all(p.upper() in words for p in parts(name))]
        if named:
            return named[0] if len(named) == 1 else None
    return None


OTHER_FORMS = frozenset(("PCIE", "NVL", "MIG"))
"""Words of a device name that make it another part than the catalogue's SXM records."""
