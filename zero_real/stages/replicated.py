"""DDP, ZeRO-1 and ZeRO-2: the stages whose parameters stay whole on every rank, in one flat
buffer (the overview of all four is zero_real.stages)."""

from __future__ import annotations

import torch

from zero_real.parts.flat import FlatParams
from zero_real.parts.measure import ActivationTracker
from zero_real.parts.optim import LossScale, ShardAdam
from zero_real.stages.sharding import Sharding
from zerosim.contract import STAGE2_LIVE_BUCKETS
from zerosim.units import MiB

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class DDP:
    stage = 0
    uses = ()  # per parameter (flat order), its uses in the model: autograd's hook fires per use
    reduces_every_micro_step = False
    """Under gradient accumulation, DDP and ZeRO-1 reduce in the last micro-step only (DDP's
    no_sync); ZeRO-2 and ZeRO-3 in every one, into the gradient shard."""

    def __init__(self, model, scenario, *, rank, world_size, comm, recorder, device, seed, lr):
        self.model, self.comm, self.rec = model, comm, recorder
        self.rank, self.world_size = rank, world_size
        self.dtype = DTYPES[scenario.training.precision]
        self.units = [model.embedding, *model.blocks, model.head]
        self.tied = model.head.lm_head is None
        bucket_bytes = int(scenario.training.reduce_bucket_MiB * MiB)
        self.bucket_elements = max(1, bucket_bytes // torch.empty(0, dtype=self.dtype).element_size())
        self.prefetch = scenario.training.prefetch_layers
        self.loss_scale = LossScale(scenario.training.precision)
        self.accumulation = scenario.training.gradient_accumulation
        self.reducing = True  # this micro-step reduces its gradients (the last one, or every one)
        self.device = device
        # Hybrid sharding and offload (sharding.py): shard_comm is the world without hybrid.
        self.sharding = Sharding(comm, scenario, self.stage, world_size, device,
                                 recorder.ledger)
        self.shard_comm = self.sharding.shard
        self.build(device, seed, lr)
        self.acts = ActivationTracker(recorder.ledger, self.is_param_storage)

    # -- buffers -------------------------------------------------------------------------------

    def build(self, device, seed, lr) -> None:
        named = list(self.model.named_parameters())
        self.flat = FlatParams(self.model, named, self.shard_comm.rank, self.shard_comm.world_size,
                               self.dtype, device, seed, sharded=False)
        layout = self.flat.layout
        self.rec.ledger.add_state("params", self.flat.full, layout.numel)
        self.optimizers = [self.make_optimizer(self.flat, self.make_grads(device), lr)]
        self.buckets = layout.buckets(self.bucket_elements)
        self.spans = layout.spans(self.bucket_elements)
        tok = self.model.embedding.tok.weight  # tied: used by the embedding and the head
        self.uses = [2 if self.tied and p is tok else 1 for p in self.flat.params]
        self.hooks = [p.register_post_accumulate_grad_hook(self._make_hook(k))  # train()
                      for k, p in enumerate(self.flat.params)]  # removes them

    def make_grads(self, device) -> torch.Tensor:
        """The gradient buffer; returns the part the optimizer reads."""
        self.flat_grad = torch.zeros_like(self.flat.full)
        self.rec.ledger.add_state("grads", self.flat_grad, self.flat.layout.numel)
        self.flat.bind_grads(self.flat_grad)  # for good: autograd adds into these views in place
        return self.flat_grad

    def make_optimizer(self, flat: FlatParams, grad: torch.Tensor, lr: float) -> ShardAdam:
        return self.sharding.optimizer(flat.full, grad, flat.layout.numel, lr)

    def is_param_storage(self, ptr: int) -> bool:
        return ptr == self.flat.full.untyped_storage().data_ptr()

    # -- gradient buckets, driven by autograd's per-parameter hooks -----------------------------

    def _make_hook(self, k: int):
        def hook(p):
            self.fired[k] += 1
            if self.fired[k] == self.uses[k]:  # this gradient is complete
                self.gradient_ready(k, p)
            else:
                self.gradient_waiting(p)
        return hook

    def gradient_waiting(self, p) -> None:
        """A tied weight after its first use in backward: autograd adds the second one later."""

    def gradient_ready(self, k: int, p) -> None:
        if not self.reducing:
            return  # no_sync: autograd adds this micro-step's gradient into the buffer, in place
        for i, elements in self.spans[k]:
            self.filled[i] += elements
            if self.filled[i] == self.buckets[i][1] - self.buckets[i][0]:
                self.reduce_bucket(i)

    def reduce_bucket(self, i: int) -> None:
        lo, hi = self.buckets[i]
        self.comm.all_reduce(self.flat_grad[lo:hi], name=f"bucket {i}")

    def zero_grads(self) -> None:
        self.flat_grad.zero_()

    # -- the step ------------------------------------------------------------------------------

    def run_unit(self, s: int, x, targets):
        if s == len(self.units) - 1:
            return self.model.head(x, self.model.embedding.tok.weight, targets)
        return self.units[s](x)

    def before_forward(self, s: int) -> None: ...  # where ZeRO-3 gathers, frees and reduces
    after_forward = before_backward = after_backward = before_forward

    def step(self, batches, step: int) -> float:
        """One optimizer step: forward and backward of each micro-batch `batches` yields ((idx,
        targets), training.gradient_accumulation of them), then the optimizer, once. Returns this
        rank's loss, the mean over its micro-batches (train.global_losses: over ranks)."""
        self.zero_grads()  # once: the micro-steps accumulate into the gradient buffer (or shard)
        # Each micro-step's loss is scaled by 1/A: its gradients add up to the gradient of the
        # mean loss over all A micro-batches (ShardAdam divides by the N ranks).
        seed_value = self.loss_scale.value / self.accumulation
        total, micro = None, -1
        for micro, (idx, targets) in enumerate(batches):
            self.last_micro = micro == self.accumulation - 1
            self.reducing = self.reduces_every_micro_step or self.last_micro
            self.fired, self.filled = [0] * len(self.uses), [0] * len(self.buckets)
            self.kept: set[int] = set()  # ZeRO-2: buckets reduced (into the shard) this micro-step
            _head_input = x = None  # the previous micro-step's, freed before this forward
            inputs, outputs = self.forward(idx, targets)
            # Alive until the next micro-step or the step's end, as one loop's locals would be:
            # the head's input (and its gradient) and the loss (test_memory counts them).
            _head_input, x = inputs[-1], outputs[-1]
            loss = x.detach().clone()
            total = loss if total is None else total.add_(loss)
            grad = torch.tensor(seed_value, device=x.device)
            self.rec.mark("after_forward", step)
            self.backward(inputs, outputs, grad)
            del grad
            self.check_all_reduced()
        if micro != self.accumulation - 1:
            raise ValueError(f"{micro + 1} micro-batches for gradient_accumulation {self.accumulation}")
        self.rec.mark("after_backward", step)
        self.rec.phase = "step"
        with self.rec.compute("optimizer", None):
            self.optimizer_step()
        self.rec.mark("after_step", step)
        return total.item() / self.accumulation

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[list, list]:
        """One micro-batch through every unit: each unit's input and output, in order."""
        self.rec.phase, inputs, outputs, x = "forward", [], [], idx
        with self.acts.hooks():
            for s in range(len(self.units)):
                self.before_forward(s)
                with self.rec.compute("forward", s):
                    # A detached input per unit: backward can then run one unit at a time.
                    x_in = x.detach().requires_grad_() if s > 0 else x
                    x = self.run_unit(s, x_in, targets)
                inputs.append(x_in)
                outputs.append(x)
                self.after_forward(s)
        return inputs, outputs

    def backward(self, inputs: list, outputs: list, grad: torch.Tensor) -> None:
        """Backward unit by unit, in reverse, from the loss's gradient `grad`."""
        self.rec.phase = "backward"
        for s in reversed(range(len(self.units))):
            self.before_backward(s)
            with self.rec.compute("backward", s):
                torch.autograd.backward(outputs[s], grad)
            grad = inputs[s].grad if s > 0 else None
            outputs[s] = inputs[s] = None  # this unit's activations are released
            self.after_backward(s)
        self.acts.release()

    def check_all_reduced(self) -> None:
        if hasattr(self, "flat_grad"):  # autograd must have accumulated in place, into buckets
            ptr = self.flat_grad.untyped_storage().data_ptr()
            assert all(p.grad.untyped_storage().data_ptr() == ptr for p in self.flat.params)
        if not self.reducing:
            return  # no_sync: the buckets fill, and are reduced, in the last micro-step
        missing = [b for b, (lo, hi) in zip(self.filled, self.buckets) if b != hi - lo]
        assert not missing, f"rank {self.rank}: {len(missing)} gradient buckets never filled"

    def grad_regions(self) -> list[tuple]:
        """(layout, the gradient storage the optimizer reads from, the layout's element at the
        storage's start) per flat buffer: here (and at ZeRO-1) the whole gradient buffer, as
        Megatron's distributed optimizer keeps one."""
        return [(self.flat.layout, self.flat_grad, 0)]

    def optimizer_step(self) -> None:
        if self.model.tensor_comm is not None:  # SP's partial gradients, summed over the TP group
            self.model.sum_partial_grads(self.grad_regions(), self.device, self.rec.ledger)
        grads = [opt.unscaled_grad(self.loss_scale.value) for opt in self.optimizers]
        # Under tensor parallelism each rank of a TP group holds other gradients: all must agree.
        comms = [c for c in (self.comm, self.model.tensor_comm) if c is not None]
        if not self.loss_scale.overflowed(grads, comms, self.device):
            for opt, g in zip(self.optimizers, grads):
                opt.step(g)
        self.after_optimizer()

    def after_optimizer(self) -> None: ...

    def full_parameters(self) -> dict[str, torch.Tensor]:
        return self.flat.full_tensors(self.shard_comm)


class ZeRO1(DDP):
    """Optimizer states sharded: reduce-scatter the buckets, Adam on the shard, all-gather."""

    stage = 1

    def make_grads(self, device):
        lo, hi = self.flat.layout.owned(self.shard_comm.rank)
        return super().make_grads(device)[lo:hi]

    def make_optimizer(self, flat, grad, lr):
        layout = flat.layout
        return self.sharding.optimizer(flat.shard, grad, layout.numel / layout.world_size, lr)

    def reduce_bucket(self, i):
        lo, hi = self.buckets[i]
        self.shard_comm.reduce_scatter(self.flat_grad[lo:hi], self.flat.layout.pieces(lo, hi),
                                       name=f"bucket {i}")
        a, b = self.flat.layout.owned_within(lo, hi, self.shard_comm.rank)
        self.sharding.reduced(self.flat_grad[a:b], name=f"bucket {i}")

    def after_optimizer(self):
        layout = self.flat.layout
        self.shard_comm.all_gather(self.flat.full, [layout.shard] * layout.world_size,
                                   name="parameters")


class ZeRO2(ZeRO1):
    """Gradients sharded: no full gradient buffer; a pool of STAGE2_LIVE_BUCKETS bucket buffers.

    A gradient is cut into the buckets it spans and each bucket is reduced as soon as it fills,
    before the next slice is copied: one large gradient (a vocabulary matrix spanning hundreds of
    buckets) passes through the pool instead of occupying one buffer per slice. If every pooled
    buffer is partly filled when another bucket needs one (gradients arriving out of address
    order), the oldest is reduced early as it stands: unfilled elements are zero on every rank and
    the owned part is added into the shard, so the rest of that bucket is reduced later, exactly.
    """

    stage = 2
    reduces_every_micro_step = True

    def make_grads(self, device):
        layout = self.flat.layout  # the gradient shard: on the host, fp32, under offload
        self.grad_shard = self.sharding.grad_shard(layout.shard, self.dtype,
                                                   layout.numel / layout.world_size)
        self.bucket_buffers: dict[int, torch.Tensor] = {}  # filling, oldest first
        self.pool: list[torch.Tensor] = []  # free buffers, reused across buckets and steps
        self.pool_size = 0
        return self.grad_shard

    def grad_regions(self):
        layout = self.flat.layout
        return [(layout, self.grad_shard, layout.owned(self.shard_comm.rank)[0])]

    def gradient_waiting(self, p):
        # A tied weight's first part stays in autograd's own buffer until the second arrives.
        self.rec.ledger.alloc("autograd_grads", p.grad.numel() * p.grad.element_size())

    def zero_grads(self):
        self.grad_shard.zero_()
        for p in self.flat.params:
            p.grad = None  # autograd allocates each gradient; the hook hands it to the buckets

    def gradient_ready(self, k, p):
        slot, grad = self.flat.layout.slots[k], p.grad.reshape(-1)
        nbytes = grad.numel() * grad.element_size()
        if self.uses[k] == 1:  # autograd's buffer, alive until its last slice is in a bucket
            self.rec.ledger.alloc("autograd_grads", nbytes)
        for i, _ in self.spans[k]:  # top down: backward's order
            lo, hi = self.buckets[i]
            a, b = max(lo, slot.offset), min(hi, slot.offset + slot.numel)
            self._bucket(i)[a - lo:b - lo].copy_(grad[a - slot.offset:b - slot.offset])
            self.filled[i] += b - a
            if self.filled[i] == hi - lo:
                self.reduce_bucket(i)
        p.grad = grad = None  # the non-owned part of this gradient is gone: its buckets reduced
        self.rec.ledger.free("autograd_grads", nbytes)

    def reduce_bucket(self, i, name=None):
        lo, hi = self.buckets[i]
        bucket, layout, name = self.bucket_buffers.pop(i), self.flat.layout, name or f"bucket {i}"
        self.shard_comm.reduce_scatter(bucket, layout.pieces(lo, hi), name=name)
        own_lo, _ = layout.owned(self.shard_comm.rank)
        a, b = layout.owned_within(lo, hi, self.shard_comm.rank)
        if a < b:  # add: a bucket reduced early comes back for the rest of its elements
            self.sharding.keep(bucket[a - lo:b - lo], self.grad_shard[a - own_lo:b - own_lo], name,
                               last_micro=self.last_micro, fresh=i not in self.kept)
        self.kept.add(i)
        self.pool.append(bucket._base)

    def _bucket(self, i: int) -> torch.Tensor:
        """Bucket i's buffer, taken from the pool when it starts filling."""
        if i not in self.bucket_buffers:
            if not self.pool and self.pool_size == STAGE2_LIVE_BUCKETS:
                oldest = next(iter(self.bucket_buffers))
                self.reduce_bucket(oldest, name=f"bucket {oldest} (partial)")
            if not self.pool:
                self.pool_size += 1
                self.rec.ledger.alloc("buckets", self.bucket_elements * self.flat.full.element_size())
                self.pool.append(torch.empty(self.bucket_elements, dtype=self.dtype,
                                             device=self.flat.full.device))
            lo, hi = self.buckets[i]
            # Zeroed: a bucket reduced before it fills must add nothing for its missing elements.
            self.bucket_buffers[i] = self.pool.pop()[:hi - lo].zero_()
        return self.bucket_buffers[i]
