"""Per-GPU constants for a per-operation compute cost model (issue 16): data-sheet peaks and
published microbenchmarks only. Nothing here comes from end-to-end training throughput, which
is the test set. docs/research/compute_model.md says what each number measured (shape, dtype,
kernel) and holds the arithmetic; the tags in the comments name the sources listed below.

None: no published figure was found. "proxy" marks a figure measured on a sister SKU with the
same die, for a quantity the difference between the SKUs does not touch (say so if you use it).
sim/op_costs.py reads it (cluster.compute_model = "op").
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

# Sources (full citations, tables and figures in docs/research/compute_model.md):
# [WP-V]   NVIDIA Tesla V100 GPU Architecture whitepaper (WP-08608-001_v1.1), Table 1.
# [DS-V]   NVIDIA V100 Tensor Core GPU data sheet (V100 SXM2 column).
# [WP-A]   NVIDIA A100 Tensor Core GPU Architecture whitepaper (v1.0), Table 3 (A100 SXM4 40GB).
# [DS-A]   NVIDIA A100 data sheet, nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (80GB SXM).
# [WP-H]   NVIDIA H100 Tensor Core GPU Architecture whitepaper v1.04 (final clocks), Table 3.
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
# [H100-MB] Our own microbenchmark on one H100 80GB HBM3 (SXM, 700 W, torch 2.11 + CUDA 13.0,
#          2026-11-24): bench/h100/microbench.py, results in profiles/h100/microbench_2026-11-24.json
#          (rows named in the comments; docs/research/compute_model.md sec. 8).

# The GEMMs of training are not MAMF's best shape. [H100-MB] "gemm": the forward, dX and dW
# products of four Llama layers (7B, 8B, 13B, 70B) at 2k, 8k and 16k tokens, 144 in all, run at
# 0.7212 of peak in total (FLOPs over time, each shape's wave-quantized cost as op_costs.gemm
# counts it); MAMF's best shape on the same SKU runs at 0.803. Their ratio scales every GPU's
# MAMF figure (proxy for the others: the same cuBLAS kernel families and shape mix).
TRAINING_GEMMS_OVER_BEST = 0.898


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One GPU's constants. Rates are per GPU; TFLOP/s are 1e12 FLOP/s, GB/s 1e9 B/s."""

    sm_count: int
    """Streaming multiprocessors enabled on the SKU (a wave holds this many tiles)."""
    peak_dense_16bit_tflops: float
    """Dense (no sparsity) tensor-core peak for BF16/FP16 inputs, FP32 accumulate."""
    peak_fp32_tflops: float
    """FP32 peak of the CUDA cores (non-tensor)."""
    hbm_GBps: float
    """Data-sheet HBM bandwidth."""
    l2_MiB: float
    """L2 cache size (NVIDIA's KB are KiB)."""
    gemm_achievable_fraction: float
    """Best measured large BF16/FP16 GEMM rate over peak_dense_16bit_tflops."""
    flash_fwd_tflops: float | None
    """FlashAttention-2 forward, head dim 128, no causal mask, long sequence; None: unsupported."""
    flash_bwd_tflops: float | None
    """FlashAttention-2 backward, same setting (2.5x the forward FLOPs, as the papers count)."""
    hbm_achievable_fraction: float
    """Measured streaming bandwidth (one load and one store stream) over hbm_GBps."""
    kernel_launch_us: float | None
    """Fixed time per kernel when small kernels are launched back to back in one stream."""
    gemm_tile: tuple[int, int]
    """Output tile (m, n) of one thread block in the large-GEMM kernels cuBLAS/CUTLASS use."""
    flash_causal_by_seq: tuple[tuple[int, float], ...] = ()
    """FlashAttention-2 forward + backward with a causal mask, head dim 128, by sequence length:
    (tokens, TFLOP/s counted on the causal FLOPs). Empty: unknown (the flat rates apply)."""
    older_flash_causal_by_seq: tuple[tuple[str, tuple[tuple[int, float], ...]], ...] = ()
    """The same curve for the older flash kernels training.flash_kernel names ("fa1": the first
    FlashAttention, CUDA; "triton": FlashAttention written in Triton), as (kernel, curve)."""

    def flash_curve(self, kernel: str) -> tuple[tuple[int, float], ...]:
        """The causal forward + backward curve of one flash kernel ("fa2", "fa1", "triton");
        empty where none is known."""
        if kernel == "fa2":
            return self.flash_causal_by_seq
        return dict(self.older_flash_causal_by_seq).get(kernel, ())


# [FA2] Fig. 4(d) (A100 80GB SXM4) and Fig. 7(d) (H100 80GB SXM5), head dim 128, causal mask:
# forward + backward TFLOP/s at 512, 1k, 2k, 4k, 8k and 16k tokens, as printed over the bars (the
# README images assets/flash2_{a100,h100}_fwd_bwd_benchmark.png at 0251105). "triton" is a proxy
# twice over: the bars labelled FlashAttention Triton ran OpenAI's triton.ops.flash_attention on
# the Triton of mid-2023 (benchmarks/benchmark_flash_attention.py), not flash-attn's own
# flash_attn_triton.py on triton-pre-mlir that llm-foundry's attn_impl "triton" ran; both started
# from Tillet's fused-attention tutorial, and the latter's header says its forward + backward is
# "slightly slower than CUDA forward + backward" (FlashAttention, on an A100), as the A100 bars
# are (50-80 against 55-83). Fig. 7 has no Triton bar, so on the H100 "triton" takes
# FlashAttention's curve (neither FlashAttention's CUDA kernel nor triton-pre-mlir, a fork of the
# legacy Triton of late 2022, uses Hopper's wgmma).
_FA2_A100 = ((512, 99.0), (1024, 133.0), (2048, 155.0), (4096, 173.0), (8192, 182.0),
             (16384, 189.0))
_OLDER_A100 = (("fa1", ((512, 55.0), (1024, 62.0), (2048, 69.0), (4096, 76.0), (8192, 80.0),
                        (16384, 83.0))),
               ("triton", ((512, 50.0), (1024, 61.0), (2048, 68.0), (4096, 74.0), (8192, 78.0),
                           (16384, 80.0))))
_FA2_H100 = ((512, 163.0), (1024, 221.0), (2048, 265.0), (4096, 294.0), (8192, 308.0),
             (16384, 328.0))
_FA1_H100 = ((512, 98.0), (1024, 109.0), (2048, 108.0), (4096, 126.0), (8192, 135.0),
             (16384, 137.0))
_OLDER_H100 = (("fa1", _FA1_H100), ("triton", _FA1_H100))  # triton: a proxy, see above

_TILE = (256, 128)  # [GUIDE] "most efficient"; [CUTL] 128x256 default; cuBLAS kernel names
# volta_h884gemm_256x128, ampere_bf16_s16816gemm_bf16_256x128, sm90_..._tilesize256x128x64.

GPU_SPECS = MappingProxyType({
    "V100-32GB": GpuSpec(
        sm_count=80,                      # [WP-V] Table 1
        peak_dense_16bit_tflops=125.0,    # [WP-V] Table 1, [DS-V]; FP16 (Volta has no BF16)
        peak_fp32_tflops=15.7,            # [WP-V] Table 1, [DS-V]
        hbm_GBps=900.0,                   # [DS-V]
        l2_MiB=6.0,                       # [WP-V] Table 1: 6144 KB
        gemm_achievable_fraction=0.736,   # [MARK] 83 / 112.7 (V100 at 1.38 GHz, N=8192, CUDA 9.0)
        flash_fwd_tflops=None,            # [FA-RM] FlashAttention does not run on Volta
        flash_bwd_tflops=None,            # [FA-RM]
        hbm_achievable_fraction=0.899,    # [RRZE-S] v100.txt: 809 / 900
        kernel_launch_us=None,            # no published measurement found
        gemm_tile=_TILE,
    ),
    "A100-40GB": GpuSpec(
        sm_count=108,                     # [WP-A] Table 3
        peak_dense_16bit_tflops=312.0,    # [WP-A] Table 3: 312/624 (dense/sparse)
        peak_fp32_tflops=19.5,            # [WP-A] Table 3
        hbm_GBps=1555.0,                  # [WP-A] Table 3
        l2_MiB=40.0,                      # [WP-A] Table 3: 40960 KB
        gemm_achievable_fraction=0.869,   # [MAMF] A100 SXM: 271.2 / 312
        flash_fwd_tflops=230.0,           # [FA2] sec. 4: "up to 230 TFLOPs/s" (proxy: 80GB)
        flash_bwd_tflops=196.6,           # [FA2] sec. 1: up to 63% of 312 (proxy: 80GB)
        hbm_achievable_fraction=0.889,    # [RRZE-S] a100_40.txt (A100-SXM4-40GB): 1382 / 1555
        kernel_launch_us=2.555,           # [RRZE-K] proxy: A100-SXM4-80GB, a = 2555 ns
        gemm_tile=_TILE,
        flash_causal_by_seq=_FA2_A100,    # [FA2] Fig. 4(d) proxy: A100 80GB SXM4
        older_flash_causal_by_seq=_OLDER_A100,  # [FA2] Fig. 4(d), proxy: 80GB
    ),
    "A100-80GB": GpuSpec(
        sm_count=108,                     # [WP-A] Table 3 (same GA100 SKU as 40GB)
        peak_dense_16bit_tflops=312.0,    # [DS-A]
        peak_fp32_tflops=19.5,            # [DS-A]
        hbm_GBps=2039.0,                  # [DS-A] SXM: 2,039 GB/s
        l2_MiB=40.0,                      # [WP-A] Table 3
        gemm_achievable_fraction=0.869,   # [MAMF] A100 SXM: 271.2 / 312
        flash_fwd_tflops=230.0,           # [FA2] sec. 4, A100 80GB SXM4
        flash_bwd_tflops=196.6,           # [FA2] sec. 1: 0.63 x 312
        hbm_achievable_fraction=0.852,    # [RRZE-S] a100_80.txt (A100-SXM4-80GB): 1737 / 2039
        kernel_launch_us=2.555,           # [RRZE-K] A100_80: a = 2555 ns
        gemm_tile=_TILE,
        flash_causal_by_seq=_FA2_A100,    # [FA2] Fig. 4(d) (A100 80GB SXM4)
        older_flash_causal_by_seq=_OLDER_A100,  # [FA2] Fig. 4(d)
    ),
    "H100-80GB": GpuSpec(
        sm_count=132,                     # [WP-H] Table 3, H100 SXM5
        peak_dense_16bit_tflops=989.4,    # [WP-H] Tables 1 and 3: 989.4/1978.9 (dense/sparse)
        peak_fp32_tflops=66.9,            # [WP-H] Table 3
        hbm_GBps=3350.0,                  # [DS-H] 3.35 TB/s ([WP-H]: 3352 GB/s)
        l2_MiB=50.0,                      # [WP-H] Table 3: 51200 KB
        gemm_achievable_fraction=0.803,   # [MAMF] H100 SXM: 794.5 / 989.4
        flash_fwd_tflops=370.0,           # [FA3] Fig. 5(c), FlashAttention-2 bar at 16k
        flash_bwd_tflops=322.0,           # [FA3] Fig. 6(b), FlashAttention-2 bar at 16k
        hbm_achievable_fraction=0.898,    # [H100-MB] "copy" (clone of 1 GiB: one load and one
                                          # store stream): 3009 / 3350 GB/s
        kernel_launch_us=2.433,           # [RRZE-K] proxy: H200, a = 2433 ns
        gemm_tile=_TILE,
        flash_causal_by_seq=_FA2_H100,    # [FA2] Fig. 7(d) (H100 SXM5)
        older_flash_causal_by_seq=_OLDER_H100,  # [FA2] Fig. 7(d); triton a proxy (above)
    ),
    "H200-141GB": GpuSpec(
        sm_count=132,                     # not on [DS-H]; GH100 as H100 SXM5 (RRZE roofline
                                          # on H200 runs 1056 blocks = 8 per SM x 132)
        peak_dense_16bit_tflops=989.5,    # [DS-H] H200: 1,979 with sparsity / 2
        peak_fp32_tflops=67.0,            # [DS-H] H200
        hbm_GBps=4800.0,                  # [DS-H] H200: 4.8 TB/s
        l2_MiB=50.0,                      # not on [DS-H]; RRZE gpu-l2-cache/h200.txt falls off
                                          # between 44 and 76 MB, as a 50 MB L2 would
        gemm_achievable_fraction=0.803,   # [MAMF] note on the H100 SXM row: "H200 is the same"
        flash_fwd_tflops=370.0,           # proxy: H100 SXM5 [FA3] (same die and clocks)
        flash_bwd_tflops=322.0,           # proxy: H100 SXM5 [FA3]
        hbm_achievable_fraction=0.684,    # [RRZE-K] h200.txt, SCALE at 275 MB: 3282 / 4800
        kernel_launch_us=2.433,           # [RRZE-K] H200: a = 2433 ns
        gemm_tile=_TILE,
        flash_causal_by_seq=_FA2_H100,    # [FA2] Fig. 7(d) proxy: H100 SXM5
        older_flash_causal_by_seq=_OLDER_H100,  # [FA2] Fig. 7(d); triton a proxy (above)
    ),
})
