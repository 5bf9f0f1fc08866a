"""Runs one training step of a stage on the simulated cluster and collects what happened.

Every simulated rank has a compute stream (its stage program, stages.py) and communication streams
(FIFO queues served one collective at a time, like CUDA streams carrying NCCL kernels). A
collective starts when every simulated rank has launched it, and moves its bytes over the links of
the cluster (network.py) in the phases of its algorithm (collectives/).

A uniform cluster is simulated through one representative rank: every rank does the same thing
at the same time, so rank 0's compute, memory and links (plus the one link per role a flat
ring needs) stand for all of them. That turns O(n) processes per collective into O(1). With
stragglers or degraded links, ranks fall into classes: one representative of the uniform ranks,
each straggler, and each degraded link are simulated ("classes"). Jitter makes every rank
different, so every rank is simulated ("per_rank"). On the same input the modes give identical
numbers (tests/test_engine.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import simpy

from zerosim import collectives
from zerosim.collectives.ring import FLAT, Group, representatives, run_phases
from zerosim.config import Scenario
from zerosim.costs import price_phases
from zerosim.errors import InputError
from zerosim.network import Cluster
from zerosim.timeline import MemoryTimeline

MODES = ("auto", "symmetric", "per_rank")
# Busy time on the compute stream that is not compute: bookkeeping a profile measured (costs.other_s).
OTHER = "other"
# Simulating every rank costs O(ranks) processes per collective phase: about 25 s per stage at
# 256 ranks on one core; beyond this a run would take many minutes.
MAX_PER_RANK = 512


@dataclass
class CommRequest:
    op: str
    size_bytes: float
    name: str
    phase: str
    layer: int | None
    done: simpy.Event
    before: Callable[[], Iterator] | None = None
    after: Callable[[], None] | None = None


@dataclass
class RankState:
    """Everything one simulated rank records."""

    rank: int
    memory: MemoryTimeline
    events: list[dict[str, Any]] = field(default_factory=list)
    compute_s: float = 0.0
    comm_s: float = 0.0
    """Summed durations of this rank's collectives (concurrent queues each count)."""
    end_s: float = 0.0
    comm_bytes: dict[str, float] = field(default_factory=lambda: defaultdict(float))


class RankContext:
    """What a stage program may do on its rank: compute, launch collectives, allocate, free."""

    def __init__(self, engine: "Engine", rank: int) -> None:
        self.engine = engine
        self.env = engine.env
        self.rank = rank
        self.state = RankState(rank, MemoryTimeline(rank, keep_samples=engine.keep_samples))
        v = engine.scenario.variation
        self._slowdown = v.slowdown if rank in v.slow else 1.0
        self._jitter = v.jitter_pct / 100
        self._rng = np.random.default_rng([v.seed, rank]) if self._jitter else None
        self._streams: dict[str, simpy.Store] = {}
        self._launched: dict[str, int] = defaultdict(int)

    # compute stream
    def compute(self, duration_s: float, name: str, phase: str, layer: int | None) -> Iterator:
        """Busy the compute stream for duration_s (costs.py: measured or FLOPs / rate), scaled by
        this rank's slowdown and jitter."""
        duration_s *= self._slowdown
        if self._rng is not None:
            duration_s *= 1 + self._jitter * float(self._rng.uniform(-1.0, 1.0))
        start_s = self.env.now
        if duration_s > 0:
            yield self.env.timeout(duration_s)
        if name != OTHER:
            self.state.compute_s += duration_s
        self._record("compute", name, phase, layer, None, 0, start_s)

    # memory
    def alloc(self, key: object, category: str, size_bytes: int) -> None:
        self.state.memory.alloc(self.env.now, key, category, size_bytes)

    def free(self, key: object) -> None:
        self.state.memory.free(self.env.now, key)

    def mark(self, label: str) -> None:
        self.state.memory.mark(label)

    # communication streams
    def comm(self, stream: str, op: str, size_bytes: float, name: str, phase: str,
             layer: int | None, before: Callable[[], Iterator] | None = None,
             after: Callable[[], None] | None = None) -> simpy.Event:
        """Queue a collective on `stream`; the event fires when it has completed on this rank."""
        if stream not in self._streams:
            self._streams[stream] = simpy.Store(self.env)
            self.env.process(self._serve(stream, self._streams[stream]))
        done = self.env.event()
        self._streams[stream].put(CommRequest(op, size_bytes, name, phase, layer, done, before, after))
        return done

    def _serve(self, stream: str, queue: simpy.Store) -> Iterator:
        while True:
            request: CommRequest = yield queue.get()
            if request.before is not None:
                yield from request.before()
            if len(self.engine.compute_ranks) > 1:  # wait until every simulated rank joins
                key = (stream, self._launched[stream])
                self._launched[stream] += 1
                start_s, sent_bytes = yield self.engine.collective(key, request.op, request.size_bytes)
            else:  # the only simulated rank: no one to wait for, no extra process
                start_s = self.env.now
                sent_bytes = yield from self.engine.move(request.op, request.size_bytes)
            self.state.comm_bytes[request.op] += sent_bytes
            self.state.comm_s += self.env.now - start_s
            self._record("comm", request.name, request.phase, request.layer, request.op,
                         request.size_bytes, start_s, queue=stream)
            if request.after is not None:
                request.after()
            request.done.succeed()

    def _record(self, stream: str, name: str, phase: str, layer: int | None, op: str | None,
                size_bytes: float, start_s: float, queue: str = "compute") -> None:
        """One record of the step-event schema (DESIGN.md); `queue` names the CUDA-like stream."""
        if self.engine.keep_events:
            self.state.events.append({"rank": self.rank, "stream": stream, "name": name,
                                      "phase": phase, "layer": layer, "op": op,
                                      "bytes": round(size_bytes), "start_s": start_s,
                                      "end_s": self.env.now, "queue": queue})


class Engine:
    def __init__(self, scenario: Scenario, mode: str = "auto", keep_events: bool = True) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {MODES}")
        self.scenario = scenario
        self.env = simpy.Environment()
        c = scenario.cluster
        self.group = Group(c.world_size, c.gpus_per_node)
        self.algorithm = collectives.choose_algorithm(c.collective_algorithm, self.group)
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
        scopes = {FLAT} if self.algorithm == "ring" else set()
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
        self.keep_events = keep_events
        self.keep_samples = keep_events
        self._pending: dict[tuple[str, int], list] = {}
        self.step_shapes: dict[int, object] = {}
        self._plans: dict[tuple[str, float], list] = {}

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
        each rank sent. Plans are cached: buckets mostly share one size."""
        phases = self._plans.get((op, size_bytes))
        if phases is None:
            phases = collectives.plan(op, size_bytes, self.group, self.algorithm)
            phases = self._plans[op, size_bytes] = price_phases(self.scenario, op, size_bytes,
                                                                self.group, phases, self.stage)
        yield from run_phases(self.env, self.cluster, self.group, phases, self.link_ranks)
        return collectives.bytes_sent_per_rank(phases)

    def run(self, stage: int) -> list[RankContext]:
        from zerosim.stages import program

        self.stage = stage
        contexts = [RankContext(self, rank) for rank in self.compute_ranks]
        for ctx in contexts:
            self.env.process(self._rank_step(ctx, program(stage, ctx)))
        self.env.run()
        if self._pending:
            raise RuntimeError(f"collectives never completed: {sorted(self._pending)}")
        return contexts

    def _rank_step(self, ctx: RankContext, step: Iterator) -> Iterator:
        yield from step
        ctx.state.end_s = self.env.now


@dataclass
class StageResult:
    """One stage's simulated step. Times are those of the rank that finished last."""

    stage: int
    step_time_s: float
    compute_s: float
    exposed_comm_s: float
    """step_time_s - compute_s: communication compute did not hide, plus any bookkeeping time a
    calibration profile measured (its other_s)."""
    comm_bytes_per_rank: dict[str, int]
    comm_time_s: float
    """The critical rank's collectives' durations, summed (hidden by compute or not)."""
    peak_bytes: int
    memory_at: dict[str, int]
    algorithm: str
    mode: str
    ranks_simulated: int
    slowest_rank: int
    notes: list[str] = field(default_factory=list)
    """What the simulation leaves out for this scenario."""
    ranks: list[RankContext] = field(repr=False, default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        from zerosim.config import STAGE_NAMES

        return {"stage": self.stage, "name": STAGE_NAMES[self.stage],
                "step_time_s": self.step_time_s, "compute_s": self.compute_s,
                "exposed_comm_s": self.exposed_comm_s,
                "comm_bytes_per_rank": self.comm_bytes_per_rank,
                "comm_bytes_per_rank_total": sum(self.comm_bytes_per_rank.values()),
                "comm_time_s": self.comm_time_s,
                "peak_bytes": self.peak_bytes, "memory_at": self.memory_at,
                "algorithm": self.algorithm, "mode": self.mode,
                "ranks_simulated": self.ranks_simulated, "slowest_rank": self.slowest_rank,
                "notes": self.notes}


def simulate(scenario: Scenario, stage: int, mode: str = "auto",
             keep_events: bool = True) -> StageResult:
    """One training step of `stage` for the scenario's model on its cluster."""
    if scenario.training.seq_len is None:
        raise InputError("simulating a step needs training.seq_len: a bare-Ψ model computes "
                         "6 * Ψ FLOPs per token (e.g. --set training.seq_len=1024)")
    engine = Engine(scenario, mode, keep_events=keep_events)
    contexts = engine.run(stage)
    if not all(math.isfinite(ctx.state.end_s) for ctx in contexts):
        raise InputError("the step time overflows a float: check the scenario's bandwidths, "
                         "FLOP/s and sizes for values off by many orders of magnitude")
    # The critical rank: last to finish; among those, the one that computed longest (a straggler).
    last = max(contexts, key=lambda ctx: (ctx.state.end_s, ctx.state.compute_s, -ctx.rank))
    rank0 = contexts[0].state
    return StageResult(
        stage=stage, step_time_s=last.state.end_s, compute_s=last.state.compute_s,
        exposed_comm_s=last.state.end_s - last.state.compute_s,
        comm_bytes_per_rank={op: round(b) for op, b in sorted(rank0.comm_bytes.items())},
        comm_time_s=last.state.comm_s,
        peak_bytes=max(ctx.state.memory.peak_bytes for ctx in contexts),
        memory_at=dict(rank0.memory.marks), algorithm=engine.algorithm,
        mode=engine.mode,
        ranks_simulated=len(contexts), slowest_rank=last.rank, ranks=contexts,
        notes=_notes(scenario))


def _notes(scenario: Scenario) -> list[str]:
    if scenario.training.optimizer_offload == "cpu":
        return ["optimizer_offload = cpu: memory is modeled, time is not (the optimizer step is "
                "timed as if on the GPU, with no PCIe transfers)"]
    return []
