"""Compute time per operation: what one transformer layer, the embedding and the head cost on a
GPU, kernel by kernel, from the GPU's data sheet and published microbenchmarks (its record in
zerosim/hardware/gpus.py, docs/research/compute_model.md §7). Nothing here is fitted to a training run.

Every kernel costs its launch overhead plus the longer of its compute and its memory traffic:

    GEMM (M x K)(K x N)  tiles = ceil(M/tm) ceil(N/tn), waves = ceil(tiles / SMs)
                         compute = waves x 2 tm tn K / (peak x f_gemm / SMs)
                         memory  = 2 (MK + KN + MN) bytes / (HBM x f_hbm)
    flash attention      4 b s^2 h / 2 (causal) FLOPs at the FlashAttention-2 forward rate, 2.5x
                         that at its backward rate, both scaled to the measured causal rate of
                         the kernel run (training.flash_kernel) at the sequence length; under
                         FlashAttention-2 a sliding window's share of them (model.window_share)
    memory-bound op      eager factor x bytes it must read and write / (HBM x f_hbm); an RMSNorm
                         composed in fp32 (training.norm_kernel) at the bytes its kernels move

with f_gemm the best measured GEMM over peak (MAMF) times the share of it training's shapes reach
(hardware.op_model.TRAINING_GEMMS_OVER_BEST), f_hbm the best measured streaming bandwidth over the data
sheet's, and each eager op's factor measured on an H100 (EAGER_FACTORS). Backward runs two GEMMs per forward one (dX and dW, each with its own
tiles) and each elementwise op reads its input and the incoming gradient and writes the outgoing
one. Activation checkpointing recomputes the layer's forward ("full"), the attention core
("selective"), or the matmuls and elementwise ops it did not keep ("selective_op"). Tensors are
16-bit (2 bytes).

A tensor-parallel rank (parallel/tensor.py) runs its slice's shapes: every GEMM over the whole
micro-batch's tokens (sequence parallelism gathers them first) with its a/t heads' query width,
kv/t heads, f/t of the MLP and v/t of the vocabulary, so wave quantization of the smaller GEMMs
shows; the norms, residuals and dropouts on every token without sequence parallelism and on 1/t
of them with it (Korthikanti et al. 2022, §4.2.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from zerosim.analytic.window import window_share, window_skipped
from zerosim.analytic.tensor_comm import DGRAD, WGRAD, window_linears
from zerosim.errors import InputError
from zerosim.contract import BLOCK, EMBEDDING, HEAD
from zerosim.hardware import DEVICES, Gpu, OpModel
from zerosim.hardware.op_model import MIN_PASSES
from zerosim.scenario.model_table import layer_windows
from zerosim.sim import host_floor

BYTES = 2  # bf16 / fp16 activations and weights
FP32 = 4
# Kernels a layer launches besides its GEMMs and attention, forward: two norms, two residual
# adds, the MLP activation, rotary embedding (rope) and two dropouts (when present).
FLASH_BACKWARD_FLOPS = 2.5  # FlashAttention-2/3 papers' convention: backward = 2.5 x forward
# An eager fp32 softmax over 16-bit scores (training.softmax_kernel = "eager"; Megatron's
# forward_torch_softmax, megatron/model/fused_softmax.py lines 192-205, derived kernel by kernel
# in docs/research/fsdp1_amp_v100.md C.5): forward .float() 2 + 4, scale 4 + 4, masked_fill
# 4 + 1 + 4, softmax 4 + 4, .half() 4 + 2 = 37 bytes per score in 5 kernels; backward, their
# gradients in reverse: .half()'s 2 + 4, softmax's 4 + 4 + 4 (gradient, output, result),
# masked_fill's 4 + 1 + 4, scale's 4 + 4, .float()'s 4 + 2 = 41 bytes in 5 kernels (derived here
# the same way).
EAGER_SOFTMAX_BYTES = (37, 41)
EAGER_KERNELS = 5


@dataclass(frozen=True)
class Kernels:
    """Seconds of a pass and the kernels it launched."""

    seconds: float = 0.0
    kernels: int = 0

    def __add__(self, other: "Kernels") -> "Kernels":
        return Kernels(self.seconds + other.seconds, self.kernels + other.kernels)


class OpCosts:
    """The per-op costs of one GPU (a record with an op model)."""

    def __init__(self, spec: Gpu, hbm_GBps: float, power_scale: float = 1.0,
                 fp32_matmuls: bool = False) -> None:
        self.spec = spec
        """The GPU's record (zerosim.hardware): its data sheet and its op model."""
        self.model = model = spec.op_model
        self.power_scale = power_scale
        """Compute-bound throughput under a power limit over the default's (cluster key)."""
        # fp32 matmuls (training.precision = "fp32" without autocast) run on the FP32 units:
        # PyTorch leaves TF32 off for matmuls (torch.backends.cuda.matmul.allow_tf32 = False
        # since 1.12, docs "TensorFloat-32 (TF32) on Ampere (and later) devices"). The tensor
        # cores' achievable fraction stands in for cuBLAS SGEMM's (an assumption: no FP32 GEMM
        # microbenchmark is in the records).
        peak = (spec.peak_fp32_tflops if fp32_matmuls and spec.peak_fp32_tflops
                else spec.peak_dense_16bit_tflops)
        self.flops = (peak * 1e12 * model.gemm_achievable_fraction
                      * model.training_shapes_over_best * power_scale)
        self.bandwidth = hbm_GBps * 1e9 * model.hbm_achievable_fraction
        self.launch = (model.kernel_launch_us or 0.0) * 1e-6
        self.gemm_launch = self.launch if model.gemm_launch_us is None else (
            model.gemm_launch_us * 1e-6)

    def gemm(self, m: int, n: int, k: int, batch: int = 1) -> Kernels:
        """`batch` (m x k)(k x n) products in one launch: wave-quantized compute or memory."""
        tm, tn = self.model.gemm_tile
        tiles = batch * math.ceil(m / tm) * math.ceil(n / tn)
        waves = math.ceil(tiles / self.spec.sm_count)
        compute = waves * 2 * tm * tn * k * self.spec.sm_count / self.flops
        memory = batch * BYTES * (m * k + k * n + m * n) / self.bandwidth
        return Kernels(self.gemm_launch + max(compute, memory), 1)

    def linear(self, tokens: int, n_in: int, n_out: int, backward: bool) -> Kernels:
        """A linear layer: forward (tokens x n_in)(n_in x n_out); backward dX and dW; and what a
        box's record measured beyond its GEMMs (OpModel.linear_overhead_s)."""
        if not backward:
            out = self.gemm(tokens, n_out, n_in)
        else:
            out = self.gemm(tokens, n_in, n_out) + self.gemm(n_in, n_out, tokens)
        extra = self.model.linear_overhead_s[1 if backward else 0]
        return Kernels(out.seconds + extra, out.kernels) if extra else out

    def measured(self, op: str, nbytes: float, backward: bool) -> Kernels | None:
        """A memory-bound op moving (at least) nbytes at a box's measured rate for it
        (OpModel.memory_ops), or None where its record has none."""
        rate = self.model.memory_op(op, backward)
        if rate is None:
            return None
        return Kernels(rate.overhead_s + nbytes / rate.per_s, 1)

    def traffic(self, nbytes: float, kernels: int = 1) -> Kernels:
        """Memory-bound kernels moving nbytes in all."""
        return Kernels(kernels * self.launch + nbytes / self.bandwidth, kernels)

    def flash(self, b: int, s: int, h: int, backward: bool,
              kernel: str = "fa2", share: float = 1.0) -> Kernels | None:
        """Causal flash attention, or None where FlashAttention does not run (Volta). The
        FlashAttention-2 best forward and backward rates, scaled to the measured causal rate of
        `kernel` at this sequence length (flash_scale): an older kernel keeps FA2's split of
        time between forward and backward. `share`: what a sliding window keeps of them."""
        model = self.model
        if model.flash_fwd_tflops is None or model.flash_bwd_tflops is None:
            return None
        forward = 4 * b * s * s * h / 2 * share  # QK^T and AV over half the pairs (causal)
        scale = flash_scale(model, s, kernel) * self.power_scale
        if backward:
            return Kernels(self.launch + FLASH_BACKWARD_FLOPS * forward
                           / (model.flash_bwd_tflops * 1e12 * scale), 1)
        return Kernels(self.launch + forward / (model.flash_fwd_tflops * 1e12 * scale), 1)


def flash_scale(model: OpModel, seq_len: int, kernel: str = "fa2") -> float:
    """The kernel's measured causal forward + backward rate at seq_len (OpModel.flash_curve,
    interpolated in log2 of the length, held at the ends) over the rate FlashAttention-2's best
    forward and backward rates give together: 3.5 / (1/fwd + 2.5/bwd). 1 where FA2's curve is
    unknown (its flat rates apply); an older kernel without a curve of its own is refused."""
    curve = model.flash_curve(kernel)
    if not curve:
        if kernel != "fa2":
            raise InputError(f"training.flash_kernel = {kernel!r}: no published rate of that "
                             f"kernel on this GPU (zerosim/hardware/gpus.py)")
        return 1.0
    best = (1 + FLASH_BACKWARD_FLOPS) / (1 / model.flash_fwd_tflops
                                         + FLASH_BACKWARD_FLOPS / model.flash_bwd_tflops)
    return by_log2_length(curve, seq_len) / best


def by_log2_length(curve, seq_len: int) -> float:
    """A rate measured at some sequence lengths, ((length, rate), ...) increasing, at seq_len:
    interpolated in log2 of the length, held at the ends."""
    x = math.log2(seq_len)
    points = [(math.log2(n), rate) for n, rate in curve]
    if x <= points[0][0]:
        return points[0][1]
    for (x0, r0), (x1, r1) in zip(points, points[1:]):
        if x <= x1:
            return r0 + (r1 - r0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def op_costs(cluster, fp32_matmuls: bool = False) -> OpCosts | None:
    """The per-op model of the cluster's GPU (its matmuls in fp32 where `fp32_matmuls`), or None
    (the CPU box, a GPU without an op model)."""
    gpu = DEVICES.get(cluster.gpu)
    if gpu is None or gpu.op_model is None:
        return None
    return OpCosts(gpu, cluster.hbm_bandwidth_GBps, cluster.power_scale, fp32_matmuls)


def attention_core(costs: OpCosts, m, t, backward: bool, window: int | None = None) -> Kernels:
    """QK^T, softmax and AV of one layer: flash where it runs, else two batched GEMMs per head
    and the s x s scores through HBM (fp16 scores, a softmax reading and writing them). A
    sliding `window` shrinks a kernel that skips what it masks (window_skipped) alone."""
    b, s = t.micro_batch, t.seq_len
    share = window_share(s, window) if window is not None and window_skipped(t) else 1.0
    measured = costs.model.attention("flash" if t.flash_attention else "math")
    if measured is not None:
        return measured_attention(measured, b, s, m.q_width // m.head_dim, m.head_dim,
                                  backward, share)
    if t.flash_attention:
        flash = costs.flash(b, s, m.q_width, backward, t.flash_kernel, share)
        if flash is not None:
            return flash
    d, heads = m.head_dim, m.heads
    batch = b * heads
    passes = 2 if backward else 1  # backward: the same shapes twice (dQ/dK, dV/dP)
    gemms = Kernels()
    for _ in range(passes):
        gemms += costs.gemm(s, s, d, batch) + costs.gemm(s, d, s, batch)
    if t.softmax_kernel == "eager":
        softmax = costs.traffic(batch * s * s * EAGER_SOFTMAX_BYTES[backward], EAGER_KERNELS)
    else:
        softmax = costs.traffic(batch * s * s * BYTES * (3 if backward else 2))
    return gemms + softmax


def measured_attention(measured, b: int, s: int, heads: int, head_dim: int,
                       backward: bool, share: float = 1.0) -> Kernels:
    """An attention core at a box's measured rates (OpModel.measured_attention): its overhead per
    call, its b x heads x s^2 score elements at the seconds each took (the math kernel's
    scores, mask and softmax through memory), and its causal FLOPs (4 b s^2 heads head_dim / 2
    forward, 2.5x that backward, whatever the kernel computes; a sliding window's `share`) at
    the rate measured at this sequence length."""
    overheads, scores, curve = measured
    p = 1 if backward else 0
    flops = 2 * b * s * s * heads * head_dim * share * (FLASH_BACKWARD_FLOPS if backward else 1)
    rate = by_log2_length([(point[0], point[1 + p]) for point in curve], s)
    return Kernels(overheads[p] + scores[p] * b * heads * s * s + flops / (rate * 1e12), 1)


# Eager PyTorch's memory-bound ops move more than the bytes they must read and write: several
# kernels per op with intermediates in HBM (rotary as mul, cat, mul, add), reductions that read
# twice. Each factor is the op's measured time over the time a plain copy of its minimum bytes
# takes on the same GPU, from our H100 microbenchmark ([H100-MB] in hardware/gpus.py; rows
# "memory_bound", against its "copy" row, 3009 GB/s; backward = the fwd_bwd row less the fwd
# row); tests/zerosim/test_op_costs.py recomputes them from the committed file. They are applied
# on every GPU (proxy: the same kernels, so the same extra passes over HBM).
EAGER_FACTORS = {
    # op: (forward, backward), minimum bytes per element in the comments (16-bit elements)
    "norm": (1.483, 2.296),      # rms_norm: fwd x in, y out; bwd x, dy in, dx out
    "swiglu": (1.652, 1.774),    # silu(a) * b: fwd a, b in, y out; bwd a, b, dy in, da, db out
    "single": (1.172, 1.172),    # one elementwise kernel (residual add, read 2 write 1); GELU,
                                 # dropout and the gradient sum at a residual branch as proxy
    "rotary": (8.637, 8.655),    # x * cos + rotate_half(x) * sin: x in, y out (+ cos, sin)
}
# Cross-entropy over 16-bit logits (F.cross_entropy): bytes of a plain copy that its measured time
# is worth, per logit (the minimum is 2 forward, 4 backward).
CROSS_ENTROPY_BYTES = (8.04, 10.02)
# training.norm_kernel = "composite_fp32": RMSNorm as Meta's Llama reference, torchtitan's
# norm_type "rmsnorm" and Hugging Face's LlamaRMSNorm write it (x.float(), pow, mean, rsqrt, mul,
# type_as, mul by the weight). (bytes per element of its input, kernels), forward and backward
# (with the weight's gradient), from the aten dispatch trace bench/eager_bytes.py committed in
# profiles/eager_bytes_2026-11-26.json (torch 2.13; per-token terms of 4/h bytes at h = 1024):
# each kernel reading its distinct inputs once and writing its outputs, at streaming speed, no
# measured slowness factor (the fused norm's own: EAGER_FACTORS). The same count gives SwiGLU
# 1.667 / 1.800 times its minimum bytes, which our H100 measured at 1.652 / 1.774, and rotate-half
# rotary, whose cos and sin broadcast over the heads, 1.6x less than was measured.
COMPOSITE_RMSNORM = ((36.02, 8), (92.04, 16))


def elementwise_bytes(m, t, backward: bool) -> tuple[float, int]:
    """Bytes and kernels of one layer's memory-bound ops, each the minimum it must move times its
    eager factor (EAGER_FACTORS; the norms: norm_traffic). Forward: two norms, two residual adds,
    the MLP activation, rotary on queries and keys, two dropouts; backward: their gradients, the
    residual ones being the sum of the two branches' gradients."""
    tokens, h, f = t.micro_batch * t.seq_len, m.hidden, m.ffn_width
    kv = m.n_kv_heads * m.head_dim
    pass_ = 1 if backward else 0
    split = tokens // m.sequence_shards  # the tokens a rank's norms, residuals and dropouts see
    norm_bytes, norm_kernels = norm_traffic(t, split * h, backward)
    residuals = 2 * 3 * split * h * EAGER_FACTORS["single"][pass_]
    if m.mlp == "swiglu":
        act = (5 if backward else 3) * tokens * f * EAGER_FACTORS["swiglu"][pass_]
    else:
        act = (3 if backward else 2) * tokens * f * EAGER_FACTORS["single"][pass_]
    rope = 0.0
    if m.position == "rope":  # queries and keys in and out, each reading cos and sin
        rope = (2 * (tokens * m.q_width + tokens * kv) + 2 * 2 * tokens * m.head_dim
                ) * EAGER_FACTORS["rotary"][pass_]
    dropout = 0.0
    if m.dropout:
        dropout = 2 * (3 if backward else 2) * split * h * EAGER_FACTORS["single"][pass_]
    kernels = 3 + 2 * norm_kernels + (1 if rope else 0) + (2 if dropout else 0)
    return 2 * norm_bytes + BYTES * (residuals + act + rope + dropout), kernels


def norm_traffic(t, elements: int, backward: bool) -> tuple[float, int]:
    """Bytes and kernels of one norm over `elements`: fused (one kernel moving its minimum bytes,
    x in and y out, + dy in backward, times its measured eager factor), or RMSNorm composed in
    fp32 (training.norm_kernel, COMPOSITE_RMSNORM)."""
    if t.norm_kernel == "composite_fp32":
        per_element, kernels = COMPOSITE_RMSNORM[1 if backward else 0]
        return elements * per_element, kernels
    factor = EAGER_FACTORS["norm"][1 if backward else 0]
    return BYTES * (3 if backward else 2) * elements * factor, 1


# Each op's factor in EAGER_FACTORS, where a record has no rate of its own for it.
_CATALOGUE = {"norm": "norm", "residual": "single", "gelu": "single", "dropout": "single",
              "swiglu": "swiglu", "rotary": "rotary"}


def min_bytes(op: str, backward: bool, tokens: int, width: int, head_dim: int = 0) -> float:
    """The minimum bytes of one memory-bound op (MIN_PASSES); rotary over the queries' and keys'
    width (x in, y out) reads cos and sin of head_dim per token as well."""
    if op == "rotary":
        return BYTES * (2 * tokens * width + 2 * 2 * tokens * head_dim)
    return BYTES * MIN_PASSES[op][1 if backward else 0] * tokens * width


def memory_op(costs: OpCosts, t, op: str, backward: bool, tokens: int, width: int,
              head_dim: int = 0) -> Kernels:
    """One memory-bound op: at the box's measured rate where its record has one, else its
    minimum bytes times the catalogue's eager factor over the streaming bandwidth."""
    if op == "norm" and t.norm_kernel == "composite_fp32":
        return costs.traffic(*norm_traffic(t, tokens * width, backward))
    nbytes = min_bytes(op, backward, tokens, width, head_dim)
    measured = costs.measured(op, nbytes, backward)
    if measured is not None:
        return measured
    p = 1 if backward else 0
    if op == "cross_entropy":
        return costs.traffic(tokens * width * CROSS_ENTROPY_BYTES[p])
    factor = EAGER_FACTORS[_CATALOGUE[op]][p] if op in _CATALOGUE else 1.0
    return costs.traffic(nbytes * factor)


def layer_memory_ops(m, t) -> list[tuple[str, int, int, int]]:
    """A layer's memory-bound ops as (op, tokens, width, head_dim), forward order: two norms,
    two residual adds, the MLP's activation, rotary on queries and keys, two dropouts."""
    tokens, h = t.micro_batch * t.seq_len, m.hidden
    split = tokens // m.sequence_shards  # the tokens a rank's norms, residuals and dropouts see
    ops = [("norm", split, h, 0)] * 2 + [("residual", split, h, 0)] * 2
    ops.append(("swiglu" if m.mlp == "swiglu" else "gelu", tokens, m.ffn_width, 0))
    if m.position == "rope":
        ops.append(("rotary", tokens, m.q_width + m.n_kv_heads * m.head_dim, m.head_dim))
    if m.dropout:
        ops += [("dropout", split, h, 0)] * 2
    return ops


def memory_bound(costs: OpCosts, m, t, backward: bool) -> Kernels:
    """A layer's memory-bound ops: op by op at a box's measured rates, or (the catalogue) their
    bytes summed at the eager factors (elementwise_bytes)."""
    if not costs.model.memory_ops:
        return costs.traffic(*elementwise_bytes(m, t, backward))
    out = Kernels()
    for op, tokens, width, head_dim in layer_memory_ops(m, t):
        out += memory_op(costs, t, op, backward, tokens, width, head_dim)
    return out


def layer(costs: OpCosts, m, t, backward: bool, window: int | None = None) -> Kernels:
    """One transformer layer, forward or backward (the gradient only, no recompute)."""
    tokens, h, f, q = t.micro_batch * t.seq_len, m.hidden, m.ffn_width, m.q_width
    # Q, K, V: the columns the rank holds (kv_width: kv/t heads, or 1/t of the whole K and V
    # when kv < t, whose output Megatron gathers to attend with one whole head)
    out = costs.linear(tokens, h, q + 2 * m.kv_width, backward)
    out += attention_core(costs, m, t, backward, window)
    out += costs.linear(tokens, q, h, backward)                    # attention output
    ups = 2 if m.mlp == "swiglu" else 1                            # gate and up, or up
    for _ in range(ups):
        out += costs.linear(tokens, h, f, backward)
    out += costs.linear(tokens, f, h, backward)                    # down
    return out + memory_bound(costs, m, t, backward)


def head(costs: OpCosts, m, t, backward: bool) -> Kernels:
    """The final norm, the logits GEMM and cross-entropy over the vocabulary, each memory-bound
    op at its eager cost (EAGER_FACTORS, CROSS_ENTROPY_BYTES)."""
    tokens, h, v = t.micro_batch * t.seq_len, m.hidden, m.vocab
    norm = memory_op(costs, t, "norm", backward, tokens // m.sequence_shards, h)
    loss = memory_op(costs, t, "cross_entropy", backward, tokens, v)
    return costs.linear(tokens, h, v, backward) + norm + loss


def embedding(costs: OpCosts, m, t, backward: bool) -> Kernels:
    """A gather of rows forward, a scatter-add of their gradient backward."""
    return memory_op(costs, t, "embedding", backward, t.micro_batch * t.seq_len, m.hidden)


def selective_op_recompute(costs: OpCosts, m, t) -> Kernels:
    """What torchtitan's per-op policy re-runs in backward: the matmuls whose outputs it did
    not keep (wk, wo, and w3 or the GeLU down projection) and every elementwise op."""
    tokens, h, f = t.micro_batch * t.seq_len, m.hidden, m.ffn_width
    kv = m.kv_width
    out = costs.linear(tokens, h, kv, False) + costs.linear(tokens, m.q_width, h, False)
    out += costs.linear(tokens, h, f, False) if m.mlp == "swiglu" else costs.linear(
        tokens, f, h, False)
    return out + memory_bound(costs, m, t, False)


def unit_seconds(costs: OpCosts, m, t) -> tuple[list[float], list[float]]:
    """Forward and backward seconds per gather unit (embedding, layers, head), backward with the
    recomputation activation checkpointing asks for; each at least the host's time to dispatch
    its ops where a box's record measured it (sim/host_floor.py); a windowed layer apart."""
    windows = layer_windows(m) if window_skipped(t) else (None,) * m.layers
    seconds = {window: layer_seconds(costs, m, t, window) for window in set(windows)}
    forward = ([embedding(costs, m, t, False).seconds] + [seconds[w][0] for w in windows]
               + [head(costs, m, t, False).seconds])
    backward = ([embedding(costs, m, t, True).seconds] + [seconds[w][1] for w in windows]
                + [head(costs, m, t, True).seconds])
    forward, backward = host_floor.floor(costs.model, m, t, layer_memory_ops(m, t), forward,
                                         backward)
    return unit_host_work(costs.model, m.layers, forward, backward)


def layer_seconds(costs: OpCosts, m, t, window: int | None) -> tuple[float, float]:
    """A layer's forward and backward seconds, backward with its recomputation."""
    forward_layer = layer(costs, m, t, False, window)
    recompute = {"full": forward_layer, "selective": attention_core(costs, m, t, False, window),
                 "selective_op": selective_op_recompute(costs, m, t),
                 "none": Kernels()}[t.activation_checkpointing]
    return forward_layer.seconds, (layer(costs, m, t, True, window) + recompute).seconds


def unit_host_work(model: OpModel, layers: int, forward: list[float],
                   backward: list[float]) -> tuple[list[float], list[float]]:
    """What a box's record measured per unit beyond its ops, added to each unit: one autograd
    call per unit's backward (OpModel.backward_call_s) and the unit's own host work
    (OpModel.unit_overhead_s: module calls, views, hooks); nothing for a catalogue GPU."""
    if model.backward_call_s:
        backward = [s + model.backward_call_s for s in backward]
    if model.unit_overhead_s:
        extra = {kind: (fwd, bwd) for kind, fwd, bwd in model.unit_overhead_s}
        kinds = [EMBEDDING, *[BLOCK] * layers, HEAD]
        forward = [s + extra.get(k, (0.0, 0.0))[0] for s, k in zip(forward, kinds)]
        backward = [s + extra.get(k, (0.0, 0.0))[1] for s, k in zip(backward, kinds)]
    return forward, backward


def fsdp2_copies(costs: OpCosts, gathered: list[int], reduced: list[int], reduce_bytes: int,
                 regather: bool = True) -> tuple[list[float], list[float]]:
    """What FSDP2 (ZeRO-3) copies on the compute stream around its collectives, per unit, as
    memory-bound traffic (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): after each
    all-gather, split_with_sizes_copy out of the gathered buffer into the unsharded parameters
    (read and write 16-bit: 4 bytes per gathered element), once in forward and, when backward
    gathers again (`regather`: ZeRO-3, not reshard_after_forward=False), in backward; before
    each reduce-scatter, chunk_cat of the 16-bit gradients into the reduce
    buffer (read 2, write reduce_bytes). The shard-sized copies (the gather's input, the
    reduced shard into the gradient) are 1/N of these and left out."""
    out = [costs.traffic(BYTES * 2 * g).seconds for g in gathered]
    back = [(o if regather else 0.0) + costs.traffic((BYTES + reduce_bytes) * r).seconds
            for o, r in zip(out, reduced)]
    return out, back


def linear_gemms(costs: OpCosts, m, t) -> dict[tuple[str, str], float]:
    """Seconds of the backward GEMMs tensor parallelism's async collectives run beside
    (analytic/tensor_comm.py's windows): each of QKV's, the MLP's first projection(s)' and the
    output layer's input gradient (dgrad) and weight gradient (wgrad), as linear() prices them."""
    tokens, h = t.micro_batch * t.seq_len, m.hidden
    out = {}
    for name, (width, count) in window_linears(m).items():
        out[name, DGRAD] = count * costs.gemm(tokens, h, width).seconds
        out[name, WGRAD] = count * costs.gemm(h, width, tokens).seconds
    return out
