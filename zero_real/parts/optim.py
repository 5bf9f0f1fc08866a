"""Adam (Kingma & Ba 2015) on one flat shard, in fp32 or mixed precision.

fp32: the parameter shard is its own master copy; m and v are fp32: K = 8 bytes per element.
Mixed precision (bf16/fp16 parameters and gradients): an fp32 master copy plus fp32 m and v,
K = 12 (ZeRO paper §3.1). The update follows torch.optim.Adam term by term, so one process with
torch's Adam is the reference. Gradients arrive summed over ranks; the division by the world size
(and, for fp16, by the loss scale) happens here, once, in fp32.

Offloaded (training.optimizer_offload = "cpu", ZeRO-Offload, Ren et al. 2021 §4.1): HostAdam keeps
the fp32 master, m and v and an fp32 gradient buffer of the shard in host memory (pinned when the
parameters are on a GPU), 16 bytes per element (zerosim.analytic.host_memory.offload_bytes), and steps
there; the updated master is cast back into the device's parameter shard. The arithmetic is
ShardAdam's, on the same fp32 values, so the parity with torch's Adam holds unchanged. On a
CPU-only box host and device are the same memory, and the same separate buffers and copies run.
"""

from __future__ import annotations

import math

import torch

from zero_real.parts.measure import Ledger


class ShardAdam:
    def __init__(self, param_shard: torch.Tensor, grad_shard: torch.Tensor, *, world_size: int,
                 ledger: Ledger, ideal_elements: float, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.param, self.grad = param_shard, grad_shard
        self.mixed = param_shard.dtype != torch.float32
        self.world_size, self.lr, self.betas, self.eps = world_size, lr, betas, eps
        self.master = self.make_master(ledger, ideal_elements)
        self.m = self.make_moment(ledger, ideal_elements)
        self.v = self.make_moment(ledger, ideal_elements)
        self.steps = 0

    def make_master(self, ledger: Ledger, ideal_elements: float) -> torch.Tensor:
        """The fp32 copy the update is applied to: the parameter shard itself in fp32."""
        if not self.mixed:
            return self.param
        master = self.param.float()
        ledger.add_state("master", master, ideal_elements)
        return master

    def make_moment(self, ledger: Ledger, ideal_elements: float) -> torch.Tensor:
        moment = torch.zeros_like(self.master)
        ledger.add_state("moments", moment, ideal_elements)
        return moment

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
        if self.master is not self.param:
            self.param.copy_(self.master)  # cast to the training dtype (and to the device)


def host_zeros(numel: int, device: torch.device) -> torch.Tensor:
    """An fp32 host buffer for an offloaded shard, pinned when the training device is a GPU (so
    that copies to and from it are DMA transfers); plain host memory on a CPU-only box."""
    return torch.zeros(numel, dtype=torch.float32, pin_memory=device.type == "cuda")


class HostAdam(ShardAdam):
    """ShardAdam with its states in host memory. `grad_shard` is the host fp32 buffer the stage
    reduces into (ZeRO-2 and 3 keep no gradient shard on the device); or, with `copy_grad`, the
    device's reduced gradient shard (ZeRO-1's slice of its full gradient buffer), which the step
    first copies into a host buffer of HostAdam's own, cast to fp32."""

    def __init__(self, param_shard: torch.Tensor, grad_shard: torch.Tensor, *, ledger: Ledger,
                 ideal_elements: float, copy_grad: bool = False, **kwargs):
        super().__init__(param_shard, grad_shard, ledger=ledger, ideal_elements=ideal_elements,
                         **kwargs)
        self.source = grad_shard if copy_grad else None
        if copy_grad:
            self.grad = host_zeros(grad_shard.numel(), param_shard.device)
            ledger.add_host("grads", self.grad, ideal_elements)

    def make_master(self, ledger, ideal_elements):
        master = host_zeros(self.param.numel(), self.param.device)
        master.copy_(self.param)
        ledger.add_host("master", master, ideal_elements)
        return master

    def make_moment(self, ledger, ideal_elements):
        moment = host_zeros(self.master.numel(), self.param.device)
        ledger.add_host("moments", moment, ideal_elements)
        return moment

    def unscaled_grad(self, loss_scale: float) -> torch.Tensor:
        if self.source is not None:
            self.grad.copy_(self.source)  # device to host, cast to fp32
        return self.grad.div_(self.world_size * loss_scale)


class LossScale:
    """fp16 only: a dynamic loss scale. Overflow anywhere (any rank, any shard) skips the step
    on every rank and halves the scale; bf16 and fp32 keep a scale of 1."""

    def __init__(self, precision: str, initial: float = 2.0 ** 12):
        self.enabled = precision == "fp16"
        self.value = initial if self.enabled else 1.0

    def overflowed(self, grads: list[torch.Tensor], comms, device: torch.device) -> bool:
        """`comms`: the groups whose ranks hold the rest of the gradients (the data-parallel
        group, and the tensor-parallel group under TP); `device`: where the collectives run
        (offloaded gradients are in host memory)."""
        if not self.enabled:
            return False
        bad = torch.zeros(1, device=device)
        for g in grads:
            bad += (~torch.isfinite(g)).any().float().to(device)
        for comm in comms:
            comm.all_reduce(bad, name="overflow check")
        if bad.item() > 0:
            self.value /= 2
            return True
        return False
