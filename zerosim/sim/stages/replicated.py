"""What one rank does in one training step, stage by stage: DDP first, then each ZeRO stage as
the difference it makes (the ZeRO paper, Rajbhandari et al. 2020, §5 and §7); ZeRO-3 is
zero3.py.

A step is: forward unit by unit, backward in reverse producing gradients, their reduction, the
optimizer step. Units are the ZeRO-3 gather units of model.py (embedding, layers, head). Under
gradient accumulation, forward and backward run once per micro-step; DDP and ZeRO-1 reduce only
in the last one (DDP's no_sync: gradients add up in the full buffer), ZeRO-2 and ZeRO-3 in every
one (each micro-step's gradients are reduced into the shard), and the communication of a
micro-step completes before the next begins (DeepSpeed and FSDP wait for their reduction streams
at the end of backward).
Memory moves exactly as memory.py counts it, so the timeline's steady points equal the analytic
model byte for byte and its peak never exceeds the analytic peak (without a calibration profile;
a profile adds what the real stages showed beyond the model: costs.memory_terms):
- DDP / ZeRO-1 reduce gradients in place on the persistent flat buffer: buckets are slices of it;
- ZeRO-2 copies gradients into separate bucket buffers, at most 2 alive (one filling, one
  reducing: a third waits, stalling backward), and frees them once reduced;
- ZeRO-3 gathers each unit before it computes, into at most 1 + prefetch_layers buffers, frees it
  after use, and reduce-scatters each unit's full gradient (at most 2 alive).
"""

from __future__ import annotations

from typing import Iterator

from zerosim.contract import STAGE2_LIVE_BUCKETS
from zerosim.sim.groups import WORLD
from zerosim.sim.stages.step_shape import StepShape


class DDP:
    """Stage 0: everything replicated; gradient buckets all-reduced as soon as they fill."""

    reduce_op = "all_reduce"
    reduces_every_micro_step = False
    reduce_stream = "comm"
    """The stream gradients are reduced on (one stream for every collective before ZeRO-3)."""
    collectives_share_links = False
    """Whether two of its collectives can be in flight at once, on streams of their own, over
    the same links; if not, each has them to itself and takes its closed form (sim/executor.py)."""
    stream_beside_step = False
    """Whether a stream runs beside the whole step from its start (a delayed update's host
    operations): it shares links with the step's collectives, and the lockstep, whose streams
    start in time order, cannot run it (sim/executor.py)."""

    def __init__(self, ctx, shape: StepShape) -> None:
        self.ctx, self.shape, self.env = ctx, shape, ctx.env
        self.pending: list = []
        self.filled_bytes = 0
        self.unit = 0
        self.layers = len(shape.gather_elements)
        self.reducing = True
        """This micro-step reduces its gradients (the last one, or every one)."""
        self.last_micro = True
        self.group = WORLD
        """The ranks that shard the model states (sim/groups.py: the world, or a shard group)."""

    def run(self) -> Iterator:
        mem = self.shape.memory
        grads = 0 if self.shape.grad_shard_bytes else mem.grads_bytes  # else made in backward
        lumps = (("params", mem.params_bytes), ("grads", grads), ("optimizer", mem.optimizer_bytes))
        for i, (category, size) in enumerate(self.shape.state_blocks or lumps):
            self.ctx.alloc((category, i), category, size)
        if self.shape.persistent_bytes:  # DDP's bucket copies of the gradients, DeepSpeed's
            # whole buckets and persistent parameters (StepShape.persistent_bytes)
            self.ctx.alloc("persistent buffers", "buckets", self.shape.persistent_bytes)
        self.ctx.mark("after_init")
        self.steady_state()
        steps = self.shape.gradient_accumulation
        for micro in range(steps):
            self.reducing = self.reduces_every_micro_step or micro == steps - 1
            self.last_micro = micro == steps - 1
            yield from self.micro_step()
        if self.shape.residue_bytes:
            self.ctx.alloc("residue", "allocator", self.shape.residue_bytes)
        self.ctx.mark("after_backward")
        yield from self.optimizer_step()
        yield from self.drain()
        self.ctx.mark("after_step")

    def steady_state(self) -> None:
        """What earlier steps left allocated that the first one allocates (a bucket pool)."""

    def micro_step(self) -> Iterator:
        """Forward and backward of one micro-batch, and its reduction when it reduces."""
        yield from self.forward()
        self.ctx.mark("after_forward")
        if self.shape.workspace_bytes:
            self.ctx.alloc("workspace", "workspace", self.shape.workspace_bytes)
        yield from self.backward()
        yield from self.drain()
        if self.shape.workspace_bytes:
            self.ctx.free("workspace")

    def forward(self) -> Iterator:
        self.start_gathers("forward", range(self.layers))
        for unit in range(self.layers):
            yield from self.gathered(unit, "forward")
            self.loss(unit, "forward")
            self.tensor_begin(unit, "forward")
            yield from self.unit_compute(unit, "forward", self.shape.forward_s[unit])
            yield from self.tensor_end(unit, "forward")
            self.ctx.alloc(("activations", unit), "activations", self.shape.activation_bytes[unit])
            self.loss(unit, "forward", done=True)
            self.release(unit, "forward")

    def unit_compute(self, unit: int, phase: str, seconds: float) -> Iterator:
        """A unit's compute in `phase` on the compute stream (stages/fetch.py: module by
        module, each waiting for its parameters)."""
        yield from self.ctx.compute(seconds, phase, phase, unit)

    def loss(self, unit: int, phase: str, done: bool = False) -> None:
        """The loss's fp32 transients around the head's compute (Framework.loss_blocks)."""
        if unit == self.layers - 1:
            for i, size in enumerate(self.shape.loss_blocks[phase]):
                (self.ctx.free(("loss", phase, i)) if done else
                 self.ctx.alloc(("loss", phase, i), "activations", size))

    def backward(self) -> Iterator:
        self.start_gathers("backward", reversed(range(self.layers)))
        for unit in reversed(range(self.layers)):
            self.unit = unit
            yield from self.gathered(unit, "backward")
            self.ctx.alloc(("recompute", unit), "activations", self.shape.recompute_bytes[unit])
            self.loss(unit, "backward")
            self.tensor_begin(unit, "backward")
            yield from self.tensor_backward(unit)
            yield from self.produce_gradients(unit)
            yield from self.tensor_end(unit, "backward")
            self.loss(unit, "backward", done=True)
            self.ctx.free(("recompute", unit))
            self.ctx.free(("activations", unit))
            self.release(unit, "backward")
        if self.filled_bytes:
            yield from self.bucket_host()
            self.launch_bucket()
            yield from self.synchronous()

    def bucket_host(self) -> Iterator:
        """The host's work on a full bucket before its collective (StepShape.bucket_host_s)."""
        if self.shape.bucket_host_s:
            yield from self.ctx.compute(self.shape.bucket_host_s, "backward", "backward",
                                        self.unit)

    def produce_gradients(self, unit: int) -> Iterator:
        """Backward of one unit, cut where its gradients cross bucket boundaries."""
        duration_s = self.shape.backward_s[unit]
        total = self.shape.grad_bytes_per_element * self.shape.gradient_elements[unit]
        if not self.reducing and self.shape.idle_hook_savings_s:  # the hooks only count
            duration_s -= self.shape.idle_hook_savings_s[unit]
        if total == 0 or not self.reducing:  # no_sync: gradients add up in the full buffer
            yield from self.ctx.compute(duration_s, "backward", "backward", unit)
            return
        produced = 0
        while produced < total:
            if self.filled_bytes == 0:
                yield from self.open_bucket()
            piece = min(total - produced, self.shape.bucket_bytes - self.filled_bytes)
            self.fill_bucket(piece)
            yield from self.ctx.compute(duration_s * piece / total, "backward", "backward", unit)
            produced += piece
            self.filled_bytes += piece
            if self.filled_bytes == self.shape.bucket_bytes:
                yield from self.bucket_host()
                self.launch_bucket()
                yield from self.synchronous()

    def open_bucket(self) -> Iterator:
        return iter(())  # a slice of the persistent gradient buffer: nothing to allocate

    def fill_bucket(self, size: int) -> None:
        """`size` bytes of gradient about to be made into the open bucket."""

    def launch_bucket(self, after=None) -> None:
        group = self.group if self.reduce_op != "all_reduce" else WORLD
        self.pending.append(self.ctx.comm("comm", self.reduce_op, self.filled_bytes, "gradient bucket",
                                          "backward", self.unit, after=after, group=group))
        self.reduced("comm", self.filled_bytes, "backward", self.unit, group)
        self.filled_bytes = 0

    def reduced(self, stream: str, size: float, phase: str, unit: int | None,
                group: str) -> None:
        """What follows a gradient reduction among `group` on `stream` (stages/family.py: hybrid
        sharding's replica all-reduce, offload's copy to the host); nothing here."""

    def drain(self) -> Iterator:
        if self.pending:  # one stream's, first in first out: the last completes last
            yield self.env.all_of(self.pending[-1:])
        self.pending = []

    def synchronous(self) -> Iterator:
        """Without overlap_comm, compute waits for the collective just launched."""
        if not self.shape.overlap_comm:
            yield from self.drain()

    def optimizer_elements(self) -> int:
        return self.shape.params

    def optimizer_step(self) -> Iterator:
        elements = self.optimizer_elements()
        workspace = round(self.shape.optimizer_workspace_per_element * elements)
        if workspace:
            self.ctx.alloc("optimizer workspace", "workspace", workspace)
        for i, (category, size) in enumerate(self.shape.step_blocks):  # DeepSpeed's fp32
            self.ctx.alloc(("step", i), category, size)  # gradients, foreach Adam's square roots
        yield from self.update(elements)
        for i in range(len(self.shape.step_blocks)):
            self.ctx.free(("step", i))
        if workspace:
            self.ctx.free("optimizer workspace")

    def update(self, elements: int) -> Iterator:
        """The optimizer's arithmetic on the GPU (offload moves it: stages/family.py)."""
        yield from self.ctx.compute(self.shape.optimizer.seconds(elements), "optimizer", "step",
                                    None)

    # Tensor parallelism's hooks around a unit's compute (stages/tensor.py): none without it.
    def tensor_begin(self, unit: int, phase: str) -> None:
        pass

    def tensor_end(self, unit: int, phase: str) -> Iterator:
        return iter(())

    def tensor_backward(self, unit: int) -> Iterator:
        """What a unit's backward does before its gradients are made and reduced."""
        return iter(())

    # ZeRO-3 hooks: nothing to gather while parameters are replicated.
    def start_gathers(self, phase: str, units) -> None:
        pass

    def gathered(self, unit: int, phase: str) -> Iterator:
        return iter(())

    def release(self, unit: int, phase: str) -> None:
        pass


class ZeRO1(DDP):
    """Stage 1: optimizer states sharded. Gradients are reduce-scattered to their owners (the full
    buffer stays allocated), each rank steps its shard, then the parameters are all-gathered."""

    def __init__(self, ctx, shape: StepShape) -> None:
        super().__init__(ctx, shape)
        self.reduce_op = shape.gradient_reduction

    def optimizer_elements(self) -> int:
        return self.shape.shard

    def optimizer_step(self) -> Iterator:
        yield from super().optimizer_step()
        total = self.shape.param_bytes_per_element * self.shape.params
        chunk = self.shape.allgather_bucket_bytes
        for start in range(0, total, chunk):
            self.pending.append(self.ctx.comm("comm", "all_gather", min(chunk, total - start),
                                              "parameter all-gather", "step", None,
                                              group=self.group))


class ZeRO2(ZeRO1):
    """Stage 2: gradients sharded too. Each bucket is a separate buffer, freed once reduced."""

    reduces_every_micro_step = True

    def __init__(self, ctx, shape: StepShape) -> None:
        super().__init__(ctx, shape)
        self.free_buckets = ctx.slots(STAGE2_LIVE_BUCKETS)
        self.bucket_id = 0
        self.bucket_pieces: list[tuple] = []

    def steady_state(self) -> None:
        """A kept bucket pool (StepShape.bucket_pool_bytes) is allocated from the first step's
        backward on: a step after it starts with it (after_init, before any step, does not)."""
        if self.shape.bucket_pool_bytes:
            self.ctx.alloc("bucket pool", "buckets", self.shape.bucket_pool_bytes)

    def open_bucket(self) -> Iterator:
        yield from self.free_buckets.take()  # backward stalls here while two buckets are in flight

    def fill_bucket(self, size: int) -> None:
        """A bucket holds the gradients made into it so far, never more: its memory grows piece
        by piece (a small model's one bucket is its gradients, not bucket_MiB)."""
        if not (self.shape.bucket_pool_bytes or self.shape.whole_buckets):  # else a buffer
            # of the pool, or of the framework's whole buckets (among its persistent bytes)
            self.ctx.alloc(("bucket", self.bucket_id, self.filled_bytes), "buckets", size)
            self.bucket_pieces.append(("bucket", self.bucket_id, self.filled_bytes))

    def launch_bucket(self, after=None) -> None:
        keys, self.bucket_pieces = self.bucket_pieces, []
        self.bucket_id += 1

        def reduced() -> None:
            for key in keys:
                self.ctx.free(key)
            self.free_buckets.put()

        super().launch_bucket(after=reduced)
