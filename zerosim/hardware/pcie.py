"""PCIe links: a generation's x16 rate, and the share of it pinned host<->device copies reach.

Each figure is a standard or a microbenchmark, cited beside it; docs/research/offload_hybrid.md
has the sources in full. A node's record (nodes.py) names its generation.
"""

from __future__ import annotations

from types import MappingProxyType

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
