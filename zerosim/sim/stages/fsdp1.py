"""FSDP1's ZeRO-3 (FULL_SHARD): a ZeRO-3 program whose root unit (the embedding and the head,
one flat parameter: Framework.keeps_root_gathered) is gathered once, before the embedding's
forward, and stays gathered until the embedding's backward is done; the blocks are gathered
and freed as ZeRO-3's."""

from __future__ import annotations

from collections.abc import Iterator

from zerosim.sim.stages.zero3 import ZeRO3


class RootKept(ZeRO3):
    """Unit 0 gathers the whole root; the head (the last unit) computes on it in forward and
    backward, and backward gathers neither. The root's gradient is still reduce-scattered unit
    by unit (the head's part at the head's backward), a simplification: FSDP1 reduces the root's
    flat gradient once, after the embedding's backward."""

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
