"""Memory mechanisms measured once on the box: the bytes a step holds beyond the analytic model,
each by a microbenchmark of its own, as zerosim.calibration.fit_memory fits them.

- loss_backward: the transient of fp32 cross-entropy's backward over (tokens x vocab) logits, as
  zero_real.parts.model.Head computes the loss (logits.float(), F.cross_entropy): nll_loss's
  gradient and log_softmax's (PyTorch's tools/autograd/derivatives.yaml: nll_loss_forward,
  _log_softmax), and under 16-bit the cast back. Bytes above what forward left, per logit.
- norm_saved: what autograd saves of one norm beyond its input and weight (nn.LayerNorm: mean
  and rstd, fp32, aten's native_layer_norm; nn.RMSNorm on CPU: its composite's normalised copy
  and rstd), counted by saved-tensor hooks as parts/measure.ActivationTracker counts them, per
  token and per token x hidden element.
- attention_saved: what autograd saves of the attention core (Block.attention between the qkv
  linear and the output projection: split, view, transpose, SDPA causal through the scenario's
  ATTENTION_KERNELS) beyond the qkv output itself, per qkv element, per score (b a s^2) and per
  row (b a s): math SDPA on CPU computes a 16-bit input in fp32 (aten
  _scaled_dot_product_attention_math), so its copies and scores are kept at 4 bytes. At
  micro-batch 2: micro-batch 1 keeps the fused output instead (fit_memory's derived term).
- optimizer_grad: the fp32 gradient ShardAdam.unscaled_grad makes under mixed precision, per
  element of the shard (zero_real/parts/optim.py);
- optimizer_step: ShardAdam.step's temporaries (v.sqrt() and its division by the bias
  correction), bytes above the states, per element of the one optimizer stepping.

Bytes come from the allocator's own count: on CUDA torch.cuda.max_memory_allocated, on CPU the
profiler's memory events (c10's ProfiledCPUMemoryReporter, as parts/measure.Recorder reads them).
Each row: processes, threads, dtype, device, mechanism, counts (the units the bytes go by:
logit, element, token, token_hidden), bytes.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import sdpa_kernel

from zero_real.parts.measure import Ledger
from zero_real.parts.model import ATTENTION_KERNELS
from zero_real.parts.optim import ShardAdam

# Sizes: small to large enough that a fixed allocation (a scalar, a workspace) and the per-unit
# bytes are told apart; the loss at two vocabularies, the shard at three sizes.
LOSS_SHAPES = ((64, 256), (256, 256), (256, 1024), (1024, 1024))
OPTIMIZER_ELEMENTS = (1 << 12, 1 << 15, 1 << 18)
NORM_SHAPES = ((64, 32), (64, 128), (512, 64), (512, 256))
ATTENTION_SHAPES = ((2, 4, 16, 16), (2, 4, 64, 16), (2, 2, 32, 32), (2, 8, 128, 8))  # b, a, s, d
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _cpu_peak_above_start(fn) -> int:
    """The most bytes fn's allocations held at once above what was allocated when it began
    (the running sum of the profiler's memory events, from fn's first)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    deltas = sorted((float(e["ts"]), int(e["args"]["Bytes"])) for e in events
                    if e.get("name") == "[memory]"
                    and e.get("args", {}).get("Device Type") in (0, None))
    held = peak = 0
    for _, size in deltas:
        held += size
        peak = max(peak, held)
    return peak


def peak_above_start(fn, device: torch.device) -> int:
    """Bytes fn held at most above those allocated when it began, by the allocator's count."""
    gc.collect()
    if device.type != "cuda":
        return _cpu_peak_above_start(fn)
    torch.cuda.synchronize(device)
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - start


def loss_backward_bytes(tokens: int, vocab: int, dtype: torch.dtype, device) -> int:
    """Backward's transient of Head's loss over (tokens x vocab) logits: what it holds above
    the activations forward saved, the logits' own gradient included (no other term counts it:
    it lives until the head's linear has taken it)."""
    logits = torch.randn(tokens, vocab, dtype=dtype, device=device, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,), device=device)
    loss = F.cross_entropy(logits.float(), targets)
    return peak_above_start(loss.backward, device)


def norm_saved_bytes(norm: str, tokens: int, hidden: int, dtype: torch.dtype, device) -> int:
    """Bytes autograd saves for one norm (parts.model._norm's module) over (tokens x hidden),
    beyond its input and its weight (which other terms count)."""
    module = (nn.RMSNorm(hidden, eps=1e-5) if norm == "rmsnorm" else nn.LayerNorm(hidden, eps=1e-5))
    module = module.to(device=device, dtype=dtype)
    x = torch.randn(tokens, hidden, dtype=dtype, device=device, requires_grad=True)
    counted = {x.untyped_storage().data_ptr()} | {p.untyped_storage().data_ptr()
                                                   for p in module.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    return sum(size for ptr, size in saved.items() if ptr not in counted)


def attention_saved_bytes(batch: int, heads: int, seq: int, head_dim: int, dtype: torch.dtype,
                          device, flash: bool) -> int:
    """Bytes autograd saves of the attention core over a (batch, seq, 3 heads head_dim) qkv
    output, beyond that output's own storage (which the analytic model counts as Q, K and V)."""
    width = heads * head_dim
    qkv = torch.randn(batch, seq, 3 * width, dtype=dtype, device=device, requires_grad=True)
    saved: dict[int, int] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        q, k, v = (t.view(batch, seq, heads, head_dim).transpose(1, 2)
                   for t in qkv.split([width] * 3, dim=-1))
        with sdpa_kernel(ATTENTION_KERNELS[flash]):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    own = qkv.untyped_storage().data_ptr()
    return sum(size for ptr, size in saved.items() if ptr != own)


def _adam(elements: int, dtype: torch.dtype, device) -> ShardAdam:
    param = torch.zeros(elements, dtype=dtype, device=device)
    grad = torch.full((elements,), 1e-3, dtype=dtype, device=device)
    return ShardAdam(param, grad, world_size=1, ledger=Ledger(), ideal_elements=elements)


def optimizer_grad_bytes(elements: int, dtype: torch.dtype, device) -> int:
    """ShardAdam.unscaled_grad over a shard of `elements`: the fp32 gradient it makes under
    mixed precision (none in fp32: divided in place), alive through every optimizer's step
    (replicated.DDP.optimizer_step unscales all shards first)."""
    adam, kept = _adam(elements, dtype, device), []
    return peak_above_start(lambda: kept.append(adam.unscaled_grad(1.0)), device)


def optimizer_step_bytes(elements: int, dtype: torch.dtype, device) -> int:
    """ShardAdam.step over a shard of `elements`, its fp32 gradient already made: bytes above
    the states and that gradient."""
    adam = _adam(elements, dtype, device)
    g = adam.unscaled_grad(1.0)
    return peak_above_start(lambda: adam.step(g), device)


def measure_memory(processes: int, dtype: torch.dtype, device: torch.device,
                   norm: str, flash: bool) -> list[dict]:
    """Every mechanism's rows at its sizes (measurements["memory_mechanisms"]); `norm` the
    scenario's model.norm, `flash` its training.flash_attention."""
    common = {"processes": processes, "threads": torch.get_num_threads(),
              "dtype": DTYPE_NAMES[dtype], "device": device.type}
    rows = [{**common, "mechanism": "loss_backward", "counts": {"logit": tokens * vocab},
             "bytes": loss_backward_bytes(tokens, vocab, dtype, device)}
            for tokens, vocab in LOSS_SHAPES]
    rows += [{**common, "mechanism": "norm_saved", "norm": norm,
              "counts": {"token": tokens, "token_hidden": tokens * hidden},
              "bytes": norm_saved_bytes(norm, tokens, hidden, dtype, device)}
             for tokens, hidden in NORM_SHAPES]
    rows += [{**common, "mechanism": "attention_saved", "kernel": "flash" if flash else "math",
              "counts": {"qkv_element": b * s * 3 * a * d, "score": b * a * s * s, "row": b * a * s},
              "bytes": attention_saved_bytes(b, a, s, d, dtype, device, flash)}
             for b, a, s, d in ATTENTION_SHAPES]
    rows += [{**common, "mechanism": name, "counts": {"element": elements},
              "bytes": measure(elements, dtype, device)}
             for name, measure in (("optimizer_grad", optimizer_grad_bytes),
                                   ("optimizer_step", optimizer_step_bytes))
             for elements in OPTIMIZER_ELEMENTS]
    return rows


__all__ = ["attention_saved_bytes", "loss_backward_bytes", "measure_memory", "norm_saved_bytes", "optimizer_grad_bytes",
           "optimizer_step_bytes",
           "peak_above_start"]
