"""The host time DeepSpeed ZeRO-3's hooks take per module visit (sim/stages/fetch.HookHost): hand
timelines of the host running ahead of the GPU and blocking on its fetch events, and the step:
hidden where the GPU's work per visit is longer, the step's pace where it is shorter."""

from __future__ import annotations

import pytest

from zerosim.analytic.fetch import hook_seconds, planned
from zerosim.errors import InputError
from zerosim.frameworks import REGISTRY
from zerosim.sim.engine import simulate
from zerosim.sim.stages.fetch import HookHost

from tests.zerosim.test_deepspeed_fetch import small

DS = REGISTRY["deepspeed"]


def run(hooks_s: float, visits: list[tuple[int, float]]) -> float:
    """The GPU's clock over visits of (parameters waited for, GPU seconds), as ModuleFetch runs
    them with every parameter already gathered: a visit computes once the host ran its hooks,
    hooks_s each, DeepSpeed's two events ahead."""
    host, now = HookHost(2), 0.0
    for waited, gpu_s in visits:
        start, own = host.start(waited)
        now = max(now, start)
        now = max(now, host.finish(start, own, now, hooks_s))
        now += gpu_s
    return now


def test_the_hooks_hide_behind_longer_gpu_work_but_the_first():
    """1 s of hooks per visit, 5 s of GPU work: the host runs one visit ahead from the second
    on, so only the first visit's hooks show: 1 + 4 x 5 s."""
    assert run(1.0, [(2, 5.0)] * 4) == 21.0


def test_the_host_paces_visits_whose_gpu_work_is_shorter():
    """1 s of hooks, 0.25 s of GPU work: each visit waits for its hooks; the step is the host's
    4 s plus the last visit's GPU work."""
    assert run(1.0, [(1, 0.25)] * 4) == 4.25


def test_visits_without_gpu_work_still_cost_their_hooks():
    """Containers and parameter-free modules (the MLP's activation) are visited too: three 1 s
    visits without GPU work, then one of 10 s: 3 s of hooks, the fourth's 1 s, then 10 s."""
    assert run(1.0, [(0, 0.0)] * 3 + [(2, 10.0)]) == 14.0


def test_beyond_two_outstanding_events_the_host_blocks_on_the_oldest():
    """DeepSpeed's coordinator keeps at most two fetch events outstanding: a third wait first
    synchronizes the oldest. With 0.1 s hooks and 5 s of GPU work per one-parameter visit the
    host would run far ahead; the events hold it: visit 4's hooks wait until the GPU reached
    visit 1's parameters (0.1 s), and visit 5's until visit 2's (5.1 s)."""
    host = HookHost(2)
    starts = []
    now = 0.0
    for _ in range(5):
        start, own = host.start(1)
        starts.append(start)
        now = max(now, start)
        now = max(now, host.finish(start, own, now, 0.1)) + 5.0
    assert starts == pytest.approx([0.0, 0.1, 0.2, 0.3, 5.1])


def test_a_visit_waiting_for_more_than_the_limit_blocks_on_its_own_parameters():
    """Four parameters at once: the fourth wait synchronizes this visit's first event, so the
    host is done only once the GPU has them (at 7 s) and its hooks ran: 7 + 1 s."""
    host = HookHost(2)
    start, own = host.start(4)
    assert (start, own) == (0.0, True)
    assert host.finish(start, own, 7.0, 1.0) == 8.0
    assert list(host.events) == [7.0, 7.0, 7.0]


def test_the_step_counts_every_visits_hooks_as_host_time():
    """Each micro-step visits every module once per pass (a recomputation too): its host time is
    that many visits' hooks, as given by training.module_hook_us."""
    s = small("training.module_hook_us=250", "training.gradient_accumulation=2")
    _, visits, _ = planned(s.model, s.training, DS, 2)
    assert simulate(s, 3, keep_events=False).host_time_s == pytest.approx(
        2 * len(visits) * 250e-6)


def test_the_hooks_lengthen_a_step_of_small_modules_by_their_excess():
    """A small model's visits compute for far less than 20 ms each: with 20 ms of hooks per
    visit the step is paced by the host, at least visits x 20 ms per micro-step, where without
    hooks it is much shorter."""
    hooked, free = (simulate(small(f"training.module_hook_us={us}"), 3, keep_events=False)
                    for us in (20_000, 0))
    _, visits, _ = planned(small().model, small().training, DS, 2)
    assert free.step_time_s < 0.5 * len(visits) * 0.02
    assert hooked.step_time_s >= len(visits) * 0.02
    # the same compute, but for the SMs NCCL's kernels take while they overlap it
    assert hooked.compute_s == pytest.approx(free.compute_s, rel=1e-2)


def test_hooks_shorter_than_each_visits_work_hide_behind_it():
    """A 2-layer model at micro-batch 64 (its smallest matmul visit computes for ms): 1 us hooks
    add about their first visits, not one per visit."""
    big = ("training.micro_batch=64",)
    hooked, free = (simulate(small(*big, f"training.module_hook_us={us}"), 3, keep_events=False)
                    for us in (1, 0))
    _, visits, _ = planned(small(*big).model, small(*big).training, DS, 2)
    assert hooked.step_time_s - free.step_time_s < 0.5 * len(visits) * 1e-6 + 1e-9


def test_deepspeeds_default_by_hand_for_the_worked_example():
    """The worked example's 50 visits (per pass: the root and its token table, 10 per block -
    the block, 2 norms, attention and MLP containers, QKV, out, fc1, the GELU, fc2 - and the
    final norm and head under its container) gather 10 parameters a pass (the table, 4
    matrices per block, the tied head; norms and biases persist): 50 visits' hooks and 20
    parameters' at bench/deepspeed_hooks.py's split."""
    s = small()
    plan, visits, _ = planned(s.model, s.training, DS, 2)
    seconds = hook_seconds(s.training, DS, plan, visits)
    assert len(visits) == 50
    assert sum(seconds) == pytest.approx((50 * 156.4 + 20 * 197.5 / 2) * 1e-6)
    assert seconds[0] == pytest.approx(156.4e-6)  # the root's container gathers nothing
    given = small("training.module_hook_us=5")
    assert hook_seconds(given.training, DS, plan, visits) == pytest.approx([5e-6] * 50)


def test_the_hooks_key_is_refused_where_it_means_nothing_or_is_negative():
    with pytest.raises(InputError, match=r"training.module_hook_us = -1(\.0)? must be >= 0"):
        small("training.module_hook_us=-1")
    with pytest.raises(InputError, match="training.module_hook_us sets how ZeRO-3"):
        small("training.framework='fsdp2'", "training.module_hook_us=5")
