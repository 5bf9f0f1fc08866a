"""Runs one training step of a stage on the simulated cluster and collects what happened.

Every simulated rank has a compute stream (its stage program, stages.py) and communication streams
(rank.py: FIFO queues served one collective at a time, like CUDA streams carrying NCCL kernels). A
collective starts when every simulated rank has launched it, and moves its bytes over the links of
the cluster (network.py) in the phases of its algorithm (collectives/).

A uniform cluster is simulated through one representative rank: every rank does the same thing
at the same time, so rank 0's compute, memory and links (plus the one link per role a flat
ring needs) stand for all of them. That turns O(n) processes per collective into O(1). With
stragglers or degraded links, ranks fall into classes: one representative of the uniform ranks,
each straggler, and each degraded link are simulated ("classes"). Jitter makes every rank
different, so every rank is simulated ("per_rank"). On the same input the modes give identical
numbers (tests/zerosim/test_engine.py).

Stages 0-2 queue every collective on one stream, so each has the links to itself and takes its
closed form's time (collectives.ring.idle_plan) in one event, or in none when nothing else is due
before it ends: a run of queued buckets or all-gathers costs no event each (clock.py). That is
granularity "collective"; "phase" simulates every phase and wait as events, with the same numbers
(tests/zerosim/test_engine_batching.py).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Iterator

import simpy

from zerosim.contract import SIM_MODES
from zerosim.errors import InputError
from zerosim.model import model_flops_per_token
from zerosim.scenario.config import Scenario
from zerosim.scenario.variation import VariationConfig
from zerosim.sim.clock import Environment
from zerosim.sim.collectives import Collectives, bytes_sent_per_rank
from zerosim.sim.collectives.ring import (FLAT, Group, idle_plan, plan_end_s, representatives,
                                          run_phases)
from zerosim.sim.costs import op_model, price_phases
from zerosim.sim.device import overhead
from zerosim.sim.network import Cluster
from zerosim.sim.rank import RankContext
from zerosim.sim.result import StageResult
from zerosim.sim.stage_fsdp2 import stage_program
from zerosim.sim.stages import ZeRO3
from zerosim.sim.step_shape import step_shape

# Simulating every rank costs O(ranks) processes per collective phase: about 25 s per stage at
# 256 ranks on one core; beyond this a run would take many minutes.
MAX_PER_RANK = 512
GRANULARITIES = ("collective", "phase")
"""How finely a step is simulated: "collective", the closed form of each collective alone on its
links, with no event where one would only resume the process waiting for it (clock.py); "phase",
every phase of every collective and every wait as its own events: the reference, which gives the
same numbers (tests/zerosim/test_engine_batching.py)."""


class Engine:
    """One step of one stage on the simulated cluster: the ranks it simulates, their links, and
    the collectives they join."""

    def __init__(self, scenario: Scenario, stage: int, mode: str = "auto",
                 keep_events: bool = True, granularity: str = "collective") -> None:
        if mode not in SIM_MODES:
            raise ValueError(f"mode {mode!r} is not one of {SIM_MODES}")
        self.scenario, self.stage = scenario, stage
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity {granularity!r} is not one of {GRANULARITIES}")
        self.env = Environment(shortcuts=granularity == "collective")
        self.program = stage_program(scenario.training, stage)
        self.closed_form = granularity == "collective" and one_stream(self.program)
        """A collective alone on its links takes its closed form's time, in one event or none
        (clock.py); else its phases move over the links event by event."""
        c = scenario.cluster
        self.group = Group(c.world_size, c.gpus_per_node)
        self.library = Collectives(scenario, self.group)
        self.used: dict[str, dict[str, float]] = {}
        """op -> the algorithm (and protocol) that ran it -> bytes of the calls it ran."""
        v = scenario.variation
        if mode == "symmetric" and not v.is_uniform:
            raise InputError("--mode symmetric needs a uniform cluster, but [variation] sets "
                             "stragglers, degraded links or jitter")
        if mode == "per_rank" or v.jitter_pct:
            self.mode = "per_rank"  # jitter makes every rank different
        else:
            self.mode = "symmetric" if v.is_uniform else "classes"
        if self.mode == "per_rank" and c.world_size > MAX_PER_RANK:
            raise InputError(
                f"simulating every rank of {c.world_size} ranks (needed for jitter or "
                f"--mode per_rank) is limited to {MAX_PER_RANK} ranks: it costs O(ranks) per "
                f"collective (about 25 s per stage at 256 ranks)")
        scopes = {FLAT} if self.library.flat else set()
        if self.mode == "per_rank":
            self.compute_ranks = self.link_ranks = list(range(c.world_size))
        else:
            # Ranks in one class do the same thing at the same time: one uniform representative
            # (the first rank that is neither slow) stands for all of them, every straggler is
            # simulated, and every degraded link joins the representative links.
            uniform = next((r for r in range(c.world_size) if r not in v.slow), None)
            self.compute_ranks = sorted(v.slow | ({uniform} if uniform is not None else set()))
            self.link_ranks = sorted(v.degraded.union(representatives(self.group, scopes)))
            if len(self.compute_ranks) > MAX_PER_RANK:
                raise InputError(f"{len(self.compute_ranks)} slow ranks are more than the "
                                 f"{MAX_PER_RANK} ranks the engine simulates one by one")
        self.cluster = Cluster(self.env, scenario, self.link_ranks)
        self.sm_share = sm_share(scenario, self.library)
        """The share of a GPU's SMs one collective's kernel takes from compute (op-by-op compute
        only: the flat fraction of peak already stands for everything a step loses)."""
        self.keep_events = keep_events
        self.keep_samples = keep_events
        self._pending: dict[tuple[str, int], list] = {}
        self._phases: dict[tuple[str, float], list] = {}
        self.moved = 0
        """Collectives completed so far."""
        self.progress: Callable[[int, int], None] | None = None
        self.collectives = 0
        """The step's collectives, known when progress is reported (count_collectives)."""

    def collective(self, key: tuple[str, int], op: str, size_bytes: float) -> simpy.Event:
        """Join collective `key`; fires with (start_s, bytes sent per rank) once it completes.
        It starts when the last simulated rank has joined."""
        entry = self._pending.get(key)
        if entry is None:
            entry = self._pending[key] = [0, self.env.event()]
        entry[0] += 1
        if entry[0] == len(self.compute_ranks):
            del self._pending[key]
            self.env.process(self._run_collective(op, size_bytes, entry[1]))
        return entry[1]

    def _run_collective(self, op: str, size_bytes: float, done: simpy.Event) -> Iterator:
        start_s = self.env.now
        sent_bytes = yield from self.move(op, size_bytes)
        done.succeed((start_s, sent_bytes))

    def move(self, op: str, size_bytes: float) -> Iterator:
        """Process body: the collective's phases over the simulated links; returns the bytes
        each rank sent. Priced phases are cached: buckets mostly share one size."""
        cached = self._phases.get((op, size_bytes))
        if cached is None:
            cached = self._phases[op, size_bytes] = self._price(op, size_bytes)
        label, phases, plan, sent_bytes = cached
        by_label = self.used.setdefault(op, {})
        by_label[label] = by_label.get(label, 0.0) + size_bytes
        if plan is None:
            yield from run_phases(self.env, self.cluster, self.group, phases, self.link_ranks)
        elif plan:  # alone on its links: its closed form (clock.py)
            end_s = plan_end_s(self.env.now, plan)
            if not self.env.advance(end_s):
                yield from self.env.arrive(end_s)
        self.moved += 1
        if self.progress is not None:
            self.progress(min(self.moved, self.collectives), self.collectives)
        return sent_bytes

    def _price(self, op: str, size_bytes: float) -> tuple:
        """How a call runs: its label, phases, idle_plan (None: event by event) and the bytes
        each rank sends."""
        choice = self.library.choose(op, size_bytes)
        phases = price_phases(self.scenario, op, size_bytes, self.group, choice.phases, self.stage)
        plan = None
        if self.closed_form:
            plan = idle_plan(self.cluster, self.group, phases, self.link_ranks)
        return choice.label, phases, plan, bytes_sent_per_rank(phases)

    def run(self) -> list[RankContext]:
        """Every simulated rank runs the stage's program to the end of the step."""
        shape = step_shape(self.scenario, self.stage)
        contexts = [RankContext(self, rank) for rank in self.compute_ranks]
        for ctx in contexts:
            self.env.process(self._rank_step(ctx, self.program(ctx, shape).run()))
        self.env.run()
        if self._pending:
            raise RuntimeError(f"collectives never completed: {sorted(self._pending)}")
        return contexts

    def _rank_step(self, ctx: RankContext, step: Iterator) -> Iterator:
        yield from step
        ctx.state.end_s = self.env.now


def count_collectives(scenario: Scenario, stage: int) -> int:
    """The collectives of one step. They follow the stage program's structure, not its timing,
    so every rank under any [variation] runs the same ones: counted on the uniform cluster, whose
    one representative rank costs little next to simulating every rank."""
    engine = Engine(replace(scenario, variation=VariationConfig()), stage, keep_events=False)
    engine.run()
    return engine.moved


def simulate(scenario: Scenario, stage: int, mode: str = "auto", keep_events: bool = True,
             progress: Callable[[int, int], None] | None = None,
             granularity: str = "collective") -> StageResult:
    """One training step of `stage` for the scenario's model on its cluster. `progress(done,
    total)` hears of every collective completed when every rank is simulated (the mode whose cost
    grows with the ranks: minutes at 512), otherwise once at the end of the step."""
    if scenario.training.seq_len is None:
        raise InputError("simulating a step needs training.seq_len: a bare-Ψ model computes "
                         "6 * Ψ FLOPs per token (e.g. --set training.seq_len=1024)")
    engine = Engine(scenario, stage, mode, keep_events=keep_events, granularity=granularity)
    each = progress is not None and engine.mode == "per_rank"
    if each:
        engine.progress, engine.collectives = progress, count_collectives(scenario, stage)
    contexts = engine.run()
    if progress is not None and not each:
        progress(engine.moved, engine.moved)
    if not all(math.isfinite(ctx.state.end_s) for ctx in contexts):
        raise InputError("the step time overflows a float: check the scenario's bandwidths, "
                         "FLOP/s and sizes for values off by many orders of magnitude")
    # The critical rank: last to finish; among those, the one that computed longest (a straggler).
    last = max(contexts, key=lambda ctx: (ctx.state.end_s, ctx.state.compute_s, -ctx.rank))
    rank0 = contexts[0].state
    t = scenario.training
    tokens_per_s = t.tokens_per_rank / last.state.end_s
    reserved = max(ctx.state.memory.allocator.peak_reserved_bytes for ctx in contexts)
    peak = scenario.cluster.peak_tflops * 1e12
    return StageResult(
        stage=stage, step_time_s=last.state.end_s, compute_s=last.state.compute_s,
        exposed_comm_s=last.state.end_s - last.state.compute_s,
        comm_bytes_per_rank={op: round(b) for op, b in sorted(rank0.comm_bytes.items())},
        comm_time_s=last.state.comm_s,
        peak_bytes=max(ctx.state.memory.peak_bytes for ctx in contexts),
        memory_at=dict(rank0.memory.marks), tokens_per_s_per_gpu=tokens_per_s,
        peak_allocated_bytes=max(ctx.state.memory.allocator.peak_allocated_bytes
                                 for ctx in contexts),
        peak_reserved_bytes=reserved,
        device_bytes=reserved + overhead(scenario.cluster, engine.library),
        mfu=model_flops_per_token(scenario.model, t) * tokens_per_s / peak,
        algorithm=algorithms_used(engine),
        mode=engine.mode,
        ranks_simulated=len(contexts), slowest_rank=last.rank, ranks=contexts,
        notes=_notes(scenario))


def one_stream(program: type) -> bool:
    """Whether the stage program queues every collective on one stream (DDP, ZeRO-1, ZeRO-2), so
    they run one at a time, each with the links to itself. ZeRO-3 gathers on one stream while it
    reduce-scatters on another: their transfers share links."""
    return not issubclass(program, ZeRO3)


def sm_share(scenario: Scenario, library) -> float:
    """NCCL runs a collective as one thread block per channel, each on an SM of its own, for as
    long as the kernel runs (NCCL's channels: collectives.comm.Comm.channels); under
    cluster.compute_model = "op" compute gets the SMs left (gpu_specs' SM count)."""
    per_op = op_model(scenario)
    if per_op is None or library.comm is None:
        return 0.0
    return library.comm.channels / per_op.spec.sm_count


def algorithms_used(engine: Engine) -> str:
    """What ran the step's collectives: the algorithm alone when one ran them all (gloo's
    ring), else per op its algorithm/protocol, the one that moved the most bytes first."""
    if engine.library.library == "gloo" or not engine.used:
        return engine.library.algorithm
    parts = []
    for op, by_label in engine.used.items():
        labels = sorted(by_label, key=lambda label: -by_label[label])
        parts.append(f"{op} {'+'.join(labels)}")
    return ", ".join(parts)


def _notes(scenario: Scenario) -> list[str]:
    notes = list(scenario.cluster.notes)
    if scenario.training.optimizer_offload == "cpu":
        notes.append("optimizer_offload = cpu: memory is modeled, time is not (the optimizer "
                     "step is timed as if on the GPU, with no PCIe transfers)")
    return notes
