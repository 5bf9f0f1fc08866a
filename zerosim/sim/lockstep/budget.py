"""How much memory a step takes when ranks are simulated one by one, and the most it may take.

Every rank of a per-rank run (jitter, or --mode per_rank), and every straggler of a classes run,
costs memory in proportion to its step: the lockstep run (strands.py) keeps, per rank, a time
and an anchor for each memory operation and a put and a join time for each collective; a rank
simulated event by event keeps its queued collectives as simpy events; with an event log
(--trace) every rank keeps its events and memory samples, and the trace of them is held whole
while it is written. The estimate counts those in the
step of one rank of the uniform cluster (engine.step_counts) times the figures below, measured
with tracemalloc on the ZeRO paper's 7.5B scenario (128 to 4096 ranks, stages 0-3; within a
factor of 2 of the peak: tests/zerosim/test_jitter_budget.py). A step whose estimate exceeds
the budget is refused before it starts, in one line. Ranks whose memory operations fall in
orders of their own are each replayed event by event (lockstep/replay.py), which the estimate cannot
foresee: once the lockstep pass has counted them, check_replays adds them and refuses again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from zerosim.errors import InputError

BUDGET_SHARE = 0.5
"""Of the memory available when the step starts (Linux's MemAvailable): the rest is left to the
machine and to what the command keeps besides (the other stages' results, a trace's text)."""
DEFAULT_BUDGET_BYTES = 8 * 2**30
"""The budget where the available memory cannot be read (no /proc/meminfo): 8 GiB."""
BUDGET_BYTES: int | None = None
"""A fixed budget in place of the machine's (None: BUDGET_SHARE of what is available)."""

BYTES_PER_OPERATION = 16
"""Lockstep, per rank and memory operation: its time and its anchor (float64 and int64)."""
BYTES_PER_COLLECTIVE = 16
"""Lockstep, per rank and collective: when it was queued and when the rank joined it."""
BYTES_PER_LOCKSTEP_RANK = 8 * 2**10
"""Lockstep, per rank: its jitter generator and a block of draws, its clocks, its result."""
BYTES_PER_ORDERED_OPERATION = 64
"""Lockstep, per memory operation of each rank being ordered at once (ORDERED_AT_ONCE of
them): its time, anchor, place and strand, sorted (replay.memory_groups)."""
ORDERED_AT_ONCE = 256
"""Ranks whose memory operations replay.memory_groups orders at once."""
BYTES_PER_QUEUED_COLLECTIVE = 200
"""Event by event, per rank and collective: its request and simpy events."""
BYTES_PER_SIMULATED_RANK = 64 * 2**10
"""Event by event, per rank: its context, processes, memory timeline and allocator (a replayed
rank of Llama-2-7B's stage 2 or 3 under 20% jitter kept 30-35 kB without an event log)."""
BYTES_PER_EVENT = 400
"""With an event log, per rank and event: the record (contract.SimulatedEvent)."""
BYTES_PER_SAMPLE = 300
"""With an event log, per rank and memory sample: its time and bytes by category."""
BYTES_PER_LOGGED_RANK = 32 * 2**10
"""With an event log, per rank: the rank replayed event by event (its context and allocator)."""
BYTES_PER_TRACE_RECORD = 1_850
"""With an event log, per rank and event or memory sample: its trace, held whole while it is
written (cli/simulation.py: sim/trace.chrome_trace's two dicts for it, their JSON text and that
text's UTF-8 bytes; the file is ~460 bytes per record). Measured with tracemalloc on the ZeRO
paper's 7.5B scenario, 5% jitter, 128 ranks: 1.67 kB (stage 3, half of it samples) to 1.82 kB
(stage 0) beyond the step's own; left out, the estimate was 5 times too small (review U2)."""


@dataclass(frozen=True)
class StepCounts:
    """What one rank of the uniform cluster does in the step."""

    collectives: int
    events: int
    samples: int
    operations: int
    """Memory operations: allocations, frees and marks."""


def step_bytes(ranks: int, counts: StepCounts, lockstep: bool, keep_events: bool) -> int:
    """The estimated memory a step of `ranks` simulated one by one takes."""
    size = ranks * bytes_per_rank(counts, lockstep, keep_events)
    if lockstep:
        size += BYTES_PER_ORDERED_OPERATION * counts.operations * min(ranks, ORDERED_AT_ONCE)
    return size


def bytes_per_rank(counts: StepCounts, lockstep: bool, keep_events: bool) -> int:
    """The estimated memory each rank simulated one by one takes, beyond what is shared."""
    if lockstep:
        size = (BYTES_PER_LOCKSTEP_RANK + BYTES_PER_OPERATION * counts.operations
                + BYTES_PER_COLLECTIVE * counts.collectives)
    else:
        size = BYTES_PER_SIMULATED_RANK + BYTES_PER_QUEUED_COLLECTIVE * counts.collectives
    if keep_events:
        size += (BYTES_PER_LOGGED_RANK + (BYTES_PER_EVENT + BYTES_PER_TRACE_RECORD) * counts.events
                 + (BYTES_PER_SAMPLE + BYTES_PER_TRACE_RECORD) * counts.samples)
    return size


def available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Linux's estimate of the memory a new process can take without swapping (MemAvailable),
    or None where it cannot be read."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable":
                return int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def budget_bytes() -> tuple[int, str]:
    """The most a step may take, and where that figure comes from."""
    if BUDGET_BYTES is not None:
        return BUDGET_BYTES, "zerosim.sim.lockstep.budget.BUDGET_BYTES"
    available = available_bytes()
    if available is None:
        return DEFAULT_BUDGET_BYTES, "the default where available memory cannot be read"
    return (int(available * BUDGET_SHARE),
            f"{BUDGET_SHARE:.0%} of the {available / 1e9:.1f} GB available")


def check_replays(ranks: int, replays: int, counts: StepCounts) -> None:
    """Once the lockstep pass has found how many ranks' memory operations fall in orders of their
    own (replay.every_rank, without an event log), refuse replaying them event by event where
    that, with the lockstep's own memory, would take more than the budget: the estimate before
    the step (step_bytes) cannot know how many orders there are."""
    size = (step_bytes(ranks, counts, lockstep=True, keep_events=False)
            + replays * BYTES_PER_SIMULATED_RANK)
    check(ranks, size, f"jitter or --mode per_rank, {replays} ranks' memory orders replayed")


def check(ranks: int, size_bytes: int, why: str) -> None:
    """Refuse a step whose `ranks` simulated one by one would take more than the budget."""
    limit, source = budget_bytes()
    if size_bytes > limit:
        raise InputError(
            f"simulating {ranks} ranks one by one ({why}) would take about "
            f"{size_bytes / 1e9:.2f} GB ({size_bytes / ranks / 1e3:.0f} kB per rank), more than "
            f"the {limit / 1e9:.2f} GB limit ({source}): simulate fewer ranks, without --trace, "
            f"or without what makes ranks differ")
