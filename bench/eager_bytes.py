"""Bytes an eager PyTorch composition moves through memory, counted from its aten dispatch trace:
every aten op that runs a kernel reads each of its distinct tensor inputs once (a broadcast
operand at its own size) and writes its outputs (or the argument it mutates in place), as one
CUDA kernel does at least. Views and bare allocations move nothing. Forward, and the backward
autograd runs for the input and the module's parameters, parameters in bf16 as FSDP's mixed
precision gathers them.

    python bench/eager_bytes.py [--out profiles/eager_bytes.json]

Runs on the CPU (the same aten ops run on CUDA: one kernel each). The op model takes the
composite RMSNorm's bytes from the committed file (zerosim/sim/op_costs.py). SwiGLU and
rotate-half rotary are traced to check the method against what our H100 measured for them
(profiles/h100/microbench_2026-11-24.json): it holds for SwiGLU, and counts too few bytes for
rotary, whose small cos and sin are broadcast over the heads.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

TOKENS, HIDDEN = 4096, 1024  # any shape: the counts are per element of the input


ALLOCATING = ("aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty")


def touched_bytes(t: torch.Tensor) -> int:
    """The bytes a kernel reads of `t` at least: its distinct elements (a broadcast, stride-0
    dimension counts once)."""
    distinct = 1
    for size, stride in zip(t.shape, t.stride()):
        distinct *= size if stride else 1
    return distinct * t.element_size()


def _distinct(tensors: list) -> list:
    seen, out = set(), []
    for t in tensors:
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


class Traffic(TorchDispatchMode):
    """Per aten op that runs a kernel: (name, bytes read, bytes written). Each distinct input is
    read once (a broadcast operand at its own size), each output written once, an argument the
    op mutates written too; views and bare allocations move nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func)
        if name.rsplit(".", 1)[0] in ALLOCATING:
            return out
        mutated = [a for a, arg in zip(args, func._schema.arguments) if isinstance(
            a, torch.Tensor) and arg.alias_info is not None and arg.alias_info.is_write]
        ins = _distinct([a for a in tree_flatten((args, kwargs))[0]
                         if isinstance(a, torch.Tensor)])
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        storages = {a.untyped_storage().data_ptr() for a in ins}
        if not mutated and outs and all(
                o.untyped_storage().data_ptr() in storages for o in outs):
            return out  # a view (detach, expand, view_as_complex...): no kernel, no traffic
        written = mutated or outs
        self.ops.append((name, sum(touched_bytes(a) for a in ins),
                         sum(touched_bytes(o) for o in _distinct(written))))
        return out


class CompositeRMSNorm(torch.nn.Module):
    """RMSNorm as Meta's Llama reference, torchtitan's norm_type "rmsnorm" and Hugging Face's
    LlamaRMSNorm write it: normalised in fp32, cast back, scaled by the weight."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm(x.float()).type_as(x) * self.weight


def trace(module: torch.nn.Module, inputs: int, shape: tuple = (TOKENS, HIDDEN)) -> dict:
    """Forward and backward traffic per element of the first input, with the op lists."""
    module = module.to(torch.bfloat16)
    xs = [torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True) for _ in range(inputs)]
    wanted = [*xs, *module.parameters()]
    with Traffic() as forward:
        y = module(*xs)
    grad = torch.randn_like(y)
    with Traffic() as backward:
        torch.autograd.grad(y, wanted, grad)
    elements = xs[0].numel()
    out = {}
    for name, mode in (("forward", forward), ("backward", backward)):
        out[name] = {"bytes_per_element": sum(r + w for _, r, w in mode.ops) / elements,
                     "kernels": len(mode.ops),
                     "ops": [[op, r / elements, w / elements] for op, r, w in mode.ops]}
    return out


class SwiGLU(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.silu(a) * b


class RotateHalf(torch.nn.Module):
    """Rotary embedding as bench/h100/microbench.py timed it, on (tokens, heads, head_dim)
    with cos and sin of (tokens, 1, head_dim) broadcast over the heads."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cos = torch.ones(x.shape[0], 1, x.shape[2], dtype=x.dtype)
        sin = torch.ones_like(cos)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the JSON here (default: print it)")
    args = parser.parse_args(argv)
    result = {
        "meta": {"torch": torch.__version__, "python": platform.python_version(),
                 "device": "cpu (aten dispatch trace)", "tokens": TOKENS, "hidden": HIDDEN,
                 "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
                     timespec="seconds"),
                 "rule": "bytes = sum over aten ops that run a kernel of distinct input bytes "
                         "(stride-0 dimensions once) + bytes written (outputs, or arguments "
                         "mutated in place), per element of the first input; parameters bf16"},
        "composite_rmsnorm": trace(CompositeRMSNorm(HIDDEN), 1),
        "swiglu": trace(SwiGLU(), 2),
        "rotate_half": trace(RotateHalf(), 1, (TOKENS, HIDDEN // 128, 128)),
    }
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    for name in ("composite_rmsnorm", "swiglu", "rotate_half"):
        print(f"{name}: forward {result[name]['forward']['bytes_per_element']:.2f}, backward "
              f"{result[name]['backward']['bytes_per_element']:.2f} bytes per element",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
