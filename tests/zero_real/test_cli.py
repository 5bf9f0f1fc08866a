"""`zero-real run`: the README command, its JSON and progress, bad input, and a rank dying
mid-run. Flags out of range: test_flags.py; outputs: test_outputs.py."""

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")

from functools import partial  # noqa: E402

from tests.conftest import SCENARIOS, CliResult, assert_one_line_error, run_main  # noqa: E402
from tests.procs import gone  # noqa: E402
from tests.zero_real.helpers import train_dying, train_hanging  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"


def run_zero_real(*argv) -> CliResult:
    from zero_real import cli

    return run_main(cli.main, *argv)


def test_run_stage3_two_ranks_writes_measurement(tmp_path, monkeypatch):
    shutil.copy(TINY, tmp_path / "tiny.toml")
    monkeypatch.chdir(tmp_path)  # paths as typed, relative to here
    result = run_zero_real("run", "tiny.toml", "--stage", 3, "--nproc", 2, "--steps", 2,
                           "--collectives", "ring", "--out", "m.json")
    assert result.code == 0, result.stderr
    assert "ZeRO-3 (stage 3) on 2 ranks" in result.stdout
    progress = result.stderr.splitlines()
    assert progress[0] == "run: starting 2 process(es)"
    assert progress[-1].startswith("run: steps 2/2 in ") and progress[-1].endswith(" s")
    assert all(line.startswith("run: steps ") for line in progress[1:])
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["scenario"] == "tiny.toml"
    for key in ("scenario", "stage", "world_size", "backend", "collectives", "torch_version",
                "hardware", "losses", "ranks", "events"):
        assert key in m, key
    assert (m["stage"], m["world_size"], m["backend"], m["collectives"]) == (3, 2, "gloo", "ring")
    assert m["timings_under_profiler"] is True  # CPU memory profiling was on
    assert len(m["losses"]) == 2 and len(m["ranks"]) == 2
    for rank in m["ranks"]:
        assert set(rank["phases"]) == {"after_init", "after_forward", "after_backward", "after_step"}
        assert rank["peak_bytes"] >= max(rank["phases"].values()) > 0
        assert rank["ledger"]["model_states"] == m["zerosim_memory"]["model_states_bytes"]
    schema = {"rank", "step", "stream", "name", "phase", "layer", "op", "bytes", "start_s",
              "end_s"}
    assert all(set(e) == schema for e in m["events"])
    comm = [e for e in m["events"] if e["stream"] == "comm"]
    assert {e["op"] for e in comm} == {"all_gather", "reduce_scatter"}  # ZeRO-3 needs no all-reduce
    assert all(e["end_s"] >= e["start_s"] for e in m["events"])
    layers = {e["layer"] for e in m["events"] if e["stream"] == "compute" and e["phase"] == "backward"}
    assert layers == {0, 1, 2, 3}  # embedding, 2 blocks, head


def test_timed_steps_run_without_the_profiler_after_the_memory_steps(tmp_path):
    out = tmp_path / "m.json"
    result = run_zero_real("run", TINY, "--stage", 1, "--nproc", 2, "--steps", 1,
                           "--timed-steps", 2, "--out", out)
    assert result.code == 0, result.stderr
    m = json.loads(out.read_text())
    assert (m["steps"], m["timed_steps"], m["timings_under_profiler"]) == (1, 2, False)
    assert m["overlap_comm"] is False
    assert len(m["losses"]) == 3
    assert {e["step"] for e in m["events"]} == {0, 1, 2}
    for rank in m["ranks"]:  # memory as measured in the profiled step, not lost to later steps
        assert rank["phases"]["after_init"] == rank["ledger"]["model_states"]
        assert all(v is not None and v > 0 for v in rank["phases"].values())
    # timed steps still mark their phases, with the ledger only
    unmeasured = [s for s in m["memory_samples"] if s["step"] >= 1]
    assert len(unmeasured) == 2 * 3 * 2 and all("measured_bytes" not in s for s in unmeasured)


@pytest.mark.parametrize("argv, fragment", [
    (["run", "missing.toml", "--stage", "1"], "missing.toml"),
    (["run", TINY, "--stage", "1", "--timed-steps", "-1"], "--timed-steps: '-1'"),
    (["run", TINY, "--stage", "5"], "--stage: '5'"),
    (["run", TINY, "--stage", "1", "--nproc", "0"], "--nproc: '0'"),
    (["run", TINY, "--stage", "1", "--collectives", "tree"], "tree"),
    (["run", TINY, "--stage", "1", "--set", "training.precison=bf16"], "precison"),
    (["run", TINY, "--stage", "1", "--fake-world-size", "8", "--nproc", "2"], "--fake-world-size"),
])
def test_bad_input_is_one_line_exit_2(argv, fragment):
    assert_one_line_error(run_zero_real(*argv), fragment)


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="checks the no-GPU message")
def test_nccl_without_gpus_is_bad_input():
    assert_one_line_error(run_zero_real("run", TINY, "--stage", "0", "--backend", "nccl"), "nccl")


def _run_with_fault(fault, *, stage: int, collectives: str, timeout_s: float, match: str):
    """Three ranks of the tiny model, one of them faulty (tests/zero_real/helpers.py): the launch
    fails naming what `match` says, and leaves no rank behind. The run's own limit (60 s) is the
    hang guard: a fault it did not name fails the match with "did not finish". How soon a fault
    is named is a figure of bench/real_timing.py, not an assertion here."""
    from zero_real.run.launch import RankFailed, spawn
    from zero_real.run.runconfig import RunConfig
    from zerosim.scenario.load import load_scenario

    scenario = load_scenario(TINY, ["cluster.gpus_per_node=3"])
    cfg = RunConfig(scenario=scenario, stage=stage, collectives=collectives, backend="gloo",
                    steps=3, timeout_s=timeout_s, nproc=3, profile_memory=False)
    with pytest.raises(RankFailed, match=match) as info:
        spawn(fault, 3, cfg, timeout_s=60)
    assert all(gone(pid) for pid in info.value.pids)


def test_a_rank_dying_mid_run_stops_every_rank():
    _run_with_fault(partial(train_dying, die_rank=1, die_step=1), stage=2, collectives="ring",
                    timeout_s=20, match="rank 1 died")


def test_a_rank_hanging_mid_step_is_named_and_every_rank_stopped():
    """Rank 1 stops (alive) at its second collective of step 1; its peers time out after 5 s.
    The launcher names rank 1, not the peer that timed out first, and leaves nothing behind."""
    _run_with_fault(partial(train_hanging, hang_rank=1, hang_step=1), stage=1,
                    collectives="native", timeout_s=5,
                    match="rank 1 stopped making progress at step 1")


@pytest.mark.parametrize("override, fragment", [
    ("training.optimizer=sgd", "training.optimizer = sgd"),
    ("training.activation_checkpointing=full", "training.activation_checkpointing = full"),
    ("training.gradient_reduction=all_reduce", "training.gradient_reduction = all_reduce"),
])
def test_unsupported_scenario_settings_are_refused(override, fragment):
    assert_one_line_error(run_zero_real("run", TINY, "--stage", "1", "--set", override),
                          fragment, "zero_real; it supports")


@pytest.mark.parametrize("settings, fragment, supported", [
    (["training.precision=bf16", "training.reduce_dtype=fp32"], "training.reduce_dtype = fp32",
     "gradients reduced in the parameters' dtype (param)"),
    (["training.framework=deepspeed"], "training.framework = deepspeed",
     "the ZeRO paper's stages (zero)"),
    (["training.framework=fsdp2"], "training.framework = fsdp2", "the ZeRO paper's stages (zero)"),
])
def test_settings_zero_real_does_not_implement_are_refused_before_launch(dry_run, settings,
                                                                         fragment, supported):
    """Review I10: these ran as something else (gradients reduced in bf16; the paper's stages,
    not DeepSpeed's or FSDP2's), their summary comparing with a zerosim that modelled them."""
    argv = [x for setting in settings for x in ("--set", setting)]
    done = dry_run("run", TINY, "--stage", "3", "--nproc", "2", *argv)
    assert done.result is not None, f"launched with {settings}"
    assert_one_line_error(done.result, fragment, f"zero_real; it supports {supported}")


def test_which_framework_zero_real_trains_is_asked_of_the_framework_class(dry_run,
                                                                          monkeypatch):
    """The refusal asks the framework's class (runs_in_zero_real), not a registry index: a
    framework that says it runs is launched, and the one that did stops saying so is refused."""
    from zerosim.frameworks.deepspeed import DeepSpeed
    from zerosim.frameworks.zero import Zero

    monkeypatch.setattr(DeepSpeed, "runs_in_zero_real", True)
    monkeypatch.setattr(Zero, "runs_in_zero_real", False)
    done = dry_run("run", TINY, "--stage", "3", "--nproc", "2",
                   "--set", "training.framework=deepspeed")
    assert done.result is None, done.result
    assert_one_line_error(dry_run("run", TINY, "--stage", "3", "--nproc", "2").result,
                          "training.framework = zero", "it supports the ZeRO paper's stages "
                          "(deepspeed)")


@pytest.mark.parametrize("setting, flags, message", [
    ("training.zero_stage=7", ["--stage", "3"],
     "--set training.zero_stage=7 disagrees with --stage, which makes training.zero_stage = 3"),
    ("training.zero_stage=1", ["--stage", "3"],
     "--set training.zero_stage=1 disagrees with --stage, which makes training.zero_stage = 3"),
])
def test_a_set_zero_stage_is_refused_unless_it_agrees_with_stage(dry_run, setting, flags,
                                                                 message):
    """Review I10: `--set training.zero_stage=7` was silently replaced by --stage. The flag
    decides; a --set saying otherwise is refused, one saying the same runs. (--shard-group and
    --nproc win over --set as test_offload_hybrid.py says: the measurement records both.)"""
    done = dry_run("run", TINY, *flags, "--set", setting)
    assert done.result is not None, f"launched with --set {setting} and {flags}"
    assert_one_line_error(done.result, message)
    agreeing = setting.split("=")[0] + "=" + message.rsplit(" = ", 1)[1]
    done = dry_run("run", TINY, *flags, "--set", agreeing)
    assert done.result is None and done.launched.stage == 3, done.result


def test_an_out_that_is_a_named_pipe_is_refused_before_the_run(dry_run, tmp_path):
    """Review H3: `--out FIFO` passed the check, and the measurement's write waited, after the
    whole run, for a reader that never came. Refused before anything starts (run and
    calibrate share the check)."""
    fifo = tmp_path / "m.json"
    os.mkfifo(fifo)
    for argv in (["run", TINY, "--stage", "1"], ["calibrate", TINY, "--nproc", "1"]):
        done = dry_run(*argv, "--out", fifo)
        assert done.result is not None, f"{argv[0]} launched with --out a named pipe"
        assert_one_line_error(done.result, f"--out {fifo}", "a named pipe")


def test_kernels_zero_real_does_not_run_are_refused():
    """zero_real runs SDPA's attention and nn.RMSNorm; a scenario timing llm-foundry's Triton
    attention or an RMSNorm in fp32 eager ops is not what it would measure."""
    result = run_zero_real("run", TINY, "--stage", "1", "--set", "training.flash_attention=true",
                           "--set", "training.flash_kernel=triton")
    assert_one_line_error(result, "training.flash_kernel = triton", "zero_real; it supports")
    result = run_zero_real("run", TINY, "--stage", "1", "--set", "model.norm=rmsnorm",
                           "--set", "training.norm_kernel=composite_fp32")
    assert_one_line_error(result, "training.norm_kernel = composite_fp32", "zero_real; it supports")


def test_rope_with_odd_head_dimension_is_refused():
    result = run_zero_real("run", TINY, "--stage", "1", "--set", "model.position=rope",
                           "--set", "model.hidden=60", "--set", "model.heads=4")
    assert_one_line_error(result, "model.position = rope", "60 / 4 = 15")


def test_a_model_too_big_for_this_box_is_refused_before_launching():
    result = run_zero_real("run", SCENARIOS / "megatron_7b5_64gpu.toml", "--stage", "0",
                           "--nproc", "2", "--set", "training.activation_checkpointing=none")
    assert_one_line_error(result, "not enough memory", "2 process(es) x", "MemAvailable")


@pytest.mark.parametrize("env, fragment", [
    ({"RANK": "0", "WORLD_SIZE": "2"}, "LOCAL_RANK, MASTER_ADDR, MASTER_PORT not"),
    ({"RANK": "0"}, "WORLD_SIZE"),
    ({"RANK": "0", "WORLD_SIZE": "x", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     "must be integers"),
    ({"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1",
      "LOCAL_WORLD_SIZE": "2"}, "whole number of nodes"),
])
def test_partial_or_bad_torchrun_environment_is_refused(monkeypatch, env, fragment):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert_one_line_error(run_zero_real("run", TINY, "--stage", "1"), fragment)


def test_torchrun_world_comes_from_the_environment(monkeypatch):
    from zero_real.run.launch import torchrun_env

    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "h",
           "MASTER_PORT": "29500", "LOCAL_WORLD_SIZE": "4"}
    assert torchrun_env(env) == (8, 4)
    assert torchrun_env({}) is None
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert_one_line_error(run_zero_real("run", TINY, "--stage", "1", "--nproc", "2"),
                          "--nproc 2 disagrees with torchrun's WORLD_SIZE=8")
