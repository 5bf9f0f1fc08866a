"""Stage 0's gradient buckets: where they are cut (flat.Layout), that each is all-reduced once a
step through Collectives either way (gloo's native all-reduce, waited for awake; the ring of
send/recv), the losses averaged over ranks once, after the run, and a rank hanging before a
bucket's all-reduce named as the stage 1 hang is."""

import pytest

torch = pytest.importorskip("torch")

from functools import partial

from tests.conftest import SCENARIOS
from tests.procs import gone
from tests.zero_real.helpers import train_hanging, train_worker
from zerosim.contract import ALL_REDUCE, COLLECTIVE_IMPLS
from zerosim.scenario.load import load_scenario

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"


def test_buckets_are_cut_top_down_and_spans_count_each_slot_in_its_buckets():
    """Slots of 3, 5 and 4 elements in a 12-element buffer, buckets of 5 from the top:
    [7, 12), [2, 7), [0, 2). The middle slot [3, 8) has 1 element in bucket 0 and 4 in bucket
    1; the first [0, 3) has 1 in bucket 1 and 2 in bucket 2."""
    from zero_real.parts.flat import Layout

    params = [(name, torch.nn.Parameter(torch.empty(n))) for name, n in zip("abc", (3, 5, 4))]
    layout = Layout.of(params, world_size=2)
    assert layout.buckets(5) == [(7, 12), (2, 7), (0, 2)]
    assert layout.spans(5) == [[(1, 1), (2, 2)], [(0, 1), (1, 4)], [(0, 4)]]
    assert layout.buckets(12) == [(0, 12)] and layout.spans(12) == [[(0, 3)], [(0, 5)], [(0, 4)]]


def test_each_bucket_is_all_reduced_once_a_step_polled_or_through_the_ring():
    """The tiny model's 118,528 fp32 gradients in 64 KiB buckets of 16,384 elements: 7 full
    buckets and one of 3,840 (15,360 bytes), each all-reduced once per step, named after it,
    and nothing else collective in the step (the loss is averaged once, after the run)."""
    from zero_real.run.launch import spawn
    from zero_real.run.runconfig import RankSetup

    scenario = load_scenario(TINY, ["cluster.gpus_per_node=2"])
    runs = [(mode, 0, mode, scenario) for mode in COLLECTIVE_IMPLS]  # native (awake), ring
    setup = RankSetup(backend="gloo", nproc=2, timeout_s=30)
    results = spawn(partial(train_worker, runs=runs, steps=2), 2, setup, timeout_s=240)
    want = sorted([(f"bucket {i}", ALL_REDUCE, 65_536) for i in range(7)]
                  + [("bucket 7", ALL_REDUCE, 15_360)])
    for per_rank in results:
        for mode in COLLECTIVE_IMPLS:
            for step in (0, 1):
                comm = [(e["name"], e["op"], e["bytes"]) for e in per_rank[mode]["events"]
                        if e["stream"] == "comm" and e["step"] == step]
                assert sorted(comm) == want, (mode, step, comm)
    # Averaged over the ranks: the same on both, though each rank's own batch differs.
    native, ring = (results[0][mode]["losses"] for mode in COLLECTIVE_IMPLS)
    for mode in COLLECTIVE_IMPLS:
        assert results[0][mode]["losses"] == results[1][mode]["losses"], mode
    assert native == pytest.approx(ring, rel=1e-6)


def test_a_rank_hanging_before_a_bucket_is_named_and_every_rank_stopped():
    """Rank 1 stops, alive, before its second collective of step 1: the buckets' all-reduces go
    through Collectives, where the fault is injected (a stage that bypassed it would finish the
    run: no error). Its peer's wait, awake, ends with gloo's timeout (5 s) as a blocking one
    does: the launcher names rank 1 and its last collective (8 buckets a step: it got through
    step 0's and step 1's bucket 0, the 9th) and leaves no rank behind. The run's own limit
    (60 s) is the hang guard: a wait that never ended would fail the match with "did not
    finish"."""
    from zero_real.run.launch import RankFailed, spawn
    from zero_real.run.runconfig import RunConfig

    scenario = load_scenario(TINY, ["cluster.gpus_per_node=2"])
    cfg = RunConfig(scenario=scenario, stage=0, backend="gloo", steps=3, timeout_s=5, nproc=2,
                    profile_memory=False)
    fault = partial(train_hanging, hang_rank=1, hang_step=1)
    match = r"rank 1 stopped making progress at step 1 after collective 9 \(all_reduce:bucket 0\)"
    with pytest.raises(RankFailed, match=match) as info:
        spawn(fault, 2, cfg, timeout_s=60)
    assert all(gone(pid) for pid in info.value.pids)
