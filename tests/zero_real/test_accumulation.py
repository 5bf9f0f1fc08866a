"""Gradient accumulation (training.gradient_accumulation = A micro-steps per optimizer step) on 2
gloo processes, every stage, against one plain PyTorch process; the collectives each stage runs
per optimizer step; and the CUDA allocator's reserved memory beside its allocated memory.

The semantics under test (zerosim's simulator follows the same): DDP and ZeRO-1 let gradients add
up in the full buffer and reduce them once, in the last micro-step (DDP's no_sync); ZeRO-2
reduce-scatters, and ZeRO-3 gathers and reduce-scatters, in every micro-step, into the shard; one
optimizer step per A micro-steps, on the gradient of the mean loss over all micro-batches.
One spawned group runs every training the module checks (a module fixture), so the module pays
for one process group.
"""

import pytest

torch = pytest.importorskip("torch")

from collections import Counter  # noqa: E402
from functools import partial  # noqa: E402

from tests.conftest import SCENARIOS  # noqa: E402
from tests.zero_real.test_memory import UNATTRIBUTED_BYTES, unowned_bytes  # noqa: E402
from tests.zero_real.helpers import (LR, freed_worker, reference_grads, reference_shard,  # noqa: E402
                                     reference_train, relative_error, train_worker)
from zerosim.contract import ALL_GATHER, ALL_REDUCE, COLLECTIVE_IMPLS, REDUCE_SCATTER, STAGES  # noqa: E402
from zerosim.scenario.load import load_scenario  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
WORLD, STEPS = 2, 2
COMM_STEPS = 3
"""Steps of the runs whose collectives are counted; they do not return their parameters (that
gathers them, under ZeRO-3 as collectives of the last step)."""
TOLERANCE = 1e-5
"""atol and rtol of every parameter against the single-process reference (fp32)."""
# Per optimizer step, what A micro-steps multiply a stage's collective bytes by (else: 1).
ONCE, EVERY_MICRO_STEP = "once", "every micro-step"
SEMANTICS = {0: {ALL_REDUCE: ONCE},
             1: {REDUCE_SCATTER: ONCE, ALL_GATHER: ONCE},  # all-gather: parameters after the step
             2: {REDUCE_SCATTER: EVERY_MICRO_STEP, ALL_GATHER: ONCE},
             3: {REDUCE_SCATTER: EVERY_MICRO_STEP, ALL_GATHER: EVERY_MICRO_STEP}}


def tiny(accumulation: int, *more: str):
    return load_scenario(TINY, [f"cluster.gpus_per_node={WORLD}",
                                f"training.gradient_accumulation={accumulation}", *more])


@pytest.fixture(scope="module")
def results():
    """Per rank: every stage at A = 2 with both collective implementations, at A = 1 and A = 3
    (native) for the collectives, at A = 1 and 2 under the memory profiler, and one step's
    averaged gradient shards at A = 2. Bounded at
    every level: 30 s per collective and init, 240 s for the whole group."""
    from zero_real.run.launch import spawn
    from zero_real.run.runconfig import RankSetup

    runs = [(("parity", stage, mode), stage, mode, tiny(2))
            for stage in STAGES for mode in COLLECTIVE_IMPLS]
    runs += [(("comm", stage, a), stage, "native", tiny(a),
              {"steps": COMM_STEPS, "return_params": False}) for stage in STAGES for a in (1, 3)]
    runs += [(("memory", stage, a), stage, "native", tiny(a), {"profile_memory": True})
             for stage in STAGES for a in (1, 2)]
    grad_runs = [(("grads", stage), stage, tiny(2)) for stage in STAGES]
    worker = partial(train_worker, runs=runs, grad_runs=grad_runs, steps=STEPS)
    return spawn(worker, WORLD, RankSetup(backend="gloo", nproc=WORLD, timeout_s=30),
                 timeout_s=240)


def assert_close_to_reference(name, got, want, model):
    if name.endswith("qkv.bias"):
        # The key bias's true gradient is exactly zero (softmax ignores a shift shared by all
        # keys), so Adam turns rounding noise there into steps (test_parity.assert_parity): the
        # query and value biases are compared at the tolerance, the key bias to 1% of the lr.
        h, kv = model.hidden, model.n_kv_heads * model.head_dim
        key = slice(h, h + kv)
        assert (got[key] - want[key]).abs().max().item() < 1e-2 * LR, name
        got, want = torch.cat([got[:h], got[h + kv:]]), torch.cat([want[:h], want[h + kv:]])
    torch.testing.assert_close(got, want, atol=TOLERANCE, rtol=TOLERANCE, msg=name)


def test_every_stage_with_accumulation_matches_one_process_adam(results):
    """N = 2, A = 2, 2 optimizer steps: the parameters of one process whose Adam steps on the
    gradient of the mean loss over all 4 micro-batches of each step."""
    scenario = tiny(2)
    want, want_losses = reference_train(scenario, WORLD, STEPS)
    # Accumulation is not ignored: without it the parameters would be another training's.
    unaccumulated, _ = reference_train(tiny(1), WORLD, STEPS)
    assert max(relative_error(unaccumulated[n], want[n]) for n in want) > 1e-2
    for stage in STAGES:
        for mode in COLLECTIVE_IMPLS:
            for rank_result in results:  # every rank ends with the same (gathered) model
                got = rank_result[("parity", stage, mode)]
                for name in want:
                    assert_close_to_reference(name, got["params"][name], want[name],
                                              scenario.model)
                # One loss per optimizer step: the mean over its micro-batches and ranks.
                assert got["losses"] == pytest.approx(want_losses, rel=TOLERANCE), (stage, mode)


def test_the_accumulated_gradient_is_that_of_the_mean_loss(results):
    """The gradient each rank's Adam steps with, at A = 2, is its slice of the single-process
    gradient of the mean loss: a factor A (or N) cannot hide behind Adam's scale invariance."""
    scenario = tiny(2)
    want = reference_grads(scenario, WORLD)
    for stage in STAGES:
        for rank, rank_result in enumerate(results):
            for layout, (lo, hi), got in rank_result[("grads", stage)]:
                ref = reference_shard(want, layout, lo, hi)
                assert got.shape == ref.shape, (stage, rank)
                assert relative_error(got, ref) < TOLERANCE, (stage, rank, relative_error(got, ref))


def comm_per_step(result) -> dict[int, tuple[Counter, Counter]]:
    """Optimizer step -> (bytes by op, calls by op) of one rank's collectives."""
    out = {}
    for e in result["events"]:
        if e["stream"] == "comm":
            nbytes, calls = out.setdefault(e["step"], (Counter(), Counter()))
            nbytes[e["op"]] += e["bytes"]
            calls[e["op"]] += 1
    return out


def test_collectives_per_optimizer_step_follow_the_semantics(results):
    """A = 3 against A = 1: DDP's all-reduce and ZeRO-1's reduce-scatter the same bytes and
    calls per optimizer step; ZeRO-2's reduce-scatter 3x; ZeRO-3's reduce-scatter and all-gather
    3x; the all-gather of parameters after ZeRO-1/2's step once. Nothing else runs."""
    for rank_result in results:
        for stage, ops in SEMANTICS.items():
            one = comm_per_step(rank_result[("comm", stage, 1)])
            three = comm_per_step(rank_result[("comm", stage, 3)])
            assert sorted(one) == sorted(three) == list(range(COMM_STEPS)), stage
            for step in range(COMM_STEPS):
                (bytes1, calls1), (bytes3, calls3) = one[step], three[step]
                assert set(bytes1) == set(bytes3) == set(ops), (stage, bytes3)
                for op, when in ops.items():
                    factor = 3 if when == EVERY_MICRO_STEP else 1
                    assert bytes1[op] > 0, (stage, op)
                    assert bytes3[op] == factor * bytes1[op], (stage, op, bytes1, bytes3)
                    assert calls3[op] == factor * calls1[op], (stage, op, calls1, calls3)


def test_a_step_is_one_optimizer_step_and_reductions_fall_in_their_micro_steps(results):
    """At A = 3: each step has 3 after_forward marks, then one after_backward and one after_step;
    every event of a step lies between the previous step's end and its own. DDP and ZeRO-1
    reduce after the third forward only; ZeRO-2 and ZeRO-3 reduce-scatter a whole step's worth
    of A = 1 in each micro-step."""
    for rank_result in results:
        for stage, ops in SEMANTICS.items():
            result = rank_result[("comm", stage, 3)]
            per_step_at_1 = comm_per_step(rank_result[("comm", stage, 1)])
            end = 0.0
            for step in range(COMM_STEPS):
                samples = [s for s in result["memory_samples"] if s["step"] == step
                           and s["point"] != "after_init"]
                points = [s["point"] for s in samples]
                assert points == ["after_forward"] * 3 + ["after_backward", "after_step"], points
                forwards = [s["t_s"] for s in samples[:3]]
                backward_end, step_end = samples[3]["t_s"], samples[4]["t_s"]
                events = [e for e in result["events"] if e["step"] == step]
                assert all(end <= e["start_s"] and e["end_s"] <= step_end for e in events), stage
                end = step_end
                reductions = [e for e in events if e["op"] in (ALL_REDUCE, REDUCE_SCATTER)]
                if ops.get(REDUCE_SCATTER) != EVERY_MICRO_STEP:
                    assert all(forwards[-1] <= e["start_s"] and e["end_s"] <= backward_end
                               for e in reductions), stage
                    continue
                bounds = forwards + [backward_end]
                for micro in range(3):
                    inside = sum(e["bytes"] for e in reductions
                                 if bounds[micro] <= e["start_s"] < bounds[micro + 1])
                    assert inside == per_step_at_1[step][0][REDUCE_SCATTER], (stage, micro)


def test_accumulation_holds_no_more_memory(results):
    """A = 2 against A = 1: the allocator holds what the ledger names at every mark of every
    micro-step (test_memory's accounting, and from the second micro-step on the step's loss sum,
    one fp32 scalar beside the micro-step's own loss), and the peak grows by that scalar and
    test_memory's unattributed one at most: no micro-step keeps another's activations, gradients
    or batch alive."""
    for rank, rank_result in enumerate(results):
        for stage in STAGES:
            for a in (1, 2):
                result = rank_result[("memory", stage, a)]
                forwards = Counter()
                for s in result["memory_samples"]:
                    forwards[s["step"]] += s["point"] == "after_forward"
                    loss_sum = 4 if forwards[s["step"]] > 1 else 0
                    ledger = sum(s["bytes_by_category"].values())
                    beyond = (s["measured_bytes"] - ledger - unowned_bytes(tiny(a), s["point"])
                              - loss_sum)
                    assert 0 <= beyond <= UNATTRIBUTED_BYTES, (rank, stage, a, s["point"], beyond)
            grown = (rank_result[("memory", stage, 2)]["peak_bytes"]
                     - rank_result[("memory", stage, 1)]["peak_bytes"])
            assert 0 <= grown <= 4 + UNATTRIBUTED_BYTES, (rank, stage, grown)


# ---- reserved memory: CUDA's figure, absent on CPU ------------------------------------------------

def _cfg(stage: int = 1):
    from zero_real.run.runconfig import RunConfig

    return RunConfig(scenario=tiny(1), stage=stage, backend="gloo", nproc=WORLD)


def test_cpu_runs_report_no_reserved_memory(results):
    """The profiler has no reserved figure: train leaves it None and the measurement leaves the
    key out, so a CPU measurement file is what it was."""
    from zero_real.run.train import measurement

    ranks = [r[("comm", 1, 1)] for r in results]
    assert all(r["peak_reserved_bytes"] is None and r["peak_bytes"] == 0 for r in ranks)
    m = measurement(_cfg(), ranks, WORLD)
    assert all("peak_reserved_bytes" not in r for r in m["ranks"])


def test_cuda_reserved_memory_is_recorded_through_a_fake_allocator(monkeypatch):
    """The Recorder's CUDA path with torch.cuda's statistics faked: the peak allocation is
    peak_bytes, the peak reservation peak_reserved_bytes; the measurement and the summary carry
    both."""
    from zero_real.parts.measure import Recorder
    from zero_real.run.report import summary
    from zero_real.run.train import measurement

    stats = {"allocated": 3 << 20, "max_allocated": 5 << 20, "max_reserved": 8 << 20}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: stats["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated",
                        lambda device=None: stats["max_allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved",
                        lambda device=None: stats["max_reserved"])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 6 << 20)
    used = iter([(70 << 20, 80 << 20), (60 << 20, 80 << 20)])  # (free, total) at each mark
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: next(used))
    recorder = Recorder(0, torch.device("cuda", 0))
    assert not recorder.profiling  # no CPU profiler on CUDA
    recorder.mark("after_init", 0)
    recorder.mark("after_forward", 0)
    assert recorder.samples[0]["measured_bytes"] == 3 << 20
    assert recorder.samples[0]["reserved_bytes"] == 6 << 20
    assert [s["device_used_bytes"] for s in recorder.samples] == [10 << 20, 20 << 20]
    assert recorder.finish() == 5 << 20
    assert recorder.peak_reserved_bytes == 8 << 20
    assert recorder.peak_device_used_bytes == 20 << 20  # the most the driver reported at a mark
    rank = {"rank": 0, "peak_bytes": recorder.peak_bytes,
            "peak_reserved_bytes": recorder.peak_reserved_bytes,
            "peak_device_used_bytes": recorder.peak_device_used_bytes,
            "phases": {"after_init": 3 << 20},
            "ledger": recorder.ledger.as_dict(), "ledger_phases": {}, "events": [],
            "memory_samples": recorder.samples, "losses": [5.0], "params": None,
            "hardware": "fake GPU x1", "under_profiler": False}
    m = measurement(_cfg(), [rank], 1)
    assert m["ranks"][0]["peak_bytes"] == 5 << 20
    assert m["ranks"][0]["peak_reserved_bytes"] == 8 << 20
    assert m["ranks"][0]["peak_device_used_bytes"] == 20 << 20
    assert "peak 5.00 MiB (reserved 8.00 MiB)" in summary(m, None)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: reserved memory is torch.cuda.max_memory_reserved's "
                           "figure (its code path is covered by the fake-allocator test)")
def test_a_cuda_run_reports_reserved_at_least_allocated():
    """One process on the GPU against a fake world of 2 (collectives do nothing)."""
    from zero_real.run.launch import spawn
    from zero_real.run.runconfig import RankSetup

    runs = [(stage, stage, "native", tiny(2)) for stage in STAGES]
    setup = RankSetup(backend="fake", nproc=1, fake_world_size=WORLD, timeout_s=30)
    result, = spawn(partial(train_worker, runs=runs, steps=1), 1, setup, timeout_s=240)
    for stage in STAGES:
        r = result[stage]
        assert 0 < r["peak_bytes"] <= r["peak_reserved_bytes"], (stage, r["peak_bytes"])


def test_every_stage_is_freed_after_its_run():
    """calibrate runs every stage in one process: a stage still alive after its run keeps its
    model states, and the next stage on a GPU runs out of memory (seen on an H100: stage 0 of a
    1.3B model after another stage-0 run). Autograd holds the gradient hooks from C++, out of the
    garbage collector's sight, so train() must unhook the stage."""
    from zero_real.run.launch import spawn
    from zero_real.run.runconfig import RankSetup

    setup = RankSetup(backend="gloo", nproc=1, timeout_s=30)
    result, = spawn(partial(freed_worker, scenario=tiny(1), steps=1), 1, setup, timeout_s=120)
    assert result == {stage: False for stage in STAGES}


def test_flash_attention_keeps_no_score_matrix_and_plain_attention_keeps_it():
    """training.flash_attention picks the attention kernel: the fused one (no s x s matrix) or
    the plain math, whose softmax output autograd keeps. Left to itself SDPA takes a fused
    kernel whenever one applies (an H100 run of a `flash_attention = false` scenario measured
    flash's memory). The measured activations differ by exactly zerosim's score term."""
    from zero_real.run.launch import spawn
    from zero_real.run.runconfig import RankSetup
    from zerosim.analytic.model import activations

    # zero_real has no dropout (zero_real.parts.model): without it zerosim keeps the softmax output.
    plain = tiny(1, "model.dropout=false")
    flash = tiny(1, "model.dropout=false", "training.flash_attention=true")
    runs = [("plain", 0, "native", plain), ("flash", 0, "native", flash)]
    setup = RankSetup(backend="gloo", nproc=1, timeout_s=30)
    result, = spawn(partial(train_worker, runs=runs, steps=1), 1, setup, timeout_s=120)
    kept = {k: result[k]["ledger_phases"]["after_forward"]["activations"] for k in result}
    a_plain, a_flash = activations(plain.model, plain.training), activations(flash.model,
                                                                             flash.training)
    scores = plain.model.layers * (a_plain.per_layer_bytes - a_flash.per_layer_bytes)
    assert scores > 0 and kept["plain"] - kept["flash"] == scores
