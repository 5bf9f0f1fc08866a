"""Tensor parallelism on top of any stage program (replicated.py, zero3.py, fsdp2.py, with the
family of family.py): each unit's TP collectives (analytic/tensor_comm.py) around its compute,
on a stream of their own among the TP group (sim/groups.TP), while the stage's own collectives
run among the data-parallel ranks (groups.WORLD) as before.

- Megatron-LM's default: the compute stream waits for each collective of the forward, and for
  the backward's synchronous ones; those LinearWithGradAccumulationAndAsyncCommunication
  launches async_op=True (the input-gradient all-reduce or reduce-scatter, the re-gather of a
  saved input: tensor_comm's `window`) run beside the one GEMM it launches them before (the
  weight gradient, the input gradient), and the compute stream waits for them after it. A
  unit's backward runs its collectives (each async one beside its GEMM) before the rest of its
  compute, so that its gradients are reduced after every weight-gradient GEMM, as Megatron's
  gradient hooks fire.
- `tp_comm_overlap` (Megatron's userbuffers, PyTorch's async TP): every collective of a unit
  runs beside its compute, the unit ending when both are done, but a synchronous one
  (tensor_comm's `sync`: the QKV output's gather when kv < t), which blocks as before.
- under sequence parallelism the replicated parameters' gradients are all-reduced among the TP
  group before the optimizer step (finalize_model_grads), the compute stream waiting.

The TP stream's collectives run while the stage's gathers and reductions are in flight, and a
data-parallel group with several ranks in a node moves bytes over the same NVLink as the TP
group: collectives share links (collectives_share_links), so none takes its closed form alone.
"""

from __future__ import annotations

from typing import Iterator

from zerosim.analytic.tensor_comm import TpCollective
from zerosim.sim.groups import TP


class TensorParallel:
    """Mixed in before a stage program when tensor_parallel > 1: its tensor_begin/tensor_end
    hooks and the optimizer step's TP all-reduce."""

    collectives_share_links = True

    def __init__(self, ctx, shape) -> None:
        super().__init__(ctx, shape)
        self.tensor = shape.tensor
        self.beside: list = []
        """This unit's TP collectives running beside its compute."""

    def _collectives(self, unit: int, phase: str) -> tuple[TpCollective, ...]:
        return (self.tensor.forward if phase == "forward" else self.tensor.backward)[unit]

    def _launch(self, c: TpCollective, phase: str, unit: int | None):
        return self.ctx.comm(TP, c.op, c.size_bytes, c.name, phase, unit, group=TP)

    def _in_order(self, unit: int, phase: str) -> Iterator:
        """The unit's collectives one after the other, the compute stream waiting for each;
        an async one of the backward beside the GEMM it hides behind."""
        windows = self.shape.tensor_windows  # none under tp_comm_overlap
        windows = windows[unit] if phase == "backward" and windows else ()
        for i, c in enumerate(self._collectives(unit, phase)):
            if self.tensor.overlap and not c.sync:
                continue  # launched beside the unit's compute (tensor_begin)
            done = self._launch(c, phase, unit)
            if c.overlaps and windows:  # async: its GEMM runs meanwhile, then the wait
                yield from self.ctx.compute(windows[i], "backward", phase, unit)
            yield done

    def tensor_begin(self, unit: int, phase: str) -> None:
        if self.tensor.overlap:  # every collective beside the unit's whole compute but a sync one
            self.beside = [self._launch(c, phase, unit) for c in self._collectives(unit, phase)
                           if not c.sync]

    def tensor_backward(self, unit: int) -> Iterator:
        """Megatron's default, before the unit's gradients are reduced (its weight-gradient
        GEMMs, windows among them, come before its gradient hooks fire): each collective, the
        async ones beside their GEMM; under tp_comm_overlap the synchronous ones alone."""
        yield from self._in_order(unit, "backward")

    def tensor_end(self, unit: int, phase: str) -> Iterator:
        if phase == "forward":
            yield from self._in_order(unit, phase)
        if self.beside:
            yield self.env.all_of(self.beside)
            self.beside = []

    def optimizer_step(self) -> Iterator:
        for c in self.tensor.step:
            yield self._launch(c, "step", None)
        yield from super().optimizer_step()


def with_tensor_parallel(program: type, scenario) -> type:
    """`program`, with tensor parallelism's collectives mixed in when t > 1."""
    if scenario.parallelism.tensor_parallel == 1:
        return program
    return type(f"{program.__name__}TP", (TensorParallel, program), {})
