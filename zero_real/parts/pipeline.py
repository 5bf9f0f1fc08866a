"""A pipeline stage for real: a rank's block of the model's units, run in its schedule's order of
forwards and backwards, activations and gradients passed to its neighbours point to point.

    the stage's units      zerosim.parallel.pipeline.layout_of(scenario).stage_units(i): the
                           embedding on stage 0, a contiguous block of layers, the final norm,
                           output layer and loss on stage p - 1 (Megatron-LM's pre_process and
                           post_process, megatron/core/models/gpt/gpt_model.py)
    the order              zerosim.parallel.schedule.orders(schedule, p, m, 1)[i]: the same list
                           of Op(kind, micro, chunk) the simulator runs, never a second schedule
    the transfers          after each op, its sends and the next op's receives in one
                           batch_isend_irecv (Megatron-LM's send_forward_recv_backward and
                           send_backward_recv_forward, megatron/core/pipeline_parallel/
                           p2p_communication.py; torch.distributed.pipelining's Schedule1F1B
                           batches fwd_sends + bwd_recvs the same way): two neighbours post the
                           matching sends and receives together, so 1F1B's steady state cannot
                           wait in a cycle, on gloo or on NCCL
    the ZeRO stage         DDP or ZeRO-1 (zero_real.stages) over the stage's d data-parallel
                           ranks, its buckets reduced once, after the stage's last backward
                           (Megatron-LM's finalize_model_grads, after the schedule)
    a tied embedding       the last stage holds its own copy as the output layer, initialised
                           equal; the two copies' gradients are summed over the first and last
                           stage before the data-parallel reduction (Megatron's embedding group,
                           finalize_model_grads._allreduce_word_embedding_grads)

Each transfer is a MeasuredEvent on the stream zerosim.contract.P2P, op "send" or "recv", with
its bytes: b x s x h elements of the training dtype per micro-batch ([s/t, b, h] under sequence
parallelism). Each micro-batch's saved activations are tracked apart and released after its
backward, so the ledger's activation peak is what the schedule keeps in flight.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch import nn

from zero_real.parts.measure import ActivationTracker
from zerosim.contract import P2P, P2P_OPS, PASSES

FORWARD, BACKWARD = PASSES  # zerosim.parallel.schedule's Op kinds
TOK, TIED_COPY = "embedding.tok.weight", "head.lm_head.weight"


class Absent(nn.Module):
    """A unit another stage holds. The ZeRO stages ask a model whether its head is tied and
    which parameter is its token embedding (zero_real.stages.replicated.DDP): neither is here."""

    tok = lm_head = SimpleNamespace(weight=None)


class StageModel(nn.Module):
    """The units one pipeline stage holds, taken from the whole model (or a tensor-parallel
    rank's slice of it) built on the meta device. Parameter names are the stage's own (its
    blocks count from 0); `global_name` gives the whole model's."""

    def __init__(self, full: nn.Module, units: list[int]):
        super().__init__()
        layers = len(full.blocks)
        self.config, self.tensor_comm = full.config, full.tensor_comm
        self._full = (full,)  # a tuple: not a submodule, its parameters are not the stage's
        blocks = [u - 1 for u in units if 1 <= u <= layers]
        self.first_block = blocks[0] if blocks else 0
        self.embedding = full.embedding if 0 in units else Absent()
        self.blocks = nn.ModuleList(full.blocks[i] for i in blocks)
        self.head = full.head if layers + 1 in units else Absent()
        self.unit_ids, self.head_unit = units, layers + 1
        self.tied_copy = self.config.tied_embeddings and layers + 1 in units
        if self.tied_copy:  # the output layer's own copy of the word embedding
            rows, hidden = full.embedding.tok.weight.shape
            with torch.device("meta"):
                self.head.lm_head = nn.Linear(hidden, rows, bias=False)

    def units(self) -> list[tuple[int, nn.Module]]:
        """(the unit's index in the whole model's [embedding, layer 1..L, head], the module)."""
        modules = [self.embedding, *self.blocks, self.head]
        held = [m for m in modules if not isinstance(m, Absent)]
        return list(zip(self.unit_ids, held))

    def global_name(self, name: str) -> str:
        if not name.startswith("blocks."):
            return name
        _, index, rest = name.split(".", 2)
        return f"blocks.{int(index) + self.first_block}.{rest}"

    def initial(self, name: str, shape: torch.Size, seed: int, dtype: torch.dtype,
                device: str | torch.device = "cpu") -> torch.Tensor:
        """The whole model's initial value of the parameter (the tied copy: the embedding's)."""
        name = self.global_name(name)
        if self.tied_copy and name == TIED_COPY:
            name = TOK
        return self._full[0].initial(name, shape, seed, dtype, device)

    def sum_partial_grads(self, regions, device, ledger) -> None:
        """Sequence parallelism's partial gradients (TensorParallelGPT.sum_partial_grads)."""
        self._full[0].sum_partial_grads(regions, device, ledger)


def boundary_shape(scenario) -> tuple[int, ...]:
    """The activation one stage passes to the next for one micro-batch: [b, s, h] as
    zero_real.parts.model runs, [s, b, h] under tensor parallelism (Megatron's order), [s/t, b,
    h] under sequence parallelism (Korthikanti et al. 2022 §4.2.2: the boundary is a
    sequence-parallel region)."""
    t, p, h = scenario.training, scenario.parallelism, scenario.model.hidden
    if p.tensor_parallel == 1:
        return (t.micro_batch, t.seq_len, h)
    s = t.seq_len // p.tensor_parallel if p.sequence_parallel else t.seq_len
    return (s, t.micro_batch, h)


class Transfers:
    """Point-to-point transfers between neighbouring stages, batched (module docstring), each
    recorded as a MeasuredEvent on the P2P stream."""

    def __init__(self, recorder):
        self.rec = recorder

    def exchange(self, sends: list[tuple], recvs: list[tuple]) -> None:
        """Send each (tensor, global rank, pass it serves) of `sends` and receive into each of
        `recvs`, all posted at once; returns when every one is done (each event spans the batch:
        the transfers of one batch run together)."""
        pairs = [(P2P_OPS[0], dist.isend, *send) for send in sends]
        pairs += [(P2P_OPS[1], dist.irecv, *recv) for recv in recvs]
        if not pairs:
            return
        items = [(op, t.numel() * t.element_size(), phase) for op, _, t, _, phase in pairs]
        with self.rec.transfers(P2P, items):
            works = dist.batch_isend_irecv([dist.P2POp(fn, t, peer)
                                            for _, fn, t, peer, _ in pairs])
            for work in works:
                work.wait()  # gloo's and NCCL's timeout: the world's --timeout-s


class PipelineStage:
    """One rank's pipeline stage: `engine` (DDP or ZeRO-1 over the stage's data-parallel group,
    built on a StageModel) driven in `order`; the interface train() asks of a stage (step,
    full_parameters, hooks)."""

    def __init__(self, engine, groups, order: list, scenario):
        self.engine, self.groups, self.order = engine, groups, order
        self.first, self.last = groups.previous is None, groups.next is None
        self.units = engine.model.units()
        self.shape = boundary_shape(scenario)
        self.transfers = Transfers(engine.rec)
        self.hooks = engine.hooks  # train() removes them after the run

    def step(self, batches, step: int) -> float:
        """One optimizer step: the schedule's forwards and backwards of the m micro-batches,
        the tied embedding's copies summed, the data-parallel reduction, the optimizer. Returns
        the mean loss over the micro-batches on the last stage, 0 elsewhere (train.global_losses
        averages over the last stage's ranks)."""
        e = self.engine
        e.zero_grads()  # once: the micro-batches accumulate into the gradient buffer
        e.reducing = False  # every bucket is reduced after the last backward (below)
        micro = list(batches)
        if len(micro) != e.accumulation:
            raise ValueError(f"{len(micro)} micro-batches for gradient_accumulation "
                             f"{e.accumulation}")
        self.held, self.inbox, self.outbox, self.total = {}, {}, [], None
        self.transfers.exchange([], self.receives(self.order[0]))
        for j, op in enumerate(self.order):
            run = self.forward if op.kind == FORWARD else self.backward
            run(op.micro, micro[op.micro], step)
            following = self.receives(self.order[j + 1]) if j + 1 < len(self.order) else []
            self.transfers.exchange(self.outbox, following)
            self.outbox = []
        assert not self.held and not self.inbox, "micro-batches left in flight"
        self.reduce_gradients()
        e.rec.mark("after_backward", step)
        e.rec.phase = "step"
        with e.rec.compute("optimizer", None):
            e.optimizer_step()
        e.rec.mark("after_step", step)
        return self.total.item() / e.accumulation if self.last else 0.0

    def receives(self, op) -> list[tuple[torch.Tensor, int, str]]:
        """The buffer `op` receives into before it runs: a forward's activation from the previous
        stage, a backward's gradient from the next; none on the first or last stage."""
        peer = self.groups.previous if op.kind == FORWARD else self.groups.next
        if peer is None:
            return []
        buffer = torch.empty(self.shape, dtype=self.engine.dtype, device=self.engine.device)
        self.inbox[op.kind, op.micro] = buffer
        return [(buffer, peer, op.kind)]

    def forward(self, micro: int, batch, step: int) -> None:
        e, (idx, targets) = self.engine, batch
        e.rec.phase, inputs, outputs, head = FORWARD, [], [], e.model.head_unit
        x = idx if self.first else self.inbox.pop((FORWARD, micro))
        acts = ActivationTracker(e.rec.ledger, e.is_param_storage)  # this micro-batch's own
        with acts.hooks():
            for s, unit in self.units:
                with e.rec.compute(FORWARD, s):
                    # A detached input per unit: backward runs one unit at a time (as DDP's).
                    x_in = x if s == 0 else x.detach().requires_grad_()
                    # the head's own output layer (or tied copy): no token embedding passed
                    x = unit(x_in, None, targets) if s == head else unit(x_in)
                inputs.append(x_in)
                outputs.append(x)
        self.held[micro] = inputs, outputs, acts
        if self.last:
            loss = x.detach().clone()
            self.total = loss if self.total is None else self.total.add_(loss)
        else:
            self.outbox.append((x.detach().contiguous(), self.groups.next, FORWARD))
        e.rec.mark("after_forward", step)

    def backward(self, micro: int, batch, step: int) -> None:
        e = self.engine
        inputs, outputs, acts = self.held.pop(micro)
        if self.last:  # the loss of one micro-batch of m: its gradient is 1/m (DDP.step's)
            grad = torch.tensor(e.loss_scale.value / e.accumulation, device=outputs[-1].device)
        else:
            grad = self.inbox.pop((BACKWARD, micro))
        e.fired, e.filled = [0] * len(e.uses), [0] * len(e.buckets)
        e.rec.phase = BACKWARD
        for k in reversed(range(len(self.units))):
            s = self.units[k][0]
            with e.rec.compute(BACKWARD, s):
                torch.autograd.backward(outputs[k], grad)
            grad = inputs[k].grad if s > 0 else None
            outputs[k] = inputs[k] = None  # this unit's activations are released
        acts.release()
        if not self.first:
            self.outbox.append((grad.contiguous(), self.groups.previous, BACKWARD))

    def reduce_gradients(self) -> None:
        """After the stage's last backward: a tied embedding's two copies summed over the
        embedding group (so both step with the whole gradient), then every bucket reduced over
        the data-parallel group, in the order DDP's hooks would have reduced them."""
        e, model = self.engine, self.engine.model
        if model.config.tied_embeddings and self.groups.embedding is not None:
            weight = model.head.lm_head.weight if self.last else model.embedding.tok.weight
            self.groups.embedding.all_reduce(weight.grad, name="embedding grads (tied)")
        for i in range(len(e.buckets)):
            e.reduce_bucket(i)

    def full_parameters(self) -> dict[str, torch.Tensor]:
        """The stage's parameters under the whole model's names; the tied copy left out (the
        embedding on stage 0 is the parameter)."""
        model = self.engine.model
        out = {model.global_name(n): v for n, v in self.engine.full_parameters().items()}
        if model.tied_copy:
            del out[TIED_COPY]
        return out


def build_pipeline_stage(scenario, comm, stage_cls, **engine_kwargs):
    """(this rank's PipelineStage, its data-parallel group's Collectives). `comm`: the world;
    `stage_cls`: the ZeRO stage's class (zero_real.stages.STAGES), built with `engine_kwargs`
    (recorder, device, seed, lr)."""
    from zero_real.parts.collectives import pipeline_groups_of
    from zero_real.parts.model import build_model
    from zero_real.parts.tensor_model import build_tensor_parallel_model
    from zerosim.parallel.pipeline import layout_of
    from zerosim.parallel.schedule import orders

    par, flash = scenario.parallelism, scenario.training.flash_attention
    layout = layout_of(scenario)
    groups = pipeline_groups_of(comm, par.tensor_parallel, layout.stages)
    if groups.tensor is None:
        full = build_model(scenario.model, flash=flash)
    else:
        full = build_tensor_parallel_model(scenario.model, groups.tensor, par.sequence_parallel,
                                           flash=flash)
    model = StageModel(full, layout.stage_units(groups.stage))
    data = groups.data
    engine = stage_cls(model, scenario, rank=data.rank, world_size=data.world_size, comm=data,
                       **engine_kwargs)
    order = orders(layout.schedule, layout.stages, layout.micro_batches, 1)[groups.stage]
    return PipelineStage(engine, groups, list(order), scenario), data
