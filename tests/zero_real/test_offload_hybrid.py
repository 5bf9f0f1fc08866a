"""Optimizer offload (training.optimizer_offload = "cpu") and hybrid sharding (parallelism.shard_group
= 2 of 4 ranks: a 2 x 2 gloo mesh) at stages 1-3, on 4 gloo processes, against one plain PyTorch
process (torch.optim.Adam); their ledgers against zerosim.analytic.memory.stage_memory, host bytes too;
the replica all-reduces each replica_allreduce runs; the `--shard-group` flag and the refusals.

One spawned group of 4 runs every training the module checks (a module fixture): the module pays
for one process group. Bounded at every level: 30 s per collective and init, 240 s for the group.
"""

import pytest

torch = pytest.importorskip("torch")

from collections import Counter  # noqa: E402
from functools import partial  # noqa: E402

from tests.conftest import SCENARIOS, assert_one_line_error  # noqa: E402
from tests.zero_real.helpers import (reference_grads, reference_shard, reference_train,  # noqa: E402
                                     relative_error, train_worker)
from tests.zero_real.test_memory import UNATTRIBUTED_BYTES, unowned_bytes  # noqa: E402
from tests.zero_real.test_parity import BF16_RTOL, UNEVEN, assert_parity  # noqa: E402
from zerosim.analytic.memory import stage_memory  # noqa: E402
from zerosim.scenario.config import (ClusterConfig, ParallelismConfig, Scenario,  # noqa: E402
                                     TrainingConfig)
from zerosim.scenario.load import load_scenario  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
WORLD, GROUP, STEPS = 4, 2, 2
SHARDED = (1, 2, 3)
POLICIES = ("every_micro_step", "once_per_step")
OFFLOAD = "training.optimizer_offload=cpu"
TINY_SHARD_BYTES = 4 * 118_528 // GROUP
"""fp32 bytes of a rank's gradient shard over a shard group of 2: the tiny model's units are all
even, so stage 3's per-unit shards add up to the same."""


def tiny(stage: int, *more: str):
    return load_scenario(TINY, [f"cluster.gpus_per_node={WORLD}", f"training.zero_stage={stage}",
                                *more])


def hybrid(stage: int, policy: str, *more: str):
    return tiny(stage, f"training.shard_group={GROUP}", f"training.replica_allreduce={policy}",
                "training.gradient_accumulation=2", *more)


def uneven(stage: int, shard_group: int = 0, replica_allreduce: str = "every_micro_step",
           **training):
    """Odd sizes everywhere (test_parity.UNEVEN): every flat buffer is padded."""
    return Scenario(model=UNEVEN, cluster=ClusterConfig(nodes=1, gpus_per_node=WORLD),
                    training=TrainingConfig(zero_stage=stage, precision="fp32", micro_batch=2,
                                            seq_len=7, reduce_bucket_MiB=0.0005, **training),
                    parallelism=ParallelismConfig(shard_group=shard_group,
                                                  replica_allreduce=replica_allreduce))


def cases() -> dict:
    """key -> (stage, collectives, scenario, measured under the memory profiler)."""
    out = {}
    for s in SHARDED:
        out["offload", s] = (s, "native", tiny(s, OFFLOAD), True)
        out["plain", s] = (s, "native", tiny(s), False)  # offload's arithmetic must be this
        for policy in POLICIES:  # the memory profiler on one policy: its cost is per run
            out["hybrid", s, policy] = (s, "native", hybrid(s, policy), policy == POLICIES[0])
        # once_per_step: ZeRO-2 reduces some of this model's buckets early, in two parts
        out["hybrid uneven ring", s] = (s, "ring", uneven(s, shard_group=GROUP,
                                                          replica_allreduce=POLICIES[1],
                                                          gradient_accumulation=2), False)
    for s in (2, 3):
        out["offload uneven ring", s] = (s, "ring", uneven(s, optimizer_offload="cpu",
                                                           gradient_accumulation=2), False)
        out["hybrid offload", s] = (s, "native", hybrid(s, "once_per_step", OFFLOAD), True)
    out["offload bf16", 2] = (2, "native", tiny(2, OFFLOAD, "training.precision=bf16"), False)
    out["plain bf16", 2] = (2, "native", tiny(2, "training.precision=bf16"), False)
    return out


GRADS = {("grads", kind, s): sc for s in SHARDED for kind, sc in (
    ("offload", tiny(s, OFFLOAD)), ("every", hybrid(s, POLICIES[0])),
    ("once", hybrid(s, POLICIES[1])), ("hybrid offload", hybrid(s, POLICIES[1], OFFLOAD)))}


_REFERENCES: dict = {}


def reference(sc, what=reference_train):
    """reference_train (or reference_grads) of a scenario's model and global batch: the same
    for a plain, an offloaded and a hybrid run of it, so computed once."""
    t = sc.training
    key = (what, sc.model, t.seq_len, t.micro_batch, t.gradient_accumulation, t.flash_attention)
    if key not in _REFERENCES:
        _REFERENCES[key] = what(sc, WORLD, STEPS) if what is reference_train else what(sc, WORLD)
    return _REFERENCES[key]


@pytest.fixture(scope="module")
def results():
    """Per rank, by key: train's result for every case, and one step's averaged gradient
    shards (helpers.gradient_shards) for every GRADS scenario."""
    from zero_real.run.launch import spawn
    from zero_real.run.runconfig import RankSetup

    runs = [(key, stage, mode, sc, {"profile_memory": profiled})
            for key, (stage, mode, sc, profiled) in cases().items()]
    grad_runs = [(key, key[2], sc) for key, sc in GRADS.items()]
    worker = partial(train_worker, runs=runs, grad_runs=grad_runs, steps=STEPS)
    return spawn(worker, WORLD, RankSetup(backend="gloo", nproc=WORLD, timeout_s=30),
                 timeout_s=240)


def test_offload_and_hybrid_match_one_process_adam(results):
    """Every rank ends with the single-process parameters (fp32: 1e-5 of each tensor's norm) and
    the same losses, at every stage, offloaded, hybrid (both replica_allreduce, accumulating 2
    micro-steps), both at once, on padded buffers and through the ring."""
    for key, (stage, mode, sc, _) in cases().items():
        want, want_losses = reference(sc)
        for rank_result in results:
            got = rank_result[key]
            if sc.training.precision == "bf16":  # the matrices (test_parity's bf16 bound)
                worst = max(relative_error(got["params"][n], want[n]) for n in want
                            if want[n].dim() > 1)
                assert worst < BF16_RTOL, (key, worst)
                continue
            for name in want:
                assert_parity(name, got["params"][name], want[name], sc.model)
            assert got["losses"] == pytest.approx(want_losses, rel=1e-5), key


def test_offloaded_adam_is_the_device_adam_to_the_bit(results):
    """On a CPU-only box the offloaded step runs on separate host buffers, with explicit copies,
    and the same arithmetic: the parameters equal those of the run without offload exactly."""
    pairs = [(("offload", s), ("plain", s)) for s in SHARDED]
    pairs.append((("offload bf16", 2), ("plain bf16", 2)))  # fp32 master and step on the host
    for rank_result in results:
        for offloaded, plain in pairs:
            got, want = rank_result[offloaded]["params"], rank_result[plain]["params"]
            assert all(torch.equal(got[n], want[n]) for n in want), offloaded


def test_the_averaged_gradient_is_that_of_the_global_batch(results):
    """The gradient each rank's Adam steps with (on the host under offload) is its slice of the
    single-process gradient of the mean loss: a factor N or g (or a missing replica sum) cannot
    hide behind Adam's scale invariance."""
    for key, sc in GRADS.items():
        want = reference(sc, reference_grads)
        for rank, rank_result in enumerate(results):
            for layout, (lo, hi), got in rank_result[key]:
                ref = reference_shard(want, layout, lo, hi)
                assert got.shape == ref.shape, (key, rank)
                assert relative_error(got, ref) < 1e-5, (key, rank, relative_error(got, ref))


def test_ledgers_equal_zerosims_memory(results):
    """Device and host bytes of every run against stage_memory: exact per category for the tiny
    model (even everywhere), up to the reported padding for the uneven one."""
    for key, (stage, _, sc, _) in cases().items():
        want = stage_memory(sc, stage)
        for rank_result in results:
            got = rank_result[key]["ledger"]
            for total, padding, analytic in ((got["model_states"], got["padding_bytes"],
                                              want.model_states_bytes),
                                             (got["host"], got["host_padding_bytes"],
                                              want.host_bytes)):
                assert total - padding <= analytic + 1e-6 and analytic <= total, (key, got, want)
            if sc.model is UNEVEN:
                continue
            assert (got["params"], got["grads"], got["master"] + got["moments"], got["host"]) == (
                want.params_bytes, want.grads_bytes, want.optimizer_bytes, want.host_bytes), key
            offloaded = sc.training.optimizer_offload == "cpu"
            assert (want.host_bytes > 0) == offloaded, key
            if offloaded:  # fp32 master, two moments and the fp32 gradient: 4 x 4 bytes each
                assert got["host_master"] == got["host_grads"] == got["host_moments"] // 2, key


def test_measured_memory_is_the_ledger_host_buffers_included(results):
    """On a CPU-only box the host buffers are this device's memory: the profiler's figure at
    every mark is the ledger (host states counted) plus what test_memory names, to the byte."""
    for key, (stage, _, sc, profiled) in cases().items():
        if not profiled:
            continue
        for rank, rank_result in enumerate(results):
            forwards = Counter()
            for s in rank_result[key]["memory_samples"]:
                forwards[s["step"]] += s["point"] == "after_forward"
                loss_sum = 4 if forwards[s["step"]] > 1 else 0  # test_accumulation's scalar
                ledger = sum(s["bytes_by_category"].values())
                beyond = s["measured_bytes"] - ledger - unowned_bytes(sc, s["point"]) - loss_sum
                assert 0 <= beyond <= UNATTRIBUTED_BYTES, (key, rank, s["point"], beyond)
            host = rank_result[key]["ledger"]["host"]
            assert rank_result[key]["ledger_phases"]["after_init"].get("host", 0) == host, key


def replica_all_reduces(result) -> dict[int, list[tuple[int, bool]]]:
    """Step -> (bytes, in the step's last micro-step) of each all-reduce across the replica
    group, in order: the last micro-step starts with the step's last forward."""
    last_forward = {s["step"]: s["t_s"] for s in result["memory_samples"]
                    if s["point"] == "after_forward"}  # the last one of each step stays
    out: dict[int, list[tuple[int, bool]]] = {}
    for e in result["events"]:
        if e["stream"] == "comm" and e["name"].endswith("(replicas)"):
            assert e["op"] == "all_reduce", e
            out.setdefault(e["step"], []).append((e["bytes"], e["start_s"] >= last_forward[e["step"]]))
    return out


def test_replicas_are_summed_as_replica_allreduce_says(results):
    """At 2 micro-steps: every_micro_step sums each reduced piece across the replica group as it
    comes, the whole shard in each micro-step that reduces (ZeRO-1 reduces in the last only);
    once_per_step sums the shard once, in the last micro-step, each region with what the first
    accumulated there; without hybrid sharding nothing is."""
    for rank_result in results:
        for s in SHARDED:
            every = replica_all_reduces(rank_result["hybrid", s, "every_micro_step"])
            once = replica_all_reduces(rank_result["hybrid", s, "once_per_step"])
            assert sorted(every) == sorted(once) == list(range(STEPS)), s
            for step in range(STEPS):
                assert sum(b for b, _ in every[step]) == (1 if s == 1 else 2) * TINY_SHARD_BYTES
                assert sum(b for b, last in every[step] if last) == TINY_SHARD_BYTES, s
                assert sum(b for b, _ in once[step]) == TINY_SHARD_BYTES, (s, once)
                assert all(last for _, last in once[step]), (s, once)
            assert not replica_all_reduces(rank_result["offload", s])
            assert not replica_all_reduces(rank_result["plain", s])


def test_shard_and_replica_groups_are_zerosims_layout():
    """Shard groups of g consecutive ranks; replica groups of the ranks with the same place in
    theirs (zerosim.scenario.family)."""
    from zero_real.parts.collectives import shard_groups

    assert shard_groups(4, 2) == ([[0, 1], [2, 3]], [[0, 2], [1, 3]])
    assert shard_groups(8, 4) == ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 4], [1, 5], [2, 6], [3, 7]])
    assert shard_groups(4, 4) == ([[0, 1, 2, 3]], [[0], [1], [2], [3]])
    with pytest.raises(ValueError, match="does not divide"):
        shard_groups(4, 3)


def test_host_states_are_device_memory_only_on_a_cpu_only_box():
    """The ledger's samples are the device's memory: host states count there on a CPU-only
    box (device == host), never beside a GPU's; the ledger's totals report them either way."""
    from zero_real.parts.measure import Ledger

    for host_is_device in (True, False):
        ledger = Ledger(host_is_device=host_is_device)
        ledger.add_state("params", torch.zeros(10), 10)
        ledger.add_host("moments", torch.zeros(20), 20)
        assert ledger.now().get("host") == (80 if host_is_device else None)
        summary = ledger.as_dict()
        assert (summary["model_states"], summary["host"], summary["host_moments"]) == (40, 80, 80)


# ---- the command line: --shard-group, and what zero_real refuses -----------------------------

def test_a_hybrid_offloaded_run_writes_host_bytes_beside_zerosims(tmp_path):
    """`zero-real run --nproc 4 --shard-group 2` with offload, end to end: the measurement's
    ledgers equal its zerosim_memory, host bytes too, and the summary shows both."""
    import json

    from tests.zero_real.test_cli import run_zero_real

    out = tmp_path / "m.json"
    result = run_zero_real("run", TINY, "--stage", 2, "--nproc", WORLD, "--shard-group", GROUP,
                           "--set", OFFLOAD, "--steps", 1, "--out", out, "--run-timeout-s", 120)
    assert result.code == 0, result.stderr
    m = json.loads(out.read_text())
    zerosim = m["zerosim_memory"]
    assert zerosim["host_bytes"] == 16 * 118_528 // GROUP and zerosim["grads_bytes"] == 0
    for rank in m["ranks"]:
        assert rank["ledger"]["model_states"] == zerosim["model_states_bytes"]
        assert rank["ledger"]["host"] == zerosim["host_bytes"]
    assert any(e["name"].endswith("(replicas)") for e in m["events"])
    host_mib = zerosim["host_bytes"] / 2**20
    assert f"host {host_mib:.3f} MiB (zerosim {host_mib:.3f})" in result.stdout


def test_shard_group_flag_sets_the_scenario_key_and_wins_over_set(dry_run):
    done = dry_run("run", TINY, "--stage", "3", "--nproc", "4", "--shard-group", "2")
    assert done.launched.scenario.parallelism.shard_group == 2
    done = dry_run("run", TINY, "--stage", "3", "--nproc", "4",
                   "--set", "training.shard_group=4", "--shard-group", "2")
    assert done.launched.scenario.parallelism.shard_group == 2
    assert done.launched.overrides == ("training.shard_group=4", "parallelism.shard_group=2")
    # the flag is recorded beside --set, so validate rebuilds the run it measured
    assert load_scenario(TINY, done.launched.overrides).parallelism.shard_group == 2
    done = dry_run("run", TINY, "--stage", "3", "--nproc", "4", "--set", "training.shard_group=2")
    assert done.launched.scenario.parallelism.shard_group == 2  # no flag: the scenario's own
    done = dry_run("run", TINY, "--stage", "3", "--nproc", "4", "--shard-group", "0")
    assert done.launched.scenario.parallelism.shard_group == 0


@pytest.mark.parametrize("argv, fragments", [
    (["--nproc", "4", "--shard-group", "3"],
     ["--shard-group 3 does not divide the 4 ranks of this run", "4 / 3 = 1.333"]),
    (["--nproc", "2", "--shard-group", "4"], ["--shard-group 4 does not divide the 2 ranks"]),
    (["--nproc", "4", "--set", "training.shard_group=3"],
     ["parallelism.shard_group = 3 must divide the world size 4"]),
    (["--nproc", "4", "--shard-group", "-1"], ["--shard-group: '-1'", "0..65536"]),
])
def test_a_shard_group_that_does_not_divide_the_ranks_is_refused(dry_run, argv, fragments):
    done = dry_run("run", TINY, "--stage", "2", *argv)
    assert done.launched is None
    assert_one_line_error(done.result, *fragments)


def test_shard_group_at_stage_0_is_refused(dry_run):
    done = dry_run("run", TINY, "--stage", "0", "--nproc", "4", "--shard-group", "2")
    assert_one_line_error(done.result, "parallelism.shard_group = 2", "zero_stage = 0")


NOT_IMPLEMENTED = "is not implemented by zero_real; it supports"


@pytest.mark.parametrize("overrides, fragment", [
    (["training.optimizer_offload=nvme", "cluster.nvme_read_GBps=10",
      "cluster.nvme_write_GBps=5"], "training.optimizer_offload = nvme"),
    ([OFFLOAD, "training.param_offload=cpu"], "training.param_offload = cpu"),
    ([OFFLOAD, "training.delayed_update=true"], "training.delayed_update = true"),
    (["training.hpz_partition=2"], "parallelism.hpz_partition = 2"),
    (["training.quantized_weights=true"], "training.quantized_weights = true"),
    (["training.quantized_gradients=true"], "training.quantized_gradients = true"),
])
def test_offload_and_zeropp_settings_zero_real_does_not_run_are_refused(dry_run, overrides,
                                                                        fragment):
    argv = [arg for o in overrides for arg in ("--set", o)]
    done = dry_run("run", TINY, "--stage", "3", "--nproc", "2", *argv)
    assert done.launched is None
    assert_one_line_error(done.result, fragment, NOT_IMPLEMENTED)


@pytest.mark.parametrize("override, fragment", [
    ("model.head_size=32", "model.head_size = 32"), ("model.qkv_bias=false", "model.qkv_bias"),
    ("model.qk_norm=true", "model.qk_norm = true"), ("model.layer_norms=4", "model.layer_norms = 4"),
    ("model.sliding_window=8", "model.sliding_window = 8"),
])
def test_layouts_zero_real_does_not_build_are_refused(dry_run, override, fragment):
    """The Hugging Face families' layouts zerosim counts (Gemma's head size, Qwen2's Q/K/V
    biases, Qwen3's Q/K norms, Gemma-2's four norms, Mistral's sliding window) are not
    zero_real's modules."""
    done = dry_run("run", TINY, "--stage", "1", "--nproc", "2", "--set", override)
    assert done.launched is None
    assert_one_line_error(done.result, fragment, NOT_IMPLEMENTED)


def test_cpu_offload_reaches_the_launch(dry_run):
    for stage in SHARDED:
        done = dry_run("run", TINY, "--stage", str(stage), "--set", OFFLOAD)
        assert done.result is None, done.result.stderr
        assert done.launched.scenario.training.optimizer_offload == "cpu"
