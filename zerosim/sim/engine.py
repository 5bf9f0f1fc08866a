"""Runs one training step of a stage on the simulated cluster and collects what happened.

Every simulated rank has a compute stream (its stage program, stages/) and communication streams
(rank.py: FIFO queues served one collective at a time, like CUDA streams carrying NCCL kernels). A
collective starts when every simulated rank has launched it, and moves its bytes over the links of
the cluster (network.py) in the phases of its algorithm (collectives/).

Which ranks are simulated is the mode; how, the executor (executor.py, chosen there): event per
phase (the reference), batched, or lockstep.

A uniform cluster is simulated through one representative rank: every rank does the same thing
at the same time, so rank 0's compute, memory and links (plus the one link per role a flat
ring needs) stand for all of them. That turns O(n) processes per collective into O(1). With
stragglers or degraded links, ranks fall into classes: one representative of the uniform ranks,
each straggler, and each degraded link are simulated ("classes"). Jitter makes every rank
different, so every rank is simulated ("per_rank"): all at once, each stream of the stage
program running once for every rank with its clock a vector over the ranks (lockstep/), over
the links of the classes (a collective starts when every rank has joined it, so every healthy
link carries the same transfers), then one rank per order of memory operations replayed event
by event (lockstep/replay.py). On the same input the modes give identical numbers
(tests/zerosim/test_engine.py), and so does per-rank mode event by event, every rank with its own
processes and links (the reference: tests/zerosim/test_jitter_lockstep.py). What a step of many
ranks simulated one by one may take in memory is capped (lockstep/budget.py).

Groups (groups.py): a collective runs among the data-parallel ranks (WORLD: every rank, or N / t
of them under tensor parallelism) or a named subgroup (the TP group, hybrid sharding's, ZeRO++'s),
each priced by NCCL's tuner on that group; the representative links stand for every group's.

Stages 0-2 without tensor parallelism queue every collective on one stream, so each has the
links to itself and takes its closed form's time (collectives.ring.idle_plan) in one event, or in none when nothing else is due
before it ends: a run of queued buckets or all-gathers costs no event each (clock.py). That is
the batched executor, granularity "collective"; "phase" simulates every phase and wait as
events, with the same numbers (tests/zerosim/test_engine_batching.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

import simpy

from zerosim.contract import SIM_MODES
from zerosim.errors import InputError
from zerosim.scenario.config import Scenario
from zerosim.scenario.variation import VariationConfig
from zerosim.sim.lockstep import budget
from zerosim.sim.clock import Environment
from zerosim.sim.collectives import Collectives, bytes_sent_per_rank
from zerosim.sim.collectives.ring import (FLAT, Group, idle_plan, plan_end_s, representatives,
                                          run_phases)
from zerosim.sim.costs import price_phases
from zerosim.sim.executor import Executor, choose
from zerosim.sim.groups import WORLD, all_ranks, node_gpus, subgroups, world_group
from zerosim.sim.network import Cluster
from zerosim.sim.offload import HOST, host_phases
from zerosim.sim.pipeline.step import simulate_pipeline
from zerosim.sim.rank import RankContext, refuse_overflow, sm_share
from zerosim.sim.result import StageResult, stage_result
from zerosim.sim.stages import stage_program
from zerosim.sim.stages.step_shape import step_shape

COUNT_FROM = 64
"""Ranks simulated one by one from which a step's memory is estimated before it runs (budget.py):
fewer take a few MB."""


class Engine:
    """One step of one stage on the simulated cluster: the ranks it simulates, their links, and
    the collectives they join."""

    def __init__(self, scenario: Scenario, stage: int, mode: str = "auto",
                 keep_events: bool = True, granularity: str = "collective") -> None:
        if mode not in SIM_MODES:
            raise ValueError(f"mode {mode!r} is not one of {SIM_MODES}")
        self.scenario, self.stage = scenario, stage
        self.program = stage_program(scenario, stage)
        self.group = world_group(scenario, stage)
        """The data-parallel ranks (groups.WORLD): the world, or N / t of them under TP."""
        self.node_gpus = node_gpus(scenario, stage)
        """A node's GPUs, whose NICs a group with fewer ranks in a node shares (Comm.of)."""
        self.library = Collectives(scenario, self.group, node_gpus=self.node_gpus)
        self.groups = subgroups(scenario, stage)  # name -> ranks (TP, hybrid sharding, ZeRO++)
        self.libraries = {WORLD: self.library}  # and each subgroup's the step used
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
        self.executor = choose(granularity, self.mode, self.program, scenario.world_size)
        """How the step runs (executor.py: the one place that chooses)."""
        self.env = Environment(shortcuts=self.executor.shortcuts)
        self.closed_form = self.executor.closed_forms(self.program)
        """A collective alone on its links takes its closed form's time, in one event or none
        (clock.py); else its phases move over the links event by event."""
        self.compute_ranks, self.link_ranks = self._ranks(self.executor.every_link)
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
        """The step's collectives, known when progress is reported (step_counts)."""

    def _ranks(self, every_link: bool) -> tuple[list[int], list[int]]:
        """The ranks whose compute is simulated, and those whose links are. Ranks in one class do
        the same thing at the same time: one uniform representative (the first rank that is not
        slow) stands for all of them, and every straggler is simulated; per rank, every rank.
        Links: the representative links (the one link per role a flat ring needs) and every
        degraded link; every rank's links at granularity "phase" per rank (the reference the
        representatives are tested against: a collective starts once every rank has joined it,
        so every healthy link carries the same transfers at the same times)."""
        c, v = self.scenario.cluster, self.scenario.variation
        scopes = {FLAT} if self.library.flat else set()
        if self.mode == "per_rank":
            compute_ranks = list(range(c.world_size))
        else:
            uniform = next((r for r in range(c.world_size) if r not in v.slow), None)
            compute_ranks = sorted(v.slow | ({uniform} if uniform is not None else set()))
        if self.mode == "per_rank" and every_link:
            return compute_ranks, list(range(c.world_size))
        return compute_ranks, sorted(v.degraded.union(
            representatives(all_ranks(self.scenario, self.stage), scopes)))

    def join(self, key: tuple[str, int], op: str, size_bytes: float,
             group: str = WORLD) -> Iterator:
        """Process body (executor.Rendezvous): a rank takes part in collective `key` until it
        completes; returns (start_s, bytes sent per rank). The only simulated rank waits for no
        one: it moves the collective itself, without a process of its own."""
        if len(self.compute_ranks) > 1:
            return (yield self.collective(key, op, size_bytes, group))
        start_s = self.env.now
        sent_bytes = yield from self.move(op, size_bytes, group)
        if self.env.now == start_s and not self.env.advance(start_s):
            # Nothing to move (a group of one): as when ranks join (collective), it completes
            # after what is due at this instant, not before it (review I4: the memory order).
            yield self.env.timeout(0)
        return start_s, sent_bytes

    def collective(self, key: tuple[str, int], op: str, size_bytes: float,
                   group: str = WORLD) -> simpy.Event:
        """Join collective `key`; fires with (start_s, bytes sent per rank) once it completes.
        It starts when the last simulated rank has joined."""
        entry = self._pending.get(key)
        if entry is None:
            entry = self._pending[key] = [0, self.env.event()]
        entry[0] += 1
        if entry[0] == len(self.compute_ranks):
            del self._pending[key]
            self.env.process(self._run_collective(op, size_bytes, entry[1], group))
        return entry[1]

    def _run_collective(self, op: str, size_bytes: float, done: simpy.Event, group: str):
        start_s, sent_bytes = self.env.now, (yield from self.move(op, size_bytes, group))
        done.succeed((start_s, sent_bytes))

    def move(self, op: str, size_bytes: float, group: str = WORLD) -> Iterator:
        """Process body: the collective's phases over the simulated links; returns the bytes
        each rank sent."""
        phases, plan, sent_bytes = self.begin(op, size_bytes, group)
        if plan is None:
            yield from run_phases(self.env, self.cluster, self.group_of(group), phases,
                                  self.link_ranks)
        elif plan:  # alone on its links: its closed form (clock.py)
            end_s = plan_end_s(self.env.now, plan)
            if not self.env.advance(end_s):
                yield from self.env.arrive(end_s)
        self.finish()
        return sent_bytes

    def begin(self, op: str, size_bytes: float, group: str = WORLD) -> tuple:
        """A collective starts: its phases, idle_plan (None: event by event) and the bytes each
        rank sends, counted under the algorithm that runs it. Priced phases are cached: buckets
        mostly share one size."""
        cached = self._phases.get((op, size_bytes, group))
        if cached is None:
            cached = self._phases[op, size_bytes, group] = self._price(op, size_bytes, group)
        label, phases, plan, sent_bytes = cached
        if group != HOST:
            by_label = self.used.setdefault(op if group == WORLD else f"{op} ({group})", {})
            by_label[label] = by_label.get(label, 0.0) + size_bytes
        return phases, plan, sent_bytes

    def group_of(self, name: str) -> Group:
        """The ranks of a named group (the world, a subgroup, or one rank for host operations)."""
        return self.group if name == WORLD else Group(1, 1) if name == HOST else self.groups[name]

    def _library(self, name: str) -> Collectives:
        if name not in self.libraries:
            self.libraries[name] = Collectives(self.scenario, self.groups[name],
                                                node_gpus=self.node_gpus)
        return self.libraries[name]

    def finish(self) -> None:
        """A collective has completed."""
        self.moved += 1
        if self.progress is not None:
            self.progress(min(self.moved, self.collectives), self.collectives)

    def _price(self, op: str, size_bytes: float, group: str) -> tuple:
        """How a call runs: its label, phases, idle_plan (None: event by event) and the bytes
        each rank sends."""
        ranks = self.group_of(group)
        if group == HOST:
            label, phases = op, host_phases(op, size_bytes)
        else:
            choice = self._library(group).choose(op, size_bytes)
            label = choice.label
            phases = price_phases(self.scenario, op, size_bytes, ranks, choice.phases)
        plan = None
        if self.closed_form:
            plan = idle_plan(self.cluster, ranks, phases, self.link_ranks)
        return label, phases, plan, bytes_sent_per_rank(phases)

    def run(self) -> list[RankContext]:
        """Every simulated rank runs the stage's program to the end of the step."""
        shape = step_shape(self.scenario, self.stage)
        if self.executor is Executor.LOCKSTEP:  # numpy: imported only where every rank runs
            from zerosim.sim.lockstep.replay import every_rank

            return every_rank(self, shape)
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


_COUNTED: dict[tuple[int, int], tuple[Scenario, budget.StepCounts]] = {}
"""step_counts of the last scenarios asked for (by identity: a command asks per stage, twice)."""


def step_counts(scenario: Scenario, stage: int) -> budget.StepCounts:
    """What one rank does in the step: its collectives, events, memory samples and operations.
    They follow the stage program's structure, not its timing, so every rank under any
    [variation] does as many: counted on the uniform cluster, whose one representative rank
    costs little next to simulating every rank."""
    known = _COUNTED.get((id(scenario), stage))
    if known is not None and known[0] is scenario:
        return known[1]
    engine = Engine(replace(scenario, variation=VariationConfig()), stage)
    rank = engine.run()[0].state
    counts = budget.StepCounts(collectives=engine.moved, events=len(rank.events),
                               samples=len(rank.memory.samples),
                               operations=rank.memory.operations)
    if len(_COUNTED) >= 16:
        _COUNTED.clear()
    _COUNTED[id(scenario), stage] = (scenario, counts)
    return counts


def check_steps(scenario: Scenario, stages: list[int], mode: str = "auto",
                keep_events: bool = True) -> None:
    """Refuse, before any is simulated, steps of `stages` whose ranks simulated one by one
    would together take more memory than the budget (budget.py): with
    event logs every stage's are kept (a trace holds them all), without them one at a time."""
    if scenario.parallelism.pipeline_parallel > 1:  # one rank per pipeline stage: no budget
        return
    sizes = []
    for stage in stages:
        engine = Engine(scenario, stage, mode, keep_events=keep_events)
        ranks = len(engine.compute_ranks)
        why = ("jitter or --mode per_rank" if engine.mode == "per_rank"
               else "[variation]'s stragglers")
        if engine.mode == "per_rank" or ranks >= COUNT_FROM:
            lockstep = engine.executor is Executor.LOCKSTEP
            sizes.append(budget.step_bytes(ranks, step_counts(scenario, stage), lockstep,
                                           keep_events))
    if sizes:
        logs = f", {len(sizes)} stages' event logs" if keep_events and len(sizes) > 1 else ""
        budget.check(ranks, sum(sizes) if keep_events else max(sizes), why + logs)


def simulate(scenario: Scenario, stage: int, mode: str = "auto", keep_events: bool = True,
             progress: Callable[[int, int], None] | None = None,
             granularity: str = "collective") -> StageResult:
    """One training step of `stage` for the scenario's model on its cluster. `progress(done,
    total)` hears of the step's collectives as they complete when every rank is simulated (the
    mode whose cost grows with the ranks), otherwise once at the end of the step. A step whose
    ranks simulated one by one would take more memory than budget.py allows is refused."""
    if scenario.training.seq_len is None:
        raise InputError("simulating a step needs training.seq_len: a bare-Ψ model computes "
                         "6 * Ψ FLOPs per token (e.g. --set training.seq_len=1024)")
    if scenario.parallelism.pipeline_parallel > 1:  # every pipeline stage, as events
        return simulate_pipeline(scenario, stage, mode, keep_events)
    check_steps(scenario, [stage], mode, keep_events)
    engine = Engine(scenario, stage, mode, keep_events=keep_events, granularity=granularity)
    each = progress is not None and engine.mode == "per_rank"
    if each:
        engine.progress = progress
        engine.collectives = step_counts(scenario, stage).collectives
    contexts = engine.run()
    if progress is not None and not each:
        progress(engine.moved, engine.moved)
    refuse_overflow(ctx.state.end_s for ctx in contexts)
    return stage_result(engine, contexts)

