"""Per-rank mode at scale: every rank's times in lockstep (strands.py), then one rank of each
memory history replayed event by event.

The lockstep run gives each collective's start and end (the same on every rank) and each rank's
compute, communication and end times. A rank's memory timeline depends only on the order of its
allocations, frees and marks; ranks whose operations fall in the same order have the same one
(memory_groups). One rank of each such group is replayed: its own program, event by event in a
clock of its own (clock.py), its collectives ending when the schedule says (Replay), which gives
exactly what the event-by-event run of every rank gives that rank
(tests/zerosim/test_jitter_lockstep.py); its times must equal the lockstep's, to the bit, or the
run stops. With an event log every rank is replayed: its events and samples are its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import simpy

from zerosim.sim.lockstep import budget
from zerosim.sim.lockstep.budget import ORDERED_AT_ONCE
from zerosim.sim.clock import Environment
from zerosim.sim.groups import WORLD
from zerosim.sim.lockstep.strands import Lockstep, MemoryLog
from zerosim.sim.lockstep.ranks import Ranks
from zerosim.sim.rank import RankContext, RankState, refuse_overflow


@dataclass
class RankView:
    """A rank that was not replayed: its own times, and the memory history of the replayed rank
    whose memory operations fall in the same order (shared, not copied)."""

    rank: int
    state: RankState


class Replay:
    """What one replayed rank's context (rank.RankContext) sees as its engine
    (executor.Rendezvous): every collective starts and ends when the schedule says (when every
    rank had joined it, in lockstep)."""

    def __init__(self, engine, schedule: dict) -> None:
        self.env = Environment()
        self.scenario, self.program = engine.scenario, engine.program
        self.keep_events = self.keep_samples = engine.keep_events
        self.sm_share = engine.sm_share
        self.closed_form = False
        self.schedule = schedule
        self.due: dict[float, list] = {}
        """End instant -> the collectives ending then, not yet fired: (place, event, value)."""

    def join(self, key: tuple[str, int], op: str, size_bytes: float,
             group: str = WORLD) -> Iterator:
        """Process body, as engine.Engine.join: the rank is one of several, and the others have
        decided when the collective starts and ends; returns (start_s, bytes sent)."""
        return (yield self.collective(key, op, size_bytes, group))

    def collective(self, key: tuple[str, int], op: str, size_bytes: float,
                   group: str = WORLD) -> simpy.Event:
        """As engine.Engine.collective: fires with (start_s, bytes sent) at the collective's end,
        after whatever else is due at that instant (clock.Environment.arrive); collectives that
        end at one instant fire in the order the lockstep completed them, as the engine's do."""
        start_s, end_s, sent_bytes, place = self.schedule[key]
        done = self.env.event()
        batch = self.due.get(end_s)
        if batch is None:
            batch = self.due[end_s] = []
            self.env.process(self._end(end_s))
        batch.append((place, done, (start_s, sent_bytes)))
        return done

    def _end(self, end_s: float) -> Iterator:
        yield from self.env.arrive(end_s)
        for _, done, value in sorted(self.due.pop(end_s), key=lambda item: item[0]):
            done.succeed(value)

    def rank(self, rank: int, shape) -> RankContext:
        ctx = RankContext(self, rank)

        def step() -> Iterator:
            yield from self.program(ctx, shape).run()
            ctx.state.end_s = self.env.now

        self.env.process(step())
        self.env.run()
        return ctx


def every_rank(engine, shape) -> list:
    """The step of every rank of engine (per-rank mode): one context per rank, in rank order."""
    n = engine.scenario.cluster.world_size
    lockstep = Lockstep(engine, n)
    ranks = Ranks(lockstep)
    end = {}

    def main() -> Iterator:
        yield from engine.program(ranks, shape).run()
        end["s"] = lockstep.current.now

    bar = Progress(engine)
    lockstep.spawn(main(), np.zeros(n))
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused just below
        lockstep.run()
    refuse_overflow([*end["s"].tolist(), *ranks.compute_s.tolist()])
    engine.progress = bar.report
    same = np.arange(n) if engine.keep_events else memory_groups(lockstep.log, n)
    replayed, models = {}, np.unique(same).tolist()
    if not engine.keep_events:  # with an event log every rank was counted as replayed
        budget.check_replays(n, len(models), budget.StepCounts(
            collectives=len(lockstep.schedule), events=0, samples=0,
            operations=len(lockstep.log.times)))
    for i, rank in enumerate(models, 1):
        ctx = replayed[rank] = Replay(engine, lockstep.schedule).rank(rank, shape)
        _check(ctx.state, end["s"][rank], ranks.compute_s[rank], lockstep.comm_s[rank],
               lockstep.host_s[rank])
        bar.replayed(i, len(models))
    contexts = []
    for rank, like in enumerate(same.tolist()):
        if rank in replayed:
            contexts.append(replayed[rank])
            continue
        model = replayed[like].state
        contexts.append(RankView(rank, RankState(
            rank, model.memory, compute_s=float(ranks.compute_s[rank]),
            comm_s=float(lockstep.comm_s[rank]), host_s=float(lockstep.host_s[rank]),
            end_s=float(end["s"][rank]), comm_bytes=model.comm_bytes,
            host_bytes=model.host_bytes, comm_calls=model.comm_calls)))
    return contexts


class Progress:
    """The step's progress in collectives (engine.Engine.progress): the lockstep run's take the
    bar to its half when every rank is replayed (with an event log), else to its last but one;
    the replays take it to the end."""

    def __init__(self, engine) -> None:
        self.report, self.total, self.shown = engine.progress, engine.collectives, 0
        self.split = self.total // 2 if engine.keep_events else self.total - 1
        if self.report is not None:
            engine.progress = self.lockstep

    def show(self, done: int) -> None:
        if done > self.shown and self.report is not None:
            self.shown = done
            self.report(done, self.total)

    def lockstep(self, moved: int, _total: int) -> None:
        self.show(max(1, moved * self.split // self.total))

    def replayed(self, done: int, replays: int) -> None:
        self.show(self.split + (self.total - self.split) * done // replays)


def _check(state: RankState, end_s: float, compute_s: float, comm_s: float,
           host_s: float) -> None:
    """A replayed rank's times are the lockstep's, to the bit."""
    if (state.end_s, state.compute_s, state.comm_s, state.host_s) != (end_s, compute_s, comm_s,
                                                                     host_s):
        raise RuntimeError(
            f"rank {state.rank} replayed differs from lockstep: end {state.end_s!r} vs {end_s!r}, "
            f"compute {state.compute_s!r} vs {compute_s!r}, comm {state.comm_s!r} vs {comm_s!r}, "
            f"host {state.host_s!r} vs {host_s!r}")


def memory_groups(log: MemoryLog, n: int) -> np.ndarray:
    """For each rank, the lowest rank whose memory operations fall in the same order. Ranks are
    ordered by time, the log's order within an instant (a stable sort). That order is the
    event-by-event run's where the later of two operations at one instant was made by a strand
    woken then by a signal the earlier one's strand fired after making it (MemoryLog); at any
    other such tie the event-by-event run decides, so the key names it: the two operations'
    places and anchors."""
    if not log.times:
        return np.zeros(n, dtype=np.int64)
    same = np.arange(n)
    strands = np.array(log.strands)
    firers = np.array(log.firers + [-2])  # index -1: no anchor, fired by no strand
    logged = np.array(log.logged + [0])
    keys: dict[bytes, int] = {}
    for lo in range(0, n, ORDERED_AT_ONCE):
        hi = min(n, lo + ORDERED_AT_ONCE)
        order, loose = _order(log, strands, firers, logged, lo, hi)
        like_first = (order == order[:, :1]).all(axis=0) & (loose == loose[:, :1]).all(axis=0)
        for j in range(hi - lo):
            if j and like_first[j]:
                same[lo + j] = same[lo]
                continue
            key = order[:, j].tobytes() + loose[:, j].tobytes()
            same[lo + j] = keys.setdefault(key, lo + j)
    return same


def _order(log: MemoryLog, strands, firers, logged, lo: int, hi: int) -> tuple:
    """Ranks lo..hi: each one's operations in order (indices into the log), and at each place
    where an operation ties with the one before it without causality, the anchors of both
    (-2 elsewhere)."""
    times = np.empty((len(log.times), hi - lo))
    anchors = np.empty((len(log.times), hi - lo), dtype=np.int64)
    for i, (t, a) in enumerate(zip(log.times, log.anchors)):
        times[i], anchors[i] = t[lo:hi], a[lo:hi]
    order = np.argsort(times, axis=0, kind="stable")
    times = np.take_along_axis(times, order, axis=0)
    anchors = np.take_along_axis(anchors, order, axis=0)
    by = strands[order]
    later = anchors[1:]
    causal = (firers[later] == by[:-1]) & (order[:-1] < logged[later])
    loose = (times[1:] == times[:-1]) & (by[1:] != by[:-1]) & ~causal
    return order, np.concatenate([np.where(loose, later, -2), np.where(loose, anchors[:-1], -2)])
