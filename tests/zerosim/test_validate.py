"""`zerosim validate`: the measured figures it takes from a run, the error arithmetic, the
simulator validated against its own output, and the command's exit codes and one-line errors."""

import json

import pytest

from tests.conftest import assert_one_line_error, run_zerosim
from tests.zerosim.calibration_data import TINY, with_profile
from zerosim.calibration.validate import compare, measured_metrics, validate
from zerosim.sim.engine import simulate


def test_compare_arithmetic():
    report = compare({"step_time_s": 2.0, "peak_bytes": 100, "exposed_comm_s": 0.0},
                     {"step_time_s": 2.5, "peak_bytes": 90, "exposed_comm_s": 0.1, "extra": 1})
    by_name = {m["name"]: m for m in report["metrics"]}
    assert by_name["step_time_s"]["error_pct"] == pytest.approx(25.0)
    assert by_name["peak_bytes"]["error_pct"] == pytest.approx(-10.0)
    assert by_name["exposed_comm_s"]["error_pct"] is None  # relative to zero: undefined
    assert by_name["extra"]["measured"] is None and by_name["extra"]["error_pct"] is None
    assert report["mean_abs_error_pct"] == pytest.approx(17.5)
    assert report["max_abs_error_pct"] == pytest.approx(25.0)


def _event(rank, step, stream, op, start, end):
    return {"rank": rank, "step": step, "stream": stream, "name": "x", "phase": "backward",
            "layer": 1, "op": op, "bytes": 8, "start_s": start, "end_s": end}


def test_measured_metrics_use_the_timed_steps_after_the_warm_up():
    events, samples = [], []
    for rank in (0, 1):
        for step, t0 in ((0, 0.0), (1, 10.0), (2, 20.0), (3, 30.0)):
            slow = 5.0 if step < 2 else 0.0  # the profiled step and the warm-up: not counted
            events += [_event(rank, step, "compute", None, t0 + 1, t0 + 2 + slow),
                       _event(rank, step, "comm", "all_reduce", t0 + 2 + slow, t0 + 3 + slow + rank)]
            samples.append({"rank": rank, "step": step, "point": "after_step",
                            "t_s": t0 + 4 + slow + rank})
    m = {"steps": 1, "timed_steps": 3, "events": events, "memory_samples": samples,
         "ranks": [{"phases": {p: 10 + r for p in ("after_init", "after_forward", "after_backward",
                                                   "after_step")}, "peak_bytes": 20 + r}
                   for r in (0, 1)]}
    got = measured_metrics(m)
    # steps 2 and 3: rank 0 runs 1..4 (3 s), rank 1 1..5 (4 s): mean 3.5 s
    assert got["step_time_s"] == pytest.approx(3.5)
    assert got["compute_s"] == pytest.approx(1.0)
    assert got["comm_all_reduce_s"] == pytest.approx(1.5)
    assert got["exposed_comm_s"] == pytest.approx(2.5)
    assert got["memory_after_forward_bytes"] == 11 and got["peak_bytes"] == 21  # largest rank


def measurement_from_simulation(profile_path, stage):
    """What zero-real would write if the box behaved exactly as the simulator says."""
    s = with_profile(profile_path, "cluster.gpus_per_node=2", "training.micro_batch=2",
              "training.overlap_comm=false", f"training.zero_stage={stage}")
    r = simulate(s, stage)
    events = [dict(e, step=1) for e in r.ranks[0].state.events]
    return {"scenario": str(TINY), "overrides": ["training.micro_batch=2"], "stage": stage,
            "world_size": 2, "collectives": "native", "overlap_comm": False, "steps": 1,
            "timed_steps": 1, "events": events,
            "memory_samples": [{"rank": 0, "step": 1, "point": "after_step",
                                "t_s": r.step_time_s}],
            "ranks": [{"rank": 0, "phases": dict(r.memory_at), "peak_bytes": r.peak_bytes}]}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_validating_the_simulators_own_output_gives_zero_error(profile_path, stage):
    m = measurement_from_simulation(profile_path, stage)
    report = validate(m, "m.json", profile=str(profile_path))
    names = {x["name"] for x in report["metrics"]}
    assert {"step_time_s", "compute_s", "exposed_comm_s", "peak_bytes"} <= names
    assert any(n.startswith("comm_") for n in names)
    assert report["max_abs_error_pct"] < 1e-6


def test_validate_cli_exit_codes_and_json(tmp_path, profile_path):
    m = measurement_from_simulation(profile_path, 2)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(m))
    ok = run_zerosim("validate", str(path), "--profile", str(profile_path), "--json")
    assert ok.code == 0, ok.stderr
    assert ok.json["mean_abs_error_pct"] < 1e-6 and ok.json["within_tolerance"] is True
    # a box 50% slower than predicted: over a 5% tolerance, exit 1, and the table says why
    for e in m["events"]:
        e["start_s"], e["end_s"] = e["start_s"] * 1.5, e["end_s"] * 1.5
    m["memory_samples"][0]["t_s"] *= 1.5
    path.write_text(json.dumps(m))
    slow = run_zerosim("validate", str(path), "--profile", str(profile_path),
                       "--tolerance-pct", "5")
    assert slow.code == 1
    step = next(line for line in slow.stdout.splitlines() if line.startswith("step_time_s"))
    assert "-33.3%" in step and "ABOVE the tolerance of 5%" in slow.stdout


@pytest.mark.parametrize("content, extra, fragment", [
    (None, [], "measurement not found"),
    ("[1]", [], "expected a JSON object"),
    ('{"stage": 1}', [], "not a zero-real measurement"),
    ("{}", ["--tolerance-pct", "0"], "--tolerance-pct: '0' must be a finite number > 0"),
    ("{}", ["--tolerance-pct", "nan"], "--tolerance-pct: 'nan' must be a finite number > 0"),
    ("{}", ["--tolerance-pct", "x"], "'x' is not a number"),
    ('{"scenario": "s.toml", "stage": 9, "world_size": 2, "events": [], "ranks": [], '
     '"memory_samples": [], "steps": 1}', [], "stage 9"),
    ('{"scenario": 5, "stage": 1, "world_size": 2, "events": [], "ranks": [], '
     '"memory_samples": [], "steps": 1}', [], "'scenario' must be a path"),
    (json.dumps({"scenario": str(TINY), "stage": 1, "world_size": 2, "events": [{"rank": 0}],
                 "ranks": [], "memory_samples": [], "steps": 1}), [], "malformed measurement"),
])
def test_validate_bad_input_is_one_line_exit_2(tmp_path, content, extra, fragment):
    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    assert_one_line_error(run_zerosim("validate", str(path), *extra), fragment)
