"""Every rank's context at once (executor.Rank, as rank.RankContext is, for strands.py): clocks
are vectors over the ranks, jitter is drawn from each rank's own generator, and memory operations
are logged rather than made (replay.py replays them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from zerosim.contract import COMPUTE
from zerosim.sim.groups import WORLD
from zerosim.sim.lockstep.strands import Idle, Lockstep, Sequence, Signal, Slots
from zerosim.sim.rank import MIN_COMPUTE_RATE

DRAW_BLOCK = 256
"""Jitter draws taken from each rank's generator at a time: k draws at once are the k scalars
drawn one by one (numpy's Generator.uniform fills an array as it draws scalars)."""


class Draws:
    """Each rank's jitter draws: its own generator, seeded [seed, rank] as rank.py seeds it."""

    def __init__(self, seed: int, ranks: int) -> None:
        self.generators = [np.random.default_rng([seed, rank]) for rank in range(ranks)]
        self.block = np.empty((0, ranks))
        self.next_row = 0

    def next(self) -> np.ndarray:
        """The next draw of every rank, uniform in [-1, 1]."""
        if self.next_row == len(self.block):
            self.block = np.empty((DRAW_BLOCK, len(self.generators)))
            for rank, generator in enumerate(self.generators):
                self.block[:, rank] = generator.uniform(-1.0, 1.0, size=DRAW_BLOCK)
            self.next_row = 0
        self.next_row += 1
        return self.block[self.next_row - 1]


class Request:
    """A collective queued on a stream (rank.CommRequest)."""

    __slots__ = ("after", "before", "done", "group", "op", "size_bytes")

    def __init__(self, op: str, size_bytes: float, done: Signal,
                 before: Callable[[], Iterator] | None,
                 after: Callable[[], None] | None, group: str) -> None:
        self.op, self.size_bytes, self.done = op, size_bytes, done
        self.before, self.after, self.group = before, after, group


class Ranks:
    """What a stage program may do (executor.Rank), on every rank at once: compute, launch
    collectives, allocate, free, mark."""

    def __init__(self, lockstep: Lockstep) -> None:
        self.lockstep = self.env = lockstep
        ranks = lockstep.ranks
        v = lockstep.engine.scenario.variation
        slow = v.slow
        self.slowdown = np.array([v.slowdown if r in slow else 1.0 for r in range(ranks)])
        self.jitter = v.jitter_pct / 100
        self.draws = Draws(v.seed, ranks) if self.jitter else None
        self.compute_s = np.zeros(ranks)
        self.queues: dict[str, Sequence] = {}
        self.empty: set = set()
        """Buffers of no bytes: allocating or freeing them changes nothing, so is not logged."""
        self.sm_share = lockstep.engine.sm_share
        self.first: dict[str, int] = {}
        """Per stream, the first kernel that had not ended when the compute stream last looked."""

    def compute(self, duration_s: float, name: str, phase: str, layer: int | None) -> Iterator:
        """rank.RankContext.compute on every rank."""
        strand = self.lockstep.current
        scaled = duration_s * self.slowdown
        if self.draws is not None:
            scaled = scaled * (1 + self.jitter * self.draws.next())
        if duration_s > 0 and self.sm_share:
            return self._shared(strand, scaled, name)
        start_s = strand.now
        if duration_s > 0:
            strand.now = start_s + scaled
            strand.anchor = self.lockstep.unanchored
        self.compute_s = self.compute_s + (strand.now - start_s)
        return iter(())

    def _shared(self, strand, work_s: np.ndarray, name: str) -> Iterator:
        """rank.RankContext._share_sms: compute at the rate NCCL's kernels leave it, the rate
        changing whenever a kernel starts or ends on the rank. Every kernel that could start or
        end before the compute does must be known first: the other strands go on until they
        wait (for this one, or for the links), then the links run up to the compute's end,
        which is computed again whenever a kernel starts or ends meanwhile (Idle): a kernel's
        end learnt brings it sooner, before events the links would otherwise run (review T1)."""
        start_s, env = strand.now, self.lockstep.engine.env
        yield Idle(float("-inf"))
        while True:
            end_s = self._shared_end(start_s, work_s)
            if not env.due_before(end_s.max()):
                break
            yield Idle(float(end_s.max()))
        strand.now, strand.anchor = end_s, self.lockstep.unanchored
        self.compute_s = self.compute_s + (end_s - start_s)

    def _shared_end(self, start_s: np.ndarray, work_s: np.ndarray) -> np.ndarray:
        """When work_s started at start_s ends, rank by rank: at each instant a kernel starts or
        ends, the work left is what the rate so far did not do, then the rate is the one that
        the kernels in flight just after it leave (the float steps of _share_sms)."""
        kernels = self._kernels(float(start_s.min()),
                                float((start_s + work_s / MIN_COMPUTE_RATE).max()))
        rate = self._rate(kernels, start_s)
        while True:
            end_s = start_s + work_s / rate
            change = np.full(len(start_s), np.inf)
            for joins, kernel_end in kernels:
                change = np.minimum(change, np.where(joins > start_s, joins, np.inf))
                change = np.minimum(change, np.where(kernel_end > start_s, kernel_end, np.inf))
            hit = change < end_s
            if not hit.any():
                return end_s
            work_s = np.where(hit, work_s - (change - start_s) * rate, work_s)
            start_s = np.where(hit, change, start_s)
            rate = np.where(hit, self._rate(kernels, start_s), rate)

    def _rate(self, kernels: list, at_s: np.ndarray) -> np.ndarray:
        """The compute rate just after at_s (rank by rank)."""
        busy = np.zeros(len(at_s), dtype=np.int64)
        for joins, end_s in kernels:
            busy += (joins <= at_s) & (at_s < end_s)
        return np.maximum(1.0 - busy * self.sm_share, MIN_COMPUTE_RATE)

    def _kernels(self, after_s: float, before_s: float) -> list[tuple[np.ndarray, float]]:
        """Every known kernel that has not ended by after_s on every rank and starts before
        before_s on some: (joins, end; inf where the links have yet to end it)."""
        found = []
        for stream, kernels in self.lockstep.kernels.items():
            first = self.first.get(stream, 0)
            while first < len(kernels) and kernels[first][1] is not None \
                    and kernels[first][1] <= after_s:
                first += 1
            self.first[stream] = first
            for joins, end_s, first_join in kernels[first:]:
                if first_join >= before_s:  # a stream's kernels start in order on each rank
                    break
                found.append((joins, np.inf if end_s is None else end_s))
        return found

    def alloc(self, key: object, category: str, size_bytes: int, stream: str = COMPUTE) -> None:
        if size_bytes:
            self.lockstep.log.add(self.lockstep.current)
        else:
            self.empty.add(key)

    def free(self, key: object) -> None:
        if key in self.empty:
            self.empty.discard(key)
        else:
            self.lockstep.log.add(self.lockstep.current)

    def mark(self, label: str) -> None:
        self.lockstep.log.add(self.lockstep.current)

    def slots(self, count: int) -> Slots:
        return Slots(self.lockstep, count)

    def comm(self, stream: str, op: str, size_bytes: float, name: str, phase: str,
             layer: int | None, before: Callable[[], Iterator] | None = None,
             after: Callable[[], None] | None = None, group: str = WORLD) -> Signal:
        """Queue a collective on `stream` among `group`; the signal fires when it has
        completed."""
        lockstep = self.lockstep
        if stream not in self.queues:
            self.queues[stream] = Sequence(lockstep)
            lockstep.spawn(lockstep.serve(stream, self.queues[stream]), lockstep.current.now)
        done = Signal()
        lockstep.requests += 1
        self.queues[stream].put(Request(op, size_bytes, done, before, after, group))
        return done
