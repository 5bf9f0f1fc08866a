"""bench/transfer.py, the transfer loop's command: its pure pieces (a table row from validate's
report, the counts against issue 31's bar) on reports written by hand, and its flags (bad ones
are one line and exit 2, before any calibration or run starts). The loop itself takes minutes
and is not run here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench/transfer.py"


@pytest.fixture(scope="module")
def transfer():
    spec = importlib.util.spec_from_file_location("transfer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["transfer"] = module
    spec.loader.exec_module(module)
    return module


def metric(name, measured, simulated, error_pct, spread_pct=None, runs=3):
    return {"name": name, "measured": measured, "simulated": simulated, "error_pct": error_pct,
            "spread_pct": spread_pct, "per_run": [measured] * runs}


def report(step_error_pct, step_spread_pct, peak_error_pct):
    """validate --json's metrics, as few as a row reads: step 20 ms measured."""
    step_sim = None if step_error_pct is None else 0.020 * (1 + step_error_pct / 100)
    return {"metrics": [
        metric("step_time_s", 0.020, step_sim, step_error_pct, step_spread_pct),
        metric("compute_s", 0.008, 0.006, -25.0, 4.0),
        metric("exposed_comm_s", 0.012, 0.0126, 5.0, 6.0),
        metric("peak_bytes", 1_000_000, 1_000_000 * (1 + peak_error_pct / 100), peak_error_pct)]}


@pytest.mark.parametrize("step_error, spread, within", [
    (-9.9, 1.0, True),     # inside 10%
    (10.0, None, True),    # on the bar: "within 10%" includes it
    (-15.0, 20.0, True),   # outside 10%, inside the measured spread
    (-15.0, 5.0, False),   # outside both
    (12.0, None, False),   # no spread (one sample) to fall back on
    (None, 5.0, False),    # no error (not compared): never within
])
def test_step_time_is_within_10_percent_or_the_spread(transfer, step_error, spread, within):
    c = transfer.Configuration("x", 2, 2, ("model.layers=4",))
    row = transfer.row_of(c, report(step_error, spread, 0.0))
    assert row["step_within"] is within
    assert (row["stage"], row["nproc"], row["runs"]) == (2, 2, 3)
    assert (row["compute_error_pct"], row["comm_error_pct"]) == (-25.0, 5.0)


@pytest.mark.parametrize("after_ms, spread, within_after, both", [
    # calibration spread = |17 - after| / (2 x 20 ms); the mean's error = (17 + after) / 40 - 1
    (17.0, 0.0, False, False),   # the same prediction twice: no spread, the mean -15%
    (20.0, 0.0, True, True),     # the second exact: the mean, -7.5%, within 10%
    (11.0, 0.0, False, False),   # a worse second: spread 15%, the mean -30%
    (15.0, 16.0, False, False),  # spread 5%, the mean -20%: hypot(16, 5) = 16.8 (a sum: 21)
    (29.0, 0.0, False, True),    # spread 30%, the mean +15%: the calibration is that unsure
])
def test_a_second_calibration_is_judged_beside_the_bar(transfer, after_ms, spread,
                                                      within_after, both):
    """The runs measured 20 ms; the first calibration priced 17 ms (-15%)."""
    first = report(-15.0, spread, 0.0)
    second = report(100 * (after_ms / 20 - 1), spread, 0.0)
    row = transfer.row_of(transfer.Configuration("x", 1), first, second)
    assert row["step_simulated_after_s"] == pytest.approx(after_ms / 1e3)
    assert row["step_error_after_pct"] == pytest.approx(100 * (after_ms / 20 - 1))
    assert row["calibration_spread_pct"] == pytest.approx(100 * abs(17 - after_ms) / 40)
    assert row["step_error_mean_pct"] == pytest.approx(100 * ((17 + after_ms) / 40 - 1))
    assert row["step_within"] is (spread >= 15)
    assert row["step_within_after"] is within_after and row["step_within_both"] is both
    assert transfer.row_of(transfer.Configuration("x", 1), first)["step_within_both"] is None


def test_the_second_calibrations_counts_stand_beside_the_bar_never_as_it(transfer):
    eight = [0, 0, 1, 1, 2, 2, 3, 3]
    rows_ = [{**r, "step_within_after": k < 3, "step_within_both": True}
             for k, r in enumerate(rows(eight, step_within=False))]
    counts = transfer.bar(rows_)
    assert (counts["step_within"], counts["step_within_after"], counts["step_within_both"],
            counts["met"]) == (0, 3, 8, False)
    text = transfer.format_bar(counts)
    assert "not its verdict: the second calibration alone 3 of 8" in text
    assert "spreads together 8 of 8" in text and "bar NOT MET" in text


def test_the_tables_columns_line_up_with_and_without_a_second_calibration(transfer):
    c = transfer.Configuration("hidden128-seq64", 0)
    for after in (None, report(45.0, 4.0, 0.0)):
        lines = transfer.format_table([transfer.row_of(c, report(-15.0, 4.0, 0.0), after)])
        header, row = lines.splitlines()
        assert [i for i, ch in enumerate(header) if ch == "|"] == [
            i for i, ch in enumerate(row) if ch == "|"]
        assert ("2nd ms" in header) is (after is not None)
    assert "±30.0%" in row  # |17 - 29| / (2 x 20 ms)


@pytest.mark.parametrize("peak_error, within", [(2.99, True), (-3.0, True), (3.01, False)])
def test_peak_memory_is_within_3_percent(transfer, peak_error, within):
    row = transfer.row_of(transfer.Configuration("x", 0), report(0.0, None, peak_error))
    assert row["peak_within"] is within


def rows(stages, step_within=True, peak_within=True):
    return [{"stage": s, "step_within": step_within, "peak_within": peak_within} for s in stages]


def test_the_bar_needs_8_configurations_all_within_and_every_stage_twice(transfer):
    eight = [0, 0, 1, 1, 2, 2, 3, 3]
    assert transfer.bar(rows(eight)) == {"configurations": 8, "step_within": 8,
                                         "step_within_after": None,
                                         "step_within_both": None, "peak_within": 8,
                                         "stages": {0: 2, 1: 2, 2: 2, 3: 2}, "met": True}
    assert not transfer.bar(rows(eight[:-1]))["met"]                  # 7 configurations
    assert not transfer.bar(rows([0, 0, 0, 1, 1, 2, 2, 3]))["met"]    # stage 3 once
    one_off = rows(eight[:-1]) + rows([3], step_within=False)
    assert transfer.bar(one_off)["step_within"] == 7 and not transfer.bar(one_off)["met"]
    assert not transfer.bar(rows(eight[:-1]) + rows([3], peak_within=False))["met"]


def test_the_held_out_list_covers_what_the_issue_changes(transfer):
    configurations = transfer.HELD_OUT
    assert len(configurations) >= 8
    assert all(n >= 2 for n in transfer.bar(
        [{"stage": c.stage, "step_within": True, "peak_within": True}
         for c in configurations if c.nproc <= 2])["stages"].values())
    sets = {s for c in configurations for s in c.sets}
    assert {"model.hidden=32", "model.hidden=128", "model.layers=4", "training.seq_len=64",
            "training.micro_batch=3"} <= sets
    assert {c.nproc for c in configurations} == {1, 2, 3}


@pytest.mark.parametrize("args, message", [
    (["--repeats", "0"], "--repeats 0"),
    (["--only", "hidden32,nothing"], "nothing is not a configuration"),
    (["--profile", "/nonexistent/p.json"], "no such file"),
    (["--json", "/nonexistent/out.json"], "no folder /nonexistent"),
    (["--timed-steps", "1"], "--timed-steps 1"),
    (["--runs", "/nonexistent"], "--runs /nonexistent: no such folder"),
    (["--max-size-MiB", "0"], "--max-size-MiB 0"),
    (["--profile", str(SCRIPT), "--save-profile", "x.json"], "give one"),
    (["--profile-after", str(SCRIPT)], "only with --profile"),
    (["--profile", str(SCRIPT), "--profile-after", "/nonexistent.json"], "no such file"),
    (["--profile", str(SCRIPT), "--profile-after", str(SCRIPT), "--no-after"], "--no-after"),
])
def test_bad_flags_are_one_line_and_exit_2(args, message):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""
