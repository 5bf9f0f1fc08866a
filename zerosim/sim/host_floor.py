"""The host-dispatch floor: a unit takes at least the host's time to dispatch its ops.

Eager PyTorch dispatches every aten op from the host (Python, the dispatcher, autograd, the
launch); the GPU runs them asynchronously, so a unit whose kernels are shorter than their
dispatch waits on the host. zero_real's Recorder synchronizes the GPU at the end of every unit's
compute (zero_real/parts/measure.py, Recorder._close_compute), so a unit's time is

    max(device seconds, host ops x seconds per op + GEMMs x seconds per GEMM dispatch)

with the seconds a box's record measured (OpModel.host_dispatch_s: the launch rows of its
microbenchmark, loops of one tiny op that the host cannot feed fast enough) and the ops counted
below. Nothing here applies without a record: the catalogue's op model has no floor.

What is not counted: Python beyond the aten call (nn.Module's __call__, zero_real's
saved-tensor and gradient hooks, the sdpa_kernel context), which the launch rows do not measure.
"""

from __future__ import annotations

# Aten ops each kernel the op model prices dispatches, (forward, backward), as zero_real's
# modules run them (zero_real/parts/model.py): counted by a TorchDispatchMode over each piece
# alone on CPU, torch 2.13, gradients bound as zero_real binds them (AccumulateGrad adds in
# place: one add_ per parameter), `python bench/h100/record.py --count-ops`; aten.detach (a
# view autograd makes of saved tensors) left out; GEMMs apart (HOST_GEMMS). The pieces sum to a
# whole Block's count (27 and 59 ops, 4 and 8 GEMMs with layer norm, GELU and bias).
HOST_OPS = {
    "linear": (3, 7),         # t, view, mm/addmm, view; backward t x4, view x2, add_ (weight)
    "linear_bias": (0, 3),    # backward: the bias's sum, a view, its add_
    "attention": (10, 10),    # split, view x3, transpose x4, SDPA; backward its grad, cat, ...
    "layernorm": (1, 2),      # native_layer_norm; backward its grad, add_ (weight)
    "norm_bias": (0, 1),      # the norm's bias's add_
    "rmsnorm": (8, 20),       # nn.RMSNorm composed: _to_copy, pow, mean, rsqrt, mul, ...
    "residual": (1, 1),       # add; backward the sum of two branches' gradients
    "gelu": (1, 1),
    "swiglu": (2, 3),         # silu, mul; backward silu_backward, mul x2
    "dropout": (4, 1),        # empty_like, bernoulli_, div_, mul; backward mul
    "rotary": (44, 26),       # _rope on queries and keys (two calls of 22 and 13)
    "embedding": (1, 2),      # token rows; backward embedding_dense_backward, add_
    "position": (3, 4),       # learned positions: arange, embedding, add; backward sum, ...
    "cross_entropy": (5, 4),  # .float(), flatten, log_softmax, nll_loss; backward the same
}
HOST_GEMMS = (1, 2)  # a linear's GEMMs: forward one; backward dX and dW


def linear_ops(m, backward: bool) -> int:
    p = 1 if backward else 0
    return HOST_OPS["linear"][p] + (HOST_OPS["linear_bias"][p] if m.bias else 0)


def memory_op_ops(m, op: str, backward: bool) -> int:
    """Host ops of one memory-bound op of layer_memory_ops (a norm is the model's kind)."""
    p = 1 if backward else 0
    if op == "norm":
        if m.norm == "rmsnorm":
            return HOST_OPS["rmsnorm"][p]
        return HOST_OPS["layernorm"][p] + (HOST_OPS["norm_bias"][p] if m.norm_biased else 0)
    return HOST_OPS[op][p]


def unit_ops(m, memory_ops, backward: bool) -> list[tuple[int, int]]:
    """(host ops, GEMMs) of the embedding, one layer and the head; `memory_ops` a layer's
    (op, ...) as op_costs.layer_memory_ops lists them."""
    p = 1 if backward else 0
    linears = 5 if m.mlp == "swiglu" else 4  # QKV, output, (gate,) up, down
    layer = (linears * linear_ops(m, backward) + HOST_OPS["attention"][p]
             + sum(memory_op_ops(m, op, backward) for op, *_ in memory_ops))
    embedding = HOST_OPS["embedding"][p] + (HOST_OPS["position"][p]
                                            if m.position == "learned" else 0)
    head = (memory_op_ops(m, "norm", backward) + HOST_OPS["linear"][p]
            + HOST_OPS["cross_entropy"][p])
    return [(embedding, 0), (layer, linears * HOST_GEMMS[p]), (head, HOST_GEMMS[p])]


def floor(model, m, t, memory_ops, forward: list[float],
          backward: list[float]) -> tuple[list[float], list[float]]:
    """Each unit's seconds (embedding, layers, head), at least its host dispatch
    (OpModel.host_dispatch_s); unchanged where the op model has none. Under activation
    checkpointing "full" a layer's backward dispatches its forward again."""
    if model.host_dispatch_s is None:
        return forward, backward
    per_op, per_gemm = model.host_dispatch_s
    fwd, bwd = ([ops * per_op + gemms * per_gemm for ops, gemms in unit_ops(m, memory_ops, b)]
                for b in (False, True))
    if t.activation_checkpointing == "full":
        bwd[1] += fwd[1]
    layers = len(forward) - 2
    return ([max(s, h) for s, h in zip(forward, [fwd[0], *[fwd[1]] * layers, fwd[2]])],
            [max(s, h) for s, h in zip(backward, [bwd[0], *[bwd[1]] * layers, bwd[2]])])
