"""Pipeline schedules (zerosim/parallel/schedule.py): every stage's order written out by hand
from Megatron-LM's rules (megatron/core/pipeline_parallel/schedules.py at d98e8a6) and from
PyTorch's ScheduleGPipe, each micro-batch run once forward and once backward, and the
activations held counted by walking each order, against the closed forms: GPipe m, 1F1B
min(p - i, m), interleaved min(2(p - i - 1) + (v - 1)p + 1, m v)."""

from __future__ import annotations

import pytest

from zerosim import contract
from zerosim.parallel.schedule import SCHEDULES, in_flight, orders, virtual_stage


def spelled(order) -> str:
    """F3 for micro-batch 3's forward, B0.1 for micro-batch 0's backward through chunk 1."""
    chunked = any(op.chunk for op in order)
    return " ".join(f"{op.kind[0].upper()}{op.micro}" + (f".{op.chunk}" if chunked else "")
                    for op in order)


def held_walking(order) -> int:
    """The most (micro-batch, chunk) activations alive, walking the order: a forward keeps
    one, its backward frees it."""
    held, most = 0, 0
    for op in order:
        held += 1 if op.kind == "forward" else -1
        most = max(most, held)
    return most


CASES = [("gpipe", p, m, 1) for p, m in ((1, 1), (1, 5), (2, 3), (4, 8), (4, 2), (8, 3))]
CASES += [("1f1b", p, m, 1) for p, m in ((1, 1), (1, 6), (2, 1), (2, 5), (4, 8), (4, 2),
                                          (4, 3), (8, 16), (5, 4))]
CASES += [("interleaved_1f1b", p, m, v) for p, m, v in ((2, 2, 2), (2, 4, 2), (4, 8, 2),
                                                         (4, 4, 3), (3, 9, 4), (8, 8, 2),
                                                         (8, 16, 4), (2, 6, 5))]


def test_the_schedules_are_the_contracts_names():
    assert SCHEDULES is contract.PIPELINE_SCHEDULES


@pytest.mark.parametrize("schedule, p, m, v", CASES)
def test_every_micro_batch_runs_forward_once_then_backward_once_on_every_stage(schedule, p, m, v):
    stage_orders = orders(schedule, p, m, v)
    assert len(stage_orders) == p
    every = {(micro, chunk) for micro in range(m) for chunk in range(v)}
    for order in stage_orders:
        forwards = [(op.micro, op.chunk) for op in order if op.kind == "forward"]
        backwards = [(op.micro, op.chunk) for op in order if op.kind == "backward"]
        assert sorted(forwards) == sorted(every) and sorted(backwards) == sorted(every)
        seen = set()
        for op in order:
            if op.kind == "forward":
                seen.add((op.micro, op.chunk))
            else:
                assert (op.micro, op.chunk) in seen  # a backward after its forward


def test_gpipe_runs_every_forward_then_every_backward_in_micro_batch_order():
    """ScheduleGPipe._step_microbatches (PyTorch 00722e6): for i in range(m) forward, then for i
    in range(m) backward; the same on every stage."""
    assert [spelled(o) for o in orders("gpipe", 3, 4)] == ["F0 F1 F2 F3 B0 B1 B2 B3"] * 3


def test_1f1b_order_for_four_stages_and_eight_micro_batches_by_hand():
    """Megatron's forward_backward_pipelining_without_interleaving: stage i runs
    min(p - i - 1, m) warmup forwards, then (forward, backward) pairs, then the cooldown. Stage 0
    warms up with 3, stage 3 with none."""
    stage_orders = orders("1f1b", 4, 8)
    assert spelled(stage_orders[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"
    assert spelled(stage_orders[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"


def test_1f1b_with_fewer_micro_batches_than_stages_warms_up_with_all_of_them():
    """m = 2 < p = 4: stage 0's warmup min(3, 2) = 2 is every forward."""
    assert spelled(orders("1f1b", 4, 2)[0]) == "F0 F1 B0 B1"
    # stage 2: min(1, 2) = 1 warmup F0, the pair F1 B0, the cooldown B1; stage 3: no warmup
    assert spelled(orders("1f1b", 4, 2)[2]) == "F0 F1 B0 B1"
    assert spelled(orders("1f1b", 4, 2)[3]) == "F0 B0 F1 B1"


def test_interleaved_order_for_two_stages_two_chunks_four_micro_batches_by_hand():
    """Megatron's get_schedule_table with groups of p = 2 micro-batches: forwards (micro, chunk)
    (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1); the k-th backward takes the k-th entry's
    micro-batch through chunk v - 1 - chunk: (0,1) (1,1) (0,0) (1,0) (2,1) (3,1) (2,0) (3,0).
    Warmup (get_pp_rank_microbatches): stage 0 (2 - 0 - 1) 2 + (2 - 1) 2 = 4, stage 1
    0 + 2 = 2; then pairs, then the cooldown."""
    stage0, stage1 = orders("interleaved_1f1b", 2, 4, 2)
    assert spelled(stage0) == ("F0.0 F1.0 F0.1 F1.1 "
                               "F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 "
                               "B2.1 B3.1 B2.0 B3.0")
    assert spelled(stage1) == ("F0.0 F1.0 "
                               "F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 "
                               "B2.0 B3.0")


def test_a_warmup_past_every_forward_is_capped():
    """p = 2, v = 2, m = 2: stage 0's warmup 4 = m v runs every forward first."""
    assert spelled(orders("interleaved_1f1b", 2, 2, 2)[0]) == \
        "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0"


def hand_in_flight(schedule: str, p: int, m: int, v: int, i: int) -> int:
    """The task's closed forms, written out here."""
    if schedule == "gpipe":
        return m
    if schedule == "1f1b":
        return min(p - i, m)
    return min(2 * (p - i - 1) + (v - 1) * p + 1, m * v)


@pytest.mark.parametrize("schedule, p, m, v", CASES)
def test_in_flight_is_the_most_held_walking_each_order_and_the_hand_formula(schedule, p, m, v):
    for stage, order in enumerate(orders(schedule, p, m, v)):
        walked = held_walking(order)
        assert in_flight(schedule, p, m, v, stage) == walked
        assert walked == hand_in_flight(schedule, p, m, v, stage)


def test_in_flight_written_out():
    """1F1B p = 4, m = 8: 4 3 2 1. Interleaved p = 4, v = 2, m = 8: 2(3 - i) + 4 + 1 =
    11 9 7 5 (Narayanan et al. 2021 §2.2.2: the first stage holds the most)."""
    assert [in_flight("1f1b", 4, 8, 1, i) for i in range(4)] == [4, 3, 2, 1]
    assert [in_flight("interleaved_1f1b", 4, 8, 2, i) for i in range(4)] == [11, 9, 7, 5]
    assert [in_flight("gpipe", 4, 8, 1, i) for i in range(4)] == [8, 8, 8, 8]


def test_virtual_stage_is_megatrons_layout():
    """Chunk c of stage i runs virtual stage c p + i: with p = 4, stage 1's chunks are 1, 5, 9."""
    assert [virtual_stage(1, chunk, 4) for chunk in range(3)] == [1, 5, 9]
    assert virtual_stage(3, 0, 4) == 3


@pytest.mark.parametrize("schedule, p, m, v, says", [
    ("zigzag", 2, 2, 1, "'zigzag' is not one of gpipe, 1f1b, interleaved_1f1b"),
    ("1f1b", 2, 4, 2, "virtual stages = 2 needs the interleaved_1f1b schedule, not 1f1b"),
    ("gpipe", 2, 0, 1, "micro-batches (0)"),
    ("1f1b", 0, 2, 1, "stages (0)"),
    ("interleaved_1f1b", 4, 6, 2, "divisible by stages: 6 % 4 = 2"),
    ("interleaved_1f1b", 4, 8, 1, "not p = 4, v = 1"),
    ("interleaved_1f1b", 1, 4, 2, "not p = 1, v = 2"),
])
def test_what_a_schedule_cannot_run_is_named(schedule, p, m, v, says):
    with pytest.raises(ValueError) as raised:
        orders(schedule, p, m, v)
    assert says in str(raised.value)
    with pytest.raises(ValueError):
        in_flight(schedule, p, m, v, 0)
