"""`zero-real calibrate`: one real calibration of the tiny model on worlds of 1 and 2 processes
(and one of 1 alone), what its profile and its progress must say, what it refuses, and what
a failing rank or a failed write leaves. No measured time is compared here (a loaded machine
would break it): bench/real_timing.py prints how time grows with size. Flags out of range:
test_flags.py; outputs: test_outputs.py."""

import json
import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.conftest import SCENARIOS, CliResult, assert_one_line_error, run_main  # noqa: E402
from zerosim.contract import COLLECTIVE_IMPLS, COLLECTIVE_OPS, STAGES, UNIT_KINDS  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
SIZES_KIB = [256 * 2**k for k in range(7)]  # 256 KiB .. 16 MiB
RUN_LIMIT = ("--run-timeout-s", 120)  # a hang fails the test instead of CI
# nccl-tests' PERFORMANCE.md at n = 2: all_reduce 2(n-1)/n, reduce_scatter and all_gather (n-1)/n
BUSBW_FACTOR_2 = {"all_reduce": 1.0, "reduce_scatter": 0.5, "all_gather": 0.5}


def calibrate(*argv) -> CliResult:
    from zero_real import cli

    fast = () if "--seconds-per-size" in argv else ("--seconds-per-size", 0.02)
    return run_main(cli.main, "calibrate", *argv, *fast)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """A calibration run from a folder holding the scenario, paths typed relative to it, every
    progress line shown (no interval between lines)."""
    from zero_real.run import progress

    folder = tmp_path_factory.mktemp("calibrate")
    shutil.copy(TINY, folder / "tiny.toml")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setattr(progress, "EVERY_S", 0.0)
        result = calibrate("tiny.toml", "--nproc", 2, "--min-size-KiB", 256, "--max-size-MiB",
                           16, "--micro-batches", "1,2", "--rounds", ROUNDS, "--out", "two.json",
                           *RUN_LIMIT)
    assert result.code == 0, result.stderr
    return result, json.loads((folder / "two.json").read_text()), folder / "two.json"


# What each world measures, in calibration/bench.py's order: in each of --rounds rounds the
# collectives, the op model's constants (ops.py), then the whole units, the optimizer and the
# stages' gradient path; the memory runs. A world of one process runs no collectives.
TIMED = ("collectives", "gemm", "linear", "launch", "attention", "memory_op", "compute",
         "optimizer", "gradients")  # each round of the timed microbenchmarks
ROUNDS = 2
SECTIONS = (*TIMED * ROUNDS, "memory")


def _known_items(n: int) -> dict[str, list[str]]:
    """The items of the sections whose list this test can write out (the op sections' shapes
    are ops.py's own grid: only their counts are checked)."""
    return {
        "collectives": [f"{impl} {op} {kib * 1024} B" for impl in COLLECTIVE_IMPLS
                        for op in COLLECTIVE_OPS for kib in SIZES_KIB] if n > 1 else [],
        "compute": [f"{unit} micro-batch {b}" for b in (1, 2) for unit in UNIT_KINDS],
        "launch": ["add_ and autograd chain"],
        "optimizer": [f"{4**k} elements" for k in range(5, 12)],
        "gradients": [f"stage {s}" for s in (0, 1, 2)]
        + [f"stage 3 visits, width x{k}" for k in (1, 2, 4)],
        "memory": [f"stage {s} micro-batch {b}" for s in STAGES for b in (1, 2)]}


def _sections(lines: list[str]) -> dict[int, list[tuple[str, list]]]:
    """Per world, its sections in order, each its items ("calibrate n=2: gemm 3/57 (16x16x16)"),
    every count from 0/N to N/N without a gap; the last item is counted, not named (None)."""
    worlds: dict[int, list] = {}
    for line in lines:
        head, _, text = line.partition(": ")
        n = int(head.removeprefix("calibrate n="))
        if text == f"starting {n} process(es)":
            assert n not in worlds, line
            worlds[n] = []
            continue
        section, count, *item = text.split(" ", 2)
        done, total = map(int, count.split("/"))
        if done == 0:
            worlds[n].append((section, total, []))
            continue
        name, total_then, items = worlds[n][-1]
        assert (section, total, done) == (name, total_then, len(items) + 1), line
        if done < total:
            assert item and item[0].startswith("(") and item[0].endswith(")"), line
        items.append(item[0][1:-1] if done < total else None)
    return {n: [(name, items) for name, _, items in sections] for n, sections in worlds.items()}


def test_progress_every_section_with_its_count_and_a_one_line_summary(two):
    """Worlds 1 then 2, each section counted from 0 to its items; the items of the sections
    written out here named exactly, the op sections' counted."""
    result, _, out = two
    assert result.stdout.count("\n") == 1 and "wrote two.json" in result.stdout
    worlds = _sections([line.rsplit(" in ", 1)[0] for line in result.stderr.splitlines()])
    assert list(worlds) == [1, 2]
    for n, sections in worlds.items():
        assert [name for name, _ in sections] == [s for s in SECTIONS
                                                  if n > 1 or s != "collectives"]
        for name, items in sections:
            assert len(items) >= 1 and items[-1] is None, (n, name)
            known = _known_items(n).get(name)
            if known is not None:
                assert (items[:-1], len(items)) == (known[:-1], len(known)), (n, name)
    assert all(line.endswith(" s") for line in result.stderr.splitlines()
               if "/" in line and " in " in line)


def test_provenance_and_scenario(two):
    _, profile, _ = two
    assert (profile["format"], profile["version"]) == ("zerosim-profile", 2)
    p = profile["provenance"]
    assert p["torch_version"] == torch.__version__ and p["date"].endswith("+00:00")
    assert (p["backend"], p["device"], p["nproc"], p["collectives"]) == ("gloo", "cpu", 2,
                                                                         ["native", "ring"])
    assert p["scenario"] == "tiny.toml"  # as typed, relative to where it ran
    assert p["command"] == (
        "zero-real calibrate tiny.toml --nproc 2 --backend gloo --collectives native,ring "
        "--min-size-KiB 256 --max-size-MiB 16 --micro-batches 1,2 --seconds-per-size 0.02 "
        "--rounds 2 --timeout-s 30 --run-timeout-s 120 --out two.json")
    assert profile["scenario"]["model"]["hidden"] == 64
    assert profile["scenario"]["training"] == {"precision": "fp32", "optimizer": "adam",
                                               "seq_len": 32, "micro_batch": 2}


def test_every_collective_once_with_its_bandwidths(two):
    rows = two[1]["measurements"]["collectives"]
    keys = [(r["impl"], r["op"], r["ranks"], r["size_bytes"]) for r in rows]
    assert sorted(keys) == sorted((impl, op, 2, kib * 2**10) for impl in ("native", "ring")
                                  for op in ("all_reduce", "reduce_scatter", "all_gather")
                                  for kib in SIZES_KIB)
    for r in rows:
        assert r["time_s"] > 0 and 5 <= r["iterations"] <= 500  # 3..250 in each of 2 rounds
        assert r["median_s"] > 0  # kept beside the mean the fit uses
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * BUSBW_FACTOR_2[r["op"]])


def test_compute_per_unit_and_micro_batch(two):
    rows = two[1]["measurements"]["compute"]
    assert sorted((r["processes"], r["unit"], r["micro_batch"]) for r in rows) == sorted(
        (n, u, b) for n in (1, 2) for u in ("embedding", "block", "head") for b in (1, 2))
    for r in rows:
        assert r["seq_len"] == 32 and r["iterations"] >= 5
        assert 0 < r["forward_s"] <= r["forward_s_max_rank"]
        assert 0 < r["backward_s"] <= r["backward_s_max_rank"]


def test_optimizer_elements_and_times(two):
    rows = two[1]["measurements"]["optimizer"]
    assert [(r["processes"], r["elements"]) for r in rows] == [
        (n, 4**k) for n in (1, 2) for k in range(5, 12)]  # 2**10 .. 2**22 in each world
    assert all(r["precision"] == "fp32" for r in rows)
    assert all(r["iterations"] >= 5 and r["time_s"] > 0 for r in rows)


def test_gradient_path_of_each_stage(two):
    """Stages 0-2 in each world: the hooks fired and the buckets reduced in one backward, counted
    by hand for the tiny GPT (token and position matrices, 2 x 12 block tensors, the final
    norm's 2 and the tied matrix's second use: 29; 118,528 fp32 gradients in 64 KiB buckets:
    ceil(474,112 / 65,536) = 8), and the fit's seconds per hook and per bucket are those
    totals over these counts. Stage 3: each pass at widths x1, x2, x4 gathers 6 flat buffers
    (token, position, two blocks, the head and the tied matrix again), whose bytes grow with
    the width: 118,528 + 16,384 (the tied matrix again) fp32 elements at x1."""
    rows = two[1]["measurements"]["grad_path"]
    hooked = [r for r in rows if "pass" not in r]
    assert sorted((r["processes"], r["stage"]) for r in hooked) == [
        (n, s) for n in (1, 2) for s in (0, 1, 2)]
    fit = two[1]["fit"]["grad_path"]
    for r in hooked:
        assert (r["hooks"], r["buckets"]) == (29, 8), r
        assert r["with_s"] > 0 and r["without_s"] > 0 and r["iterations"] >= 5
        assert r["reduce_s"] >= r["buckets_s"]  # the collectives' time is taken out of it
        entry = fit[str(r["processes"])][str(r["stage"])]
        assert entry["hook_s"] == max(0.0, r["hooks_s"] / 29)
        assert entry["bucket_s"] == max(0.0, r["buckets_s"] / 8)
    visits = [r for r in rows if "pass" in r]
    assert sorted((r["processes"], r["pass"], r["scale"]) for r in visits) == sorted(
        (n, p, k) for n in (1, 2) for p in ("forward", "backward") for k in (1, 2, 4))
    for r in visits:
        assert r["stage"] == 3 and r["counts"]["groups"] == 6 and r["iterations"] >= 5
        if r["scale"] == 1:
            assert r["counts"]["bytes"] == 4 * (118_528 + 16_384)
    by_scale = {(r["processes"], r["pass"], r["scale"]): r["counts"]["bytes"] for r in visits}
    assert all(by_scale[n, p, 1] < by_scale[n, p, 2] < by_scale[n, p, 4]
               for n, p, _ in by_scale)
    for n in ("1", "2"):
        assert set(fit[n]["3"]) == {"forward", "backward"}
        assert all(fit[n]["3"][p]["buffer_s"] >= 0 and fit[n]["3"][p]["s_per_byte"] >= 0
                   for p in ("forward", "backward"))


def test_memory_of_each_stage_against_its_ledger(two):
    rows = [r for r in two[1]["measurements"]["memory"] if r["processes"] == 2]
    assert {r["processes"] for r in two[1]["measurements"]["memory"]} == {1, 2}
    by = {(r["stage"], r["micro_batch"]): r for r in rows}
    assert sorted(by) == [(s, b) for s in range(4) for b in (1, 2)] and len(rows) == 8
    points = {"after_init", "after_forward", "after_backward", "after_step"}
    for (stage, b), r in by.items():
        assert set(r["phases"]) == set(r["ledger_phases"]) == points
        assert r["phases"]["after_init"] == r["ledger_phases"]["after_init"], r  # model states
        assert r["peak_bytes"] >= max(r["phases"].values())
        assert r["ledger_phases"]["after_forward"] > r["ledger_phases"]["after_init"]
    for b in (1, 2):
        assert by[0, b]["peak_bytes"] > by[1, b]["peak_bytes"]
        init = [by[s, b]["ledger_phases"]["after_init"] for s in range(4)]
        assert init == sorted(init, reverse=True) and len(set(init)) == 4
    assert by[0, 2]["ledger_phases"]["after_forward"] > by[0, 1]["ledger_phases"]["after_forward"]


def test_the_profile_is_fitted_and_drives_the_simulator(two):
    from tests.conftest import run_zerosim
    from zerosim.scenario.profile import load_profile

    _, profile, out = two
    assert set(profile["fit"]) == {"collectives", "optimizer", "memory", "record", "grad_path"}
    assert sorted(profile["fit"]["record"]) == sorted(profile["fit"]["memory"]) == ["1", "2"]
    for n, record in profile["fit"]["record"].items():
        assert (record["device"], record["dtype"]) == ("cpu", "float32")
        assert record["gemm"]["tflops"] > 0 and record["bandwidth_GBps"] > 0
        # a kernel whose time a busy box hid is named, not a failed calibration
        assert all(isinstance(line, str) and "measurements.ops" in line
                   for line in record.get("unfitted", []))
    for row in profile["measurements"]["memory"]:  # the stages' own timed steps: kept, not fitted
        timing = row["timing"]
        assert timing["step_time_s"] >= timing["compute_s"] > 0
        if row["processes"] > 1:
            assert timing["calls_reduce_scatter" if row["stage"] else "calls_all_reduce"] >= 1
    assert {r["kind"] for r in profile["measurements"]["ops"]} == {
        "gemm", "linear", "launch", "attention", "memory_op"}  # copy_host: CUDA only
    assert {r["mechanism"] for r in profile["measurements"]["memory_mechanisms"]} == {
        "loss_backward", "norm_saved", "attention_saved", "optimizer_grad", "optimizer_step"}
    measured = {(r["impl"], r["op"]): r["time_s"] for r in profile["measurements"]["collectives"]
                if r["size_bytes"] == 2**20}
    loaded = load_profile(out)
    for (impl, op), time_s in measured.items():
        # the lookup at a measured size is off by exactly the residual the fit reports there
        segments = profile["fit"]["collectives"][impl][op]["2"]["segments"]
        seg = next(s for s in segments if s["min_bytes"] <= 2**20 <= s["max_bytes"]
                   or s is segments[-1])
        sizes = sorted(r["size_bytes"] for r in profile["measurements"]["collectives"]
                       if (r["impl"], r["op"], r["ranks"]) == (impl, op, 2)
                       and seg["min_bytes"] <= r["size_bytes"])[:seg["points"]]
        residual = seg["residuals_pct"][sizes.index(2**20)]
        predicted = loaded.collective_time(impl, op, 2, 2**20)
        assert (predicted - time_s) / time_s * 100 == pytest.approx(residual, abs=1e-2)
    result = run_zerosim("simulate", TINY, "--set", f'cluster.profile="{out}"',
                         "--set", "cluster.gpus_per_node=2", "--json")
    assert result.code == 0, result.stderr


def test_a_row_over_rounds_is_the_median_of_its_times():
    """bench.median_row: each "*_s" time the median over the rounds (a slow round is one of
    three, not the row), None where a round has none (a copy's backward), the iterations their
    sum, everything else as the first round has it."""
    from zero_real.calibration.bench import median_row

    rounds = [{"op": "gelu", "tokens": 64, "forward_s": 1.0, "backward_s": None, "iterations": 9},
              {"op": "gelu", "tokens": 64, "forward_s": 9.0, "backward_s": None, "iterations": 7},
              {"op": "gelu", "tokens": 64, "forward_s": 2.0, "backward_s": None, "iterations": 8}]
    assert median_row(rounds) == {"op": "gelu", "tokens": 64, "forward_s": 2.0,
                                  "backward_s": None, "iterations": 24}
    assert median_row(rounds[:1]) == rounds[0]


def test_a_collectives_row_over_rounds_has_the_bandwidths_of_its_median_time():
    """A collective's row kept from three rounds: algbw and busbw (nccl-tests' definitions:
    bytes / time, busbw = algbw x 2(n-1)/n for all_reduce) of the median time, not of the first
    round's."""
    from zero_real.calibration.bench import _bandwidths, median_row

    rounds = [{"impl": "ring", "op": "all_reduce", "ranks": 4, "size_bytes": 8e9,
               "time_s": t, "median_s": t, "iterations": 5} for t in (4.0, 1.0, 2.0)]
    row = _bandwidths(median_row(rounds))
    assert (row["time_s"], row["iterations"]) == (2.0, 15)
    assert row["algbw_GBps"] == 4.0 and row["busbw_GBps"] == 4.0 * 2 * 3 / 4


def test_one_process_measures_no_collectives(tmp_path):
    out = tmp_path / "one.json"
    result = calibrate(TINY, "--nproc", 1, "--micro-batches", 1, "--collectives", "ring",
                       "--rounds", 1, "--out", out, *RUN_LIMIT)
    assert result.code == 0, result.stderr
    m = json.loads(out.read_text())["measurements"]
    assert m["collectives"] == [] and "collectives" not in result.stderr
    assert {(r["processes"], r["unit"]) for r in m["compute"]} == {
        (1, "embedding"), (1, "block"), (1, "head")}
    assert {(r["processes"], r["stage"]) for r in m["memory"]} == {(1, s) for s in range(4)}
    assert {r["processes"] for r in m["ops"]} == {1}
    fit = json.loads(out.read_text())["fit"]
    assert "collectives" not in fit and list(fit["record"]) == ["1"]


@pytest.mark.parametrize("argv, fragment", [
    (["missing.toml", "--nproc", "2"], "missing.toml"),
    ([TINY, "--nproc", "0"], "--nproc: '0'"),
    ([TINY, "--nproc", "2", "--collectives", "native,tree"], "tree"),
    ([TINY, "--nproc", "2", "--collectives", ","], "--collectives"),
    ([TINY, "--nproc", "2", "--min-size-KiB", "2048", "--max-size-MiB", "1"], "exceeds"),
    ([TINY, "--nproc", "2", "--max-size-MiB", "0"], "--max-size-MiB: '0'"),
    ([TINY, "--nproc", "2", "--min-size-KiB", "-1"], "--min-size-KiB: '-1'"),
    ([TINY, "--nproc", "2", "--min-size-KiB", "nan"], "--min-size-KiB: 'nan'"),
    ([TINY, "--nproc", "4", "--min-size-KiB", "0.001"], "4 x 4 = 16 bytes"),
    ([TINY, "--nproc", "2", "--min-size-KiB", "3", "--max-size-MiB", "0.0034"], "no power of two"),
    ([TINY, "--nproc", "2", "--micro-batches", "1,x"], "--micro-batches: '1,x'"),
    ([TINY, "--nproc", "2", "--micro-batches", "0,2"], "--micro-batches: '0,2'"),
    ([TINY, "--nproc", "2", "--timeout-s", "0"], "--timeout-s: '0'"),
    ([TINY, "--nproc", "2", "--set", "training.optimizer=sgd"], "training.optimizer"),
    ([TINY, "--nproc", "2", "--set", "model.hidden=65"], "model"),
    ([TINY], "--nproc"),
])
def test_bad_input_is_one_line_exit_2(argv, fragment, tmp_path):
    if "--nproc" in argv:
        argv = [*argv, "--out", tmp_path / "p.json"]
    assert_one_line_error(calibrate(*argv), fragment)
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="the check reads /proc/meminfo")
def test_what_does_not_fit_this_box_is_refused(tmp_path):
    out = ("--out", tmp_path / "p.json")
    assert_one_line_error(calibrate(TINY, "--nproc", 2, "--max-size-MiB", 2**20, *out),
                          "not enough memory: 2 process(es)", "buffers of --max-size-MiB 1048576")
    huge = ["--set", "model.hidden=16384", "--set", "model.ffn=65536", "--set", "model.layers=100"]
    assert_one_line_error(calibrate(TINY, "--nproc", 2, *huge, *out),  # run's own check
                          "not enough memory: 2 process(es)")


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="checks the no-GPU message")
def test_nccl_without_gpus_is_bad_input(tmp_path):
    assert_one_line_error(calibrate(TINY, "--nproc", 2, "--backend", "nccl",
                                    "--out", tmp_path / "p.json"), "nccl")


def test_a_failing_rank_is_exit_1_naming_it(tmp_path, monkeypatch):
    from zero_real.run import launch

    def failing_spawn(fn, nproc, cfg, timeout_s=None):
        raise launch.RankFailed("rank 0 died (exit code 17): no error message; all ranks stopped",
                                [])

    monkeypatch.setattr(launch, "spawn", failing_spawn)
    out = tmp_path / "p.json"
    out.write_text("the user's earlier profile")
    result = calibrate(TINY, "--nproc", 3, "--out", out)
    assert result.code == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "calibrate n=1: starting 1 process(es)",  # the first world: 1 process
        "zero-real: error: calibrate n=1: rank 0 died (exit code 17): no error message; "
        "all ranks stopped"]
    assert out.read_text() == "the user's earlier profile"


def test_a_failed_write_keeps_the_old_file(tmp_path):
    from zero_real.calibration.calibrate import write_json

    out = tmp_path / "p.json"
    out.write_text("old")
    with pytest.raises(TypeError):
        write_json(str(out), {"measurements": [object()]})  # not JSON: fails mid-write
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["p.json"]
    write_json(str(out), {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1}
    umask = os.umask(0o022)
    try:
        write_json(str(out), {"a": 2})
    finally:
        os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o644  # readable like any file the user writes

