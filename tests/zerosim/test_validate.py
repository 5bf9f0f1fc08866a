"""`zerosim validate`: the measured figures it takes from a run and their spread, the error
arithmetic, the verdict per category (a step 20% off fails however exact memory is), the
refusal of another configuration, and the command's exit codes and one-line errors.

Measurements are built from the simulator's own output with known distortions (every time
scaled, memory scaled), so every expected error and spread is exact."""

import json

import pytest

from tests.conftest import SCENARIOS, assert_one_line_error, run_zerosim
from tests.zerosim.calibration_data import TINY, with_profile
from zerosim.calibration.measured import measured_metrics, run_samples
from zerosim.calibration.measured import step_figures
from zerosim.calibration.validate import compare
from zerosim.contract import MEMORY_POINTS
from zerosim.analytic.memory import stage_memory
from zerosim.sim.engine import simulate
from zerosim.tradeoffs import calibration_plot, plot_inputs

POINTS = dict.fromkeys(MEMORY_POINTS)


def _event(rank, step, stream, op, start, end):
    return {"rank": rank, "step": step, "stream": stream, "name": "x", "phase": "backward",
            "layer": 1, "op": op, "bytes": 8, "start_s": start, "end_s": end}


def hand_built(step_times, first_step=2, rank_extra=0.0):
    """One run of 2 ranks: a profiled step 0, a warm-up step 1 (5 s slower, dropped), then timed
    steps of the given lengths on rank 0 (rank 1 takes rank_extra s more in its collective):
    1 s compute, then an all_reduce to the end."""
    events, samples = [], []
    timed = list(enumerate([10.0, 10.0, *step_times]))
    for rank in (0, 1):
        for step, length in timed:
            t0, end = 100.0 * step, 100.0 * step + length + rank * rank_extra
            events += [_event(rank, step, "compute", None, t0, t0 + 1),
                       _event(rank, step, "comm", "all_reduce", t0 + 1, end)]
            samples.append({"rank": rank, "step": step, "point": "after_step", "t_s": end})
    return {"steps": 1, "timed_steps": len(step_times) + 1, "events": events,
            "memory_samples": samples,
            "ranks": [{"phases": {p: 10 + r for p in POINTS}, "peak_bytes": 20 + r}
                      for r in (0, 1)]}


def test_step_figures_are_medians_of_the_timed_steps_after_the_warm_up():
    got = step_figures(hand_built([3.0, 5.0, 4.0], rank_extra=1.0))
    # steps 2-4: ranks take (3, 4), (5, 6), (4, 5) s: means 3.5, 5.5, 4.5, median 4.5
    assert got == {"step_time_s": 4.5, "compute_s": 1.0, "comm_all_reduce_s": 3.5,
                   "exposed_comm_s": 3.5, "calls_all_reduce": 1.0}


def test_spread_is_half_the_interquartile_range_over_every_step_of_every_run():
    one, _ = run_samples(hand_built([1.0, 2.0, 3.0]), "a.json")
    two, steps = run_samples(hand_built([4.0, 5.0]), "b.json")
    assert steps == 2 and one["step_time_s"] == [1.0, 2.0, 3.0]
    got = measured_metrics([one, two])
    # pooled 1..5: median 3, quartiles 2 and 4 -> (4 - 2) / 2 / 3 = 33.3%; runs' medians 2, 4.5
    assert got["step_time_s"] == {"measured": 3.0, "spread_pct": pytest.approx(100 / 3),
                                  "per_run": [2.0, 4.5]}
    assert got["compute_s"]["spread_pct"] == 0.0
    assert got["peak_bytes"] == {"measured": 21, "spread_pct": 0.0, "per_run": [21, 21]}
    assert measured_metrics([one])["peak_bytes"]["spread_pct"] is None  # one sample: none


def test_compare_arithmetic():
    measured = {"step_time_s": {"measured": 2.0, "spread_pct": 30.0, "per_run": [1.6, 2.5]},
                "exposed_comm_s": {"measured": 0.0, "spread_pct": None, "per_run": [0.0]},
                "peak_bytes": {"measured": 100, "spread_pct": 5.0, "per_run": [100]}}
    metrics = {m["name"]: m for m in compare(measured, {"step_time_s": 2.5, "peak_bytes": 90,
                                                        "exposed_comm_s": 0.1, "extra_s": 1})}
    step = metrics["step_time_s"]
    assert step["error_pct"] == pytest.approx(25.0) and step["within_noise"] is True
    assert step["per_run_error_pct"] == pytest.approx([56.25, 0.0])
    assert metrics["peak_bytes"]["error_pct"] == pytest.approx(-10.0)
    assert metrics["peak_bytes"]["within_noise"] is False
    assert metrics["peak_bytes"]["category"] == "memory"
    assert metrics["exposed_comm_s"]["error_pct"] is None  # relative to zero: undefined
    assert metrics["extra_s"]["measured"] is None and metrics["extra_s"]["category"] == "time"


def from_simulation(profile_path, stage=2, step_scales=(1.0,), memory_scale=1.0, overrides=()):
    """What zero-real would write if the box ran each timed step `scale` times as long as the
    simulator says and measured memory_scale times its memory (rank 0 only; a slow warm-up step
    first, which must be dropped). zero_real's model runs no dropout: the box's step is the
    scenario's without it, its zerosim_memory the scenario's as written."""
    overrides = ["training.micro_batch=2", *overrides]
    sets = ("cluster.gpus_per_node=2", *overrides, "training.overlap_comm=false",
            f"training.zero_stage={stage}")
    s = with_profile(profile_path, *sets)
    r = simulate(with_profile(profile_path, *sets, "model.dropout=false"), stage)
    events, samples = [], []
    for step, scale in enumerate([3.0, *step_scales], start=2):
        t0 = 10.0 * step
        events += [dict(e, step=step, start_s=t0 + scale * e["start_s"],
                        end_s=t0 + scale * e["end_s"]) for e in r.ranks[0].state.events]
        samples.append({"rank": 0, "step": step, "point": "after_step",
                        "t_s": t0 + scale * r.step_time_s})
    return {"scenario": str(TINY), "overrides": overrides, "stage": stage,
            "world_size": 2, "collectives": "native", "overlap_comm": False, "steps": 2,
            "timed_steps": len(step_scales) + 1, "events": events, "memory_samples": samples,
            "zerosim_memory": stage_memory(s, stage).as_dict(),
            "ranks": [{"rank": 0, "peak_bytes": int(memory_scale * r.peak_bytes),
                       "phases": {p: int(memory_scale * b) for p, b in r.memory_at.items()}}]}


def validate_files(tmp_path, profile_path, *measurements, args=()):
    paths = []
    for i, m in enumerate(measurements):
        paths.append(tmp_path / f"m{i + 1}.json")
        paths[-1].write_text(json.dumps(m))
    return run_zerosim("validate", *paths, "--profile", profile_path, *args)


def verdict(result):
    return [line for line in result.stdout.splitlines()
            if line.startswith(("time:", "memory:", "verdict:"))]


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_step_20_percent_slow_fails_though_memory_is_exact(tmp_path, profile_path, stage):
    result = validate_files(tmp_path, profile_path, from_simulation(profile_path, stage, (1.2,)),
                            args=["--json"])
    assert result.code == 1, result.stderr
    report = result.json
    by_name = {m["name"]: m for m in report["metrics"]}
    for name in ("step_time_s", "compute_s", "exposed_comm_s"):  # 1 / 1.2 - 1, every time
        assert by_name[name]["error_pct"] == pytest.approx(-100 / 6)
        assert by_name[name]["category"] == "time" and by_name[name]["within_tolerance"] is False
    assert any(n.startswith("comm_") for n in by_name)
    time, memory = report["categories"]["time"], report["categories"]["memory"]
    assert time["within_tolerance"] is False and "step_time_s" in time["above_tolerance"]
    assert memory["within_tolerance"] is True and memory["max_abs_error_pct"] == 0.0
    assert report["within_tolerance"] is False


def test_verdict_lines_per_category(tmp_path, profile_path):
    slow = validate_files(tmp_path, profile_path, from_simulation(profile_path, 2, (1.2,)))
    assert slow.code == 1
    assert verdict(slow)[0].startswith("time: max |error| 16.7% (")
    assert verdict(slow)[0].endswith("ABOVE the tolerance of 10%")
    assert "  step_time_s -16.7% (one sample): no spread to tell the noise by" in slow.stdout
    assert verdict(slow)[1:] == ["memory: max |error| 0.0% (memory_after_init_bytes), mean 0.0%: "
                                 "within the tolerance of 2%", "verdict: FAILED (time)"]
    ok = validate_files(tmp_path, profile_path, from_simulation(profile_path, 2, (1.05,), 1.01),
                        args=["--time-tolerance-pct", "5"])
    assert ok.code == 0, ok.stdout
    assert verdict(ok)[-1] == "verdict: PASSED"


def test_memory_off_with_time_exact_fails(tmp_path, profile_path):
    result = validate_files(tmp_path, profile_path, from_simulation(profile_path, 2, (1.0,), 1.05))
    assert result.code == 1
    assert verdict(result)[-1] == "verdict: FAILED (memory)"
    assert "memory: max |error| 4.8% (" in result.stdout  # 1 / 1.05 - 1
    loose = validate_files(tmp_path, profile_path, from_simulation(profile_path, 2, (1.0,), 1.05),
                           args=["--memory-tolerance-pct", "5"])
    assert loose.code == 0


def test_no_timed_step_fails(tmp_path, profile_path):
    m = from_simulation(profile_path)
    for events in ([], [e for e in m["events"] if e["step"] == 2]):  # none, or the warm-up only
        result = validate_files(tmp_path, profile_path, dict(m, events=events), args=["--json"])
        assert result.code == 1
        assert result.json["categories"]["time"]["compared"] == 0
        assert result.json["categories"]["memory"]["within_tolerance"] is True
    text = validate_files(tmp_path, profile_path, dict(m, events=[]))
    assert "time: FAILED: no time metric compared (no timed step in the measurement)" in text.stdout


def test_several_runs_show_their_spread_and_each_runs_error(tmp_path, profile_path):
    runs = [from_simulation(profile_path, 2, (1.0, 1.1, 1.2)),
            from_simulation(profile_path, 2, (1.3, 1.4))]
    result = validate_files(tmp_path, profile_path, *runs)
    assert result.code == 1
    # pooled 1.0..1.4: median 1.2 (-16.7%), quartiles 1.1 and 1.3: ±8.3%; runs' medians 1.1, 1.35
    assert "step_time_s per run: -9.1%, -25.9%" in result.stdout
    assert ("  step_time_s -16.7% (spread ±8.3% over 2 runs, 5 steps): beyond the noise"
            in result.stdout)
    noisy = validate_files(tmp_path, profile_path, from_simulation(profile_path, 2, (0.7, 0.9)),
                           from_simulation(profile_path, 2, (1.2, 1.5, 1.8)), args=["--json"])
    step = next(m for m in noisy.json["metrics"] if m["name"] == "step_time_s")
    # pooled 0.7..1.8: median 1.2 (-16.7%), quartiles 0.9 and 1.5: ±25%
    assert step["spread_pct"] == pytest.approx(25.0) and step["within_noise"] is True
    assert step["per_run"] == pytest.approx([0.8 * step["simulated"], 1.5 * step["simulated"]])
    assert noisy.code == 1  # the noise is shown, not forgiven


def test_another_configuration_is_refused(tmp_path, profile_path):
    m = from_simulation(profile_path)
    other = validate_files(tmp_path, profile_path, m,
                           args=["--scenario", SCENARIOS / "llama2_7b_64gpu.toml"])
    assert_one_line_error(other, "m1.json: measured another configuration than",
                          "llama2_7b_64gpu.toml", "zerosim's params_bytes was")
    edited = validate_files(tmp_path, profile_path,
                            dict(m, overrides=["training.micro_batch=4"]))
    assert_one_line_error(edited, "zerosim's activations_bytes was")
    mixed = validate_files(tmp_path, profile_path, m, from_simulation(profile_path, 3))
    assert_one_line_error(mixed, "m2.json: stage 3 differs from", "m1.json's 2",
                          "must be runs of one configuration")
    wider = validate_files(tmp_path, profile_path, m, dict(m, world_size=4))
    assert_one_line_error(wider, "m2.json: world_size 4 differs from")


def test_json_report_is_complete(tmp_path, profile_path):
    result = validate_files(tmp_path, profile_path, from_simulation(profile_path, 2, (1.0, 1.0)),
                            from_simulation(profile_path, 2, (1.0,)), args=["--json"])
    report = result.json
    assert report["measurements"] == [str(tmp_path / "m1.json"), str(tmp_path / "m2.json")]
    assert report["timed_steps"] == [2, 1] and report["within_tolerance"] is True
    for m in report["metrics"]:
        assert set(m) == {"name", "category", "measured", "simulated", "error_pct", "spread_pct",
                          "within_noise", "within_tolerance", "per_run", "per_run_error_pct",
                          "not_compared"}
    for name, tolerance in (("time", 10.0), ("memory", 2.0)):
        assert report["categories"][name]["tolerance_pct"] == tolerance
        assert report["categories"][name]["within_tolerance"] is True


def test_plot_draws_the_new_report(tmp_path, profile_path):
    result = validate_files(tmp_path, profile_path, from_simulation(profile_path, 2, (1.2,)),
                            args=["--json"])
    (tmp_path / "r.json").write_text(result.stdout)
    plot = run_zerosim("plot", tmp_path / "r.json", "--kind", "calibration", "-o",
                       tmp_path / "c.html")
    assert plot.code == 0, plot.stderr
    fig = calibration_plot.calibration_figure(plot_inputs.read_reports([tmp_path / "r.json"]))
    names = {d.name for d in fig.data if d.mode == "markers"}
    assert names == {"ZeRO-2 (max |error| time 16.7%, memory 0.0%)"}
    for xaxis, (low, high, name) in (("x", (0.9, 1.1, "within ±10%")),
                                     ("x2", (0.98, 1.02, "within ±2%"))):  # each its own band
        lower, upper = [d for d in fig.data if d.xaxis == xaxis and d.mode == "lines"][:2]
        assert lower.y[0] / lower.x[0] == pytest.approx(low) and upper.name == name
        assert upper.y[0] / upper.x[0] == pytest.approx(high)


def test_fake_world_judges_memory_only(tmp_path, profile_path):
    m = dict(from_simulation(profile_path), fake_world_size=2, events=[])
    result = validate_files(tmp_path, profile_path, m)
    assert result.code == 0, result.stdout
    assert "time: not judged: a --fake-world-size run times no real collective" in result.stdout


@pytest.mark.parametrize("content, extra, fragment", [
    (None, [], "measurement not found"),
    ("[1]", [], "expected a JSON object"),
    ('{"stage": 1}', [], "not a zero-real measurement"),
    ("{}", ["--time-tolerance-pct", "0"], "--time-tolerance-pct: '0' must be a finite number > 0"),
    ("{}", ["--memory-tolerance-pct", "nan"], "'nan' must be a finite number > 0"),
    ("{}", ["--time-tolerance-pct", "x"], "'x' is not a number"),
    ("{}", ["--tolerance-pct", "5"], "--tolerance-pct is retired"),
    ('{"scenario": "s.toml", "stage": 9, "world_size": 2, "events": [], "ranks": [], '
     '"memory_samples": [], "steps": 1}', [], "stage 9"),
    ('{"scenario": 5, "stage": 1, "world_size": 2, "events": [], "ranks": [], '
     '"memory_samples": [], "steps": 1}', [], "'scenario' must be a path"),
    ('{"scenario": "s.toml", "stage": 1, "world_size": "2", "events": [], "ranks": [], '
     '"memory_samples": [], "steps": 1}', [], "'world_size' must be a whole number >= 1"),
    ('{"scenario": "s.toml", "stage": 1, "world_size": 2, "events": [], "ranks": [], '
     '"memory_samples": [], "steps": 1, "timed_steps": 1e400}', [], "'timed_steps' must be"),
    (json.dumps({"scenario": str(TINY), "stage": 1, "world_size": 2, "events": [{"rank": 0}],
                 "ranks": [{}], "memory_samples": [], "steps": 1}), [], "malformed measurement"),
    (json.dumps({"scenario": str(TINY), "stage": 1, "world_size": 2, "events": [],
                 "ranks": [{"phases": {}, "peak_bytes": float("nan")}], "memory_samples": [],
                 "steps": 1}), [], "peak_bytes is nan, not a number within ±2**53"),
])
def test_validate_bad_input_is_one_line_exit_2(tmp_path, content, extra, fragment):
    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    assert_one_line_error(run_zerosim("validate", str(path), *extra), fragment)


def test_one_run_given_twice_is_refused(tmp_path, profile_path):
    """Twice the same file would pass for two runs that agree exactly (a spread it never had)."""
    validate_files(tmp_path, profile_path, from_simulation(profile_path))
    link = tmp_path / "again.json"
    link.symlink_to(tmp_path / "m1.json")
    for second in (tmp_path / "m1.json", link):
        assert_one_line_error(run_zerosim("validate", tmp_path / "m1.json", second,
                                          "--profile", profile_path),
                              f"measurement {second} is the file {tmp_path / 'm1.json'} again")


@pytest.mark.parametrize("break_it,fragment", [
    (lambda m: [e.update(end_s=e["start_s"] - 1) for e in m["events"]], "runs from"),
    (lambda m: [e.update(start_s=float("nan")) for e in m["events"]], "runs from nan"),
    (lambda m: [s.update(t_s=-1e6) for s in m["memory_samples"] if s["point"] == "after_step"],
     "before its first event starts"),
])
def test_times_that_cannot_have_been_measured_are_refused(tmp_path, profile_path, break_it,
                                                          fragment):
    """An event that ends before it starts, or a step that ends before its first event, is a
    malformed file (exit 2), not a negative compute time to be judged (exit 1)."""
    m = from_simulation(profile_path)
    break_it(m)
    assert_one_line_error(validate_files(tmp_path, profile_path, m), "malformed measurement",
                          fragment)


def test_reserved_memory_is_compared_where_the_run_measured_it(tmp_path, profile_path):
    """A CUDA run carries the caching allocator's peak reservation: validate compares it with
    the allocator model's (sim/allocator.py); a CPU run has none: its row has no measurement
    and no error, so nothing is judged on it."""
    m = from_simulation(profile_path)
    simulated = simulate(with_profile(profile_path, "cluster.gpus_per_node=2",
                                      "training.micro_batch=2", "training.overlap_comm=false",
                                      "training.zero_stage=2", "model.dropout=false"),
                         2).peak_reserved_bytes  # as validate simulates the run: no dropout
    cpu = validate_files(tmp_path, profile_path, m, args=["--json"]).json
    row, = [x for x in cpu["metrics"] if x["name"] == "peak_reserved_bytes"]
    assert row["measured"] is None and row["error_pct"] is None
    m["ranks"][0]["peak_reserved_bytes"] = round(simulated * 1.25)
    report = validate_files(tmp_path, profile_path, m, args=["--json"]).json
    row, = [x for x in report["metrics"] if x["name"] == "peak_reserved_bytes"]
    assert row["category"] == "memory" and row["simulated"] == simulated
    assert row["error_pct"] == pytest.approx(-20.0, abs=1e-6)  # 1 / 1.25 - 1
    assert not row["within_tolerance"]


def strict_json(text):
    """JSON as RFC 8259 has it: Infinity and NaN are not JSON (Python's json.dumps writes them)."""
    def refuse(constant):
        raise AssertionError(f"{constant} in JSON output")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("break_it, name, why", [
    (lambda m: m["ranks"][0].update(peak_bytes=0), "peak_bytes", "measured as 0"),
    (lambda m: m["ranks"][0]["phases"].update(after_forward=0), "memory_after_forward_bytes",
     "measured as 0"),
    (lambda m: m["ranks"][0]["phases"].pop("after_step"), "memory_after_step_bytes",
     "not measured"),
    (lambda m: m.update(events=[e for e in m["events"] if e["op"] != "reduce_scatter"]),
     "comm_reduce_scatter_s", "not measured"),
    (lambda m: m["events"].append(dict(m["events"][-1], op="broadcast")),  # a timed step's
     "comm_broadcast_s", "measured, not simulated"),  # collective the simulation never runs
])
def test_a_metric_measured_as_zero_or_not_at_all_fails(tmp_path, profile_path, break_it, name,
                                                       why):
    """Review I1: a peak measured as 0 had no error, was left out of the verdict, and an exact
    run with its peak and after_forward zeroed PASSED. A metric with no error now fails."""
    m = from_simulation(profile_path, 2, (1.0,))  # exact: passes as it is
    assert validate_files(tmp_path, profile_path, m).code == 0
    break_it(m)
    result = validate_files(tmp_path, profile_path, m, args=["--json"])
    assert result.code == 1, result.stdout
    row, = [x for x in result.json["metrics"] if x["name"] == name]
    assert row["error_pct"] is None and row["not_compared"] == why
    assert row["within_tolerance"] is False
    c = result.json["categories"][row["category"]]
    assert c["not_compared"] == [name] and c["within_tolerance"] is False
    assert result.json["within_tolerance"] is False
    text = validate_files(tmp_path, profile_path, m)
    assert f"  {name} not compared: {why} (the {row['category']} verdict fails)" in text.stdout
    assert verdict(text)[-1] == f"verdict: FAILED ({row['category']})"


def test_zero_measured_and_simulated_agree(tmp_path, profile_path):
    """0 against 0 is the one error relative to zero that can be taken: none."""
    from zerosim.calibration.validate import _error_pct
    assert _error_pct(0, 0) == 0.0 and _error_pct(1.0, 0) is None
    assert _error_pct(1.0, 5e-324) is None  # 2e325 %: overflows to inf
    assert _error_pct(3.0, 2.0) == 50.0


@pytest.mark.parametrize("tiny", [5e-324, 1e-320])
def test_json_output_is_json_where_an_error_overflows(tmp_path, profile_path, tiny):
    """Review I7: a peak of 5e-324 bytes gave an error of inf, printed `Infinity` (not JSON).
    The metric has no error (null), says why, and fails; the output is strict JSON."""
    m = from_simulation(profile_path)
    m["ranks"][0]["peak_bytes"] = tiny
    result = validate_files(tmp_path, profile_path, m, args=["--json"])
    assert result.code == 1
    report = strict_json(result.stdout)
    row, = [x for x in report["metrics"] if x["name"] == "peak_bytes"]
    assert row["error_pct"] is None and row["per_run_error_pct"] == [None]
    assert row["not_compared"] == f"measured as {tiny:.3g}: the error relative to it overflows"
    # three runs whose pooled median is that small: the spread relative to it overflows too
    # (peaks tiny, tiny, 1 MB: median tiny, quartiles tiny and 0.5 MB)
    m2, m3 = from_simulation(profile_path, 2, (1.01,)), from_simulation(profile_path, 2, (1.02,))
    m2["ranks"][0]["peak_bytes"], m3["ranks"][0]["peak_bytes"] = tiny, 10**6
    three = validate_files(tmp_path, profile_path, m, m2, m3, args=["--json"])
    row, = [x for x in strict_json(three.stdout)["metrics"] if x["name"] == "peak_bytes"]
    assert row["measured"] == tiny and row["spread_pct"] is None and three.code == 1


def test_huge_finite_errors_average_without_overflow(tmp_path, profile_path):
    """Errors near 1e308 % are finite, but their sum is not (fmean raised OverflowError): the
    mean divides first. Peak and after_forward measured 1.2e306 times below the simulation:
    errors (s - s / 1.2e306) / (s / 1.2e306) x 100 = 1.2e308 %, each."""
    m = from_simulation(profile_path)
    rank = m["ranks"][0]
    rank["peak_bytes"] /= 1.2e306
    rank["phases"]["after_forward"] /= 1.2e306
    result = validate_files(tmp_path, profile_path, m, args=["--json"])
    assert result.code == 1
    memory = strict_json(result.stdout)["categories"]["memory"]
    assert memory["not_compared"] == [] and memory["compared"] == 5
    # two of five errors near 1.2e308, the other three (after init, backward, step) 0
    assert memory["max_abs_error_pct"] == pytest.approx(1.2e308)
    assert memory["mean_abs_error_pct"] == pytest.approx(1.2e308 / 5 * 2)


def test_another_scenario_with_the_same_memory_is_refused(tmp_path, profile_path):
    """Review I3: a copy of the scenario with two ranks 3.9x slower has the same memory, and
    --scenario took it (compute error -49% became +100%). The whole configuration is compared
    with the scenario the measurement names, key by key."""
    m = from_simulation(profile_path, 2, (1.0,))
    slow = tmp_path / "slow.toml"
    slow.write_text(TINY.read_text() + "\n[variation]\nslow_ranks = [0, 1]\nslowdown = 3.9\n")
    assert_one_line_error(validate_files(tmp_path, profile_path, m, args=["--scenario", slow]),
                          "m1.json: measured another configuration than", "slow.toml",
                          "variation.slow_ranks is (0, 1) there, () in the measured")
    bigger = tmp_path / "bigger.toml"  # memory differs: the memory refusal, as before
    bigger.write_text(TINY.read_text().replace("vocab = 256", "vocab = 512"))
    assert_one_line_error(validate_files(tmp_path, profile_path, m, args=["--scenario", bigger]),
                          "zerosim's params_bytes was")
    moved = tmp_path / "moved.toml"  # the same file elsewhere: what --scenario is for
    moved.write_text(TINY.read_text())
    same = validate_files(tmp_path, profile_path, m, args=["--scenario", moved])
    assert same.code == 0, same.stdout + same.stderr
    gone = validate_files(tmp_path, profile_path, dict(m, scenario=str(tmp_path / "gone.toml")),
                          args=["--scenario", moved])
    assert gone.code == 0, gone.stderr
    assert (f"note: the measured scenario {tmp_path / 'gone.toml'} cannot be loaded here"
            in gone.stdout)


def test_a_copy_or_hard_link_of_one_run_is_refused(tmp_path, profile_path):
    """Review I13: only realpath was compared, so a copy or a hard link counted as a second
    run (a spread of 0 it never had). A hard link is the same file (st_dev, st_ino); a copy holds
    the same measured data."""
    validate_files(tmp_path, profile_path, from_simulation(profile_path))
    first = tmp_path / "m1.json"
    hard, copy = tmp_path / "hard.json", tmp_path / "copy.json"
    hard.hardlink_to(first)
    copy.write_text(json.dumps(json.loads(first.read_text()), indent=1))  # same data, new bytes
    assert_one_line_error(run_zerosim("validate", first, hard, "--profile", profile_path),
                          f"measurement {hard} is the file {first} again")
    assert_one_line_error(run_zerosim("validate", first, copy, "--profile", profile_path),
                          f"measurement {copy} holds the same measured data as {first}")
    second = validate_files(tmp_path, profile_path, from_simulation(profile_path, 2, (1.0,)),
                            from_simulation(profile_path, 2, (1.01,)))
    assert second.code == 0, second.stdout  # two runs that differ are two runs


def test_every_memory_metric_measured_as_zero_names_each(tmp_path, profile_path):
    m = from_simulation(profile_path, 2, (1.0,))
    m["ranks"][0].update(peak_bytes=0, phases=dict.fromkeys(MEMORY_POINTS, 0))
    text = validate_files(tmp_path, profile_path, m)
    assert text.code == 1
    assert verdict(text)[1:] == ["memory: FAILED: no memory metric compared",
                                 "verdict: FAILED (memory)"]
    lines = text.stdout.splitlines()
    for point in MEMORY_POINTS:
        assert (f"  memory_{point}_bytes not compared: measured as 0 (the memory verdict fails)"
                in lines)


def test_host_operations_no_run_records_are_shown_not_judged(tmp_path, profile_path):
    """zero_real's recorder times compute and collectives: offload's copies and CPU Adam lie
    inside its step, which step_time_s judges. Simulated alone, they do not fail the verdict;
    measured, they are judged like any time."""
    m = from_simulation(profile_path, 2, (1.0,), overrides=["training.optimizer_offload=cpu"])
    host = {"comm_d2h_s", "comm_h2d_s", "comm_cpu_adam_s"}
    assert host <= {f"comm_{e['op']}_s" for e in m["events"]}
    judged = validate_files(tmp_path, profile_path, m, args=["--json"])
    assert judged.code == 0 and {x["name"] for x in judged.json["metrics"]
                                 if x["within_tolerance"] is True} >= host
    unrecorded = dict(m, events=[e for e in m["events"] if f"comm_{e['op']}_s" not in host])
    shown = validate_files(tmp_path, profile_path, unrecorded, args=["--json"])
    rows = {x["name"]: x for x in shown.json["metrics"]}
    for name in host:
        assert rows[name]["measured"] is None and rows[name]["simulated"] > 0
        assert rows[name]["not_compared"] is None and rows[name]["within_tolerance"] is None
    assert shown.json["categories"]["time"]["not_compared"] == [] and shown.code == 0
