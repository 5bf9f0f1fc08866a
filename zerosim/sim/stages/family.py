"""The ZeRO family on top of any stage program (replicated.py, zero3.py, fsdp2.py), as
the differences each scheme makes (family_shape.FamilyShape says which are on):

- hybrid sharding (HSDP, MiCS): reductions, gathers and the post-step all-gather run inside the
  shard group; each reduced shard is then all-reduced across the replica group, every
  micro-step (FSDP2's HSDP) or in the last one only (MiCS), on the reduction's stream (stages
  1-2) or on a stream of its own after it (stage 3: FSDP2's all_reduce_stream);
- optimizer offload (ZeRO-Offload, ZeRO-Infinity): each reduced gradient partition is copied
  to the host after its reduction, on the same stream (DeepSpeed's overlap_comm: the reduction
  stream; without it compute waits, stages.DDP.synchronous); the optimizer step is the host's
  (NVMe reads, the CPU's Adam, NVMe writes, the 16-bit partition copied up) instead of the
  GPU's; with delayed_update it runs from the start of the step, beside forward and backward,
  on the previous step's gradients (ZeRO-Offload §5.2), and the step waits for it at its end;
- parameter offload (stage 3): each unit's shard is copied up (read from NVMe first) before
  its all-gather, on the gather stream;
- ZeRO++: hpZ gathers backward's units inside the node from the secondary partition; qwZ sends
  INT8 (offload.QWZ_BYTES_PER_ELEMENT) and dequantizes each gathered unit before its compute;
  qgZ replaces each reduce-scatter with an INT4 all-to-all inside the node and one across nodes
  (priced as reduce-scatters of those bytes over those groups: every rank sends (k - 1) / k
  of its buffer either way), quantizing and reducing on the compute stream.
Quantization kernels move their bytes at the optimizer's HBM rate (offload.kernel_seconds).
"""

from __future__ import annotations

from typing import Iterator

from zerosim.contract import DELAYED_QUEUE, REPLICA_QUEUE
from zerosim.sim.stages.family_shape import uses_family
from zerosim.sim.groups import INTER_NODE, NODE, REPLICA, WORLD
from zerosim.sim.network import D2H
from zerosim.sim.offload import HOST, QGZ_BYTES_PER_ELEMENT, QWZ_BYTES_PER_ELEMENT


def _after(event) -> Iterator:
    yield event


class Family:
    """Mixed in before a stage program: its hooks, as the scenario's schemes change them."""

    def __init__(self, ctx, shape) -> None:
        super().__init__(ctx, shape)
        self.family = f = shape.family
        self.group = f.group
        self.delayed_done = None

    def run(self) -> Iterator:
        if self.family.delayed:  # the previous step's update, beside this step's compute
            self.delayed_done = self.host_ops(DELAYED_QUEUE, "previous step's update")
        yield from super().run()

    def reduced(self, stream: str, size: float, phase: str, unit: int | None,
                group: str) -> None:
        f, ctx, mesh = self.family, self.ctx, self.shape.mesh
        ops = []
        # a world all-reduce (gradient_reduction = "all_reduce") has summed the replicas already
        if mesh.hybrid and group != WORLD and (f.replica_every_micro_step or self.last_micro):
            ops.append(("all_reduce", size / mesh.dp_shard, REPLICA, "shard all-reduce"))
        if f.offload and (f.offload_every_micro_step or self.last_micro):
            ops.append((D2H, size * f.grad_to_host_per_byte, HOST, "gradient to host"))
        if not ops:
            return
        before = None
        if stream == "reduce":  # ZeRO-3: on a stream of its own, after the reduce-scatter
            stream, before = REPLICA_QUEUE, (lambda event=self.pending[-1]: _after(event))
        for op, op_size, group, name in ops:
            self.pending.append(ctx.comm(stream, op, op_size, name, phase, unit, before=before,
                                         group=group))
            before = None

    def host_ops(self, stream: str, name: str):
        """Queue the optimizer step's host operations on `stream`; the last one's event."""
        done = None
        for op, size in self.family.step_ops:
            done = self.ctx.comm(stream, op, size, f"{name}: {op}", "step", None, group=HOST)
        return done

    def update(self, elements: int) -> Iterator:
        if not self.family.offload:
            yield from super().update(elements)
        elif self.delayed_done is not None:
            yield self.delayed_done
        else:
            yield self.host_ops(self.reduce_stream, "optimizer")

    # ZeRO-3's hooks
    def fetch(self, phase: str, unit: int) -> None:
        f = self.family
        if phase == "backward" and self.shape.mesh.hpz:
            return  # backward gathers hpZ's secondary partition, already on the GPU
        size = self.shape.param_bytes_per_element * self.shape.gather_elements[unit]
        for op, per_byte in f.fetch_ops:
            self.ctx.comm("gather", op, size * per_byte, f"parameters from host: {op}", phase,
                          unit, group=HOST)

    def wire(self, size: int) -> float:
        f = self.family
        return (size / self.shape.param_bytes_per_element * QWZ_BYTES_PER_ELEMENT
                if f.quantized_weights else size)

    def gather_group(self, phase: str) -> str:
        return self.family.backward_group if phase == "backward" else self.group

    def release(self, unit: int, phase: str) -> None:
        super().release(unit, phase)
        hpz = self.shape.mesh.hpz
        if hpz and not self.kept(unit):  # hpZ: forward leaves the unit's secondary partition
            # (not the last unit's where it stays gathered: its backward gathers nothing)
            key = ("secondary", unit)
            if phase == "forward":
                size = -(-self.shape.gather_elements[unit] // hpz)
                self.ctx.alloc(key, "gathered", self.shape.param_bytes_per_element * size)
            else:
                self.ctx.free(key)

    def unpack(self, unit: int, phase: str) -> Iterator:
        f = self.family
        if f.quantized_weights:  # read INT8, write the 16-bit unit
            elements = self.shape.gather_elements[unit]
            bp = self.shape.param_bytes_per_element
            yield from self.ctx.compute(f.kernel_s_per_byte * (1 + bp) * elements,
                                        "dequantize", phase, unit)

    def reduce_unit(self, size: int, unit: int, after) -> Iterator:
        f, mesh = self.family, self.shape.mesh
        if not mesh.qgz:
            yield from super().reduce_unit(size, unit, after)
            return
        bg, n, q = self.shape.grad_bytes_per_element, mesh.node, QGZ_BYTES_PER_ELEMENT
        elements = size / bg
        # quantize the unit; reduce the node's n INT4 parts and requantize; reduce across nodes
        # into the rank's shard
        kernel_bytes = ((bg + q) * elements + (q + q / n) * elements
                        + (q / n) * elements + bg * elements / (n * mesh.nodes))
        yield from self.ctx.compute(f.kernel_s_per_byte * kernel_bytes, "quantize", "backward",
                                    unit)
        across = mesh.nodes > 1
        done = self.ctx.comm(self.reduce_stream, "reduce_scatter", q * elements,
                             "gradient all-to-all (node)", "backward", unit,
                             after=None if across else after, group=NODE)
        if across:
            done = self.ctx.comm(self.reduce_stream, "reduce_scatter", q * elements / n,
                                 "gradient all-to-all (nodes)", "backward", unit, after=after,
                                 group=INTER_NODE)
        self.pending.append(done)
        self.reduced(self.reduce_stream, size, "backward", unit, NODE)


def with_family(program: type, scenario) -> type:
    """`program`, with the family's behaviour mixed in when the scenario uses any of it."""
    if not uses_family(scenario):
        return program
    return type(f"{program.__name__}Family", (Family, program),
                {"stream_beside_step": scenario.training.delayed_update})  # the host stream
