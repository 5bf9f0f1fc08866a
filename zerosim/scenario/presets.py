"""Named GPU systems: device numbers plus the links of a typical node built around that GPU.

A scenario names one with `[cluster] gpu = "A100-80GB"` and may override any single value.
Peak FLOP/s are dense 16-bit tensor-core numbers from the vendor data sheets (no sparsity);
link bandwidths are per GPU, per direction (what a ring step can push one way): vendors quote
NVLink bidirectionally, so the figure here is half theirs.

GPU presets leave the per-step latencies to NCCL's own tables (zerosim.sim.collectives.nccl_tables):
NCCL prices a hop by link type, algorithm and protocol, so one number would be wrong for most
of them. A scenario that sets `intra_node_latency_us` / `inter_node_latency_us` replaces NCCL's
per-hop figure for every algorithm and protocol. The CPU preset is gloo over loopback, whose
ring steps cost one latency each.
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
    "collective_library",
    "nvlink_sharp",
    "pcie_gen",
    "host_cpu",
)

_NCCL = None  # latency: NCCL's tables

_ROWS = (
    #                HBM   peak  HBM      intra-node    inter-node  library  NVLS   PCIe  host
    #                GiB  TFLOP/s GB/s    GB/s   us     GB/s   us                   gen   CPU
    # The ZeRO paper's cluster (§10.1): DGX-2 nodes, NVLink2 through NVSwitch gen1 (6 links x 25
    # GB/s one way = 150; NVIDIA DGX-2 datasheet) and "800 Gbps internode" = 8 EDR 100 Gb/s NICs
    # per 16-GPU node -> 6.25 GB/s per GPU; PCIe Gen3 (V100 SXM2 datasheet); two Intel Xeon
    # Platinum 8168 (DGX-2 datasheet).
    ("V100-32GB",     32,   125,  900,   150, _NCCL,   6.25, _NCCL, "nccl", False, 3, "intel"),
    # DGX A100: NVLink3 600 GB/s bidirectional = 300 one way (12 links x 25; NVIDIA A100
    # datasheet, https://www.nvidia.com/en-us/data-center/a100/), NVSwitch gen2 without NVLink
    # SHARP; one HDR 200 Gb/s NIC per GPU = 25 GB/s; PCIe Gen4; two AMD EPYC 7742 (DGX A100
    # user guide, https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html).
    ("A100-40GB",     40,   312, 1555,   300, _NCCL,  25,    _NCCL, "nccl", False, 4, "amd"),
    ("A100-80GB",     80,   312, 2039,   300, _NCCL,  25,    _NCCL, "nccl", False, 4, "amd"),
    # DGX H100: NVLink4 900 GB/s bidirectional = 450 one way (18 links x 25), NVSwitch gen3 with
    # NVLink SHARP (https://www.nvidia.com/en-us/data-center/nvlink/); one NDR 400 Gb/s
    # ConnectX-7 per GPU = 50 GB/s and two Intel Xeon Platinum 8480C (DGX H100 user guide,
    # https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html); PCIe Gen5.
    ("H100-80GB",     80,   989, 3350,   450, _NCCL,  50,    _NCCL, "nccl", True,  5, "intel"),
    # H200 SXM: 141 GB (decimal) of HBM3e = 131.3 GiB; the same NVLink4/NVSwitch gen3, NICs
    # and host as DGX H100 (https://www.nvidia.com/en-us/data-center/h200/).
    ("H200-141GB", 131.3,   989, 4800,   450, _NCCL,  50,    _NCCL, "nccl", True,  5, "intel"),
    # Processes on one CPU box talking gloo over loopback: placeholders of the right order of
    # magnitude, meant to be replaced by `zero-real calibrate`. gloo's ring pays each step's
    # latency; no NVLink, no NCCL.
    ("CPU",            4,  0.05,   10,     2,    50,   1,     100, "gloo", False, 3, "intel"),
)

GPU_PRESETS = MappingProxyType({name: dict(zip(PRESET_KEYS, values)) for name, *values in _ROWS})

# The GPU generation of each preset: it picks NCCL's tables (tuning.cc indexes them by compute
# capability: Volta SM70, Ampere SM80, Hopper SM90).
GENERATION = MappingProxyType({"V100-32GB": "volta", "A100-40GB": "ampere",
                               "A100-80GB": "ampere", "H100-80GB": "hopper",
                               "H200-141GB": "hopper", "CPU": None})

# GPUs sharing one NIC in the preset's node: DGX-2 has 8 NICs for 16 GPUs (DGX-2 datasheet);
# DGX A100 and DGX H100/H200 one per GPU (their user guides). cluster.nics_per_node overrides.
GPUS_PER_NIC = MappingProxyType({"V100-32GB": 2, "A100-40GB": 1, "A100-80GB": 1,
                                 "H100-80GB": 1, "H200-141GB": 1, "CPU": 1})

# Device memory a process holds before its first tensor: the CUDA context (code, heaps) that
# nvidia-smi shows and no allocator counts. 723 MiB measured on the first CUDA call of a PyTorch
# process (https://discuss.pytorch.org/t/what-is-the-reason-for-pytorchs-gpu-memory-floor/73021;
# "~700+MB depending on the CUDA version and device" in
# https://discuss.pytorch.org/t/high-gpu-memory-overhead/81330). Lazy module loading (CUDA >=
# 11.7) makes it smaller: cluster.cuda_context_MiB overrides it. A CPU process has none. Seen
# on an H100 (torch 2.11 + CUDA 13, 2026-11-24, profiles/measurements/h100_2026-11-24/*: the
# driver's used memory minus the allocator's reservation): 619 MiB after init, 767 MiB once a
# training step's kernels had loaded; 830 MiB in FSDP2 runs (profiles/h100/fsdp2_memory_*).
CUDA_CONTEXT_MIB = MappingProxyType({name: (0.0 if name == "CPU" else 723.0) for name, *_ in _ROWS})

# Dense 16-bit GEMM throughput under a board power limit below the part's default, for
# cluster.power_limit_W: (watts, TFLOP/s) of the same product, cuBLAS 8192 x 8192 x 8192, the
# last point at the default limit. Compute-bound work (GEMMs, attention) runs at the ratio of
# the interpolated figure to the last; HBM traffic is left as it is.
# H100: 500 W, 557.2 TFLOP/s (FP16, the same tensor-core rate as BF16): Meta's
# facebookexperimental/triton commit ac9e9d9ffcfbe466d43ae03f3d99be271f6dc83b (PR #854,
# 2026-02-06), test plan "Change 3", after third_party/tlx/denoise.sh printed "Locking GPU 4
# power cap to 500 W" (an H100 96GB part by its nvidia-smi listing). 700 W, 712.9 TFLOP/s
# (BF16, median of 20): our H100 80GB HBM3 SXM, profiles/h100/microbench_2026-11-24.json, row
# gemm "square" 8192.
GEMM_TFLOPS_BY_POWER_W = MappingProxyType({"H100-80GB": ((500.0, 557.2), (700.0, 712.9))})

DEFAULT_GPU = "A100-80GB"

assert all(len(row) == 1 + len(PRESET_KEYS) for row in _ROWS)  # zip would drop a missing value
assert set(GENERATION) == set(GPUS_PER_NIC) == set(GPU_PRESETS)
