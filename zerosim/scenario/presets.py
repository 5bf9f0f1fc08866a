"""Named GPU systems: device numbers plus the links of a typical node built around that GPU.

A scenario names one with `[cluster] gpu = "A100-80GB"` and may override any single value.
Peak FLOP/s are dense 16-bit tensor-core numbers from the vendor data sheets (no sparsity);
link bandwidths are per GPU, per direction (what a ring step can push one way).
Latencies are per ring step and are rough starting points: calibration replaces them.
"""

from __future__ import annotations

from types import MappingProxyType

# Every preset defines exactly the ClusterConfig keys below.
PRESET_KEYS = (
    "hbm_GiB",
    "peak_tflops",
    "hbm_bandwidth_GBps",
    "intra_node_bandwidth_GBps",
    "intra_node_latency_us",
    "inter_node_bandwidth_GBps",
    "inter_node_latency_us",
)

_ROWS = (
    #                HBM   peak  HBM      intra-node    inter-node
    #                GiB  TFLOP/s GB/s    GB/s   us     GB/s   us
    # The ZeRO paper's cluster (§10.1): DGX-2 nodes, NVLink2 (6 links x 25 GB/s one way) and
    # "800 Gbps internode" = 8 EDR NICs = 100 GB/s per 16-GPU node -> 6.25 GB/s per GPU.
    ("V100-32GB",     32,   125,  900,   150,   5,     6.25, 10),
    # DGX A100: NVLink3 300 GB/s one way; one HDR 200 Gb/s NIC per GPU = 25 GB/s.
    ("A100-40GB",     40,   312, 1555,   300,   3,    25,     8),
    ("A100-80GB",     80,   312, 2039,   300,   3,    25,     8),
    # DGX H100: NVLink4 450 GB/s one way; one NDR 400 Gb/s NIC per GPU = 50 GB/s.
    ("H100-80GB",     80,   989, 3350,   450,   3,    50,     6),
    # H200 SXM: 141 GB (decimal) of HBM3e = 131.3 GiB.
    ("H200-141GB", 131.3,   989, 4800,   450,   3,    50,     6),
    # Processes on one CPU box talking gloo over loopback: placeholders of the right order of
    # magnitude, meant to be replaced by `zero-real calibrate`.
    ("CPU",            4,  0.05,   10,     2,  50,     1,   100),
)

GPU_PRESETS = MappingProxyType({name: dict(zip(PRESET_KEYS, values)) for name, *values in _ROWS})

DEFAULT_GPU = "A100-80GB"

assert all(len(row) == 1 + len(PRESET_KEYS) for row in _ROWS)  # zip would drop a missing value
