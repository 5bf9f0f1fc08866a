"""What a stage program may do on its simulated rank: compute, launch collectives on its
communication streams, allocate and free memory (executor.Rank). The engine (engine.py) owns the
ranks and runs their collectives (executor.Rendezvous); a RankContext is one rank's view of it.

Communication streams are FIFO queues served one collective at a time, like CUDA streams carrying
NCCL kernels. Everything a rank does is recorded in the step-event schema (zerosim.contract).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterator

import simpy

from zerosim.contract import COMM, COMPUTE, SimulatedEvent
from zerosim.errors import InputError
from zerosim.sim.costs import op_model
from zerosim.sim.groups import WORLD
from zerosim.sim.network import CPU_ADAM, HOOKS
from zerosim.sim.offload import HOST
from zerosim.sim.sync import CommQueue, Slots, first_of
from zerosim.sim.timeline import MemoryTimeline


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
    group: str = WORLD


@dataclass
class RankState:
    """Everything one simulated rank records."""

    rank: int
    memory: MemoryTimeline
    events: list[SimulatedEvent] = field(default_factory=list)
    compute_s: float = 0.0
    comm_s: float = 0.0
    """Summed durations of this rank's collectives, each from its launch on this rank
    (concurrent queues each count)."""
    host_s: float = 0.0
    """Summed durations of its host operations (offload's copies, CPU step, drives; module
    hooks: sim/stages/fetch.py)."""
    end_s: float = 0.0
    comm_bytes: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """Bytes sent per rank by op ("op (group)" on a subgroup)."""
    host_bytes: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """Bytes of each host operation (offload: d2h, h2d, nvme_read, nvme_write)."""
    comm_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Collectives launched per rank by op, keyed as comm_bytes."""

    def count(self, op: str, group: str, size: float) -> None:
        """Record what one collective or host operation moved."""
        if group == HOST:
            if op not in (CPU_ADAM, HOOKS):  # elements, seconds: no bytes moved
                self.host_bytes[op] += size
        else:
            key = op if group == WORLD else f"{op} ({group})"
            self.comm_bytes[key] += size
            self.comm_calls[key] += 1


def refuse_overflow(seconds) -> None:
    """A step whose times overflowed a float (a bandwidth or FLOP/s off by many orders of
    magnitude) is bad input: one line, before anything compares or reports them."""
    if not all(math.isfinite(s) for s in seconds):
        raise InputError("the step time overflows a float: check the scenario's bandwidths, "
                         "FLOP/s and sizes for values off by many orders of magnitude")


def sm_share(scenario, library) -> float:
    """NCCL runs a collective as one thread block per channel, each on an SM of its own, for as
    long as the kernel runs (NCCL's channels: collectives.comm.Comm.channels); under
    cluster.compute_model = "op" compute gets the SMs left (the GPU record's SM count)."""
    per_op = op_model(scenario)
    if per_op is None or library.comm is None:
        return 0.0
    return library.comm.channels / per_op.spec.sm_count


# Compute never stops for communication: at most this share of the SMs goes to NCCL's kernels
# (a guard for a scenario whose channels outnumber the SMs).
MIN_COMPUTE_RATE = 0.05


class RankContext:
    """What a stage program may do on its rank: compute, launch collectives, allocate, free."""

    def __init__(self, engine, rank: int) -> None:
        """`engine`: whoever runs the collectives this rank joins (executor.Rendezvous: the
        Engine, or lockstep/replay.Replay)."""
        self.engine = engine
        self.env = engine.env
        self.rank = rank
        self.state = RankState(rank, MemoryTimeline(rank, keep_samples=engine.keep_samples))
        v = engine.scenario.variation
        self._slowdown = v.slowdown if rank in v.slow else 1.0
        self._jitter = v.jitter_pct / 100
        self._rng = None
        if self._jitter:  # numpy only here: commands without jitter never import it
            import numpy as np

            self._rng = np.random.default_rng([v.seed, rank])
        self._streams: dict[str, CommQueue] = {}
        self._launched: dict[str, int] = defaultdict(int)
        self._communicating = 0
        """Collectives whose kernels occupy this rank's SMs now (engine.sm_share each)."""
        self._changed = self.env.event()

    # compute stream
    def compute(self, duration_s: float, name: str, phase: str, layer: int | None) -> Iterator:
        """Busy the compute stream for duration_s (costs.py: measured or FLOPs / rate), scaled by
        this rank's slowdown and jitter."""
        duration_s *= self._slowdown
        if self._rng is not None:
            duration_s *= 1 + self._jitter * float(self._rng.uniform(-1.0, 1.0))
        start_s = self.env.now
        if duration_s > 0:
            if self.engine.sm_share:
                yield from self._share_sms(duration_s)
            elif not self.env.advance(start_s + duration_s):  # else nothing was due before
                yield self.env.timeout(duration_s)
        self.state.compute_s += self.env.now - start_s
        if self.engine.keep_events:
            self._record(COMPUTE, name, phase, layer, None, 0, start_s)

    def _share_sms(self, work_s: float) -> Iterator:
        """Compute at the rate the SMs that NCCL's kernels leave it: each collective in flight on
        this rank runs its channels as thread blocks, one SM each (engine.sm_share of them)."""
        env, share = self.env, self.engine.sm_share
        while True:
            rate = max(1.0 - self._communicating * share, MIN_COMPUTE_RATE)
            start_s = env.now
            if env.advance(start_s + work_s / rate):  # nothing changed the rate before its end
                return
            timer = env.timeout(work_s / rate)
            yield from first_of(env, timer, self._changed)
            if timer.callbacks is None:  # processed: the work is done
                return
            env.forget(timer)  # the rate changed: a new timer follows
            work_s -= (env.now - start_s) * rate

    def _communication(self, delta: int) -> None:
        """A collective's kernels start (+1) or end (-1) on this rank."""
        self._communicating += delta
        if self._changed.callbacks:  # else no compute waits for it: the event would do nothing
            changed, self._changed = self._changed, self.env.event()
            changed.succeed()

    # memory
    def alloc(self, key: object, category: str, size_bytes: int, stream: str = COMPUTE) -> None:
        self.state.memory.alloc(self.env.now, key, category, size_bytes, stream)

    def free(self, key: object) -> None:
        self.state.memory.free(self.env.now, key)

    def mark(self, label: str) -> None:
        self.state.memory.mark(label)

    def slots(self, count: int) -> Slots:
        """`count` buffers that the stage program takes before use and puts back after."""
        return Slots(self.env, count)

    # communication streams
    def comm(self, stream: str, op: str, size_bytes: float, name: str, phase: str,
             layer: int | None, before: Callable[[], Iterator] | None = None,
             after: Callable[[], None] | None = None, group: str = WORLD) -> simpy.Event:
        """Queue a collective on `stream` among `group` (sim/groups.py; HOST: a host operation,
        sim/offload.py); the event fires when it has completed on this rank."""
        if stream not in self._streams:
            if self._streams and self.engine.closed_form:  # collectives could share links
                raise RuntimeError(f"stream {stream!r} beside {sorted(self._streams)}: closed "
                                   f"forms need one stream (a stage program that opens more "
                                   f"says collectives_share_links)")
            self._streams[stream] = CommQueue(self.env)
            self.env.process(self._serve(stream, self._streams[stream]))
        done = self.env.event()
        self._streams[stream].put(CommRequest(op, size_bytes, name, phase, layer, done, before,
                                              after, group))
        return done

    def _serve(self, stream: str, queue: CommQueue) -> Iterator:
        env, engine, state = self.env, self.engine, self.state
        quiet = None
        while True:
            request: CommRequest = yield from queue.take(quiet)
            if request.before is not None:
                yield from request.before()
            kernel = request.group != HOST  # copies and the CPU's step take no SMs
            if kernel:
                self._communication(+1)  # NCCL's kernel takes its SMs from launch to completion
            key = (stream, self._launched[stream])
            self._launched[stream] += 1
            # On this rank it lasts from its launch here, not from the last rank's: so NCCL's
            # kernel holds its SMs, and so zero_real times it (parts/measure.py). Waiting for a
            # later rank is then communication time, and a step's exposed communication never
            # exceeds it (review I8).
            joined_s = env.now
            _, sent_bytes = yield from engine.join(key, request.op, request.size_bytes,
                                                   request.group)
            quiet = env.quiet(env.now)
            if kernel:
                self._communication(-1)
            state.count(request.op, request.group, sent_bytes)
            if kernel:
                state.comm_s += env.now - joined_s
            else:
                state.host_s += env.now - joined_s
            if engine.keep_events:
                self._record(COMM, request.name, request.phase, request.layer, request.op,
                             request.size_bytes, joined_s, queue=stream)
            if request.after is not None:
                request.after()
            # Nothing else was due when the collective ended: what is due now is only what this
            # completion scheduled (the end of its kernel, a buffer put back), and that resumes
            # no one before the events it follows (Environment.succeed_soon waits while an event
            # is due). So `done`, if no one waits for it, is processed now, and the next request
            # taken now, without an event each.
            done = request.done
            if quiet and not done.callbacks:
                env.settle(done)
            else:
                done.succeed()
                quiet = False

    def _record(self, stream: str, name: str, phase: str, layer: int | None, op: str | None,
                size_bytes: float, start_s: float, queue: str = COMPUTE) -> None:
        """One record of the step-event schema (contract.SimulatedEvent); `queue` names the stream.
        Callers record only when the engine keeps events."""
        self.state.events.append(SimulatedEvent(
            rank=self.rank, stream=stream, name=name, phase=phase, layer=layer, op=op,
            bytes=round(size_bytes), start_s=start_s, end_s=self.env.now, queue=queue))
