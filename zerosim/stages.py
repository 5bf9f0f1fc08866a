"""What one rank does in one training step, stage by stage: DDP first, then each ZeRO stage as
the difference it makes (the ZeRO paper, Rajbhandari et al. 2020, §5 and §7).

A step is: forward unit by unit, backward in reverse producing gradients, their reduction, the
optimizer step. Units are the ZeRO-3 gather units of model.py (embedding, layers, head).
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

import math
from dataclasses import dataclass
from typing import Iterator

import simpy

from zerosim.costs import (OptimizerCost, compute_seconds, memory_terms, optimizer_cost,
                           other_s)
from zerosim.engine import OTHER
from zerosim.errors import InputError
from zerosim.memory import (BYTES_PER_ELEMENT, FP32_BYTES, MOMENTS, STAGE2_LIVE_BUCKETS,
                            STAGE3_LIVE_LAYER_GRADS, StageMemory, shard_elements, stage_memory)
from zerosim.model import (activations, gather_units, gradient_units, total_params,
                           unit_activation_bytes, unit_flops)
from zerosim.units import mib_to_bytes


@dataclass(frozen=True)
class StepShape:
    """The numbers every rank of a stage works from, derived once from the scenario."""

    stage: int
    memory: StageMemory
    gather_elements: list[int]
    gradient_elements: list[int]
    forward_s: list[float]
    backward_s: list[float]
    """Compute seconds of each unit's forward and backward (costs.py)."""
    activation_bytes: list[int]
    recompute_bytes: list[int]
    """Regenerated activations alive during each unit's backward (checkpointed layers only)."""
    param_bytes_per_element: int
    grad_bytes_per_element: int
    params: int
    shard: int
    bucket_bytes: int
    allgather_bucket_bytes: int
    optimizer: OptimizerCost
    optimizer_workspace_per_element: float
    """Temporaries of the optimizer step per element it updates (a profile's measurement)."""
    prefetch_layers: int
    gradient_reduction: str
    overlap_comm: bool
    workspace_bytes: int
    """Transient bytes during backward beyond the named buffers (a profile's measurement)."""
    residue_bytes: int
    """Bytes the allocator keeps after backward (a profile's measurement)."""
    other_s: float
    """Seconds per step in neither compute nor a collective (a profile's measurement)."""


# A step costs a few simpy events per bucket and per all-gather chunk, and about ten times that
# per unit; beyond this many pieces (about 10 s) it would take minutes. The shipped scenarios need
# a few thousand.
MAX_STEP_PIECES = 50_000
UNIT_WEIGHT = 10


def _check_size(stage: int, units: int, grad_bytes: int, bucket_bytes: int, param_bytes: int,
                allgather_bytes: int) -> None:
    buckets = math.ceil(grad_bytes / bucket_bytes) if stage < 3 else 0
    chunks = math.ceil(param_bytes / allgather_bytes) if stage in (1, 2) else 0
    if UNIT_WEIGHT * units + buckets + chunks > MAX_STEP_PIECES:
        parts = [f"{UNIT_WEIGHT} x {units:,} units"]
        if buckets:
            parts.append(f"{grad_bytes:,} / {bucket_bytes:,} = {buckets:,} gradient buckets")
        if chunks:
            parts.append(f"{param_bytes:,} / {allgather_bytes:,} = {chunks:,} all-gather chunks")
        raise InputError(
            f"stage {stage} would simulate {' + '.join(parts)}, more than {MAX_STEP_PIECES:,} "
            f"pieces: raise training.reduce_bucket_MiB or allgather_bucket_MiB, or lower "
            f"model.layers")


def step_shape(scenario, stage: int) -> StepShape:
    m, t = scenario.model, scenario.training
    bp = bg = BYTES_PER_ELEMENT[t.precision]
    moments = MOMENTS[t.optimizer]
    # Bytes the optimizer moves over HBM per element of its partition: read the gradient, read and
    # write the fp32 master (or the fp32 parameter itself) and each fp32 moment, and under mixed
    # precision write back the 16-bit working copy.
    master = 2 * FP32_BYTES + bp if t.precision != "fp32" else 2 * bp
    recompute = activations(m, t).recompute_bytes
    psi = total_params(m)
    # Checked before the unit list is built: a bare Ψ may ask for 2**53 layers.
    _check_size(stage, m.n_layers + 2, bg * psi, mib_to_bytes(t.reduce_bucket_MiB), bp * psi,
                mib_to_bytes(t.allgather_bucket_MiB))
    units = gather_units(m)
    recompute_bytes = [0] * m.n_layers if m.is_bare else [0] + [recompute] * m.layers + [0]
    forward_s, backward_s = compute_seconds(scenario, unit_flops(m, t), stage)
    extra = memory_terms(scenario, stage)
    activation_bytes = unit_activation_bytes(m, t)
    if extra["activations"]:  # measured activations: the analytic split, scaled to their total
        total = sum(activation_bytes)
        activation_bytes = ([max(0, round(a * (total + extra["activations"]) / total))
                             for a in activation_bytes] if total else
                            activation_bytes[:-1] + [max(0, round(extra["activations"]))])
    return StepShape(
        stage=stage, memory=stage_memory(scenario, stage), gather_elements=units,
        gradient_elements=gradient_units(m), forward_s=forward_s, backward_s=backward_s,
        activation_bytes=activation_bytes,
        recompute_bytes=recompute_bytes, param_bytes_per_element=bp, grad_bytes_per_element=bg,
        params=psi, shard=shard_elements(psi, scenario.world_size),
        bucket_bytes=mib_to_bytes(t.reduce_bucket_MiB),
        allgather_bucket_bytes=mib_to_bytes(t.allgather_bucket_MiB),
        optimizer=optimizer_cost(scenario, bg + master + 2 * FP32_BYTES * moments, stage),
        optimizer_workspace_per_element=extra["optimizer_per_element"],
        prefetch_layers=t.prefetch_layers, gradient_reduction=t.gradient_reduction,
        overlap_comm=t.overlap_comm, workspace_bytes=max(0, round(extra["workspace"])),
        residue_bytes=max(0, round(extra["residue"])), other_s=other_s(scenario, stage))


class DDP:
    """Stage 0: everything replicated; gradient buckets all-reduced as soon as they fill."""

    reduce_op = "all_reduce"

    def __init__(self, ctx, shape: StepShape) -> None:
        self.ctx, self.shape, self.env = ctx, shape, ctx.env
        self.pending: list = []
        self.filled_bytes = 0
        self.unit = 0
        self.layers = len(shape.gather_elements)

    def run(self) -> Iterator:
        mem = self.shape.memory
        for category, size in (("params", mem.params_bytes), ("grads", mem.grads_bytes),
                               ("optimizer", mem.optimizer_bytes)):
            self.ctx.alloc(category, category, size)
        self.ctx.mark("after_init")
        yield from self.forward()
        self.ctx.mark("after_forward")
        if self.shape.workspace_bytes:
            self.ctx.alloc("workspace", "workspace", self.shape.workspace_bytes)
        yield from self.backward()
        yield from self.drain()
        if self.shape.workspace_bytes:
            self.ctx.free("workspace")
        if self.shape.residue_bytes:
            self.ctx.alloc("residue", "allocator", self.shape.residue_bytes)
        if self.shape.other_s:
            yield from self.ctx.compute(self.shape.other_s, OTHER, "backward", None)
        self.ctx.mark("after_backward")
        yield from self.optimizer_step()
        yield from self.drain()
        self.ctx.mark("after_step")

    def forward(self) -> Iterator:
        self.start_gathers("forward", range(self.layers))
        for unit in range(self.layers):
            yield from self.gathered(unit, "forward")
            yield from self.ctx.compute(self.shape.forward_s[unit], "forward", "forward", unit)
            self.ctx.alloc(("activations", unit), "activations", self.shape.activation_bytes[unit])
            self.release(unit, "forward")

    def backward(self) -> Iterator:
        self.start_gathers("backward", reversed(range(self.layers)))
        for unit in reversed(range(self.layers)):
            self.unit = unit
            yield from self.gathered(unit, "backward")
            self.ctx.alloc(("recompute", unit), "activations", self.shape.recompute_bytes[unit])
            yield from self.produce_gradients(unit)
            self.ctx.free(("recompute", unit))
            self.ctx.free(("activations", unit))
            self.release(unit, "backward")
        if self.filled_bytes:
            self.launch_bucket()
            yield from self.synchronous()

    def produce_gradients(self, unit: int) -> Iterator:
        """Backward of one unit, cut where its gradients cross bucket boundaries."""
        duration_s = self.shape.backward_s[unit]
        total = self.shape.grad_bytes_per_element * self.shape.gradient_elements[unit]
        if total == 0:
            yield from self.ctx.compute(duration_s, "backward", "backward", unit)
            return
        produced = 0
        while produced < total:
            if self.filled_bytes == 0:
                yield from self.open_bucket()
            piece = min(total - produced, self.shape.bucket_bytes - self.filled_bytes)
            yield from self.ctx.compute(duration_s * piece / total, "backward", "backward", unit)
            produced += piece
            self.filled_bytes += piece
            if self.filled_bytes == self.shape.bucket_bytes:
                self.launch_bucket()
                yield from self.synchronous()

    def open_bucket(self) -> Iterator:
        return iter(())  # a slice of the persistent gradient buffer: nothing to allocate

    def launch_bucket(self, after=None) -> None:
        self.pending.append(self.ctx.comm("comm", self.reduce_op, self.filled_bytes, "gradient bucket",
                                          "backward", self.unit, after=after))
        self.filled_bytes = 0

    def drain(self) -> Iterator:
        if self.pending:
            yield self.env.all_of(self.pending)
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
        yield from self.ctx.compute(self.shape.optimizer.seconds(elements), "optimizer", "step",
                                    None)
        if workspace:
            self.ctx.free("optimizer workspace")

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
                                              "parameter all-gather", "step", None))


class ZeRO2(ZeRO1):
    """Stage 2: gradients sharded too. Each bucket is a separate buffer, freed once reduced."""

    def __init__(self, ctx, shape: StepShape) -> None:
        super().__init__(ctx, shape)
        self.free_buckets = simpy.Container(self.env, STAGE2_LIVE_BUCKETS, init=STAGE2_LIVE_BUCKETS)
        self.unbucketed_bytes = shape.grad_bytes_per_element * shape.params
        self.bucket_id = 0

    def open_bucket(self) -> Iterator:
        yield self.free_buckets.get(1)  # backward stalls here while two buckets are in flight
        size = min(self.shape.bucket_bytes, self.unbucketed_bytes)
        self.unbucketed_bytes -= size
        self.ctx.alloc(("bucket", self.bucket_id), "buckets", size)

    def launch_bucket(self, after=None) -> None:
        key = ("bucket", self.bucket_id)
        self.bucket_id += 1

        def reduced() -> None:
            self.ctx.free(key)
            self.free_buckets.put(1)

        super().launch_bucket(after=reduced)


class ZeRO3(ZeRO1):
    """Stage 3: parameters sharded. Each unit is all-gathered before forward and again before
    backward (prefetched up to prefetch_layers ahead), freed after use; each unit's gradient is
    reduce-scattered on its own stream, which shares the links with the gathers."""

    def __init__(self, ctx, shape: StepShape) -> None:
        super().__init__(ctx, shape)
        self.gather_slots = simpy.Container(self.env, 1 + shape.prefetch_layers,
                                            init=1 + shape.prefetch_layers)
        self.grad_slots = simpy.Container(self.env, STAGE3_LIVE_LAYER_GRADS,
                                          init=STAGE3_LIVE_LAYER_GRADS)
        self.gathers: dict[tuple[str, int], object] = {}

    def start_gathers(self, phase: str, units) -> None:
        for unit in units:
            size = self.shape.param_bytes_per_element * self.shape.gather_elements[unit]

            def take_slot(unit=unit, size=size) -> Iterator:
                yield self.gather_slots.get(1)  # prefetch depth: wait for a free buffer
                self.ctx.alloc(("gathered", phase, unit), "gathered", size)

            self.gathers[phase, unit] = self.ctx.comm("gather", "all_gather", size,
                                                      "parameter all-gather", phase, unit,
                                                      before=take_slot)

    def gathered(self, unit: int, phase: str) -> Iterator:
        yield self.gathers.pop((phase, unit))
        if not self.shape.overlap_comm:  # synchronous prefetch: the next units before compute
            # gathers are queued in the order the units compute
            ahead = [self.gathers[key] for key in self.gathers if key[0] == phase]
            ahead = ahead[:self.shape.prefetch_layers]
            if ahead:
                yield self.env.all_of(ahead)

    def release(self, unit: int, phase: str) -> None:
        self.ctx.free(("gathered", phase, unit))
        self.gather_slots.put(1)

    def produce_gradients(self, unit: int) -> Iterator:
        yield self.grad_slots.get(1)
        bg = self.shape.grad_bytes_per_element
        key = ("layer_grads", unit)
        # A tied head produces a gradient for the whole shared matrix (memory), but its part is
        # added to the embedding's and reduce-scattered with the embedding unit: sent once.
        self.ctx.alloc(key, "layer_grads", bg * self.shape.gather_elements[unit])
        size = bg * self.shape.gradient_elements[unit]
        yield from self.ctx.compute(self.shape.backward_s[unit], "backward", "backward", unit)

        def reduced() -> None:
            self.ctx.free(key)
            self.grad_slots.put(1)

        self.pending.append(self.ctx.comm("reduce", "reduce_scatter", size,
                                          "gradient reduce-scatter", "backward", unit,
                                          after=reduced))
        yield from self.synchronous()

    def optimizer_step(self) -> Iterator:
        yield from DDP.optimizer_step(self)  # on the shard; parameters stay sharded: no all-gather


STAGE_PROGRAMS = {0: DDP, 1: ZeRO1, 2: ZeRO2, 3: ZeRO3}


def program(stage: int, ctx) -> Iterator:
    shapes = ctx.engine.step_shapes
    if stage not in shapes:
        shapes[stage] = step_shape(ctx.engine.scenario, stage)
    return STAGE_PROGRAMS[stage](ctx, shapes[stage]).run()
