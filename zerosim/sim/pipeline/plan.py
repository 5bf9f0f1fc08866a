"""A pipelined step's plan: what each pipeline stage's representative rank computes and moves
in one step, priced from the scenario, for the executor (events.py) to run as events.

Every number comes from the models a step without a pipeline uses, unit by unit
(sim/stages/step_shape.py over the gather units [embedding, layer 1..L, head]), gathered into
the chunks each stage holds (parallel/pipeline.py):

- a chunk's forward or backward of one micro-batch: its units' compute seconds (costs.py, the op
  model by default), plus tensor parallelism's collectives as stages/tensor.py runs them, each at
  its closed form's time on idle links (the TP group's NVLink is the stage's own);
- the data-parallel collectives of a stage (its d ranks, t apart: groups.world_group), each at
  its closed form among them: stage 0's all-reduce and ZeRO-1's reduce-scatter of the stage's
  gradients in buckets (training.reduce_bucket_MiB), during the last micro-batch's backward where
  the framework overlaps them (Framework.pipeline_overlaps_reduction) or after the stage's last
  backward; ZeRO-1's parameter all-gather after the optimizer step; FSDP2's all-gather of each
  unit before the chunk's first forward and its reduce-scatters after the schedule (torchtitan's
  FSDP2 beside a pipeline: reshard_after_forward=False, torch's REDUCE_GRAD);
- a point-to-point transfer between neighbouring stages: latency + bytes over the link the two
  ranks share (the NVLink of a node, or each GPU's share of its node's NICs), as nccl-tests'
  sendrecv reports it (busbw = algbw: the bytes cross one link once); the sender waits for it
  where its framework does (Framework.pipeline_sends_block).

What is left out: the data-parallel collectives and the transfers are priced alone, never
sharing a NIC with each other (the tail of 1F1B overlaps them on the first stages); Megatron's
overlap of the parameter all-gather with the next step's forward; the tied embedding's gradient
all-reduce between the first and the last stage.
"""

from __future__ import annotations

import math

import simpy

from zerosim.analytic.memory import StageMemory, p2p_bytes, pipeline_memory, shard_elements
from zerosim.analytic.model import gather_units, unit_activation_bytes
from zerosim.contract import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from zerosim.frameworks import framework_of
from zerosim.parallel.pipeline import PipelineLayout, layout_of, stage_orders
from zerosim.parallel.tensor import rank_model
from zerosim.sim.collectives import Collectives
from zerosim.sim.collectives.nccl_tables import (BASE_LATENCY_US, HW_LATENCY_US, NET, NVLINK,
                                                PROTOCOL_ORDER, RING, SIMPLE)
from zerosim.sim.collectives.ring import (FLAT, bytes_sent_per_rank, idle_plan, plan_end_s,
                                          representatives, run_phases)
from zerosim.sim.costs import price_phases
from zerosim.sim.groups import TP, WORLD, all_ranks, node_gpus, subgroups, world_group
from zerosim.sim.network import Cluster
from zerosim.sim.pipeline.events import PipelinePlan, StagePlan
from zerosim.sim.stages.step_shape import StepShape, step_shape
from zerosim.units import US

P2P_PROTOCOL = PROTOCOL_ORDER.index(SIMPLE)
"""NCCL's Simple protocol's place in its (LL, LL128, Simple) latency tables: point-to-point
transfers of activations (megabytes) run Simple."""


class Pricer:
    """Each collective's time alone on its links, as the engine's closed form gives it
    (collectives.ring.idle_plan), and what ran it, per group (the stage's data-parallel ranks,
    the TP group)."""

    def __init__(self, scenario, stage: int) -> None:
        self.scenario, self.stage = scenario, stage
        n = node_gpus(scenario, stage)
        groups = {WORLD: world_group(scenario, stage), **subgroups(scenario, stage)}
        self.groups = groups
        self.libraries = {name: Collectives(scenario, g, node_gpus=n) for name, g in groups.items()}
        flat = self.libraries[WORLD].flat
        self.links = representatives(all_ranks(scenario, stage), {FLAT} if flat else set())
        self.cluster = Cluster(simpy.Environment(), scenario, self.links)
        self._cache: dict[tuple[str, float, str], tuple[float, str, float]] = {}
        self.used: dict[str, dict[str, float]] = {}
        """op (and group) -> algorithm/protocol -> bytes of the calls a stage makes per step."""
        self.sent: list[dict[str, float]] = []
        """Per pipeline stage: op (and group) -> bytes a rank of it sends per step."""

    def seconds(self, op: str, size_bytes: float, group: str = WORLD) -> tuple[float, float]:
        """(seconds, bytes each rank sends) of one call."""
        key = (op, size_bytes, group)
        if key not in self._cache:
            self._cache[key] = self._price(op, size_bytes, group)
        seconds, _, sent = self._cache[key]
        return seconds, sent

    def count(self, stage: int, op: str, size_bytes: float, group: str = WORLD,
              calls: int = 1) -> float:
        """A stage's `calls` calls of one collective in the step: their bytes, under what runs
        them; returns the seconds of one."""
        seconds, sent = self.seconds(op, size_bytes, group)
        _, label, _ = self._cache[op, size_bytes, group]
        name = op if group == WORLD else f"{op} ({group})"
        while len(self.sent) <= stage:
            self.sent.append({})
        self.sent[stage][name] = self.sent[stage].get(name, 0.0) + calls * sent
        by_label = self.used.setdefault(name, {})
        by_label[label] = by_label.get(label, 0.0) + calls * size_bytes
        return seconds

    def _price(self, op: str, size_bytes: float, group: str) -> tuple[float, str, float]:
        ranks = self.groups[group]
        choice = self.libraries[group].choose(op, size_bytes)
        phases = price_phases(self.scenario, op, size_bytes, ranks, choice.phases)
        sent = bytes_sent_per_rank(phases)
        plan = idle_plan(self.cluster, ranks, phases, self.links)
        if plan is not None:
            return plan_end_s(0.0, plan), choice.label, sent
        env = simpy.Environment()  # a phase shares a link with itself: event by event
        env.process(run_phases(env, Cluster(env, self.scenario, self.links), ranks, phases,
                               self.links))
        env.run()
        return env.now, choice.label, sent


def p2p_seconds(scenario, layout: PipelineLayout, size_bytes: int) -> tuple[float, ...]:
    """One transfer over each link i (stage i to stage (i + 1) mod p): the tier's latency, or
    NCCL's for one hop of its Simple protocol (tuning.cc's base latency and the link's hwLat,
    nccl_tables.py) where the cluster gives none, then the bytes at the tier's bandwidth."""
    hw = scenario.cluster.hardware
    out = []
    for i in range(layout.stages):
        inter = layout.crosses_nodes(i)
        tier = hw.inter if inter else hw.intra
        latency = tier.latency_s
        if latency is None:
            latency = (BASE_LATENCY_US[RING][P2P_PROTOCOL]
                       + HW_LATENCY_US[NET if inter else NVLINK][RING][P2P_PROTOCOL]) * US
        out.append(latency + size_bytes / tier.bandwidth_bytes_per_s)
    return tuple(out)


def _unit_times(shape: StepShape, pricer: Pricer) -> tuple[list[float], list[float]]:
    """Each unit's forward and backward seconds for one micro-batch, tensor parallelism's
    collectives included as stages/tensor.py runs them: the compute stream waits for each (an
    async one of the backward beside its GEMM: the longer of the two), or under tp_comm_overlap
    all but the synchronous ones run beside the unit's compute."""
    tensor = shape.tensor
    if not tensor.forward:
        return list(shape.forward_s), list(shape.backward_s)

    def tp(c) -> float:
        return pricer.seconds(c.op, c.size_bytes, TP)[0]

    forward, backward = [], []
    for u, (f, b) in enumerate(zip(shape.forward_s, shape.backward_s)):
        fwd, bwd = tensor.forward[u], tensor.backward[u]
        if tensor.overlap:
            forward.append(max(f, sum(tp(c) for c in fwd if not c.sync))
                           + sum(tp(c) for c in fwd if c.sync))
            backward.append(max(b, sum(tp(c) for c in bwd if not c.sync))
                            + sum(tp(c) for c in bwd if c.sync))
            continue
        windows = shape.tensor_windows[u] if shape.tensor_windows else (0.0,) * len(bwd)
        forward.append(f + sum(tp(c) for c in fwd))
        backward.append(b + sum(max(w, tp(c)) if c.overlaps else tp(c)
                                for c, w in zip(bwd, windows)))
    return forward, backward


def _buckets(total: int, bucket: int) -> list[int]:
    """A buffer of `total` bytes cut into buckets of `bucket` (the last one the rest)."""
    count = max(1, math.ceil(total / bucket)) if total else 0
    return [min(bucket, total - k * bucket) for k in range(count)]


def _reduce_pieces(scenario, shape: StepShape, pricer: Pricer, stage: int, units: list[int],
                   backward: list[float], elements: list[int]) -> list[tuple[float, float]]:
    """A chunk's gradient collectives, each with the fraction of the chunk's last backward
    after which it starts where the framework overlaps them (Framework.
    pipeline_overlaps_reduction: per bucket, gradients made evenly through the backward):
    FSDP2's reduce-scatter per unit, stages 0-1's all-reduce or reduce-scatter per bucket."""
    t = scenario.training
    if framework_of(t).keeps_gathered_parameters(t, shape.stage):  # FSDP2: unit by unit
        total_s = sum(backward[u] for u in units)
        return [(backward[u] / total_s if total_s else 1 / len(units), pricer.count(
            stage, REDUCE_SCATTER, shape.grad_bytes_per_element * elements[u]))
            for u in reversed(units)]
    op = ALL_REDUCE if shape.stage == 0 else shape.gradient_reduction
    grad = shape.grad_bytes_per_element * sum(elements[u] for u in units)
    sizes = _buckets(grad, shape.bucket_bytes)
    return [(size / grad, pricer.count(stage, op, size)) for size in sizes]


def _reductions(scenario, pieces: list[list[tuple[float, float]]],
                last_chunk: int) -> tuple[tuple[tuple[float, float], ...], ...]:
    """StagePlan.reduce: each chunk's pieces during its last backward where the framework
    overlaps the reduction; else every chunk's after the stage's last backward (the chunk
    `last_chunk` runs it: Megatron's finish_grad_sync after forward_backward_func returns,
    DeepSpeed's ReduceGrads, torch's REDUCE_GRAD after every micro-batch)."""
    if framework_of(scenario.training).pipeline_overlaps_reduction(scenario.training):
        return tuple(tuple(p) if p else ((1.0, 0.0),) for p in pieces)
    after = sum(seconds for chunk in pieces for _, seconds in chunk)
    return tuple(((1.0, after if c == last_chunk else 0.0),) for c in range(len(pieces)))


def _count_tensor(shape: StepShape, pricer: Pricer, stage: int, units: list[int],
                  micro_batches: int) -> None:
    """Tensor parallelism's collectives of the stage's units, once per micro-batch and pass."""
    for u in units:
        for c in (*shape.tensor.forward[u], *shape.tensor.backward[u]):
            pricer.count(stage, c.op, c.size_bytes, TP, calls=micro_batches)


def pipeline_plan(scenario, stage: int) -> tuple[PipelinePlan, Pricer, list[StageMemory]]:
    """The plan of one step of `stage` under the scenario's pipeline, the pricer that priced
    its collectives (what ran them, the bytes each stage's ranks send, the communicators a
    rank holds), and each pipeline stage's memory (memory.pipeline_memory) it was built on."""
    layout = layout_of(scenario)
    shape = step_shape(scenario, stage)
    pricer = Pricer(scenario, stage)
    m, t = rank_model(scenario), scenario.training
    elements = gather_units(m)  # the head's stage holds its own output matrix (tied or not)
    acts = unit_activation_bytes(m, t)
    forward, backward = _unit_times(shape, pricer)
    keeps = framework_of(t).keeps_gathered_parameters(t, stage)
    rows = pipeline_memory(scenario, stage)
    bp = shape.param_bytes_per_element
    plans = []
    for i in range(layout.stages):
        chunks = [layout.chunk_units(i, c) for c in range(layout.virtual)]
        if shape.tensor.forward:
            _count_tensor(shape, pricer, i, layout.stage_units(i), layout.micro_batches)
        psi = sum(elements[u] for c in chunks for u in c)
        gathers = tuple(tuple(pricer.count(i, ALL_GATHER, bp * elements[u]) for u in c)
                        for c in chunks) if keeps else ()
        optimizer = shape.optimizer.seconds(psi if stage == 0 else
                                            shard_elements(psi, shape.mesh.dp_shard))
        optimizer += sum(pricer.count(i, c.op, c.size_bytes, TP) for c in shape.tensor.step)
        reduce = _reductions(scenario, [_reduce_pieces(scenario, shape, pricer, i, c, backward,
                                                       elements) for c in chunks],
                             stage_orders(layout)[i][-1].chunk)
        gathered = bp * psi if stage == 1 else 0  # ZeRO-1: every rank's updated shard
        after = tuple(pricer.count(i, ALL_GATHER, size)
                      for size in _buckets(gathered, shape.allgather_bucket_bytes))
        row = rows[i]
        plans.append(StagePlan(
            forward_s=tuple(sum(forward[u] for u in c) for c in chunks),
            backward_s=tuple(sum(backward[u] for u in c) for c in chunks),
            activation_bytes=tuple(sum(acts[u] for u in c) for c in chunks),
            gather_s=gathers, reduce=reduce, optimizer_s=optimizer, after_s=after,
            static_bytes=row.model_states_bytes + row.buffers_bytes))
    size = p2p_bytes(scenario)
    return PipelinePlan(schedule=layout.schedule, stages=layout.stages,
                        micro_batches=layout.micro_batches, virtual=layout.virtual,
                        stage_plans=tuple(plans), p2p_s=p2p_seconds(scenario, layout, size),
                        p2p_bytes=size, blocking_sends=framework_of(t).pipeline_sends_block(
                            layout.schedule)), pricer, rows

