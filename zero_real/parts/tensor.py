"""Tensor parallelism's collectives inside autograd: Megatron-LM's mappings and its
vocabulary-parallel cross-entropy, on a `Collectives` of the tensor-parallel group.

Written after megatron/core/tensor_parallel/mappings.py and cross_entropy.py (Shoeybi et al.
2019, §3; Korthikanti et al. 2022, §4.2.2 for sequence parallelism). Each mapping is a pair,
one collective forward and its conjugate backward:

    copy            identity          all-reduce       (Megatron's f: before column-parallel)
    reduce          all-reduce        identity         (g: after row-parallel)
    gather(dim)     all-gather        reduce-scatter   (the QKV output when kv < t, last dim)
    reduce_scatter  reduce-scatter    all-gather       (SP after row-parallel)
    split           own chunk         all-gather       (SP after the embedding's all-reduce)

Under SP a column-parallel linear gathers its own input (`column`, Megatron's
LinearWithGradAccumulationAndAsyncCommunication with sequence_parallel): it keeps the sequence
shard for backward, not the gathered input, and all-gathers it again there for the weight
gradient (Korthikanti et al. 2022, §4.2.2: a layer's activations s b h (34/t + 5as/(ht))).
The replicated parameters' gradients, partial under SP, are summed over the group once per
step, before the optimizer (`sum_partial_grads`, Megatron's finalize_model_grads).

Activations are [s, b, h] as in Megatron, so the sequence is dimension 0 and a rank's sequence
shard is one contiguous piece of the flat buffer the collectives move. Every collective is
recorded by the group's recorder under a name starting "tp " (its own events in the
measurement file, beside the data-parallel buckets and gathers).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd import Function

PREFIX = "tp "
"""How a tensor-parallel collective's event name starts in the measurement."""


def _gather(comm, x: torch.Tensor, dim: int, name: str) -> torch.Tensor:
    """All-gather along `dim`: the ranks' pieces concatenated in rank order."""
    front = x.movedim(dim, 0).contiguous()
    n, piece = comm.world_size, front.numel()
    out = torch.empty((n * front.shape[0], *front.shape[1:]), dtype=x.dtype, device=x.device)
    flat = out.view(-1)
    flat[comm.rank * piece:(comm.rank + 1) * piece].copy_(front.view(-1))
    comm.all_gather(flat, [piece] * n, name=PREFIX + name)
    return out.movedim(0, dim)


def _reduce_scatter(comm, x: torch.Tensor, dim: int, name: str) -> torch.Tensor:
    """Sum over ranks and keep this rank's chunk along `dim`."""
    front = x.movedim(dim, 0).contiguous().clone()  # the collective writes in place
    n = comm.world_size
    flat, piece = front.view(-1), front.numel() // n
    comm.reduce_scatter(flat, [piece] * n, name=PREFIX + name)
    mine = flat[comm.rank * piece:(comm.rank + 1) * piece].clone()
    return mine.view(front.shape[0] // n, *front.shape[1:]).movedim(0, dim)


def _all_reduce(comm, x: torch.Tensor, name: str) -> torch.Tensor:
    out = x.contiguous().clone()
    comm.all_reduce(out.view(-1), name=PREFIX + name)
    return out


def _chunk(comm, x: torch.Tensor) -> torch.Tensor:
    size = x.shape[0] // comm.world_size
    return x[comm.rank * size:(comm.rank + 1) * size].clone()


def _matrix(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


class _GatherLinear(Function):
    """SP's all-gather of a sequence shard `x` and the column-parallel linears that read it, as
    Megatron's LinearWithGradAccumulationAndAsyncCommunication (megatron/core/tensor_parallel/
    layers.py) with sequence_parallel: forward gathers and runs the GEMMs but saves the shard;
    backward gathers it again (its `total_input`) for the weight gradients and reduce-scatters
    the input gradient. `params`: each linear's weight and bias (None: no bias); several linears
    share one gather (SwiGLU's gate and up: Megatron's one fused linear_fc1)."""

    @staticmethod
    def forward(ctx, x, comm, name, *params):
        ctx.comm, ctx.name, ctx.biased = comm, name, [b is not None for b in params[1::2]]
        whole = _gather(comm, x, 0, name)
        weights = params[0::2]
        ctx.save_for_backward(x, *weights)
        return tuple(F.linear(whole, w, b) for w, b in zip(weights, params[1::2]))

    @staticmethod
    def backward(ctx, *grads):
        x, *weights = ctx.saved_tensors
        whole = _matrix(_gather(ctx.comm, x, 0, ctx.name))  # the re-gather, for the weights
        grad_whole = sum(g.matmul(w) for g, w in zip(grads, weights))
        grad_x = _reduce_scatter(ctx.comm, grad_whole, 0, ctx.name)
        out = []
        for g, biased in zip(grads, ctx.biased):
            g = _matrix(g)
            out += [g.t().matmul(whole), g.sum(0) if biased else None]
        return grad_x, None, None, *out


class _Copy(Function):
    @staticmethod
    def forward(ctx, x, comm, name):
        ctx.comm, ctx.name = comm, name
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(ctx.comm, grad, ctx.name), None, None


class _Reduce(Function):
    @staticmethod
    def forward(ctx, x, comm, name):
        return _all_reduce(comm, x, name)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class _Gather(Function):
    @staticmethod
    def forward(ctx, x, comm, dim, name):
        ctx.comm, ctx.dim, ctx.name = comm, dim, name
        return _gather(comm, x, dim, name)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter(ctx.comm, grad, ctx.dim, ctx.name), None, None, None


class _ReduceScatter(Function):
    @staticmethod
    def forward(ctx, x, comm, name):
        ctx.comm, ctx.name = comm, name
        return _reduce_scatter(comm, x, 0, name)

    @staticmethod
    def backward(ctx, grad):
        return _gather(ctx.comm, grad, 0, ctx.name), None, None


class _Split(Function):
    @staticmethod
    def forward(ctx, x, comm, name):
        ctx.comm, ctx.name = comm, name
        return _chunk(comm, x)

    @staticmethod
    def backward(ctx, grad):
        return _gather(ctx.comm, grad, 0, ctx.name), None, None


class TensorGroup:
    """One rank's tensor-parallel group: its Collectives (`comm`: t ranks, this one at
    comm.rank) and whether sequence parallelism is on. `column` and `exit` are what surrounds a
    column-parallel ... row-parallel pair (attention, MLP); `sum_partial_grads` completes, once
    per step, the gradients of the parameters every rank holds whole, which under SP each rank
    makes from its sequence shard alone."""

    def __init__(self, comm, sequence_parallel: bool):
        self.comm, self.sequence_parallel = comm, sequence_parallel
        self.rank, self.size = comm.rank, comm.world_size

    def column(self, x: torch.Tensor, linears: list, name: str) -> tuple[torch.Tensor, ...]:
        """Column-parallel linears (`linears`: (weight, bias or None) pairs) on one input: under
        SP its sequence shard, gathered by the linear (_GatherLinear); without SP the whole
        input, whose gradient is all-reduced in backward (f)."""
        if self.sequence_parallel:
            return _GatherLinear.apply(x, self.comm, name, *(t for pair in linears for t in pair))
        x = _Copy.apply(x, self.comm, name)
        return tuple(F.linear(x, w, b) for w, b in linears)

    def exit(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """After a row-parallel linear: partial sums reduced; SP reduce-scatters the sequence."""
        if self.sequence_parallel:
            return _ReduceScatter.apply(x, self.comm, name)
        return _Reduce.apply(x, self.comm, name)

    def reduce(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return _Reduce.apply(x, self.comm, name)

    def reduce_scatter(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return _ReduceScatter.apply(x, self.comm, name)

    def split(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return _Split.apply(x, self.comm, name)

    def gather(self, x: torch.Tensor, dim: int, name: str) -> torch.Tensor:
        return _Gather.apply(x, self.comm, dim, name)

    def sum_partial_grads(self, pieces: list[torch.Tensor], device: torch.device,
                          ledger) -> None:
        """Under SP, add up over the group the gradients of the replicated parameters (norms,
        row-parallel biases), which each rank made from its sequence shard alone: as Megatron's
        finalize_model_grads (megatron/core/distributed/finalize_model_grads.py,
        _allreduce_layernorm_grads; _allreduce_non_tensor_model_parallel_grads in later
        releases): once per step, after the data-parallel reduction (finish_grad_sync) and
        before the optimizer, one all-reduce of the flattened `pieces` (the stage's
        gradient storage of those parameters: whole, or the rank's data-parallel shard of them;
        every rank of the group holds the same layout and shard, so the same pieces), staged
        through `device` (the collective's memory) and copied back."""
        pieces = [p for p in pieces if p.numel()]
        if not self.sequence_parallel or not pieces:
            return
        flat = torch.cat([p.reshape(-1).to(device) for p in pieces])
        nbytes = flat.numel() * flat.element_size()
        ledger.alloc("buckets", nbytes)
        self.comm.all_reduce(flat, name=PREFIX + "sp grads")
        offset = 0
        for p in pieces:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        del flat
        ledger.free("buckets", nbytes)


class _VocabParallelCrossEntropy(Function):
    """Megatron's _VocabParallelCrossEntropy (cross_entropy.py): each rank holds the logits of
    its vocabulary rows [lo, lo + V'); three all-reduces make the loss exact on every rank: the
    max (for a stable softmax), the target's logit (only its owner has it) and the sum of exps.
    Backward is local: softmax minus the target's one-hot, on the rank's columns.

    `real`: columns of this rank that are vocabulary entries (the last ranks' padding rows, which
    make the vocabulary a multiple of t, are not). Megatron trains padded rows as entries no
    target names; they are left out of the softmax here, so that the run equals the unpadded
    single-process model, and they keep a zero gradient."""

    @staticmethod
    def forward(ctx, logits, targets, lo, real, comm):
        width = logits.shape[-1]
        logits = logits.clone()
        if real < width:
            logits[..., real:] = float("-inf")
        top = logits.max(dim=-1).values.contiguous()
        comm.all_reduce(top.view(-1), name=PREFIX + "loss max", op="max")
        logits.sub_(top.unsqueeze(-1))
        mine = (targets >= lo) & (targets < lo + width)
        local = torch.where(mine, targets - lo, torch.zeros_like(targets))
        target_logit = logits.gather(-1, local.unsqueeze(-1)).squeeze(-1)
        target_logit = torch.where(mine, target_logit, torch.zeros_like(target_logit)).contiguous()
        comm.all_reduce(target_logit.view(-1), name=PREFIX + "loss target")
        exp = logits.exp_()
        sum_exp = exp.sum(dim=-1).contiguous()
        comm.all_reduce(sum_exp.view(-1), name=PREFIX + "loss sum-exp")
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, mine, local)
        return sum_exp.log() - target_logit

    @staticmethod
    def backward(ctx, grad):
        softmax, mine, local = ctx.saved_tensors
        out = softmax.clone()
        out.scatter_add_(-1, local.unsqueeze(-1), -mine.to(out.dtype).unsqueeze(-1))
        return out.mul_(grad.unsqueeze(-1)), None, None, None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, lo: int,
                                 real: int, comm) -> torch.Tensor:
    """Per-token loss of `logits` (this rank's vocabulary columns [lo, lo + width), `real` of
    them entries) against whole-vocabulary `targets`, the same on every rank of `comm`."""
    return _VocabParallelCrossEntropy.apply(logits, targets, lo, real, comm)
