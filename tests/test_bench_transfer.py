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


@pytest.mark.parametrize("after_ms, calibration, spread, both", [
    (17.0, 0.0, 0.0, False),            # the same prediction twice: no spread at all
    (24.0, 100 * 7 / 41, 0.0, True),    # 17 and 24 ms: half of 7 over 20.5, 17.1% >= 15%
    (19.0, 100 * 2 / 36, 0.0, False),   # 5.6% alone does not cover -15%
    (19.0, 100 * 2 / 36, 14.0, True),   # with the runs' 14%: hypot = 15.06% >= 15%
])
def test_a_second_calibration_adds_its_spread_in_quadrature(transfer, after_ms, calibration,
                                                            spread, both):
    """The runs measured 20 ms; the first calibration priced 17 ms (-15%), outside 10% and the
    runs' spread (at most 14% here); the second calibration's prediction gives the calibration's own spread, half
    the two predictions' difference over their mean, and the count beside the bar's adds the two
    spreads in quadrature."""
    first = report(-15.0, spread, 0.0)
    second = report(100 * (after_ms / 20 - 1), spread, 0.0)
    row = transfer.row_of(transfer.Configuration("x", 1), first, second)
    assert row["step_simulated_after_s"] == pytest.approx(after_ms / 1e3)
    assert row["calibration_spread_pct"] == pytest.approx(calibration)
    assert row["step_within"] is False and row["step_within_both"] is both
    assert transfer.row_of(transfer.Configuration("x", 1), first)["step_within_both"] is None


def test_the_second_count_is_reported_beside_the_bar_never_as_it(transfer):
    eight = [0, 0, 1, 1, 2, 2, 3, 3]
    rows_ = [{**r, "step_within_both": True} for r in rows(eight, step_within=False)]
    counts = transfer.bar(rows_)
    assert (counts["step_within"], counts["step_within_both"], counts["met"]) == (0, 8, False)
    assert "together: 8 of 8; not the bar's verdict" in transfer.format_bar(counts)
    assert transfer.bar(rows(eight))["step_within_both"] is None


@pytest.mark.parametrize("peak_error, within", [(2.99, True), (-3.0, True), (3.01, False)])
def test_peak_memory_is_within_3_percent(transfer, peak_error, within):
    row = transfer.row_of(transfer.Configuration("x", 0), report(0.0, None, peak_error))
    assert row["peak_within"] is within


def rows(stages, step_within=True, peak_within=True):
    return [{"stage": s, "step_within": step_within, "peak_within": peak_within} for s in stages]


def test_the_bar_needs_8_configurations_all_within_and_every_stage_twice(transfer):
    eight = [0, 0, 1, 1, 2, 2, 3, 3]
    assert transfer.bar(rows(eight)) == {"configurations": 8, "step_within": 8,
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
