"""Every numeric flag of `zero-real run` and `calibrate`: a value out of its range is one line,
exit 2, naming the flag, the value and the range, before anything starts; the bounds themselves
are accepted and reach the launch unchanged; a --nproc this box cannot hold is refused with what
it needs against what there is. In-process, launching disabled (conftest.dry_run)."""

import math

import pytest

pytest.importorskip("torch")

from tests.conftest import SCENARIOS, assert_one_line_error  # noqa: E402
from zero_real.checks import flags, preflight  # noqa: E402
from zerosim.units import GiB  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
RUN = ("run", TINY, "--stage", "1")
TIMEOUT = "[0.001, 2147483]"
# flag: (its range as the error states it, out-of-range values, the field the launch gets)
RUN_FLAGS = {
    "--stage": ("0..3", ["4", "-1", "1.0", "nan"], "stage"),
    "--nproc": ("1..65536", ["0", "-2", "65537", "1099511627776", "2.5"], "nproc"),
    "--steps": ("1..10000", ["0", "10001", "1e3", "inf"], "steps"),
    "--timed-steps": ("0..10000", ["-1", "10001", "nan"], "timed_steps"),
    "--fake-world-size": ("1..65536", ["0", "65537", "1099511627776", "2**40"], "fake_world_size"),
    "--shard-group": ("0..65536", ["-1", "65537", "1.5", "nan", "1099511627776"], None),
    "--seed": ("0..2147483647", ["-1", "2147483648", "99999999999999999999"], "seed"),
    "--lr": ("(0, 1]", ["nan", "inf", "-inf", "0", "-0.001", "1.5", "1e400"], "lr"),
    "--timeout-s": (TIMEOUT, ["nan", "inf", "0", "-1", "1e-300", "1e300", "2147484"], "timeout_s"),
    "--run-timeout-s": (TIMEOUT, ["nan", "inf", "0", "-5", "1e300"], "run_timeout_s"),
}
CALIBRATE_FLAGS = {
    "--nproc": ("1..65536", ["0", "65537", "nan"]),
    "--min-size-KiB": ("(0, 1073741824]", ["0", "-1", "nan", "inf", "1073741825"]),
    "--max-size-MiB": ("(0, 1048576]", ["0", "nan", "inf", "1048577"]),
    "--seconds-per-size": ("(0, 60]", ["0", "nan", "inf", "61", "-0.3"]),
    "--rounds": ("1..20", ["0", "21", "1.5", "nan", "-1"]),
    "--timeout-s": (TIMEOUT, ["0", "nan", "inf", "1e300"]),
    "--run-timeout-s": (TIMEOUT, ["0", "nan", "-inf"]),
    "--micro-batches": ("1 to 16 whole numbers in 1..1048576",
                        ["0,2", "1,x", "", ",", "1048577", ",".join(map(str, range(1, 18)))]),
}
JUNK = ["", "x", "\udcff", " ", "1_0_", "0x10"]  # what no flag takes


def _case(command, flag, value):
    return pytest.param(command, flag, value, id=f"{command} {flag}={value!a}"[:60])


@pytest.mark.parametrize("command, flag, value", [
    *(_case("run", flag, v) for flag, (_, bad, _) in RUN_FLAGS.items() for v in bad + JUNK),
    *(_case("calibrate", flag, v) for flag, (_, bad) in CALIBRATE_FLAGS.items()
      for v in bad + JUNK)])
def test_a_value_out_of_range_is_one_line_naming_flag_value_and_range(dry_run, tmp_path, command,
                                                                      flag, value):
    if command == "run":
        argv, interval = [*RUN, f"{flag}={value}"], RUN_FLAGS[flag][0]
    else:
        argv = ["calibrate", TINY, "--out", tmp_path / "p.json", f"{flag}={value}"]
        argv += [] if flag == "--nproc" else ["--nproc", "2"]
        interval = CALIBRATE_FLAGS[flag][0]
    done = dry_run(*argv)
    assert done.launched is None
    assert_one_line_error(done.result, f"argument {flag}: {value!r}", interval)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flag, value, expected", [
    ("--stage", "3", 3), ("--steps", "10000", 10_000), ("--timed-steps", "10000", 10_000),
    ("--fake-world-size", "65536", 65_536), ("--seed", "2147483647", 2**31 - 1),
    ("--lr", "1", 1.0), ("--lr", "1e-300", 1e-300), ("--timeout-s", "0.001", 0.001),
    ("--timeout-s", "2147483", 2_147_483.0), ("--run-timeout-s", "0.001", 0.001),
])
def test_the_bounds_themselves_reach_the_launch(dry_run, flag, value, expected):
    done = dry_run(*RUN, flag, value)
    assert done.result is None, done.result.stderr
    assert getattr(done.launched, RUN_FLAGS[flag][2]) == expected


def test_lr_nan_is_refused_not_trained(dry_run):
    """The issue's case: --lr nan was accepted and every loss after the first was nan."""
    assert_one_line_error(dry_run(*RUN, "--lr", "nan").result, "--lr", "'nan'", "(0, 1]")


def test_fake_world_size_2_to_the_40_is_one_line_not_torchs_message(dry_run):
    result = dry_run(*RUN, "--fake-world-size", str(2**40)).result
    assert_one_line_error(result, "--fake-world-size", "'1099511627776'", "1..65536")
    assert "TypeError" not in result.stderr and "incompatible" not in result.stderr


def _needed_bytes(procs: int, per_rank_bytes: float) -> float:
    return preflight.FORK_SERVER_BYTES + procs * (preflight.PROCESS_BYTES + per_rank_bytes)


def test_the_memory_check_counts_each_process_not_the_model_alone(dry_run, monkeypatch):
    """The tiny model peaks at ~2.7 MB per rank, but each rank's process holds ~150 MiB (torch,
    gloo, the profiler): on a box with 1 GiB available (80% usable: 819 MiB), 3 ranks fit and 4
    do not. Counting the model alone, 300 ranks would have 'fit'."""
    from zerosim.analytic.memory import stage_memory
    from zerosim.scenario.load import load_scenario

    monkeypatch.setattr(preflight, "mem_available", lambda: GiB)
    assert dry_run(*RUN, "--nproc", "3").nproc == 3
    peak = stage_memory(load_scenario(TINY, ["cluster.gpus_per_node=4"]), 1).peak_bytes
    need = _needed_bytes(4, peak)
    assert 4 * peak < 0.01 * GiB < 0.8 * GiB < need
    assert_one_line_error(
        dry_run(*RUN, "--nproc", "4").result,
        f"not enough memory: 4 process(es) x (150 MiB per process + {peak / GiB:.3f} GiB "
        f"zerosim's peak for stage 1 at world size 4) + 256 MiB fork server = "
        f"{need / GiB:.2f} GiB needed; available: 80% of MemAvailable 1.00 GiB = 0.80 GiB")


def test_calibrate_checks_memory_before_building_its_worlds(dry_run, monkeypatch, tmp_path):
    """--nproc bounds the worlds 1..N calibrate builds: what cannot fit is refused first."""
    from zero_real.calibration import calibrate

    monkeypatch.setattr(preflight, "mem_available", lambda: GiB)
    built = []
    monkeypatch.setattr(calibrate, "CalibrationWorld", lambda **kw: built.append(kw))
    result = dry_run("calibrate", TINY, "--nproc", "8", "--out", tmp_path / "p.json").result
    assert_one_line_error(result, "not enough memory: 8 process(es) x (150 MiB per process")
    assert built == []


def test_a_nproc_this_box_cannot_hold_is_refused_before_launching(dry_run):
    available = preflight.mem_available()
    if available is None:
        pytest.skip("MemAvailable cannot be read here")
    procs = math.ceil(0.8 * available / preflight.PROCESS_BYTES)  # the processes alone exceed it
    assert procs <= flags.MAX_WORLD
    assert_one_line_error(dry_run(*RUN, "--nproc", procs).result,
                          f"not enough memory: {procs} process(es)", "GiB needed; available:")



@pytest.mark.parametrize("value", ["٣", "３", "٢", "1٠"])
def test_every_typed_flag_of_zero_real_takes_ascii_digits_only(value):
    """Review I14: `zero-real run --stage ٣` ran stage 3 and `--nproc ٢` two ranks (int() reads
    Unicode digits) where zerosim refused them. Every flag found by walking the parser (so one
    added later is covered) now refuses them in zerosim's words (tests/zerosim/test_inputs.py)."""
    from tests.conftest import run_main, typed_flags
    from zero_real.cli import build_parser, main

    found = list(typed_flags(build_parser()))
    assert {(("run",), "--stage"), (("run",), "--nproc"), (("calibrate",), "--nproc"),
            (("run",), "--lr"), (("calibrate",), "--micro-batches")} <= set(found)
    for path, flag in found:
        assert_one_line_error(run_main(main, *path, flag, value), f"argument {flag}: {value!r}",
                              "ASCII digits")


@pytest.mark.parametrize("value", ["+2", " 2", "2 ", "2_0"])
def test_whole_number_flags_take_digits_alone_as_zerosims_do(dry_run, value):
    """int() took these; zerosim's --ranks and --jobs never did."""
    done = dry_run(*RUN, "--nproc", value)
    assert done.launched is None
    assert_one_line_error(done.result, f"argument --nproc: {value!r}", "1..65536")


def test_a_named_pipe_as_out_is_refused_before_the_run(dry_run, tmp_path):
    """Review H3: `zero-real run --out <fifo>` ran the whole run, then waited forever in open()
    for a reader of the pipe (zerosim.files.refuse_special; every zerosim command:
    tests/zerosim/test_special_files.py)."""
    import os

    pipe = tmp_path / "m.json"
    os.mkfifo(pipe)
    done = dry_run(*RUN, "--out", pipe)
    assert done.launched is None
    assert_one_line_error(done.result, f"--out {pipe}: a named pipe, not a regular file")
