"""What hybrid sharding and optimizer offload change in a stage, in one place: who shares a shard,
where the gradient shard and the optimizer live, and when the replicas' gradients are summed.

Hybrid sharding (parallelism.shard_group = g, stages 1-3; FSDP2's HSDP, MiCS): the stage's flat
buffers are sharded over its shard group of g ranks as if that were the world (reduce-scatters
and all-gathers stay inside it); the rank's reduced gradient piece is then all-reduced across its
replica group, the N/g ranks holding the same shard: as each piece is reduced, in every
micro-step (replica_allreduce = "every_micro_step", FSDP2's HSDP), or in the last micro-step
only, each region of the shard with what the earlier micro-steps accumulated in it
("once_per_step", MiCS: at the accumulation boundary), as zerosim's stages/family.py sends them.
Either way Adam steps the sum over all N ranks, averaged by N.

Optimizer offload (training.optimizer_offload = "cpu", stages 1-3; ZeRO-Offload): the gradient
shard Adam steps lives in host memory, fp32 (stages 2-3 add each reduced piece into it, so no
gradient shard stays on the device; stage 1 keeps its full gradient buffer and the step copies
its shard out), and HostAdam steps there (zero_real.parts.optim).
"""

from __future__ import annotations

import torch

from zero_real.parts.collectives import shard_groups_of
from zero_real.parts.optim import HostAdam, ShardAdam, host_zeros


def accumulate(shard: torch.Tensor, piece: torch.Tensor) -> None:
    """Add a reduced gradient piece into (its part of) the gradient shard: in place on the
    device, or copied out and cast to fp32 into the host shard under offload."""
    shard.add_(piece.to(device=shard.device, dtype=shard.dtype))


class Sharding:
    def __init__(self, comm, scenario, stage: int, world_size: int, device: torch.device,
                 ledger):
        training, p = scenario.training, scenario.parallelism
        g = p.shard_group if p.shard_group and stage >= 1 else world_size
        groups = shard_groups_of(comm, g)
        self.shard, self.replica = groups.shard, groups.replica
        self.every_micro_step = p.replica_allreduce == "every_micro_step"
        self.offload = stage >= 1 and training.optimizer_offload == "cpu"
        self.world_size = world_size  # Adam averages the gradient summed over every rank
        self.device, self.ledger = device, ledger
        self.host_grads: list[torch.Tensor] = []

    def grad_shard(self, numel: int, dtype: torch.dtype, ideal_elements: float) -> torch.Tensor:
        """A persistent gradient shard, zeroed: on the device in the training dtype, or in host
        memory in fp32 under offload."""
        if self.offload:
            shard = host_zeros(numel, self.device)
            self.ledger.add_host("grads", shard, ideal_elements)
            self.host_grads.append(shard)
        else:
            shard = torch.zeros(numel, dtype=dtype, device=self.device)
            self.ledger.add_state("grads", shard, ideal_elements)
        return shard

    def optimizer(self, param: torch.Tensor, grad: torch.Tensor, ideal_elements: float,
                  lr: float) -> ShardAdam:
        """Adam on `param` with gradient `grad`; offloaded, a gradient that is not one of this
        Sharding's host shards is copied into one as the step begins."""
        kwargs = dict(world_size=self.world_size, ledger=self.ledger,
                      ideal_elements=ideal_elements, lr=lr)
        if not self.offload:
            return ShardAdam(param, grad, **kwargs)
        copy = not any(grad is host for host in self.host_grads)
        return HostAdam(param, grad, copy_grad=copy, **kwargs)

    def reduced(self, piece: torch.Tensor, name: str) -> None:
        """ZeRO-1: this rank's piece of a bucket just reduce-scattered in the shard group, in
        place in the full gradient buffer, summed over the replica group (ZeRO-1 reduces in the
        last micro-step only, which both replica_allreduce policies reduce in)."""
        if self.replica is not None:
            self._replica_sum(piece, name)

    def keep(self, piece: torch.Tensor, shard: torch.Tensor, name: str, *, last_micro: bool,
             fresh: bool = True) -> None:
        """ZeRO-2 and 3: add `piece`, this rank's part of a gradient just reduce-scattered in
        the shard group, into `shard`, its region of the gradient shard, summed over the replica
        group: the piece itself under every_micro_step; under once_per_step, in the last
        micro-step, the region with what earlier micro-steps accumulated there, once (`fresh`:
        the region's first reduction in this micro-step; a ZeRO-2 bucket reduced early comes
        back for the rest of its elements, which are then summed on their own)."""
        if self.replica is None or not (self.every_micro_step or last_micro):
            accumulate(shard, piece)
        elif self.every_micro_step or not fresh:
            self._replica_sum(piece, name)
            accumulate(shard, piece)
        else:
            accumulate(shard, piece)
            self._replica_sum(shard, name)

    def _replica_sum(self, t: torch.Tensor, name: str) -> None:
        """All-reduce `t` across the replica group; through a device buffer where `t` is in host
        memory and the device is a GPU (NCCL reduces device memory)."""
        if not t.numel():
            return  # the replica group's ranks hold the same shard: all of them skip it
        name = f"{name} (replicas)"
        if t.device == self.device:
            self.replica.all_reduce(t, name=name)
            return
        staged = t.to(self.device)
        nbytes = staged.numel() * staged.element_size()
        self.ledger.alloc("buckets", nbytes)
        self.replica.all_reduce(staged, name=name)
        t.copy_(staged)
        del staged
        self.ledger.free("buckets", nbytes)
