"""The host time DeepSpeed ZeRO-3's hooks take per module visit (sim/stages/fetch.py: a host
stream that runs ahead of the GPU until a fetch event blocks it, analytic/fetch.FetchSteps):
event timelines of the worked example, hand counts of its hooks, and the step: hidden where the
GPU's work per visit is longer, the step's pace where it is shorter."""

from __future__ import annotations

import pytest

from zerosim.analytic.fetch import FetchSteps, hook_seconds, planned
from zerosim.errors import InputError
from zerosim.frameworks import REGISTRY
from zerosim.sim.engine import simulate

from tests.conftest import SCENARIOS, run_zerosim
from tests.zerosim.test_deepspeed_fetch import small

DS = REGISTRY["deepspeed"]


def timeline(*sets: str):
    """One micro-step of the worked example with events: per visit, (its hooks' start and end on
    the host, its compute's start or None where it computes nothing), and the visits."""
    s = small(*sets)
    plan, visits, _ = planned(s.model, s.training, DS, 2)
    events = simulate(s, 3, keep_events=True).ranks[0].state.events
    hooks = [(e["start_s"], e["end_s"]) for e in events if e["name"] == "module hooks"]
    computes = iter(e["start_s"] for e in events if e["queue"] == "compute")
    starts = [next(computes) if v.share else None for v in visits]
    assert len(hooks) == len(visits)
    return [(h0, h1, c) for (h0, h1), c in zip(hooks, starts)], visits


def test_a_visit_computes_only_once_its_hooks_are_done():
    steps, _ = timeline("training.module_hook_us=2000")
    assert all(c >= h1 for _, h1, c in steps if c is not None)


def test_the_host_blocks_on_the_fetch_event_three_waits_back():
    """DeepSpeed's coordinator records an event per parameter waited for and, beyond two
    outstanding, blocks on the oldest before the next wait. In the worked example the waits are
    the token table's (visit 1) and each block's four matrices' in forward (the tied head's was
    waited at the table; backward waits for nothing: the reuse distance kept everything): so
    the k-th waiting visit's hooks wait for the GPU to reach the (k - 3)-th, and no other visit
    waits for anything."""
    steps, visits = timeline("training.module_hook_us=1")
    s = small()
    plan, _, _ = planned(s.model, s.training, DS, 2)
    waiting = [i for i, v in enumerate(visits) if v.phase == "forward"
               and any(p not in plan.persistent for p in v.params) and i != len(visits) // 2 - 1]
    assert len(waiting) == 9 and waiting[0] == 1
    fetch = FetchSteps(plan, visits, events_ahead=DS.fetch_events_ahead)
    for k in range(3, len(waiting)):
        gate = waiting[k - 3]
        assert steps[waiting[k]][0] >= steps[gate][2]  # the GPU began the gate visit's compute
        assert fetch.hooks_after[gate] >= waiting[k] > fetch.hooks_after[gate - 1]
    assert fetch.hooks_free == waiting[3] - 1
    assert fetch.hooks_after[waiting[-3]] == len(visits) - 1  # then nothing blocks
    # 1 us hooks: the host is ahead where it may be; some hooks start before the previous
    # visit's compute does
    assert any(steps[i][0] < steps[i - 1][2] for i in range(1, len(steps))
               if steps[i - 1][2] is not None)


def test_on_demand_gathers_block_the_host_three_waits_back_in_both_passes():
    """Without prefetch or reuse every parameter-owning visit gathers its own on demand, in
    forward and backward alike, and waits for each of its non-persistent parameters: the gates
    follow the same rule over every such visit."""
    s = small("training.prefetch_bucket_elements=0", "training.max_reuse_distance=0")
    plan, visits, _ = planned(s.model, s.training, DS, 2)
    fetch = FetchSteps(plan, visits, events_ahead=DS.fetch_events_ahead)
    waiting = [i for i, v in enumerate(visits) if any(p not in plan.persistent for p in v.params)]
    assert len(waiting) == 20  # 10 a pass, the tied head's wait included
    assert all(not g.prefetch for g in plan.gathers)
    for k in range(3, len(waiting)):
        gate = waiting[k - 3]
        assert fetch.hooks_after[gate] >= waiting[k] > fetch.hooks_after[gate - 1]


def test_hooks_longer_than_the_gpus_work_run_back_to_back():
    """20 ms hooks, far more than any visit of this model computes: the host never waits for
    the GPU within the forward, each visit's hooks start as the last one's end."""
    steps, visits = timeline("training.module_hook_us=20000")
    forward = [i for i, v in enumerate(visits) if v.phase == "forward"]
    assert all(steps[i + 1][0] == pytest.approx(steps[i][1]) for i in forward[:-1])


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
    final norm and head under its container) visit 10 modules owning a non-persistent
    parameter a pass (the table, 4 matrices per block, the tied head; norms and biases
    persist): 50 visits' hooks and 20 parameters' at bench/deepspeed_hooks.py's split."""
    s = small()
    plan, visits, _ = planned(s.model, s.training, DS, 2)
    seconds = hook_seconds(s.training, DS, plan, visits)
    assert len(visits) == 50
    assert sum(seconds) == pytest.approx((50 * 161.4 + 20 * 205.3 / 2) * 1e-6)
    assert seconds[0] == pytest.approx(161.4e-6)  # the root's container gathers nothing
    given = small("training.module_hook_us=5")
    assert hook_seconds(given.training, DS, plan, visits) == pytest.approx([5e-6] * 50)


def test_the_hooks_key_is_refused_where_it_means_nothing_or_is_negative():
    with pytest.raises(InputError, match=r"training.module_hook_us = -1(\.0)? must be >= 0"):
        small("training.module_hook_us=-1")
    with pytest.raises(InputError, match="training.module_hook_us sets how ZeRO-3"):
        small("training.framework='fsdp2'", "training.module_hook_us=5")


def test_the_report_names_the_hooks_host_time_apart_from_offload():
    """`zerosim simulate` of DeepSpeed ZeRO-3 prints the hooks' host time per step (as --json's
    host_time_s), under its own heading, not offload's."""
    argv = ("simulate", str(SCENARIOS / "llama2_7b_64gpu.toml"), "--stage", "3",
            "--set", "training.framework='deepspeed'", "--set", "training.module_hook_us=300")
    shown = run_zerosim(*argv)
    host_s = run_zerosim(*argv, "--json").json[0]["host_time_s"]
    assert host_s > 0
    assert "offload, per rank" not in shown.stdout
    heading = shown.stdout.index("module hooks' host time, per rank")
    assert f"3 ZeRO-3: {host_s:.4g} s a step" in shown.stdout[heading:]
    offload = run_zerosim(*argv[:-2], "--set", "training.optimizer_offload='cpu'")
    assert "offload, per rank" in offload.stdout  # unit by unit: no hooks timed
    assert "module hooks' host time" not in offload.stdout


def test_a_demand_gather_is_issued_by_its_visits_hook():
    """Without prefetch every gather is the visit's own, issued inside its pre-forward hook:
    never before the host is done with the visit before (the GPU reaches a visit only once the
    one before computed, after its hooks)."""
    s = small("training.prefetch_bucket_elements=0", "training.max_reuse_distance=0",
              "training.module_hook_us=2000")
    plan, visits, _ = planned(s.model, s.training, DS, 2)
    events = simulate(s, 3, keep_events=True).ranks[0].state.events
    hooks = [e for e in events if e["name"] == "module hooks"]
    gathers = [e for e in events if e["name"] == "parameter all-gather"]
    assert len(hooks) == len(visits) and len(gathers) == len(plan.gathers)
    assert all(not g.prefetch for g in plan.gathers)
    for gather, event in zip(plan.gathers, gathers):
        if gather.visit > 0:
            assert event["start_s"] >= hooks[gather.visit - 1]["end_s"] - 1e-12


def test_no_hooks_queue_nothing_even_under_jitter():
    """module_hook_us = 0: no host operation at all, so no host time (review: zero-second hooks
    still waited for the slowest rank under jitter and were reported)."""
    shown = simulate(small("training.module_hook_us=0", "variation.jitter_pct=20",
                           "cluster.nodes=2", "cluster.gpus_per_node=2"), 3, keep_events=False)
    assert shown.host_time_s == 0.0
