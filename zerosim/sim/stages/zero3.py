"""ZeRO-3 as the difference it makes to ZeRO-1 (replicated.py): parameters sharded, gathered unit by
unit before forward and again before backward, and each unit's gradient reduce-scattered on a
stream of its own, which shares the links with the gathers."""

from __future__ import annotations

from typing import Iterator

from zerosim.analytic.memory import STAGE3_LIVE_LAYER_GRADS
from zerosim.sim.stages.replicated import DDP, ZeRO1
from zerosim.sim.stages.step_shape import StepShape


class ZeRO3(ZeRO1):
    """Stage 3: parameters sharded. Each unit is all-gathered before forward and again before
    backward (prefetched up to prefetch_layers ahead), freed after use; each unit's gradient is
    reduce-scattered on its own stream, which shares the links with the gathers."""

    reduces_every_micro_step = True
    reduce_stream = "reduce"
    collectives_share_links = True  # gathers on one stream while reduce-scattering on another

    def __init__(self, ctx, shape: StepShape) -> None:
        super().__init__(ctx, shape)
        self.gather_slots = ctx.slots(1 + shape.prefetch_layers)
        self.grad_slots = ctx.slots(STAGE3_LIVE_LAYER_GRADS)
        self.gathers: dict[tuple[str, int], object] = {}
        self.grad_shards: set[int] = set()

    def kept(self, unit: int) -> bool:
        """The last unit, when it stays gathered from its forward into its backward."""
        return self.shape.keeps_last_unit and unit == self.layers - 1

    def start_gathers(self, phase: str, units) -> None:
        for unit in units:
            if phase == "backward" and self.kept(unit):
                continue  # still gathered, since its forward
            pieces = self.pieces(unit, self.shape.param_bytes_per_element)
            size = sum(pieces)

            def take_slot(unit=unit, size=size) -> Iterator:
                yield from self.gather_slots.take()  # prefetch depth: wait for a free buffer
                # allocated for the gather's stream (DeepSpeed and FSDP2 gather on their own)
                self.ctx.alloc(("gathered", phase, unit), "gathered", size, stream="gather")

            self.fetch(phase, unit)
            for i, piece in enumerate(pieces):
                # one stream: the unit's last buffer gathered, all of them are
                self.gathers[phase, unit] = self.ctx.comm(
                    "gather", "all_gather", self.wire(piece), "parameter all-gather", phase, unit,
                    before=None if i else take_slot, group=self.gather_group(phase))

    def pieces(self, unit: int, element_bytes: int, gradient: bool = False) -> list[int]:
        """The bytes of each flat buffer of the unit (StepShape.gather_buffers), one collective
        each; of its gradient, without a tied head's matrix (reduced with the embedding's)."""
        whole = (self.shape.gradient_elements if gradient else self.shape.gather_elements)[unit]
        buffers = self.shape.gather_buffers[unit] if self.shape.gather_buffers else [whole]
        if gradient and sum(buffers) != whole:
            buffers = buffers[:-1]  # the tied matrix, gathered again by the head
        if sum(buffers) != whole:
            buffers = [whole]
        return [element_bytes * b for b in buffers]

    def fetch(self, phase: str, unit: int) -> None:
        """What precedes a unit's all-gather on its stream (parameter offload's copy up)."""

    def wire(self, size: int) -> float:
        """Bytes an all-gather of `size` bytes of parameters sends (ZeRO++ qwZ: fewer)."""
        return size

    def gather_group(self, phase: str) -> str:
        return self.group

    def gathered(self, unit: int, phase: str) -> Iterator:
        if not (phase == "backward" and self.kept(unit)):
            yield self.gathers.pop((phase, unit))
            yield from self.unpack(unit, phase)
        if not self.shape.overlap_comm:  # synchronous prefetch: the next units before compute
            # gathers are queued in the order the units compute
            ahead = [self.gathers[key] for key in self.gathers if key[0] == phase]
            ahead = ahead[:self.shape.prefetch_layers]
            if ahead:
                yield self.env.all_of(ahead)

    def unpack(self, unit: int, phase: str) -> Iterator:
        """Compute on a gathered unit before its own (ZeRO++ qwZ's dequantization)."""
        return iter(())

    def release(self, unit: int, phase: str) -> None:
        if self.kept(unit):
            if phase == "forward":
                return  # its backward follows at once
            phase = "forward"  # the buffer its forward gathered
        self.ctx.free(("gathered", phase, unit))
        self.gather_slots.put()

    def produce_gradients(self, unit: int) -> Iterator:
        yield from self.grad_slots.take()
        bg = self.shape.grad_bytes_per_element
        key = ("layer_grads", unit)
        # A tied head produces a gradient for the whole shared matrix (memory), but its part is
        # added to the embedding's and reduce-scattered with the embedding unit: sent once.
        held = bg * self.shape.gather_elements[unit]
        tied = self.shape.tied_grad_bytes
        if tied and unit == self.layers - 1:  # the tied matrix's part waits for the embedding's
            self.ctx.alloc("tied gradient", "layer_grads", tied)
        if tied and unit in (0, self.layers - 1):
            held -= tied  # the head's own part; the embedding adds into the tied one's buffer
        self.ctx.alloc(key, "layer_grads", held)
        size = bg * self.shape.gradient_elements[unit]
        yield from self.unit_compute(unit, "backward", self.shape.backward_s[unit])

        def reduced() -> None:
            self.ctx.free(key)
            if tied and unit == 0:
                self.ctx.free("tied gradient")
            self.grad_slots.put()
            if self.shape.grad_shard_bytes and unit not in self.grad_shards:
                self.grad_shards.add(unit)  # once: later micro-steps add into it. FSDP2 makes
                # them the reduce-scatter's output, on the reduce-scatter stream (its own pool)
                for i, size in enumerate(self.shape.grad_shard_bytes[unit]):
                    self.ctx.alloc(("grad shard", unit, i), "grads", size, stream="reduce")

        yield from self.reduce_unit(size, unit, reduced)
        yield from self.synchronous()

    def reduce_unit(self, size: int, unit: int, after) -> Iterator:
        """Reduce-scatter one unit's gradient (`size` bytes) among the shard group, a collective
        per flat buffer (pieces); `after` once the last is done."""
        pieces = self.pieces(unit, self.shape.grad_bytes_per_element, gradient=True)
        if sum(pieces) != size:
            pieces = [size]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            self.pending.append(self.ctx.comm(self.reduce_stream, "reduce_scatter", piece,
                                              "gradient reduce-scatter", "backward", unit,
                                              after=after if last else None, group=self.group))
        self.reduced(self.reduce_stream, size, "backward", unit, self.group)
        return iter(())

    def optimizer_step(self) -> Iterator:
        yield from DDP.optimizer_step(self)  # on the shard; parameters stay sharded: no all-gather

