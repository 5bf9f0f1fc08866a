"""GPUs: one record per GPU, every figure of it with its source, written once.

A record holds the GPU's data sheet (peaks, HBM, SMs, L2), the NCCL generation that picks
NCCL's tables, the node it comes in (nodes.py), what a CUDA process holds before its first
tensor, GEMM throughput under a power limit where measured, and the op model's constants
(op_model.py). A scenario names one with `[cluster] gpu = ...` (zerosim/scenario/presets.py
turns a record into the [cluster] keys it fills) and may override any single value.

Peak FLOP/s are dense 16-bit tensor-core numbers from the vendor data sheets (no sparsity).
None: no published figure was found.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from zerosim.hardware.nodes import (CPU_BOX, DGX_1V, DGX_2, DGX_A100, DGX_B200, DGX_H100,
                                   GB200_NVL72, Node)
from zerosim.hardware.op_model import (CUBLAS_TILE, FA2_A100, FA2_H100, OLDER_A100, OLDER_H100,
                                       OpModel)

# Sources (full citations, tables and figures in docs/research/compute_model.md):
# [WP-V]   NVIDIA Tesla V100 GPU Architecture whitepaper (WP-08608-001_v1.1), Table 1.
# [DS-V]   NVIDIA V100 Tensor Core GPU data sheet (V100 SXM2 column).
# [WP-A]   NVIDIA A100 Tensor Core GPU Architecture whitepaper (v1.0), Table 3 (A100 SXM4 40GB).
# [DS-A]   NVIDIA A100 data sheet, nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (80GB SXM).
# [WP-H]   NVIDIA H100 Tensor Core GPU Architecture whitepaper v1.04 (final clocks), Table 3.
# [DS-BW]  NVIDIA Blackwell data sheet (Oct 2025) p. 8, the per-GPU table (as on nvidia.com's
#          HGX and GB200 NVL72 pages): its tensor-core rows are with sparsity, halved here.
# [SMI]    nvidia-smi's memory.total as public repositories quote it ("NVIDIA H200, 143771
#          MiB", "NVIDIA B200, 183359 MiB", "NVIDIA GB200, 189471 MiB"; "NVIDIA H100 80GB HBM3
#          ... 81559MiB": NVIDIA/nccl issue #1264, and modal-labs/modal-client PR #2797's list,
#          which also gives the A100 80GB's 81920 MiB).
# [DS-H]   https://www.nvidia.com/en-us/data-center/h100/ and .../h200/ spec tables.
# [MAMF]   Bekman, ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul
#          FLOPS comparison table", BF16 rows (stas00/ml-engineering @ 744d01e).
# [MARK]   Markidis et al., "NVIDIA Tensor Core Programmability, Performance & Precision",
#          IPDPSW 2018 (arXiv:1803.04014), sec. VI-VII.A: cuBLAS 83 of 112.7 TFLOP/s.
# [FA2]    Dao, FlashAttention-2, arXiv:2307.08691, sec. 1 and 4.1 (A100 80GB SXM4).
# [FA3]    Shah et al., FlashAttention-3, arXiv:2407.08608, Fig. 5(c) and 6(b) (H100 SXM5).
# [FA-RM]  Dao-AILab/flash-attention README @ 0251105: requires Ampere, Ada or Hopper.
# [RRZE-S] RRZE-HPC/gpu-benches @ 1038c5d, gpu-stream/<gpu>.txt: SCALE kernel (1 load + 1 store
#          stream, fp64, 2 GiB per buffer), best launch config; GB/s over the data-sheet peak.
# [RRZE-K] RRZE-HPC/gpu-benches @ 1038c5d, gpu-small-kernels: fit T = a + V/b of back-to-back
#          SCALE launches without CUDA graphs; a in repeated-stream.svg.
# [GUIDE]  NVIDIA Matrix Multiplication Background User's Guide, sec. 2.3 "Typical Tile
#          Dimensions In cuBLAS And Performance" (256x128 and 128x256 most efficient).
# [CUTL]   NVIDIA/cutlass include/cutlass/gemm/device/default_gemm_configuration.h
#          (OpClassTensorOp Sm70: 128x256x32, Sm80: 128x256x64).
# [DB]     Baidu DeepBench, results/train/DeepBench_NV_V100.xlsx, sheet "Results - FP16 ip, Mixed
#          math", row 24 (4096 x 7000 x 4096, 112.3 TFLOP/s; DGX-1 V100 SXM2, CUDA 10.1),
#          baidu-research/DeepBench @ da81ba7 (docs/research/fsdp1_amp_v100.md C.3).
# [CLP]    clpeak README sample, Tesla V100-SXM2-16GB: kernel launch latency 7.22 us (OpenCL
#          queue-to-start, krrishnarraj/clpeak @ 810fb4f, lines 21-65); a latency, not the
#          back-to-back fit [RRZE-K] gives the other GPUs (no V100 file there).
# [H100-MB] Our own microbenchmark on one H100 80GB HBM3 (SXM, 700 W, torch 2.11 + CUDA 13.0,
#          2026-11-24): bench/h100/microbench.py, results in profiles/h100/microbench_2026-11-24.json
#          (rows named in the comments; docs/research/compute_model.md sec. 8).

# Device memory a process holds before its first tensor: the CUDA context (code, heaps) that
# nvidia-smi shows and no allocator counts. 723 MiB measured on the first CUDA call of a PyTorch
# process (https://discuss.pytorch.org/t/what-is-the-reason-for-pytorchs-gpu-memory-floor/73021;
# "~700+MB depending on the CUDA version and device" in
# https://discuss.pytorch.org/t/high-gpu-memory-overhead/81330). Lazy module loading (CUDA >=
# 11.7) makes it smaller: cluster.cuda_context_MiB overrides it. A CPU process has none. Seen
# on an H100 (torch 2.11 + CUDA 13, 2026-11-24, profiles/measurements/h100_2026-11-24/*: the
# driver's used memory minus the allocator's reservation): 619 MiB after init, 767 MiB once a
# training step's kernels had loaded; 830 MiB in FSDP2 runs (profiles/h100/fsdp2_memory_*).
CUDA_CONTEXT_MIB = 723.0


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One GPU. Rates are per GPU; TFLOP/s are 1e12 FLOP/s, GB/s 1e9 B/s."""

    name: str
    """What `[cluster] gpu` calls it; written here only, nowhere else in zerosim."""
    generation: str | None
    """The GPU generation: it picks NCCL's tables (tuning.cc indexes them by compute
    capability: Volta SM70, Ampere SM80, Hopper SM90). None: no NCCL (the CPU box)."""
    node: Node
    """The typical node built around it: links, NICs, PCIe, host (nodes.py)."""
    hbm_GiB: float
    """Device memory, GiB (2**30 bytes): nvidia-smi's memory.total ([SMI]) where it is public,
    which is what the device figure (the allocator's segments, context and NCCL's buffers, as
    nvidia-smi counts them) is judged against; else the data sheet's binary figure."""
    hbm_GBps: float
    """Data-sheet HBM bandwidth."""
    peak_dense_16bit_tflops: float
    """Dense (no sparsity) tensor-core peak for BF16/FP16 inputs, FP32 accumulate: the preset's
    cluster.peak_tflops (the flat model's rate, MFU's denominator) and the op model's GEMM
    ceiling alike."""
    peak_fp32_tflops: float | None = None
    """FP32 peak of the CUDA cores (non-tensor)."""
    sm_count: int | None = None
    """Streaming multiprocessors enabled on the SKU (a wave holds this many tiles)."""
    l2_MiB: float | None = None
    """L2 cache size (NVIDIA's KB are KiB)."""
    collective_library: str = "nccl"
    """The library that runs its collectives: "nccl", or "gloo" on the CPU box."""
    cuda_context_MiB: float = CUDA_CONTEXT_MIB
    """Device memory of the CUDA context (CUDA_CONTEXT_MIB above)."""
    gemm_tflops_by_power_W: tuple[tuple[float, float], ...] = ()
    """Dense 16-bit GEMM throughput under a board power limit below the part's default, for
    cluster.power_limit_W: (watts, TFLOP/s) of the same product, cuBLAS 8192 x 8192 x 8192, the
    last point at the default limit. Compute-bound work (GEMMs, attention) runs at the ratio of
    the interpolated figure to the last; HBM traffic is left as it is. Empty: none measured."""
    op_model: OpModel | None = None
    """What its kernels reach (op_model.py); None: the flat model times it."""


V100_OPS = OpModel(
    gemm_achievable_fraction=0.898,   # [DB] 112.3 / 125 (CUDA 10.1; [MARK]'s 83 / 112.7 on CUDA
                                      # 9.0 was the older library)
    flash_fwd_tflops=None,            # [FA-RM] FlashAttention does not run on Volta
    flash_bwd_tflops=None,            # [FA-RM]
    hbm_achievable_fraction=0.899,    # [RRZE-S] v100.txt: 809 / 900
    kernel_launch_us=7.22,            # [CLP] V100-SXM2-16GB
    gemm_tile=CUBLAS_TILE,
)
"""The V100 SXM2's op model: the 16 GB and 32 GB parts run at the same clocks and rates."""

V100_32GB = Gpu(
    name="V100-32GB", generation="volta", node=DGX_2,  # the ZeRO paper's cluster (nodes.py)
    hbm_GiB=32.0,
    hbm_GBps=900.0,                   # [DS-V]
    peak_dense_16bit_tflops=125.0,    # [WP-V] Table 1, [DS-V]; FP16 (Volta has no BF16)
    peak_fp32_tflops=15.7,            # [WP-V] Table 1, [DS-V]
    sm_count=80,                      # [WP-V] Table 1
    l2_MiB=6.0,                       # [WP-V] Table 1: 6144 KB
    op_model=V100_OPS,
)

V100_16GB = Gpu(
    name="V100-16GB", generation="volta", node=DGX_1V,  # the DGX-1's part
    hbm_GiB=16.0,                     # [DS-V] (16 GB and 32 GB SXM2 columns)
    hbm_GBps=900.0,                   # [DS-V]
    peak_dense_16bit_tflops=125.0,    # [WP-V] Table 1, [DS-V]
    peak_fp32_tflops=15.7,            # [WP-V] Table 1, [DS-V]
    sm_count=80,                      # [WP-V] Table 1
    l2_MiB=6.0,                       # [WP-V] Table 1
    op_model=V100_OPS,
)

A100_40GB = Gpu(
    name="A100-40GB", generation="ampere", node=DGX_A100,
    hbm_GiB=40.0,
    hbm_GBps=1555.0,                  # [WP-A] Table 3
    peak_dense_16bit_tflops=312.0,    # [WP-A] Table 3: 312/624 (dense/sparse)
    peak_fp32_tflops=19.5,            # [WP-A] Table 3
    sm_count=108,                     # [WP-A] Table 3
    l2_MiB=40.0,                      # [WP-A] Table 3: 40960 KB
    op_model=OpModel(
        gemm_achievable_fraction=0.869,   # [MAMF] A100 SXM: 271.2 / 312
        flash_fwd_tflops=230.0,           # [FA2] sec. 4: "up to 230 TFLOPs/s" (proxy: 80GB)
        flash_bwd_tflops=196.6,           # [FA2] sec. 1: up to 63% of 312 (proxy: 80GB)
        hbm_achievable_fraction=0.889,    # [RRZE-S] a100_40.txt (A100-SXM4-40GB): 1382 / 1555
        kernel_launch_us=2.555,           # [RRZE-K] proxy: A100-SXM4-80GB, a = 2555 ns
        gemm_tile=CUBLAS_TILE,
        flash_causal_by_seq=FA2_A100,     # [FA2] Fig. 4(d) proxy: A100 80GB SXM4
        older_flash_causal_by_seq=OLDER_A100,  # [FA2] Fig. 4(d), proxy: 80GB
    ),
)

A100_80GB = Gpu(
    name="A100-80GB", generation="ampere", node=DGX_A100,
    hbm_GiB=80.0,
    hbm_GBps=2039.0,                  # [DS-A] SXM: 2,039 GB/s
    peak_dense_16bit_tflops=312.0,    # [DS-A]
    peak_fp32_tflops=19.5,            # [DS-A]
    sm_count=108,                     # [WP-A] Table 3 (same GA100 SKU as 40GB)
    l2_MiB=40.0,                      # [WP-A] Table 3
    op_model=OpModel(
        gemm_achievable_fraction=0.869,   # [MAMF] A100 SXM: 271.2 / 312
        flash_fwd_tflops=230.0,           # [FA2] sec. 4, A100 80GB SXM4
        flash_bwd_tflops=196.6,           # [FA2] sec. 1: 0.63 x 312
        hbm_achievable_fraction=0.852,    # [RRZE-S] a100_80.txt (A100-SXM4-80GB): 1737 / 2039
        kernel_launch_us=2.555,           # [RRZE-K] A100_80: a = 2555 ns
        gemm_tile=CUBLAS_TILE,
        flash_causal_by_seq=FA2_A100,     # [FA2] Fig. 4(d) (A100 80GB SXM4)
        older_flash_causal_by_seq=OLDER_A100,  # [FA2] Fig. 4(d)
    ),
)

H100_80GB = Gpu(
    name="H100-80GB", generation="hopper", node=DGX_H100,
    hbm_GiB=79.65,                    # [SMI] 81559 MiB (marketed 80 GB; an A100 80GB shows
                                      # 81920 MiB = 80 GiB; this record's figure was 80.0
                                      # until 2026-11-28)
    hbm_GBps=3350.0,                  # [DS-H] 3.35 TB/s ([WP-H]: 3352 GB/s)
    peak_dense_16bit_tflops=989.4,    # [WP-H] Tables 1 and 3: 989.4/1978.9 (dense/sparse)
    peak_fp32_tflops=66.9,            # [WP-H] Table 3
    sm_count=132,                     # [WP-H] Table 3, H100 SXM5
    l2_MiB=50.0,                      # [WP-H] Table 3: 51200 KB
    # 500 W, 557.2 TFLOP/s (FP16, the same tensor-core rate as BF16): Meta's
    # facebookexperimental/triton commit ac9e9d9ffcfbe466d43ae03f3d99be271f6dc83b (PR #854,
    # 2026-02-06), test plan "Change 3", after third_party/tlx/denoise.sh printed "Locking GPU 4
    # power cap to 500 W" (an H100 96GB part by its nvidia-smi listing). 700 W, 712.9 TFLOP/s
    # (BF16, median of 20): our H100 80GB HBM3 SXM, profiles/h100/microbench_2026-11-24.json, row
    # gemm "square" 8192.
    gemm_tflops_by_power_W=((500.0, 557.2), (700.0, 712.9)),
    op_model=OpModel(
        gemm_achievable_fraction=0.803,   # [MAMF] H100 SXM: 794.5 / 989.4
        flash_fwd_tflops=370.0,           # [FA3] Fig. 5(c), FlashAttention-2 bar at 16k
        flash_bwd_tflops=322.0,           # [FA3] Fig. 6(b), FlashAttention-2 bar at 16k
        hbm_achievable_fraction=0.898,    # [H100-MB] "copy" (clone of 1 GiB: one load and one
                                          # store stream): 3009 / 3350 GB/s
        kernel_launch_us=2.433,           # [RRZE-K] proxy: H200, a = 2433 ns
        gemm_tile=CUBLAS_TILE,
        flash_causal_by_seq=FA2_H100,     # [FA2] Fig. 7(d) (H100 SXM5)
        older_flash_causal_by_seq=OLDER_H100,  # [FA2] Fig. 7(d); triton a proxy (op_model.py)
    ),
)

H200_141GB = Gpu(
    # The same NVLink4/NVSwitch gen3, NICs and host as DGX H100
    # (https://www.nvidia.com/en-us/data-center/h200/).
    name="H200-141GB", generation="hopper", node=DGX_H100,
    hbm_GiB=140.4,                    # [SMI] 143771 MiB (marketed 141 GB, which is not decimal
                                      # GB: 131.3 GiB, this record's figure until 2026-11-28)
    hbm_GBps=4800.0,                  # [DS-H] H200: 4.8 TB/s
    peak_dense_16bit_tflops=989.5,    # [DS-H] H200: 1,979 with sparsity / 2
    peak_fp32_tflops=67.0,            # [DS-H] H200
    sm_count=132,                     # not on [DS-H]; GH100 as H100 SXM5 (RRZE roofline
                                      # on H200 runs 1056 blocks = 8 per SM x 132)
    l2_MiB=50.0,                      # not on [DS-H]; RRZE gpu-l2-cache/h200.txt falls off
                                      # between 44 and 76 MB, as a 50 MB L2 would
    op_model=OpModel(
        gemm_achievable_fraction=0.803,   # [MAMF] note on the H100 SXM row: "H200 is the same"
        flash_fwd_tflops=370.0,           # proxy: H100 SXM5 [FA3] (same die and clocks)
        flash_bwd_tflops=322.0,           # proxy: H100 SXM5 [FA3]
        hbm_achievable_fraction=0.684,    # [RRZE-K] h200.txt, SCALE at 275 MB: 3282 / 4800
        kernel_launch_us=2.433,           # [RRZE-K] H200: a = 2433 ns
        gemm_tile=CUBLAS_TILE,
        flash_causal_by_seq=FA2_H100,     # [FA2] Fig. 7(d) proxy: H100 SXM5
        older_flash_causal_by_seq=OLDER_H100,  # [FA2] Fig. 7(d); triton a proxy (op_model.py)
    ),
)

# Blackwell: no B200 measurement of flash attention, HBM streaming or kernel launch was found;
# those are the H100's, named as proxies.
_BLACKWELL_PROXIES = dict(
    flash_fwd_tflops=370.0,           # proxy: H100 SXM5 [FA3]
    flash_bwd_tflops=322.0,           # proxy: H100 SXM5 [FA3]
    hbm_achievable_fraction=0.898,    # proxy: H100 [H100-MB] "copy"
    kernel_launch_us=2.433,           # proxy: H200 [RRZE-K]
    gemm_tile=CUBLAS_TILE,
    flash_causal_by_seq=FA2_H100,     # proxy: H100 SXM5 [FA2] Fig. 7(d)
    older_flash_causal_by_seq=OLDER_H100,
)

B200_180GB = Gpu(
    name="B200-180GB", generation="blackwell", node=DGX_B200,
    hbm_GiB=179.06,                   # [SMI] 183359 MiB (marketed 180 GB: [DS-BW])
    hbm_GBps=7700.0,                  # [DS-BW] 7.7 TB/s (the DGX B200 page's 64 TB/s / 8 = 8.0)
    peak_dense_16bit_tflops=2250.0,   # [DS-BW] 4.5 PF with sparsity / 2
    peak_fp32_tflops=75.0,            # [DS-BW]
    sm_count=148,                     # NVIDIA's CUDA MPS blog (MLOPart), as B200 repos report
    op_model=OpModel(
        gemm_achievable_fraction=0.776,   # [MAMF] B200: 1745 of 2250 TFLOP/s (torch 2.7.1)
        **_BLACKWELL_PROXIES),
)

GB200_186GB = Gpu(
    name="GB200-186GB", generation="blackwell", node=GB200_NVL72,
    hbm_GiB=185.03,                   # [SMI] 189471 MiB (marketed 186 GB: [DS-BW])
    hbm_GBps=8000.0,                  # [DS-BW] 8 TB/s
    peak_dense_16bit_tflops=2500.0,   # [DS-BW] 5 PF with sparsity / 2
    peak_fp32_tflops=80.0,            # [DS-BW]
    sm_count=148,                     # proxy: B200 (no GB200 figure found)
    op_model=OpModel(
        gemm_achievable_fraction=0.729,   # [MAMF] GB200: 1822 of 2500 TFLOP/s
        **_BLACKWELL_PROXIES),
)

# Processes on one CPU box standing in for GPUs (gloo over loopback): placeholders of the right
# order of magnitude, meant to be replaced by `zero-real calibrate`. Not a GPU, so not in GPUS;
# no data sheet, no op model (the flat model times it), no CUDA context.
CPU = Gpu(name="CPU", generation=None, node=CPU_BOX, hbm_GiB=4.0, hbm_GBps=10.0,
          peak_dense_16bit_tflops=0.05, collective_library="gloo", cuda_context_MiB=0.0)

GPUS = MappingProxyType({gpu.name: gpu for gpu in (V100_16GB, V100_32GB, A100_40GB, A100_80GB,
                                                  H100_80GB, H200_141GB, B200_180GB,
                                                  GB200_186GB)})
"""The GPUs, by name."""
DEVICES = MappingProxyType({**GPUS, CPU.name: CPU})
"""Every name `[cluster] gpu` takes: the GPUs and the CPU box."""
DEFAULT_GPU = A100_80GB.name
"""The GPU of a scenario that names none."""
