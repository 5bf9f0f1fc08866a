"""FSDP1's ZeRO-3 (FULL_SHARD): a ZeRO-3 program whose root unit (the embedding and the head,
one flat parameter: Framework.keeps_root_gathered) is gathered once, before the embedding's
forward, and stays gathered until the embedding's backward is done; the blocks are gathered
and freed as ZeRO-3's."""

from __future__ import annotations

from collections.abc import Iterator

from zerosim.sim.stages.zero3 import ZeRO3


class RootKept(ZeRO3):
    """Unit 0 gathers the whole root; the head (the last unit) computes on it in forward and
    backward, and backward gathers neither. The head's gradient is held from its backward until
    the embedding's is reduced (FSDP1 builds the root's one flat gradient then); its
    reduce-scatter still runs at the head's backward, a simplification of the one collective
    FSDP1 runs for the root after the embedding's backward."""

    def root(self, unit: int) -> bool:
        return unit in (0, self.layers - 1)

    def start_gathers(self, phase: str, units) -> None:
        last = self.layers - 1
        super().start_gathers(phase, [u for u in units if not (
            u == last or (phase == "backward" and u == 0))])

    def pieces(self, unit: int, element_bytes: int, gradient: bool = False) -> list[int]:
        if unit == 0 and not gradient:
            return [element_bytes * self.shape.root_elements]
        return super().pieces(unit, element_bytes, gradient)

    def gathered(self, unit: int, phase: str) -> Iterator:
        if self.root(unit) and not (phase == "forward" and unit == 0):
            return iter(())
        return super().gathered(unit, phase)

    def release(self, unit: int, phase: str) -> None:
        if unit == 0 and phase == "forward":
            self.gather_slots.put()  # the prefetch may go on; the root stays gathered
        elif unit == 0:
            self.ctx.free(("gathered", "forward", 0))
        elif unit != self.layers - 1:
            super().release(unit, phase)

    def produce_gradients(self, unit: int) -> Iterator:
        if unit == self.layers - 1:
            size = self.shape.grad_bytes_per_element * self.shape.gradient_elements[unit]
            self.ctx.alloc("root's head gradient", "layer_grads", size)
        yield from super().produce_gradients(unit)

    def reduce_unit(self, size: int, unit: int, after) -> Iterator:
        if unit != 0:
            return super().reduce_unit(size, unit, after)

        def root_done() -> None:
            after()
            self.ctx.free("root's head gradient")

        return super().reduce_unit(size, unit, root_done)
