"""The event executor of a pipelined step (zerosim/sim/pipeline/events.py) against closed forms
and hand counts, never against its own numbers:

- uniform stages, no communication: GPipe and 1F1B take (m + p - 1)(t_f + t_b) (Huang et al.
  2019; Narayanan et al. 2021, §2.2.1), interleaved (t_f + t_b) m (1 + (p - 1)/(v m))
  (Narayanan et al. 2021, §2.2.2, the bubble (p - 1)/(v m)) with t_f, t_b a whole stage's;
- a link of c seconds: GPipe adds 2(p - 1)c (derived below); 1F1B does only for m <= 2;
- timelines written out by hand for small cases: the FIFO link, the cut backward's
  reductions, the gathers, the memory held.
Integer-friendly inputs (1 s forwards, 2 s backwards) make every time exact.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from zerosim.sim.pipeline.events import PipelinePlan, StagePlan, run_pipeline


def uniform(schedule: str, p: int, m: int, v: int = 1, tf: float = 1.0, tb: float = 2.0,
            c: float = 0.0, act: int = 10, **stage) -> PipelinePlan:
    """p identical stages; tf, tb a whole stage's seconds per micro-batch, tf/v, tb/v a chunk's."""
    plan = StagePlan(forward_s=(tf / v,) * v, backward_s=(tb / v,) * v,
                     activation_bytes=(act,) * v, **stage)
    return PipelinePlan(schedule, p, m, v, (plan,) * p, (c,) * p, 100)


def step_s(plan: PipelinePlan) -> float:
    return max(run.end_s for run in run_pipeline(plan))


def compute(run, kind=None) -> list[tuple]:
    """(F|B, micro, chunk, start, end) of a stage's compute ops."""
    return [(e[1][0].upper(), e[4], e[5], e[2], e[3]) for e in run.events
            if e[0] == "compute" and e[1] in ("forward", "backward") and kind in (None, e[1])]


SHAPES = [(1, 1), (1, 4), (2, 1), (2, 3), (2, 8), (4, 2), (4, 4), (4, 8), (8, 3), (8, 32),
          (5, 7)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", SHAPES)
def test_uniform_stages_take_m_plus_p_minus_one_slots(schedule, p, m):
    assert step_s(uniform(schedule, p, m)) == (m + p - 1) * 3.0
    tf, tb = 0.37, 0.81  # not exact in binary: the same to rounding
    assert step_s(uniform(schedule, p, m, tf=tf, tb=tb)) == pytest.approx(
        (m + p - 1) * (tf + tb), rel=1e-12)


INTERLEAVED = [(2, 2, 2), (2, 4, 2), (2, 6, 3), (4, 4, 2), (4, 8, 2), (4, 16, 4), (3, 9, 2),
               (8, 8, 2), (8, 32, 4), (5, 10, 3)]


@pytest.mark.parametrize("p, m, v", INTERLEAVED)
@pytest.mark.parametrize("chunk_f, chunk_b", [(1, 2), (1, 1), (2, 1), (0.5, 1.25)])
def test_interleaved_bubble_is_narayanans(p, m, v, chunk_f, chunk_b):
    """(t_f + t_b) m (1 + (p - 1)/(v m)) = (m v + p - 1)(a + b) with a, b a chunk's times: it
    holds exactly for m a multiple of p, whatever the ratio of b to a, in every case here (and a
    wider sweep: p 2..8, v 2..4, m = p..4p, six ratios). The smallest case's timeline is
    written out by hand below."""
    tf, tb = Fraction(chunk_f) * v, Fraction(chunk_b) * v
    expected = (tf + tb) * m * (1 + Fraction(p - 1, v * m))
    assert step_s(uniform("interleaved_1f1b", p, m, v, float(tf), float(tb))) == expected


def test_interleaved_timeline_by_hand():
    """p = 2, v = 2, m = 2, a chunk's forward 1 s, backward 2 s. Virtual stages g0 = (stage 0,
    chunk 0), g1 = (1, 0), g2 = (0, 1), g3 = (1, 1). Stage 0 runs its 4 forwards back to back
    (F0.1 needs g1's F0, done at 2; F1.1 g1's F1, done at 3); stage 1 runs F0.1 when g2's ends
    (3), then g3's own B0.1; B0.1 on stage 0 waits for it (6); stage 1's F1.1 for stage 0's F1.1
    (4, but stage 1 is busy until 6); and so on backward. The step: 15 = (2 + 4) 2 (1 + 1/4)."""
    stage0, stage1 = run_pipeline(uniform("interleaved_1f1b", 2, 2, 2, 2.0, 4.0))
    assert compute(stage0) == [("F", 0, 0, 0, 1), ("F", 1, 0, 1, 2), ("F", 0, 1, 2, 3),
                               ("F", 1, 1, 3, 4), ("B", 0, 1, 6, 8), ("B", 1, 1, 9, 11),
                               ("B", 0, 0, 11, 13), ("B", 1, 0, 13, 15)]
    assert compute(stage1) == [("F", 0, 0, 1, 2), ("F", 1, 0, 2, 3), ("F", 0, 1, 3, 4),
                               ("B", 0, 1, 4, 6), ("F", 1, 1, 6, 7), ("B", 1, 1, 7, 9),
                               ("B", 0, 0, 9, 11), ("B", 1, 0, 11, 13)]
    assert (stage0.end_s, stage1.end_s) == (15, 13)


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 2), (8, 3), (3, 7), (8, 16)])
@pytest.mark.parametrize("c", [0.125, 0.5, 1.0])
def test_gpipe_adds_one_link_per_hop_each_way(p, m, c):
    """GPipe with a link of c <= min(tf, tb): stage i's forward j starts at i(tf + c) + j tf
    (its inputs come tf apart, each link carries one transfer per tf, so none queues); the last
    stage ends its forwards at (p - 1)(tf + c) + m tf and its backwards come tb apart, so the
    gradients reach stage 0 (p - 1)(tb + c) later: (m + p - 1)(tf + tb) + 2(p - 1)c."""
    assert step_s(uniform("gpipe", p, m, c=c)) == (m + p - 1) * 3 + 2 * (p - 1) * c


@pytest.mark.parametrize("p, m", [(2, 1), (2, 2), (4, 1), (4, 2), (8, 2)])
def test_1f1b_adds_one_link_per_hop_each_way_when_no_forward_waits_on_a_backward(p, m):
    """1F1B's stage i - 1 runs its forward w_{i-1} + k after its backward k - 1 (k >= 1), a
    loop through stage i's backward and the link both ways, once m >= w_{i-1} + 2 for some
    stage (w_{p-2} = 1: m >= 3). With m <= 2 no such forward exists and the path is GPipe's."""
    assert step_s(uniform("1f1b", p, m, c=0.5)) == (m + p - 1) * 3 + 2 * (p - 1) * 0.5


def test_1f1b_steady_state_puts_the_round_trip_on_the_path_by_hand():
    """p = 2, m = 4, tf 1, tb 2, c 0.5: (m + p - 1)(tf + tb) + 2(p - 1)c = 16, but stage 1's F2
    waits for stage 0's F2, which follows stage 0's B1, which waits for stage 1's B1 over the
    link: stage 1 idles 7.5 -> 8.5, and the step is 17."""
    stage0, stage1 = run_pipeline(uniform("1f1b", 2, 4, c=0.5))
    assert compute(stage0) == [("F", 0, 0, 0, 1), ("F", 1, 0, 1, 2), ("B", 0, 0, 5, 7),
                               ("F", 2, 0, 7, 8), ("B", 1, 0, 8, 10), ("F", 3, 0, 10, 11),
                               ("B", 2, 0, 12, 14), ("B", 3, 0, 15, 17)]
    assert compute(stage1) == [("F", 0, 0, 1.5, 2.5), ("B", 0, 0, 2.5, 4.5),
                               ("F", 1, 0, 4.5, 5.5), ("B", 1, 0, 5.5, 7.5),
                               ("F", 2, 0, 8.5, 9.5), ("B", 2, 0, 9.5, 11.5),
                               ("F", 3, 0, 11.5, 12.5), ("B", 3, 0, 12.5, 14.5)]
    assert [e[2:] for e in stage1.events if e[0] == "send"] == [
        (4.5, 5.0, 0, 0), (7.5, 8.0, 1, 0), (11.5, 12.0, 2, 0), (14.5, 15.0, 3, 0)]
    assert stage0.end_s == 17


def test_a_blocking_send_holds_its_sender_until_it_arrives_by_hand():
    """p = 2, m = 2, 1F1B, tf 1, tb 2, c 0.5, each sender waiting for its transfer (Megatron's
    non-interleaved schedules, DeepSpeed): stage 0 F0 0-1 (sends until 1.5), F1 1.5-2.5 (3.0);
    stage 1 F0 1.5-2.5, B0 2.5-4.5 (sends until 5.0), F1 5-6, B1 6-8 (8.5); stage 0 B0 5-7, B1
    8.5-10.5. Asynchronous, the same plan takes 10: stage 1's F1 starts at 4.5, its B1 ends at
    7.5 and stage 0's B1 ends at 10."""
    blocking = uniform("1f1b", 2, 2, c=0.5)
    stage0, stage1 = run_pipeline(PipelinePlan(**{**blocking.__dict__, "blocking_sends": True}))
    assert compute(stage0) == [("F", 0, 0, 0, 1), ("F", 1, 0, 1.5, 2.5), ("B", 0, 0, 5, 7),
                               ("B", 1, 0, 8.5, 10.5)]
    assert compute(stage1) == [("F", 0, 0, 1.5, 2.5), ("B", 0, 0, 2.5, 4.5),
                               ("F", 1, 0, 5, 6), ("B", 1, 0, 6, 8)]
    assert (stage0.end_s, stage1.end_s) == (10.5, 8.5)
    assert step_s(blocking) == 10


def test_a_busy_link_delays_the_next_transfer():
    """GPipe p = 2, m = 4, c = 1.5 > tf = 1: stage 0's forwards end at 1, 2, 3, 4 but the link
    takes one at a time: transfers 1-2.5, 2.5-4, 4-5.5, 5.5-7, so stage 1's forwards run at
    2.5, 4, 5.5, 7, its backwards 8-16 (2 s apart, c <= tb: no queue back), and stage 0's
    backwards end at 19.5, not the 18 of links that never queue."""
    stage0, stage1 = run_pipeline(uniform("gpipe", 2, 4, c=1.5))
    assert [e[2:4] for e in stage0.events if e[0] == "send"] == [(1, 2.5), (2.5, 4), (4, 5.5),
                                                                  (5.5, 7)]
    assert [op[3] for op in compute(stage1, "forward")] == [2.5, 4, 5.5, 7]
    assert stage0.end_s == 19.5


def test_each_direction_of_a_link_is_its_own_queue():
    """1F1B p = 2, m = 2, tf = tb = 1, c = 3. Stage 0's activations take the link 1-4 and 4-7;
    stage 1 runs F0 4-5, B0 5-6 and sends its gradient at 6, while the second activation is
    still on the wire the other way: 6-9, not 7-10. Stage 1's F1 7-8, B1 8-9, its gradient
    queues behind the first (9-12); stage 0's B0 9-10, B1 12-13."""
    stage0, stage1 = run_pipeline(uniform("1f1b", 2, 2, tb=1.0, c=3.0))
    assert [e[2:4] for e in stage1.events if e[0] == "send"] == [(6, 9), (9, 12)]
    assert compute(stage0, "backward") == [("B", 0, 0, 9, 10), ("B", 1, 0, 12, 13)]
    assert stage0.end_s == 13


def test_a_gradient_goes_back_over_the_link_it_came_on():
    """p = 2, links (0.5 s between stages 0 and 1, 3 s on the wrap link that only interleaved
    uses). GPipe m = 1: F0 0-1, over link 0 1-1.5, stage 1's F0 1.5-2.5 and B0 2.5-4.5, back
    over link 0 4.5-5, stage 0's B0 5-7."""
    plan = uniform("gpipe", 2, 1)
    stage0, stage1 = run_pipeline(PipelinePlan("gpipe", 2, 1, 1, plan.stage_plans, (0.5, 3.0),
                                               8))
    assert [e[2:4] for e in stage1.events if e[0] == "send"] == [(4.5, 5)]
    assert stage0.end_s == 7


@pytest.mark.parametrize("schedule, p, m, v, held", [
    ("gpipe", 4, 8, 1, [8, 8, 8, 8]), ("1f1b", 4, 8, 1, [4, 3, 2, 1]),
    ("1f1b", 4, 2, 1, [2, 2, 2, 1]), ("interleaved_1f1b", 4, 8, 2, [11, 9, 7, 5]),
    ("interleaved_1f1b", 2, 2, 2, [4, 3])])
def test_activations_held_are_the_schedules_count(schedule, p, m, v, held):
    """GPipe m, 1F1B min(p - i, m), interleaved min(2(p - i - 1) + (v - 1)p + 1, m v), with
    link time too (the order decides, not the times)."""
    for c in (0.0, 0.7):
        runs = run_pipeline(uniform(schedule, p, m, v, c=c, act=10, static_bytes=1000))
        assert [run.max_held for run in runs] == held
        assert [run.peak_bytes for run in runs] == [1000 + 10 * h for h in held]


def test_the_peak_counts_each_chunks_bytes():
    """p = 2, v = 2, m = 4, chunk 0 keeps 100 bytes, chunk 1 keeps 1. Stage 1 runs F0.0 F1.0
    F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0: at most 3 held, but
    the most bytes (300) at F2.0, not at the last 3 held (F3.1: 201). Stage 0 (warmup 4): F0.0
    F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 ...: 5 held at most, 401 bytes."""
    stage = StagePlan(forward_s=(1.0, 1.0), backward_s=(2.0, 2.0), activation_bytes=(100, 1))
    runs = run_pipeline(PipelinePlan("interleaved_1f1b", 2, 4, 2, (stage, stage), (0, 0), 8))
    assert [(run.max_held, run.peak_bytes) for run in runs] == [(5, 401), (3, 300)]
    assert [b for _, b in runs[1].memory] == [0, 100, 200, 201, 200, 201, 200, 300, 200, 300,
                                              200, 201, 200, 201, 200, 100, 0]


def test_memory_timeline_by_hand():
    """p = 1, GPipe m = 2: F0 0-1, F1 1-2, B0 2-4, B1 4-6 over 1000 static bytes."""
    run, = run_pipeline(uniform("gpipe", 1, 2, static_bytes=1000))
    assert run.memory == [(0, 1000), (1, 1010), (2, 1020), (4, 1010), (6, 1000)]
    assert (run.max_held, run.peak_bytes) == (2, 1020)


def test_p2p_bytes_are_one_transfer_per_hop():
    """1F1B p = 4, m = 8: the first and last stages send one way (8 transfers of 100 bytes),
    the middle ones both (16). Interleaved p = 2, v = 2, m = 2: stage 0 sends g0 -> g1, g2 -> g3
    forward and g2 -> g1 back (6); stage 1 g1 -> g2 forward, g3 -> g2 and g1 -> g0 back (6)."""
    assert [r.p2p_sent_bytes for r in run_pipeline(uniform("1f1b", 4, 8))] == [800, 1600,
                                                                              1600, 800]
    assert [r.p2p_sent_bytes for r in run_pipeline(uniform("interleaved_1f1b", 2, 2, 2))] == \
        [600, 600]
    assert [r.p2p_sent_bytes for r in run_pipeline(uniform("gpipe", 1, 5))] == [0]


def test_one_stage_is_the_plain_step():
    """p = 1: no transfer; m (tf + tb), then the optimizer, then the collectives after it."""
    for schedule in ("gpipe", "1f1b"):
        run, = run_pipeline(uniform(schedule, 1, 5, optimizer_s=0.5, after_s=(0.25, 0.125)))
        assert run.end_s == 5 * 3 + 0.5 + 0.25 + 0.125
        assert (run.compute_s, run.comm_s) == (15.5, 0.375)
        assert [e[:4] for e in run.events if e[1] in ("optimizer", "all_gather")] == [
            ("compute", "optimizer", 15, 15.5), ("comm", "all_gather", 15.5, 15.75),
            ("comm", "all_gather", 15.75, 15.875)]


def test_a_reduction_longer_than_what_follows_it_ends_the_step_later_by_what_shows():
    """p = 1, 1F1B m = 2: F0 0-1, B0 1-3, F1 3-4, B1 4-6 cut in halves: the first half ends at
    5 and launches 3 s of reduction (5-8), the second ends at 6 and queues 0.5 s behind it
    (8-8.5). The optimizer waits for it (8.5-9.5), the all-gather after (9.5-9.75): 2.5 s
    later than without reductions (7.25), the part of the comm that no compute hides."""
    pieces = (((0.5, 3.0), (0.5, 0.5)),)
    plain, = run_pipeline(uniform("1f1b", 1, 2, optimizer_s=1.0, after_s=(0.25,)))
    cut, = run_pipeline(uniform("1f1b", 1, 2, optimizer_s=1.0, after_s=(0.25,), reduce=pieces))
    assert (plain.end_s, cut.end_s) == (7.25, 9.75)
    assert [e[:4] for e in cut.events if e[0] == "comm"] == [
        ("comm", "reduce", 5, 8), ("comm", "reduce", 8, 8.5), ("comm", "all_gather", 9.5, 9.75)]
    assert compute(cut)[-1] == ("B", 1, 0, 4, 6)  # one backward, cut or not
    assert (cut.compute_s, cut.comm_s) == (7, 3.75)


def test_a_chunks_reduction_hides_behind_the_next_chunks_backwards():
    """The interleaved timeline above: stage 0's chunk 1 ends its last backward (B1.1) at 11,
    then runs chunk 0's B0.0 11-13 and B1.0 13-15. Chunk 1's 3 s reduction (11-14) hides
    entirely; chunk 0's 1 s (15-16) shows: 16. A 5 s one (11-16) holds chunk 0's back to
    16-17: 17."""
    def stage0_end(chunk1_s: float) -> float:
        cut = StagePlan(forward_s=(1.0, 1.0), backward_s=(2.0, 2.0), activation_bytes=(1, 1),
                        reduce=(((1.0, 1.0),), ((1.0, chunk1_s),)))
        plain = StagePlan(forward_s=(1.0, 1.0), backward_s=(2.0, 2.0), activation_bytes=(1, 1))
        return run_pipeline(PipelinePlan("interleaved_1f1b", 2, 2, 2, (cut, plain), (0, 0),
                                         8))[0].end_s
    assert (stage0_end(3.0), stage0_end(5.0)) == (16, 17)


def test_gathers_delay_only_each_chunks_first_forward():
    """p = 1, 1F1B m = 2, a 2.5 s gather: F0 2.5-3.5, B0 3.5-5.5, F1 5.5-6.5 (no second wait),
    B1 6.5-8.5."""
    run, = run_pipeline(uniform("1f1b", 1, 2, gather_s=((2.5,),)))
    assert compute(run) == [("F", 0, 0, 2.5, 3.5), ("B", 0, 0, 3.5, 5.5), ("F", 1, 0, 5.5, 6.5),
                            ("B", 1, 0, 6.5, 8.5)]
    assert run.comm_s == 2.5


def test_chunks_gather_in_order_and_each_waits_for_its_own():
    """p = 2, v = 2, m = 2; stage 0 gathers chunk 0 (1 s, 0-1) then chunk 1 (10 s, 1-11). Its
    F0.0 waits until 1, F1.0 runs 2-3; F0.1's input is there at 3 (stage 1's F0.0 2-3) but its
    gather only at 11: 11-12; F1.1 is not held again: 12-13."""
    gathers = StagePlan(forward_s=(1.0, 1.0), backward_s=(2.0, 2.0), activation_bytes=(1, 1),
                        gather_s=((1.0,), (10.0,)))
    plain = StagePlan(forward_s=(1.0, 1.0), backward_s=(2.0, 2.0), activation_bytes=(1, 1))
    stage0, _ = run_pipeline(PipelinePlan("interleaved_1f1b", 2, 2, 2, (gathers, plain), (0, 0),
                                          8))
    assert [e[2:4] for e in stage0.events if e[1] == "gather"] == [(0, 1), (1, 11)]
    assert compute(stage0, "forward") == [("F", 0, 0, 1, 2), ("F", 1, 0, 2, 3),
                                          ("F", 0, 1, 11, 12), ("F", 1, 1, 12, 13)]


def test_without_events_the_numbers_are_the_same():
    plan = uniform("interleaved_1f1b", 4, 8, 2, c=0.3, static_bytes=7, optimizer_s=0.25,
                   reduce=(((0.25, 1.0), (0.75, 2.0)),) * 2)
    kept, bare = run_pipeline(plan), run_pipeline(plan, keep_events=False)
    assert all(not run.events and not run.memory for run in bare)
    strip = [(r.end_s, r.compute_s, r.comm_s, r.p2p_sent_bytes, r.max_held, r.peak_bytes)
             for r in kept]
    assert strip == [(r.end_s, r.compute_s, r.comm_s, r.p2p_sent_bytes, r.max_held,
                      r.peak_bytes) for r in bare]


@pytest.mark.parametrize("change, says", [
    (dict(p2p_s=(0.0,)), "2 stages need 2 stage plans and 2 links"),
    (dict(stage_plans=(StagePlan((1.0,), (2.0,), (1,), reduce=(((0.5, 1.0),),)),) * 2),
     "reduce fractions sum to 0.5, not 1"),
    (dict(stage_plans=(StagePlan((1.0, 1.0), (2.0,), (1,)),) * 2), "forward_s has 2 entries"),
    (dict(virtual=2), "needs the interleaved_1f1b schedule"),
])
def test_an_inconsistent_plan_is_refused_by_name(change, says):
    plan = uniform("1f1b", 2, 2)
    fields = dict(schedule=plan.schedule, stages=2, micro_batches=2, virtual=1,
                  stage_plans=plan.stage_plans, p2p_s=plan.p2p_s, p2p_bytes=8)
    with pytest.raises(ValueError) as raised:
        run_pipeline(PipelinePlan(**{**fields, **change}))
    assert says in str(raised.value)
