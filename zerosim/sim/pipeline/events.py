"""One pipelined training step as a discrete-event simulation: each pipeline stage's compute
stream runs its schedule's ops (parallel/schedule.py), its communication stream the
data-parallel collectives, and the point-to-point links carry activations forward and gradients
back between neighbouring stages. Bubbles emerge from the waits; no bubble formula is used.

    a forward of (micro j, chunk c) on stage i, virtual stage g = c p + i, waits for the
      activation from virtual stage g - 1 (unless g = 0); a backward for the gradient from g + 1
      (unless g = p v - 1, which follows its own forward of j: the schedule's order keeps that)
    a finished op sends asynchronously (the sender goes on: torch.distributed.isend, as Megatron's
      P2PCommunicator._communicate issues it, waited only later with overlap_p2p_comm, and as
      ScheduleGPipe defers its fwd_sends_to_wait), or with blocking_sends waits for the transfer
      to arrive before its next op (Megatron's non-interleaved schedules, DeepSpeed's dist.send),
      over link i forward or link (i - 1) mod p backward; each direction of a link is a FIFO:
      start = max(sent, link free), end = start + that link's seconds, and the receiving op
      cannot start before the end
    a chunk's first forward waits for its own parameter gathers (launched at step start, chunk
      by chunk, on the comm stream); the chunk's last backward is cut into pieces, each piece's
      gradient reduction launched on the comm stream (FIFO) as the piece ends, hidden behind the
      compute that follows
    after the last op and the last collective: the optimizer, then the collectives that follow
      it (ZeRO-1's parameter all-gather), each waited

Every time is exact arithmetic on a stage's own clock (max and +); the simpy events only order
the stages: one timeout per op (per piece of a cut backward), and one event more when an op's
input has not been sent yet (the sender wakes the receiver with the arrival time). Each link
direction has a single sender and each comm stream a single owner, so the order in which
simultaneous events are processed changes no time.

Memory: an op's activations are allocated when its forward ends and freed when its backward
ends; a stage's peak is its static bytes plus the most held at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from zerosim.contract import COLLECTIVE_OPS, COMM, COMPUTE, P2P, P2P_OPS, PASSES, QUEUES
from zerosim.parallel.schedule import check, orders, virtual_stage

FORWARD, BACKWARD = PASSES
SEND = P2P_OPS[0]
GATHER, REDUCE = QUEUES[2:]  # event kinds: a chunk's parameter gather, a piece's reduction
ALL_GATHER = COLLECTIVE_OPS[2]  # the parameter all-gather after the optimizer (ZeRO-1)
OPTIMIZER = "optimizer"
PIECE_SUM_TOLERANCE = 1e-9
"""How far a cut backward's fractions may sum from 1 (they are floats a plan computed)."""


@dataclass(frozen=True)
class StagePlan:
    """One pipeline stage (its representative data-parallel rank): seconds and bytes per chunk."""

    forward_s: tuple[float, ...]
    """Per chunk: compute seconds of one micro-batch's forward."""
    backward_s: tuple[float, ...]
    """Per chunk: compute seconds of one micro-batch's backward."""
    activation_bytes: tuple[int, ...]
    """Per chunk: bytes kept from a micro-batch's forward to its backward."""
    gather_s: tuple[tuple[float, ...], ...] = ()
    """Per chunk: comm-stream seconds of its parameter all-gathers (FSDP), launched at step start
    in chunk order; the chunk's first forward waits for its own. () = none."""
    reduce: tuple[tuple[tuple[float, float], ...], ...] = ()
    """Per chunk: the last backward of the chunk cut into pieces (fraction of its backward_s,
    comm-stream seconds launched when the piece ends); fractions sum to 1. () = none."""
    optimizer_s: float = 0.0
    """Compute seconds of the optimizer, after the last op and all comm."""
    after_s: tuple[float, ...] = ()
    """Comm-stream seconds after the optimizer (ZeRO-1's parameter all-gather), each waited."""
    static_bytes: int = 0
    """Model states and buffers alive all step."""


@dataclass(frozen=True)
class PipelinePlan:
    """One pipelined step: the schedule and every stage's plan and links."""

    schedule: str
    stages: int
    micro_batches: int
    virtual: int
    stage_plans: tuple[StagePlan, ...]
    """One per stage."""
    p2p_s: tuple[float, ...]
    """Per link i (stage i to stage (i + 1) mod p; the wrap link p - 1 -> 0 only interleaved
    uses): seconds of one transfer, the same in each direction."""
    p2p_bytes: int
    """Bytes of one transfer (s b h x bytes per element / sequence shards)."""
    blocking_sends: bool = False
    """Whether a stage waits for each of its sends to arrive before its next op (Megatron's
    non-interleaved schedules, DeepSpeed's PipelineEngine: Framework.pipeline_sends_block)."""


@dataclass
class StageRun:
    """What one stage did in the step."""

    end_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    """Seconds the comm stream was busy."""
    p2p_sent_bytes: int = 0
    max_held: int = 0
    """The most (micro-batch, chunk) activations held at once."""
    peak_bytes: int = 0
    """static_bytes + the most activation bytes held at once."""
    events: list[tuple[str, str, float, float, int, int]] = field(default_factory=list)
    """(lane, kind, start_s, end_s, micro, chunk); micro -1 where none. Only with keep_events."""
    memory: list[tuple[float, int]] = field(default_factory=list)
    """(time_s, bytes held) at the start and after each change. Only with keep_events."""


def check_plan(plan: PipelinePlan) -> None:
    """ValueError naming what in a plan is inconsistent (a bug of whoever made it)."""
    check(plan.schedule, plan.stages, plan.micro_batches, plan.virtual)
    p, v = plan.stages, plan.virtual
    if len(plan.stage_plans) != p or len(plan.p2p_s) != p:
        raise ValueError(f"{p} stages need {p} stage plans and {p} links, not "
                         f"{len(plan.stage_plans)} and {len(plan.p2p_s)}")
    if min(plan.p2p_s) < 0:
        raise ValueError(f"negative link seconds {plan.p2p_s}")
    for i, sp in enumerate(plan.stage_plans):
        for name in ("forward_s", "backward_s", "activation_bytes", "gather_s", "reduce"):
            size = len(getattr(sp, name))
            if size != v and not (size == 0 and name in ("gather_s", "reduce")):
                raise ValueError(f"stage {i}: {name} has {size} entries for {v} chunks")
        if min(sp.forward_s + sp.backward_s) < 0 or min(sp.activation_bytes) < 0:
            raise ValueError(f"stage {i}: negative seconds or bytes")
        for c, pieces in enumerate(sp.reduce):
            total = sum(fraction for fraction, _ in pieces)
            if not pieces or abs(total - 1.0) > PIECE_SUM_TOLERANCE:
                raise ValueError(f"stage {i} chunk {c}: reduce fractions sum to {total}, not 1")


class _Links:
    """The links' free times per direction and each stage's received inputs: arrival times by
    key, or the event of the stage waiting for one."""

    def __init__(self, plan: PipelinePlan) -> None:
        self.seconds = plan.p2p_s
        self.free_forward = [0.0] * plan.stages
        self.free_backward = [0.0] * plan.stages
        self.inbox: list[dict[int, float]] = [{} for _ in range(plan.stages)]
        self.waiting: list[tuple[int, simpy.Event] | None] = [None] * plan.stages

    def send(self, link: int, backward: bool, sent_s: float, target: int, key: int) -> float:
        """One transfer over a link's direction (FIFO); delivers its arrival time to the target
        stage, waking it if it waits for exactly this input. The transfer's start."""
        free = self.free_backward if backward else self.free_forward
        start = sent_s if sent_s > free[link] else free[link]
        arrival = start + self.seconds[link]
        free[link] = arrival
        waiting = self.waiting[target]
        if waiting is not None and waiting[0] == key:
            self.waiting[target] = None
            waiting[1].succeed(arrival)
        else:
            self.inbox[target][key] = arrival
        return start


def run_pipeline(plan: PipelinePlan, keep_events: bool = True) -> list[StageRun]:
    """Simulate one pipelined step; each stage's run, in stage order."""
    check_plan(plan)
    env = simpy.Environment()
    links = _Links(plan)
    runs = [StageRun() for _ in range(plan.stages)]
    for stage, order in enumerate(orders(plan.schedule, plan.stages, plan.micro_batches,
                                         plan.virtual)):
        env.process(_stage(env, plan, stage, order, links, runs[stage], keep_events))
    env.run()
    stuck = [stage for stage, waiting in enumerate(links.waiting) if waiting is not None]
    if stuck:
        raise RuntimeError(f"pipeline stages {stuck} never received their inputs")
    return runs


def _until(env: simpy.Environment, time_s: float) -> float:
    """The delay to time_s: the stage's clock is exact, simpy's now can be an ulp past it."""
    delay = time_s - env.now
    return delay if delay > 0.0 else 0.0


def _gathers(sp: StagePlan, run: StageRun, keep: bool) -> tuple[list[float], float]:
    """Launch the chunks' parameter gathers at step start, FIFO on the comm stream: when each
    chunk's are done, and when the comm stream is free."""
    done, free = [], 0.0
    for c, gathers in enumerate(sp.gather_s):
        for seconds in gathers:
            if keep:
                run.events.append((COMM, GATHER, free, free + seconds, -1, c))
            free += seconds
            run.comm_s += seconds
        done.append(free)
    return done, free


def _last_backwards(order: list) -> set[int]:
    """Positions in `order` of each chunk's last backward."""
    last: dict[int, int] = {}
    for position, op in enumerate(order):
        if op.kind == BACKWARD:
            last[op.chunk] = position
    return set(last.values())


def _routes(plan: PipelinePlan, stage: int) -> list[tuple]:
    """Per (chunk, backward), what an op needs and does: (whether it waits for an input, its
    seconds, the activation bytes it keeps (+) or frees (-), the stage its output goes to or -1,
    that stage's chunk, the link)."""
    p, v, last_g = plan.stages, plan.virtual, plan.stages * plan.virtual - 1
    sp, routes = plan.stage_plans[stage], []
    for c in range(v):
        g = virtual_stage(stage, c, p)
        for backward in (False, True):
            waits, target_g = (g < last_g, g - 1) if backward else (g > 0, g + 1)
            seconds = sp.backward_s[c] if backward else sp.forward_s[c]
            kept = -sp.activation_bytes[c] if backward else sp.activation_bytes[c]
            if not 0 <= target_g <= last_g:
                routes.append((waits, seconds, kept, -1, 0, 0))
                continue
            link = (stage - 1) % p if backward else stage
            routes.append((waits, seconds, kept, target_g % p, target_g // p, link))
    return routes


def _stage(env: simpy.Environment, plan: PipelinePlan, stage: int, order: list, links: _Links,
           run: StageRun, keep: bool):
    """A stage's compute stream: its ops in order, each after its input; then the tail."""
    v, sp, routes = plan.virtual, plan.stage_plans[stage], _routes(plan, stage)
    inbox, events, memory, timeout = links.inbox[stage], run.events, run.memory, env.timeout
    gather_done, comm_free = _gathers(sp, run, keep)
    cut = _last_backwards(order) if sp.reduce else set()
    held_bytes, held, most_bytes, most, sent, clock, compute_s = 0, 0, 0, 0, 0, 0.0, 0.0
    if keep:
        memory.append((0.0, sp.static_bytes))
    for position, op in enumerate(order):
        c, micro, backward = op.chunk, op.micro, op.kind == BACKWARD
        waits, seconds, kept, target, target_chunk, link = routes[2 * c + backward]
        start = clock
        if waits:
            key = (micro * v + c) * 2 + backward
            arrival = inbox.pop(key, None)
            if arrival is None:  # not sent yet: the sender wakes this stage with its arrival
                links.waiting[stage] = (key, env.event())
                arrival = yield links.waiting[stage][1]
            if arrival > start:
                start = arrival
        if gather_done and not backward and gather_done[c] > start:
            start = gather_done[c]  # only ever the chunk's first forward: gathers start at 0
        if position in cut:
            clock, comm_free = yield from _cut_backward(env, sp, c, micro, start, comm_free,
                                                         run, keep)
        else:
            clock = start + seconds
            delay = clock - env.now  # simpy's now may be an ulp past the exact clock
            yield timeout(delay if delay > 0.0 else 0.0)
            if keep:
                events.append((COMPUTE, op.kind, start, clock, micro, c))
        compute_s += clock - start
        held_bytes += kept
        held += -1 if backward else 1
        if held > most:
            most = held
        if held_bytes > most_bytes:  # chunks' bytes may differ: not always at the most held
            most_bytes = held_bytes
        if keep:
            memory.append((clock, sp.static_bytes + held_bytes))
        if target >= 0:
            start = links.send(link, backward, clock, target, (micro * v + target_chunk) * 2
                               + backward)
            sent += 1
            if plan.blocking_sends:  # the next op waits for the transfer to arrive
                clock = start + plan.p2p_s[link]
            if keep:
                events.append((SEND, P2P, start, start + plan.p2p_s[link], micro, c))
    run.compute_s, run.max_held, run.peak_bytes = compute_s, most, most_bytes + sp.static_bytes
    run.p2p_sent_bytes = sent * plan.p2p_bytes
    yield from _tail(env, sp, clock, comm_free, run, keep)


def _cut_backward(env: simpy.Environment, sp: StagePlan, c: int, micro: int, start: float,
                  comm_free: float, run: StageRun, keep: bool):
    """A chunk's last backward, piece by piece, each piece's reduction launched on the comm
    stream as it ends. (end of the backward, when the comm stream is free)."""
    backward_s, pieces = sp.backward_s[c], sp.reduce[c]
    done = 0.0
    end = start
    for index, (fraction, comm_s) in enumerate(pieces):
        done += fraction
        # The last piece ends where the whole backward does (no drift from summed fractions).
        end = start + backward_s if index == len(pieces) - 1 else start + backward_s * done
        yield env.timeout(_until(env, end))
        if not comm_s:  # nothing to reduce after this piece (another chunk's reduces it)
            continue
        comm_start = end if end > comm_free else comm_free
        comm_free = comm_start + comm_s
        run.comm_s += comm_s
        if keep:
            run.events.append((COMM, REDUCE, comm_start, comm_free, micro, c))
    if keep:
        run.events.append((COMPUTE, BACKWARD, start, end, micro, c))
    return end, comm_free


def _tail(env: simpy.Environment, sp: StagePlan, clock: float, comm_free: float, run: StageRun,
          keep: bool):
    """After the last op and the last collective: the optimizer, then the collectives after it,
    each waited."""
    now = clock if clock > comm_free else comm_free
    if sp.optimizer_s:
        if keep:
            run.events.append((COMPUTE, OPTIMIZER, now, now + sp.optimizer_s, -1, -1))
        now += sp.optimizer_s
        run.compute_s += sp.optimizer_s
    for seconds in sp.after_s:
        if keep:
            run.events.append((COMM, ALL_GATHER, now, now + seconds, -1, -1))
        now += seconds
        run.comm_s += seconds
    run.end_s = now
    yield env.timeout(_until(env, now))
