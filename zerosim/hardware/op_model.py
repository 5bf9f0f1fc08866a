"""The op model's constants of a GPU: what its kernels reach, from published microbenchmarks only.

Per-GPU constants for a per-operation compute cost model (issue 16): nothing here comes from
end-to-end training throughput, which is the test set. docs/research/compute_model.md says what
each number measured (shape, dtype, kernel) and holds the arithmetic; the tags in the comments
name the sources listed in gpus.py. Each GPU's `OpModel` is written in its record (gpus.py);
the tables several GPUs share are here. sim/op_costs.py reads them (cluster.compute_model = "op").

None: no published figure was found. "proxy" marks a figure measured on a sister SKU with the
same die, for a quantity the difference between the SKUs does not touch (say so if you use it).
"""

from __future__ import annotations

from dataclasses import dataclass

# The GEMMs of training are not MAMF's best shape. [H100-MB] "gemm": the forward, dX and dW
# products of four Llama layers (7B, 8B, 13B, 70B) at 2k, 8k and 16k tokens, 144 in all, run at
# 0.7212 of peak in total (FLOPs over time, each shape's wave-quantized cost as op_costs.gemm
# counts it); MAMF's best shape on the same SKU runs at 0.803. Their ratio scales every GPU's
# MAMF figure (proxy for the others: the same cuBLAS kernel families and shape mix).
TRAINING_GEMMS_OVER_BEST = 0.898


@dataclass(frozen=True, kw_only=True)
class OpModel:
    """What one GPU's kernels reach. Rates are per GPU; TFLOP/s are 1e12 FLOP/s."""

    gemm_achievable_fraction: float
    """Best measured large BF16/FP16 GEMM rate over the GPU's peak_dense_16bit_tflops."""
    flash_fwd_tflops: float | None
    """FlashAttention-2 forward, head dim 128, no causal mask, long sequence; None: unsupported."""
    flash_bwd_tflops: float | None
    """FlashAttention-2 backward, same setting (2.5x the forward FLOPs, as the papers count)."""
    hbm_achievable_fraction: float
    """Measured streaming bandwidth (one load and one store stream) over the GPU's hbm_GBps."""
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
FA2_A100 = ((512, 99.0), (1024, 133.0), (2048, 155.0), (4096, 173.0), (8192, 182.0),
            (16384, 189.0))
OLDER_A100 = (("fa1", ((512, 55.0), (1024, 62.0), (2048, 69.0), (4096, 76.0), (8192, 80.0),
                       (16384, 83.0))),
              ("triton", ((512, 50.0), (1024, 61.0), (2048, 68.0), (4096, 74.0), (8192, 78.0),
                          (16384, 80.0))))
FA2_H100 = ((512, 163.0), (1024, 221.0), (2048, 265.0), (4096, 294.0), (8192, 308.0),
            (16384, 328.0))
_FA1_H100 = ((512, 98.0), (1024, 109.0), (2048, 108.0), (4096, 126.0), (8192, 135.0),
             (16384, 137.0))
OLDER_H100 = (("fa1", _FA1_H100), ("triton", _FA1_H100))  # triton: a proxy, see above

CUBLAS_TILE = (256, 128)  # [GUIDE] "most efficient"; [CUTL] 128x256 default; cuBLAS kernel names
# volta_h884gemm_256x128, ampere_bf16_s16816gemm_bf16_256x128, sm90_..._tilesize256x128x64.
