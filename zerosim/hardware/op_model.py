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


# The bytes each memory-bound op must read and write at least, per element of its (tokens x
# width) input, forward and backward, in 16-bit elements: the counts sim/op_costs.py's
# elementwise_bytes and head use (norm: x in, y out; + dy in backward; residual: two in, one
# out; GELU and dropout as norm; SwiGLU over the ffn width: a, b in, y out; + dy in, da, db out;
# the embedding's rows out, their gradient in and scattered; cross-entropy: the logits in, their
# gradient out; a copy: in and out; rotary: op_costs.min_bytes). A box's record (measured.py)
# measures each op's rate against these bytes, whatever its dtype.
MIN_PASSES = {"norm": (2, 3), "residual": (3, 3), "gelu": (2, 3), "dropout": (2, 3),
              "swiglu": (3, 5), "embedding": (1, 2), "cross_entropy": (1, 2), "copy": (2, 2)}
MEMORY_OPS = (*MIN_PASSES, "rotary")


@dataclass(frozen=True)
class OpRate:
    """A measured kernel (a box's record): seconds = overhead_s + work / per_s."""

    overhead_s: float
    per_s: float


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
    training_shapes_over_best: float = TRAINING_GEMMS_OVER_BEST
    """What training's GEMM shapes reach over the best shape's rate (TRAINING_GEMMS_OVER_BEST);
    1 for a box's own record, whose rate was fitted on training shapes."""
    memory_ops: tuple[tuple[str, "OpRate | None", "OpRate | None"], ...] = ()
    """Measured memory-bound ops (a box's record, zerosim/hardware/measured.py): (op, forward,
    backward), each overhead + minimum bytes / rate (sim/op_costs.min_bytes counts the bytes),
    None for a pass the fit could not tell. Empty, or None: the catalogue's EAGER_FACTORS over
    the streaming bandwidth."""
    measured_attention: tuple[tuple[str, tuple[float, float], tuple[float, float],
                                    tuple[tuple[int, float, float], ...]], ...] = ()
    """Measured attention cores (a box's record): (kernel "flash" | "math", (forward, backward)
    overhead seconds per call, (forward, backward) seconds per score element (batch x heads x
    s^2: the math kernel's scores, mask and softmax through memory; 0 for flash), ((sequence,
    forward TFLOP/s, backward TFLOP/s), ...)), the rates counted on the causal FLOPs. Empty:
    flash's published curves, else two batched GEMMs."""
    linear_overhead_s: tuple[float, float] = (0.0, 0.0)
    """A box's record: seconds per linear layer beyond its GEMMs (bias, views, autograd's node),
    forward and backward."""
    backward_call_s: float = 0.0
    """A box's record: seconds of one autograd backward call beyond its nodes (the engine's
    setup), paid once per unit's backward: zero_real runs one torch.autograd.backward per unit
    (zero_real/stages/replicated.py, backward), and the microbenchmarks, timing each op's
    backward with a call of its own, have it taken out (calibration/fit_ops.py)."""
    unit_overhead_s: tuple[tuple[str, float, float], ...] = ()
    """A box's record: (unit kind, forward, backward) seconds a whole unit took beyond its ops
    (the framework's per-unit host work: module calls, views, hooks), from whole units timed
    alone (calibration/fit_ops.fit_unit_overhead)."""
    gemm_launch_us: float | None = None
    """A box's record: the fixed time of one GEMM (torch.mm's dispatch and launch), fitted with
    its rate; None: kernel_launch_us."""
    host_dispatch_s: tuple[float, float] | None = None
    """A box's record: the host's seconds to dispatch one aten op and one GEMM (its launch rows,
    host-bound); a unit then takes at least its ops' host time (sim/host_floor.py). None (the
    catalogue): no floor, the device's time alone."""

    def memory_op(self, op: str, backward: bool) -> "OpRate | None":
        """The measured rate of one memory-bound op and pass, or None (not measured)."""
        for name, forward, back in self.memory_ops:
            if name == op:
                return back if backward else forward
        return None

    def attention(self, kernel: str):
        """(overheads, seconds per score element, curve) of a measured attention kernel, or
        None."""
        for name, overheads, scores, curve in self.measured_attention:
            if name == kernel:
                return overheads, scores, curve
        return None

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
