"""Adam (Kingma & Ba 2015) on one flat shard, in fp32 or mixed precision.

fp32: the parameter shard is its own master copy; m and v are fp32: K = 8 bytes per element.
Mixed precision (bf16/fp16 parameters and gradients): an fp32 master copy plus fp32 m and v,
K = 12 (ZeRO paper §3.1). The update follows torch.optim.Adam term by term, so one process with
torch's Adam is the reference. Gradients arrive summed over ranks; the division by the world size
(and, for fp16, by the loss scale) happens here, once, in fp32.
"""

from __future__ import annotations

import math

import torch

from zero_real.measure import Ledger


class ShardAdam:
    def __init__(self, param_shard: torch.Tensor, grad_shard: torch.Tensor, *, world_size: int,
                 ledger: Ledger, ideal_elements: float, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.param, self.grad = param_shard, grad_shard
        self.mixed = param_shard.dtype != torch.float32
        self.world_size, self.lr, self.betas, self.eps = world_size, lr, betas, eps
        if self.mixed:
            self.master = param_shard.float()  # the fp32 copy the update is applied to
            ledger.add_state("master", self.master, ideal_elements)
        else:
            self.master = param_shard
        self.m = torch.zeros_like(self.master)
        self.v = torch.zeros_like(self.master)
        ledger.add_state("moments", self.m, ideal_elements)
        ledger.add_state("moments", self.v, ideal_elements)
        self.steps = 0

    def unscaled_grad(self, loss_scale: float) -> torch.Tensor:
        """The averaged fp32 gradient (a new tensor under mixed precision, in place in fp32)."""
        g = self.grad.float() if self.mixed else self.grad
        return g.div_(self.world_size * loss_scale)

    def step(self, g: torch.Tensor) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        self.m.mul_(beta1).add_(g, alpha=1 - beta1)
        self.v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        bias1 = 1 - beta1 ** self.steps
        bias2_sqrt = math.sqrt(1 - beta2 ** self.steps)
        denom = (self.v.sqrt() / bias2_sqrt).add_(self.eps)
        self.master.addcdiv_(self.m, denom, value=-self.lr / bias1)
        if self.mixed:
            self.param.copy_(self.master)


class LossScale:
    """fp16 only: a dynamic loss scale. Overflow anywhere (any rank, any shard) skips the step
    on every rank and halves the scale; bf16 and fp32 keep a scale of 1."""

    def __init__(self, precision: str, initial: float = 2.0 ** 12):
        self.enabled = precision == "fp16"
        self.value = initial if self.enabled else 1.0

    def overflowed(self, grads: list[torch.Tensor], comm) -> bool:
        if not self.enabled:
            return False
        bad = torch.zeros(1, device=grads[0].device)
        for g in grads:
            bad += (~torch.isfinite(g)).any().float()
        comm.all_reduce(bad, name="overflow check")
        if bad.item() > 0:
            self.value /= 2
            return True
        return False
