"""FSDP2's stage 2, fully_shard(reshard_after_forward=False) (FSDP's SHARD_GRAD_OP): a ZeRO-3
program that keeps each unit's gathered parameters from its forward to the end of its backward,
so backward gathers nothing (Framework.keeps_gathered_parameters says which scenarios run it). The
other frameworks' stage 2 is ZeRO-2 (stages.ZeRO2): whole parameters, gradient buckets and an
all-gather after the step."""

from __future__ import annotations

from collections.abc import Iterator

from zerosim.sim.stages.zero3 import ZeRO3


class KeepGathered(ZeRO3):
    """Forward gathers unit by unit as ZeRO-3 (prefetch included) but hands each buffer's slot
    back without freeing it; backward finds every unit gathered and frees each after use."""

    def start_gathers(self, phase: str, units) -> None:
        if phase == "forward":
            super().start_gathers(phase, units)

    def gathered(self, unit: int, phase: str) -> Iterator:
        return super().gathered(unit, phase) if phase == "forward" else iter(())

    def release(self, unit: int, phase: str) -> None:
        if phase == "forward":
            self.gather_slots.put()  # the prefetch may go on; the parameters stay
        else:
            self.ctx.free(("gathered", "forward", unit))

