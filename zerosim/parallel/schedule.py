"""Pipeline schedules: the order in which each pipeline stage's compute stream runs the forwards
and backwards of a step's m micro-batches, and how many micro-batches' activations it holds.

    gpipe             every forward (micro-batches 0..m-1), then every backward in the same
                      order (Huang et al. 2019; PyTorch's torch/distributed/pipelining/
                      schedules.py, ScheduleGPipe._step_microbatches, at 00722e6).
                      Stage i holds m.
    1f1b              PipeDream-flush (Narayanan et al. 2021, §2.2.1): w = min(p - i - 1, m)
                      warmup forwards, then m - w pairs (a forward, then the oldest backward),
                      then the w cooldown backwards. Holds min(p - i, m).
    interleaved_1f1b  v model chunks per stage, chunk c of stage i holding virtual stage
                      c*p + i (§2.2.2): forwards walk groups of p micro-batches through chunk 0,
                      then chunk 1, ... (backwards through the chunks in reverse);
                      w = min(2(p - i - 1) + (v - 1)p, m v) warmup forwards, then 1F1B pairs,
                      then the cooldown. Holds min(w + 1, m v) (micro-batch, chunk) activations.

Each rule is Megatron-LM's megatron/core/pipeline_parallel/schedules.py, read at d98e8a6
(get_pp_rank_microbatches, get_schedule_table, forward_backward_pipelining_with_interleaving's
get_model_chunk_id, forward_backward_pipelining_without_interleaving), with Megatron's default
microbatch_group_size_per_vp_stage = p (megatron/core/model_parallel_config.py, __post_init__).
"""

from __future__ import annotations

from dataclasses import dataclass

from zerosim.contract import PASSES, PIPELINE_SCHEDULES

SCHEDULES = PIPELINE_SCHEDULES
GPIPE, ONE_F_ONE_B, INTERLEAVED = PIPELINE_SCHEDULES
FORWARD, BACKWARD = PASSES


@dataclass(frozen=True, slots=True)
class Op:
    """One compute op of a pipeline stage: a forward or backward of one micro-batch through one
    of the stage's model chunks."""

    kind: str
    """FORWARD or BACKWARD."""
    micro: int
    """The micro-batch, 0..m-1."""
    chunk: int
    """The stage's model chunk, 0..v-1 (0 unless interleaved)."""


def virtual_stage(stage: int, chunk: int, stages: int) -> int:
    """The virtual stage that chunk `chunk` of pipeline stage `stage` runs: Megatron's layout
    puts virtual stage c*p + i on stage i (Narayanan et al. 2021, §2.2.2, Figure 4)."""
    return chunk * stages + stage


def check(schedule: str, stages: int, micro_batches: int, virtual: int) -> None:
    """ValueError naming what a schedule cannot run (the scenario layer refuses it first, as user
    input)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"pipeline schedule {schedule!r} is not one of {', '.join(SCHEDULES)}")
    if stages < 1 or micro_batches < 1 or virtual < 1:
        raise ValueError(f"stages ({stages}), micro-batches ({micro_batches}) and virtual "
                         f"stages ({virtual}) must each be at least 1")
    if schedule != INTERLEAVED:
        if virtual != 1:
            raise ValueError(f"virtual stages = {virtual} needs the {INTERLEAVED} schedule, "
                             f"not {schedule}")
        return
    # Megatron runs a virtual size of 1 as the plain schedule (training/arguments.py sets it to
    # None) and asserts p > 1 for the interleaved one (same file, "pipeline-model-parallel size
    # should be greater than 1").
    if virtual < 2 or stages < 2:
        raise ValueError(f"{INTERLEAVED} needs at least 2 stages and 2 virtual stages per stage, "
                         f"not p = {stages}, v = {virtual}")
    # Megatron before 4295be1 (schedules.py at 2e2bdf6, forward_backward_pipelining_with_
    # interleaving): "number of microbatches is not divisible by pipeline-model-parallel-size".
    if micro_batches % stages:
        raise ValueError(f"{INTERLEAVED} needs micro-batches divisible by stages: "
                         f"{micro_batches} % {stages} = {micro_batches % stages}")


def warmup(schedule: str, stages: int, micro_batches: int, virtual: int, stage: int) -> int:
    """Forwards stage `stage` runs before its first backward (Megatron's get_pp_rank_microbatches
    and, for 1F1B, forward_backward_pipelining_without_interleaving), capped at all of them."""
    total = micro_batches * virtual
    if schedule == GPIPE:
        return total
    if schedule == ONE_F_ONE_B:
        return min(stages - stage - 1, total)
    return min((stages - stage - 1) * 2 + (virtual - 1) * stages, total)


def in_flight(schedule: str, stages: int, micro_batches: int, virtual: int, stage: int) -> int:
    """Closed form: the most (micro-batch, chunk) activations stage `stage` holds at once.
    After the warmup each steady pair's forward comes before its backward, so one more is held
    (Megatron's max_outstanding_backprops = num_warmup_microbatches + 1), unless the warmup
    already ran every forward."""
    check(schedule, stages, micro_batches, virtual)
    return min(warmup(schedule, stages, micro_batches, virtual, stage) + 1,
               micro_batches * virtual)


def _interleaved_table(stages: int, micro_batches: int, virtual: int) -> list[tuple[int, int]]:
    """(micro-batch, forward chunk) of each forward in order: Megatron's get_schedule_table with
    groups of p micro-batches (m is a multiple of p, so every group is whole)."""
    return [(micro, chunk)
            for first in range(0, micro_batches, stages)
            for chunk in range(virtual)
            for micro in range(first, first + stages)]


def orders(schedule: str, stages: int, micro_batches: int, virtual: int = 1) -> list[list[Op]]:
    """Each pipeline stage's ops in the order its compute stream runs them."""
    check(schedule, stages, micro_batches, virtual)
    if schedule == INTERLEAVED:
        table = _interleaved_table(stages, micro_batches, virtual)
    else:
        table = [(micro, 0) for micro in range(micro_batches)]
    forwards = [Op(FORWARD, micro, chunk) for micro, chunk in table]
    # The k-th backward takes the k-th forward's micro-batch through the chunks in reverse
    # (get_model_chunk_id with forward=False: v - 1 - chunk).
    backwards = [Op(BACKWARD, micro, virtual - 1 - chunk) for micro, chunk in table]
    return [_stage_order(forwards, backwards,
                         warmup(schedule, stages, micro_batches, virtual, stage))
            for stage in range(stages)]


def _stage_order(forwards: list[Op], backwards: list[Op], warm: int) -> list[Op]:
    """warm forwards, then (forward, backward) pairs, then the remaining backwards."""
    total = len(forwards)
    order = forwards[:warm]
    for k in range(total - warm):
        order.append(forwards[warm + k])
        order.append(backwards[k])
    order.extend(backwards[total - warm:])
    return order
