"""The executors: three ways to run one step of a stage program, named, chosen in one place
(`choose`), and their contracts written down.

- PHASE, the reference (`Engine(granularity="phase")`): every simulated rank is a simpy process
  (rank.RankContext), every phase of every collective and every wait an event, and per rank
  every rank has its own links. Read it first: the others are tested equal to it, to the bit.
- BATCHED: the same processes less the events that change nothing. A stage program whose
  collectives never share links (one stream: DDP, ZeRO-1, ZeRO-2 without tensor parallelism,
  whose stream of its own shares them: stages/tensor.py) has each priced in closed
  form (collectives.ring.idle_plan); the clock moves without an event where one would only
  resume the process waiting for it (clock.py), and queues and slots schedule nothing needless
  (sync.py). tests/zerosim/test_engine_batching.py.
- LOCKSTEP: every rank at once, for per-rank runs (jitter): each stream runs once for all ranks
  with numpy vectors of clocks (lockstep/strands.py, lockstep/ranks.py), then one rank per order
  of memory operations is replayed event by event (lockstep/replay.py).
  tests/zerosim/test_jitter_lockstep.py.

The stage programs (stages/) run unchanged on each: what they may ask of their rank is `Rank`
(with `Slots` and `ProgramClock`); what a rank asks of whoever runs its collectives (the engine,
or the replay) is `Rendezvous`; what the lockstep asks of the engine is `LockstepHost`. Nothing
inherits from them: tests/zerosim/test_executor_contracts.py checks that every implementation
has every member, and that nothing uses a member its contract lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any, Protocol

from zerosim.contract import COMPUTE
from zerosim.sim.groups import WORLD

GRANULARITIES = ("collective", "phase")
"""What a caller asks for (Engine, simulate): "collective", the fastest executor that serves
the run (BATCHED or LOCKSTEP), or "phase", the reference (PHASE); the numbers are the same."""


class Executor(Enum):
    """How a step is run (module docstring)."""

    PHASE = "phase"
    BATCHED = "batched"
    LOCKSTEP = "lockstep"

    @property
    def shortcuts(self) -> bool:
        """Whether the clock skips the events that change nothing (clock.Environment)."""
        return self is not Executor.PHASE

    @property
    def every_link(self) -> bool:
        """Whether, per rank, every rank's links are simulated (else the representative and
        degraded ones: a collective starts once every rank has joined it, so every healthy link
        carries the same transfers at the same times)."""
        return self is Executor.PHASE

    def closed_forms(self, program: type) -> bool:
        """Whether a collective takes its closed form's time: alone on its links, which the
        program's collectives are unless it says they share them."""
        return self is not Executor.PHASE and not (program.collectives_share_links
                                                   or program.stream_beside_step)


def choose(granularity: str, mode: str, program: type, world_size: int) -> Executor:
    """The executor of a step: the reference at granularity "phase"; else the lockstep where
    every rank is simulated (mode "per_rank") and the program's streams start in time order (no
    stream beside the whole step), else batched."""
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity {granularity!r} is not one of {GRANULARITIES}")
    if granularity == "phase":
        return Executor.PHASE
    if mode == "per_rank" and world_size > 1 and not program.stream_beside_step:
        return Executor.LOCKSTEP
    return Executor.BATCHED


# What a stage program yields to wait (a simpy event, a lockstep Signal): opaque to it.
Waitable = Any


class ProgramClock(Protocol):
    """The rank's `env` as a stage program sees it (clock.Environment, strands.Lockstep)."""

    def all_of(self, events: list) -> Waitable:
        """Fires once every one of `events` has (simpy's AllOf)."""


class Slots(Protocol):
    """`count` buffers a stage program takes before use and puts back after (sync.Slots,
    strands.Slots)."""

    def take(self) -> Iterator:
        """Process body: wait until a buffer is free, and take it."""

    def put(self) -> None:
        """Put a buffer back."""


class Rank(Protocol):
    """What a stage program may ask of its rank (rank.RankContext; lockstep/ranks.Ranks, every
    rank at once)."""

    env: ProgramClock

    def compute(self, duration_s: float, name: str, phase: str, layer: int | None) -> Iterator:
        """Process body: busy the compute stream for duration_s, scaled by the rank's
        slowdown and jitter."""

    def comm(self, stream: str, op: str, size_bytes: float, name: str, phase: str,
             layer: int | None, before: Callable[[], Iterator] | None = None,
             after: Callable[[], None] | None = None, group: str = WORLD) -> Waitable:
        """Queue a collective (or a host operation: group offload.HOST) on `stream`; what is
        returned fires when it has completed on the rank."""

    def alloc(self, key: object, category: str, size_bytes: int, stream: str = COMPUTE) -> None:
        """Allocate a buffer on the rank's memory timeline."""

    def free(self, key: object) -> None:
        """Free the buffer allocated under `key`."""

    def mark(self, label: str) -> None:
        """Name the memory in use now (contract's memory points)."""

    def slots(self, count: int) -> Slots:
        """`count` buffers, taken and put back."""


class Rendezvous(Protocol):
    """What a rank (rank.RankContext) asks of whoever runs its collectives: the engine
    (engine.Engine), or, for a rank replayed after the lockstep, the lockstep's schedule
    (lockstep/replay.Replay)."""

    env: Any
    """Its clock.Environment."""
    scenario: Any
    keep_events: bool
    keep_samples: bool
    sm_share: float
    closed_form: bool
    """Collectives take their closed forms: the program may open only one stream."""

    def join(self, key: tuple[str, int], op: str, size_bytes: float,
             group: str = WORLD) -> Iterator:
        """Process body: take part in collective `key` (a stream and its count) until it has
        completed on this rank; returns (start_s, bytes each rank sent)."""


class LockstepHost(Protocol):
    """What the lockstep (lockstep/) asks of the engine that chose it: the step to run, its
    clock and links, and how a collective is priced over them."""

    env: Any
    scenario: Any
    program: type
    keep_events: bool
    sm_share: float
    cluster: Any
    link_ranks: list[int]
    progress: Callable[[int, int], None] | None
    collectives: int

    def begin(self, op: str, size_bytes: float, group: str = WORLD) -> tuple:
        """A collective starts: its phases, idle_plan (None: event by event) and the bytes each
        rank sends."""

    def finish(self) -> None:
        """A collective has completed."""

    def group_of(self, name: str) -> Any:
        """The ranks of a named group (collectives.ring.Group)."""
