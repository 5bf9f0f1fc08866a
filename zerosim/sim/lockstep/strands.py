"""Every rank of a per-rank step at once: what jitter needs at thousands of ranks.

Simulating every rank event by event (rank.py) costs O(ranks) Python per collective. But when
ranks differ only in what they compute (jitter, stragglers), each of a rank's streams is a
max-plus recurrence: a compute adds its duration to the stream's clock, a wait takes the later of
the clock and the time of what it waits for, and a collective starts when the last rank joins
(the maximum over ranks) and ends when its closed form, or the simulated links, say: the same
time for every rank. So each stream of the stage program (its compute and each communication
stream) runs once, as a strand whose clock is a numpy vector over the ranks (lockstep/ranks.py),
making rank by rank the float additions and maxima the event-by-event run makes: every time is
the same to the bit. Collectives that share links (ZeRO-3) move over the engine's links (its
representative and degraded ones, network.py), event by event, in its clock; the strands run
whenever one of them completes, and start new ones no earlier (all of them wait, directly or
not, for that one).

A vector does not carry the order in which two streams of one rank act at one instant, nor the
memory timeline, which depends on the order of allocations and frees: the strands log their
memory operations (MemoryLog), and lockstep/replay.py replays one rank of each order event by event.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from functools import reduce
from itertools import count

import numpy as np

from zerosim.sim.collectives.ring import plan_end_s, run_phases
from zerosim.sim.offload import HOST


class Signal:
    """Something strands wait for: fired once with a time (a float, or one per rank) and a value.
    Its id indexes what MemoryLog knows of its firing."""

    __slots__ = ("id", "time", "value", "waiters")

    def __init__(self) -> None:
        self.time = None
        self.value = None
        self.waiters: list[Callable[[Signal], None]] | None = []
        self.id = -1


class Idle:
    """Yielded by a strand: go on once no other strand can, and the engine's links have nothing
    due before until_s or a kernel started or ended (until_s was computed without it, and an
    end learnt can bring the strand's own end before the links' next event: ranks._shared)."""

    __slots__ = ("until_s",)

    def __init__(self, until_s: float) -> None:
        self.until_s = until_s


class Strand:
    """One stream of every rank: a generator yielding Signals, its clock per rank, and per rank
    the signal it was woken by at the instant its clock shows (-1: none; MemoryLog)."""

    __slots__ = ("anchor", "body", "index", "now")

    def __init__(self, body: Iterator, now: np.ndarray, anchor: np.ndarray, index: int) -> None:
        self.body, self.now, self.anchor, self.index = body, now, anchor, index

    def wait(self, signal: Signal) -> None:
        """Go on once `signal` has fired: where it fired later than the clock, the strand waited
        for it (anchored to it); its clock is the later of the two."""
        later = signal.time > self.now
        if later.any():
            self.anchor = np.where(later, signal.id, self.anchor)
            self.now = np.maximum(self.now, signal.time)


class MemoryLog:
    """Every memory operation that changes something (a buffer of some bytes allocated or freed,
    a mark): when each rank made it, which strand, and per rank the signal that strand was
    anchored to then. An operation made by a strand that went on only because another strand's
    signal woke it at that very instant comes after whatever that strand had logged by then
    (causality), whatever the times say (replay.memory_groups)."""

    def __init__(self) -> None:
        self.times: list[np.ndarray] = []
        self.anchors: list[np.ndarray] = []
        self.strands: list[int] = []
        self.firers: list[int] = []
        """Per signal id: the strand that fired it (-1: the engine's clock, a collective's end)."""
        self.logged: list[int] = []
        """Per signal id: how many operations had been logged when it fired."""

    def add(self, strand: Strand) -> None:
        self.times.append(strand.now)
        self.anchors.append(strand.anchor)
        self.strands.append(strand.index)

    def fired(self, strand: Strand | None) -> int:
        self.firers.append(-1 if strand is None else strand.index)
        self.logged.append(len(self.times))
        return len(self.firers) - 1


class Lockstep:
    """Runs the strands of every rank's step over the engine's links and clock
    (executor.LockstepHost); what the stage program sees as its context's env
    (executor.ProgramClock)."""

    def __init__(self, engine, ranks: int) -> None:
        self.engine, self.ranks = engine, ranks
        self.ready: deque = deque()
        self.current: Strand | None = None
        self.log = MemoryLog()
        self.unanchored = np.full(ranks, -1)
        self.strands = 0
        self.requests = 0
        """Collectives queued and not yet completed."""
        self.schedule: dict[tuple[str, int], tuple[float, float, float, int]] = {}
        """(stream, index) -> when the collective started and ended, the bytes each rank sent,
        and its place among the completions (collectives ending at one instant end in it)."""
        self.comm_s, self.host_s = np.zeros(ranks), np.zeros(ranks)
        """Per rank, its collectives' and host operations' durations from its own launch."""
        self.kernels: dict[str, list[list]] = defaultdict(list)
        """Per stream, each collective's [when each rank joined it, when it ended (None: not
        yet known), the first join]: NCCL's kernel holds its SMs on a rank from its join to the
        end."""
        self.kernel_changes = 0
        """Kernels started or ended so far (Idle)."""
        self.idle: tuple[Strand, float, int] | None = None
        """A strand that goes on once no other can and the links have nothing due before its
        time or the kernels changed since it waited (Idle)."""

    def spawn(self, body: Iterator, now: np.ndarray) -> None:
        self.ready.append((Strand(body, now, self.unanchored, self.strands), None))
        self.strands += 1

    def fire(self, signal: Signal, time, value=None) -> None:
        """Fire `signal` at `time`: every strand waiting for it goes on (in turn, in order)."""
        signal.time, signal.value, signal.id = time, value, self.log.fired(self.current)
        waiters, signal.waiters = signal.waiters, None
        for waiter in waiters:
            waiter(signal)

    def run(self) -> None:
        """Every strand to its end; the engine's clock moves only while none can go on."""
        env = self.engine.env
        while True:
            while self.ready:
                self._go_on(*self.ready.popleft())
            if self.idle is not None and (self.idle[2] != self.kernel_changes
                                          or not env.due_before(self.idle[1])):
                strand, self.idle = self.idle[0], None
                self._go_on(strand, None)
                continue
            if not env.scheduled():
                break
            self.current = None  # what fires now is the links' doing
            env.step()
        if self.requests:
            raise RuntimeError(f"{self.requests} collectives never completed (lockstep)")

    def _go_on(self, strand: Strand, signal: Signal | None) -> None:
        value = None
        if signal is not None:
            strand.wait(signal)
            value = signal.value
        self.current = strand
        while True:
            try:
                item = strand.body.send(value)
            except StopIteration:
                return
            if isinstance(item, Idle):
                assert self.idle is None, "one strand waits idle at a time (the compute one)"
                self.idle = (strand, item.until_s, self.kernel_changes)
                return
            if item.time is None:
                item.waiters.append(lambda s, strand=strand: self.ready.append((strand, s)))
                return
            strand.wait(item)
            value = item.value

    def all_of(self, events: list[Signal]) -> Signal:
        """Fires when every one of `events` (Signals) has, at the latest of their times (simpy's
        AllOf)."""
        out = Signal()
        pending = [s for s in events if s.time is None]
        left = [len(pending)]

        def one(_signal: Signal) -> None:
            left[0] -= 1
            if not left[0]:
                self.fire(out, reduce(np.maximum, [s.time for s in events]))

        for signal in pending:
            signal.waiters.append(one)
        if not pending:
            self.fire(out, reduce(np.maximum, [s.time for s in events], float("-inf")))
        return out

    def serve(self, stream: str, queue: Sequence) -> Iterator:
        """A communication stream of every rank (rank.RankContext._serve): each collective starts
        when the last rank has joined it."""
        for index in count():
            request = yield from queue.take()
            if request.before is not None:
                yield from request.before()
            start_s = float(self.current.now.max()) or 0  # simpy's clock starts at int 0
            kernel = [self.current.now, None, float(self.current.now.min())]
            if request.group != HOST:  # copies and the CPU's step take no SMs
                self.kernels[stream].append(kernel)
                self.kernel_changes += 1
            end_s, sent_bytes = yield self.collective(request.op, request.size_bytes, start_s,
                                                      request.group)
            if request.group != HOST:
                kernel[1] = end_s
                self.kernel_changes += 1
            self.schedule[stream, index] = (start_s, end_s, sent_bytes, len(self.schedule))
            if request.group == HOST:  # each rank's from its own launch (rank.py's _serve)
                self.host_s = self.host_s + (end_s - kernel[0])
            else:
                self.comm_s = self.comm_s + (end_s - kernel[0])
            if request.after is not None:
                request.after()
            self.requests -= 1
            self.fire(request.done, end_s)

    def collective(self, op: str, size_bytes: float, start_s: float, group: str) -> Signal:
        """Fires at the collective's end, with (end_s, bytes each rank sent)."""
        engine, done = self.engine, Signal()
        phases, plan, sent_bytes = engine.begin(op, size_bytes, group)
        if plan is not None:  # alone on its links: its closed form
            end_s = plan_end_s(start_s, plan) if plan else start_s
            engine.finish()
            self.fire(done, end_s, (end_s, sent_bytes))
            return done
        env = engine.env

        def move() -> Iterator:
            yield from run_phases(env, engine.cluster, engine.group_of(group), phases,
                                  engine.link_ranks)
            engine.finish()
            self.fire(done, env.now, (env.now, sent_bytes))

        if start_s > env.now:
            env.at(start_s).callbacks.append(lambda _event: env.process(move()))
        elif start_s == env.now:
            env.process(move())
        else:
            raise RuntimeError(f"a collective starts at {start_s} s, before {env.now} s (lockstep)")
        return done


class Sequence:
    """Items put one after another, taken in order by one strand (a stream's queue: the k-th
    take waits for the k-th put, and proceeds at the later of its clock and that put's time)."""

    def __init__(self, lockstep: Lockstep) -> None:
        self.lockstep = lockstep
        self.puts: list[Signal] = []
        self.put_count = self.taken = 0

    def _put_signal(self, index: int) -> Signal:
        while len(self.puts) <= index:
            self.puts.append(Signal())
        return self.puts[index]

    def put(self, item=None) -> None:
        index, self.put_count = self.put_count, self.put_count + 1
        self.lockstep.fire(self._put_signal(index), self.lockstep.current.now, item)

    def take(self) -> Iterator:
        """Process body: returns the next item."""
        index, self.taken = self.taken, self.taken + 1
        return (yield self._put_signal(index))


class Slots(Sequence):
    """`count` buffers (sync.Slots): the k-th take waits for the (k - count)-th put."""

    def __init__(self, lockstep: Lockstep, count: int) -> None:
        super().__init__(lockstep)
        self.count = count

    def take(self) -> Iterator:
        index, self.taken = self.taken, self.taken + 1
        if index >= self.count:
            yield self._put_signal(index - self.count)
