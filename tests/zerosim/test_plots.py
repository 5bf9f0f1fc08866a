"""`zerosim plot`: each figure drawn from a small result with known numbers, read back from the
figure's data; the result files' reader; the command's outputs and one-line errors."""

import csv
import json
import re

import pytest

from zerosim.tradeoffs import calibration_plot, figures, plot_inputs, plots
from zerosim.sim.engine import simulate
from zerosim.errors import InputError
from zerosim.scenario.load import load_scenario
from zerosim.sim.trace import chrome_trace

from tests.conftest import SCENARIOS, assert_one_line_error, run_zerosim

GiB, MiB = 2**30, 2**20
STAGE_NAMES = ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"]
# (stage, world_size): peak GiB, comm GB per rank per step, comm s per step. On bytes, ZeRO-1 at 8
# GPUs (7, 7) is beaten by ZeRO-2 (5, 7) and DDP by everything; on time DDP is fastest.
NUMBERS = {(0, 4): (16, 6, 0.1), (0, 8): (16, 7, 0.2), (1, 4): (10, 6, 0.12),
           (1, 8): (7, 7, 0.22), (2, 4): (8, 6, 0.12), (2, 8): (5, 7, 0.22),
           (3, 4): (4, 9, 0.3), (3, 8): (2.5, 10.5, 0.4)}


def sweep_row(stage, world_size, peak_GiB, comm_GB, comm_s, **inputs):
    """One row of `zerosim sweep` (its column order) with a stack that adds up to the peak."""
    peak = int(peak_GiB * GiB)
    row = {"point": 0, **{k[5:]: v for k, v in inputs.items() if k.startswith("vary.")},
           "stage": stage, "stage_name": STAGE_NAMES[stage], "world_size": world_size,
           "params": 10**9, "tokens_per_step": 4096, "params_bytes": peak // 4,
           "grads_bytes": peak // 4, "optimizer_bytes": peak // 4,
           "model_states_bytes": 3 * peak // 4,
           "activations_bytes": peak // 8, "buffers_bytes": peak // 8, "host_bytes": 0,
           "peak_bytes": peak, "gpu_memory_bytes": 32 * GiB, "fits_gpu_memory": peak <= 32 * GiB,
           "step_time_s": 1.5, "compute_s": 1.0, "exposed_comm_s": 0.5, "comm_time_s": comm_s,
           "comm_bytes_per_rank_total": int(comm_GB * 10**9), "comm_bytes_all_reduce": 0,
           "comm_bytes_reduce_scatter": 0, "comm_bytes_all_gather": 0,
           "simulated_peak_bytes": peak, "gpu_seconds_per_step": 1.5 * world_size,
           "algorithm": "ring", "model.name": "test model", "cluster.nodes": world_size // 4,
           "cluster.gpus_per_node": 4, "training.precision": "bf16"}
    row.update({k.removeprefix("vary."): v for k, v in inputs.items()})  # values; places above
    return row


@pytest.fixture
def rows():
    return [sweep_row(s, n, *NUMBERS[s, n]) for (s, n) in sorted(NUMBERS, key=lambda k: -k[1])]


def write_sweep(path, rows):
    """A sweep file as `zerosim sweep --out` writes it: CSV (true/false, None empty) or JSON."""
    columns = list(dict.fromkeys(c for row in rows for c in row))
    if path.suffix == ".json":
        path.write_text(json.dumps({"zerosim_sweep": 1, "scenario": "s.toml", "vary": {},
                                    "overrides": [], "columns": columns, "rows": rows}))
        return path
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else str(row[c]).lower()
                             if isinstance(row[c], bool) else row[c] for c in columns])
    return path


# ---- memory -------------------------------------------------------------------------------------

def test_memory_figure_one_line_per_stage_on_log_axes(rows):
    rows[0]["host_bytes"] = 3 * GiB  # one row under CPU offload
    fig = plots.memory_figure(rows)
    lines = fig.data[:4]
    assert [d.name for d in fig.data] == [*STAGE_NAMES, "GPU memory (32 GiB)"]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    for stage, line in enumerate(lines):
        assert line.x == (4, 8)  # sorted by GPUs although the rows came 8 first
        assert line.y == (NUMBERS[stage, 4][0], NUMBERS[stage, 8][0])
    assert fig.data[4].y == (32, 32) and fig.data[4].line.dash == "dash"
    hover = lines[3].hovertext[1]  # ZeRO-3 at 8 GPUs: 2.5 GiB = 4 x 0.625 quarters ...
    assert "params: 0.625 GiB" in hover and "activations: 0.3125 GiB" in hover
    assert "peak: 2.5 GiB" in hover and "host" not in hover
    assert "host: 3 GiB" in next(d for d in lines if rows[0]["stage_name"] == d.name).hovertext[1]


def test_memory_figure_splits_lines_by_other_varied_inputs(rows):
    bigger = [sweep_row(s, n, 2 * peak, comm, t, **{"vary.model.params": 2 * 10**9})
              for (s, n), (peak, comm, t) in NUMBERS.items()]
    for row in rows:
        row["model.params"] = 10**9
        row["gpu_memory_bytes"] = 80 * GiB if row["world_size"] == 8 else 32 * GiB
    fig = plots.memory_figure(rows + bigger)
    assert [d.name for d in fig.data] == [f"{name}, model.params={p}" for name in STAGE_NAMES
                                          for p in ("1e+09", "2e+09")]
    assert fig.data[1].y == (32, 32) and fig.data[1].line.dash != fig.data[0].line.dash
    # cluster.nodes moves with the GPU count along each line; two GPU memories: no dashed line
    fig = plots.memory_figure(rows + bigger, gpu_memory_bytes=40 * GiB)
    assert fig.data[-1].name == "GPU memory (40 GiB)" and fig.data[-1].y == (40, 40)


def test_series_columns_keep_what_world_size_does_not_fix():
    grid = [sweep_row(0, nodes * gpn, 1, 1, 1, **{"vary.cluster.nodes": nodes,
                                                "vary.cluster.gpus_per_node": gpn})
            for nodes in (1, 2) for gpn in (4, 8)]
    assert plot_inputs.series_columns(grid) == ["cluster.gpus_per_node"]  # 8 GPUs: 1 x 8 and 2 x 4
    gpus = [sweep_row(0, 4 * nodes, 1, 1, 1, **{"vary.cluster.gpu": gpu, "cluster.hbm_GiB": hbm})
            for nodes in (1, 2) for gpu, hbm in (("A100", 40), ("H100", 80))]
    assert plot_inputs.series_columns(gpus) == ["cluster.gpu"]  # hbm_GiB follows from the GPU
    assert plot_inputs.series_columns([sweep_row(0, 4 * n, 1, 1, 1) for n in (1, 2)]) == []


# ---- memory against communication ---------------------------------------------------------------

def test_pareto_front_keeps_exactly_the_non_dominated_points():
    points = [(3, 3), (1, 5), (2, 6), (2, 2), (4, 1), (4, 4)]
    assert plots.pareto_front(points) == [(1, 5), (2, 2), (4, 1)]  # (3, 3), (4, 4) lose to (2, 2)
    assert plots.pareto_front([(1, 2), (1, 3), (2, 2)]) == [(1, 2)]  # ties lose to better
    assert plots.pareto_front([(1, 1), (1, 1)]) == [(1, 1), (1, 1)]  # neither beats the other
    assert plots.pareto_front([]) == []


def test_tradeoff_figure_points_and_a_front_per_panel(rows):
    fig = plots.tradeoff_figure(rows)
    left = [d for d in fig.data if d.xaxis == "x"]
    right = [d for d in fig.data if d.xaxis == "x2"]
    assert [d.name for d in left] == [*STAGE_NAMES, "Pareto front"] == [d.name for d in right]
    assert [d.showlegend for d in left + right] == [True] * 5 + [False] * 5
    assert fig.layout.xaxis.type == fig.layout.xaxis2.type == "log"
    assert fig.layout.xaxis2.matches == "x"
    for stage in range(4):
        assert left[stage].x == right[stage].x == tuple(NUMBERS[stage, n][0] for n in (4, 8))
        assert left[stage].y == tuple(NUMBERS[stage, n][1] for n in (4, 8))
        assert right[stage].y == tuple(NUMBERS[stage, n][2] for n in (4, 8))
        assert left[stage].marker.color == right[stage].marker.color
    assert list(zip(left[4].x, left[4].y)) == [(2.5, 10.5), (4, 9), (5, 7), (8, 6)]
    assert list(zip(right[4].x, right[4].y)) == [(2.5, 0.4), (4, 0.3), (5, 0.22), (8, 0.12),
                                                 (16, 0.1)]
    assert left[4].marker.symbol == "circle-open" and left[4].mode == "lines+markers"
    assert "ZeRO-1, 8 GPUs" in left[1].hovertext[1] and "7 GB per rank" in left[1].hovertext[1]


# ---- one simulated step -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def simulated():
    """A trace file's content (through JSON, as read back) of DDP and ZeRO-3, every rank."""
    scenario = load_scenario(SCENARIOS / "tiny_gpt_4rank_cpu.toml")
    results = [simulate(scenario, stage, mode="per_rank", keep_events=True) for stage in (0, 3)]
    return json.loads(json.dumps(chrome_trace(results))), results


def test_trace_holds_memory_samples_of_the_step_event_schema(simulated):
    trace, results = simulated
    samples = [s for s in trace["memorySamples"] if s["stage"] == 3 and s["rank"] == 2]
    assert set(samples[0]) == {"stage", "rank", "t_s", "bytes_by_category"}
    assert max(sum(s["bytes_by_category"].values()) for s in samples) == results[1].peak_bytes
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)


def test_timeline_bars_are_the_step_events(simulated):
    trace, _ = simulated
    fig = plots.timeline_figure(trace, stage=3)
    events = [e for e in trace["stepEvents"] if e["stage"] == 3]
    bars = [d for d in fig.data if d.type == "bar"]
    assert [d.name for d in bars] == ["forward", "backward", "step", "reduce_scatter", "all_gather"]
    drawn = sorted((d.name, y, base, width)
                   for d in bars for y, base, width in zip(d.y, d.base, d.x))
    assert drawn == sorted((e["op"] or e["phase"], f"rank {e['rank']} {e['queue']}",
                            e["start_s"] * 1e3, (e["end_s"] - e["start_s"]) * 1e3) for e in events)
    assert fig.layout.yaxis.categoryarray == tuple(
        f"rank {r} {q}" for r in range(4) for q in ("compute", "gather", "reduce"))
    assert fig.layout.barmode == "overlay" and fig.layout.xaxis.matches == "x2"
    assert "ZeRO-3 (4 simulated ranks)" in fig.layout.title.text


def test_timeline_memory_curve_ends_at_the_last_sample(simulated):
    trace, results = simulated
    fig = plots.timeline_figure(trace, stage=3)
    samples = [s for s in trace["memorySamples"] if s["stage"] == 3 and s["rank"] == 0]
    total = next(d for d in fig.data if d.name == "total")
    stacked = [d for d in fig.data if d.type == "scatter" and d.stackgroup == "memory"]
    assert fig.layout.yaxis2.title.text == "rank 0 memory (MiB)"  # a 1.7 MiB model
    assert total.y[-1] == total.y[-2] == sum(samples[-1]["bytes_by_category"].values()) / MiB
    assert total.x[:-1] == tuple(s["t_s"] * 1e3 for s in samples)
    assert total.x[-1] == max(e["end_s"] for e in trace["stepEvents"] if e["stage"] == 3) * 1e3
    assert max(total.y) * MiB == results[1].peak_bytes
    assert {d.name for d in stacked} == {"params", "grads", "optimizer", "activations",
                                         "gathered", "layer_grads"}  # the ones ever non-zero
    for i, value in enumerate(total.y):
        assert sum(d.y[i] for d in stacked) == pytest.approx(value)
    assert all(d.line.shape == "hv" for d in stacked + [total])


def test_timeline_default_stage_rank_limit_and_absent_stage(simulated):
    trace, _ = simulated
    fig = plots.timeline_figure(trace)  # the first stage in the file
    assert "DDP" in fig.layout.title.text
    assert {d.name for d in fig.data if d.type == "bar"} == {"forward", "backward", "step",
                                                             "all_reduce"}
    fig = plots.timeline_figure(trace, stage=3, max_ranks=2)
    assert {y for d in fig.data if d.type == "bar" for y in d.y} == {
        f"rank {r} {q}" for r in (0, 1) for q in ("compute", "gather", "reduce")}
    assert "first 2 shown" in fig.layout.title.text
    with pytest.raises(InputError, match=r"stage 2 is not in the trace \(it holds stage 0, 3\)"):
        plots.timeline_figure(trace, stage=2)


# ---- simulated against measured -----------------------------------------------------------------

def report(stage, metrics, **extra):
    return {"stage": stage, "measurement": f"m{stage}.json", "mean_abs_error_pct": 5.0,
            "metrics": [{"name": n, "measured": m, "simulated": s,
                         "error_pct": None if not m or s is None else (s - m) / m * 100}
                        for n, m, s in metrics], **extra}


REPORTS = [report(1, [("step_time_s", 0.05, 0.045), ("compute_s", 0.03, 0.033),
                      ("comm_all_gather_s", None, 0.004), ("peak_bytes", 4 * MiB, 5 * MiB)],
                  tolerance_pct=20),
           report(3, [("step_time_s", 0.08, 0.1), ("exposed_comm_s", 0.0, 0.01),
                      ("memory_after_forward_bytes", 2 * MiB, 1.5 * MiB)], tolerance_pct=20)]


def test_calibration_points_line_and_band():
    fig = calibration_plot.calibration_figure(REPORTS)
    points = {(d.name, d.xaxis): d for d in fig.data if d.mode == "markers"}
    time1 = points["ZeRO-1 (mean |error| 5.0%)", "x"]
    time3 = points["ZeRO-3 (mean |error| 5.0%)", "x"]
    assert time1.x == pytest.approx((50, 30)) and time1.y == pytest.approx((45, 33))
    assert time3.x == pytest.approx((80,)) and time3.y == pytest.approx((100,))
    memory1 = points["ZeRO-1 (mean |error| 5.0%)", "x2"]
    assert memory1.x == (4,) and memory1.y == (5,)
    assert "compute_s (ZeRO-1)" in time1.hovertext[1] and "+10.0%" in time1.hovertext[1]
    for axis in ("xaxis", "yaxis", "xaxis2", "yaxis2"):
        assert fig.layout[axis].type == "log"
    for xaxis in ("x", "x2"):
        lower, upper, line = [d for d in fig.data if d.xaxis == xaxis and d.mode == "lines"]
        assert line.x == line.y and line.name == "simulated = measured"
        assert lower.y == pytest.approx([0.8 * x for x in lower.x])  # the reports' 20%
        assert upper.y == pytest.approx([1.2 * x for x in upper.x]) and upper.fill == "tonexty"
        values = [v for d in fig.data if d.xaxis == xaxis and d.mode == "markers"
                  for v in d.x + d.y]
        assert line.x[0] < min(values) and line.x[1] > max(values)
    assert "2 metrics skipped" in fig.layout.title.text
    assert "comm_all_gather_s (ZeRO-1), exposed_comm_s (ZeRO-3)" in fig.layout.title.text


def test_calibration_tolerance_given_default_and_widest():
    def band(fig):
        lower, upper = [d for d in fig.data if d.xaxis == "x" and d.mode == "lines"][:2]
        return (pytest.approx(lower.y[0] / lower.x[0]), pytest.approx(upper.y[0] / upper.x[0]),
                upper.name)

    assert band(calibration_plot.calibration_figure(REPORTS, tolerance_pct=5)) == (0.95, 1.05, "within ±5%")
    bare = [{k: v for k, v in r.items() if k != "tolerance_pct"} for r in REPORTS]
    assert band(calibration_plot.calibration_figure(bare)) == (0.9, 1.1, "within ±10% (default)")
    bare[1]["tolerance_pct"], bare[0]["tolerance_pct"] = 5, 15
    assert band(calibration_plot.calibration_figure(bare)) == (
        0.85, 1.15, "within ±15% (widest of the reports' 5, 15 %)")


def test_calibration_with_nothing_positive_is_bad_input():
    with pytest.raises(InputError, match="nothing to plot"):
        calibration_plot.calibration_figure([report(0, [("step_time_s", None, 0.1), ("peak_bytes", 0, 5)])])


# ---- result files -------------------------------------------------------------------------------

def test_csv_values_come_back_as_the_sweep_wrote_them():
    assert [plot_inputs.csv_value(t) for t in ("", "true", "false", "42", "-3", "1.5", "1e+09",
                                               "bf16", "1_000", "nan", "DDP")] == [
        None, True, False, 42, -3, 1.5, 1e9, "bf16", "1_000", "nan", "DDP"]


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_sweep_files_read_back_the_rows(tmp_path, rows, suffix):
    rows[0]["tokens_per_step"] = None
    path = write_sweep(tmp_path / f"sweep{suffix}", rows)
    assert plot_inputs.read_sweep(path, "memory", plots.MEMORY_COLUMNS) == rows


@pytest.mark.parametrize("mend, fragment", [
    (lambda rows: [{k: v for k, v in r.items() if k != "peak_bytes"} for r in rows],
     "missing column peak_bytes"),
    (lambda rows: [{**r, "peak_bytes": "lots"} for r in rows], "row 1: peak_bytes = 'lots'"),
    (lambda rows: [{**r, "stage": 4} for r in rows], "row 1: stage = 4 is not a ZeRO stage"),
    (lambda rows: [], "is empty"),
    (lambda rows: [{**r, "peak_bytes": 10**400} for r in rows], "row 1: peak_bytes = 1000"),
    (lambda rows: [{**r, "peak_bytes": 0} for r in rows], "not a positive number (a log axis)"),
    (lambda rows: [{k: None for k in rows[0]}], "row 1: stage = None"),
])
def test_unusable_sweep_is_one_line(tmp_path, rows, mend, fragment):
    path = write_sweep(tmp_path / "sweep.csv", mend(rows))
    with pytest.raises(InputError) as error:
        plot_inputs.read_sweep(path, "memory", plots.MEMORY_COLUMNS)
    assert str(path) in str(error.value) and fragment in str(error.value)


def read_sweep(path):
    return plot_inputs.read_sweep(path, "memory", plots.MEMORY_COLUMNS)


EVENT = {"stage": 3, "rank": 0, "stream": "compute", "queue": "compute", "name": "forward",
         "phase": "forward", "layer": 0, "op": None, "bytes": 0, "start_s": 0.0, "end_s": 1.0}


@pytest.mark.parametrize("content, read, fragment", [
    ({"traceEvents": [], "stepEvents": []}, read_sweep, "is a zerosim simulate --trace file, not "
     "a result --kind memory can draw (use --kind timeline)"),
    (REPORTS[0], plot_inputs.read_trace, "is a zerosim validate --json file, not a result --kind "
     "timeline can draw (use --kind calibration)"),
    ({"events": [], "memory_samples": [], "ranks": [], "stage": 1},
     lambda p: plot_inputs.read_reports([p]), "is a zero-real run --out measurement file, not a "
     "result --kind calibration can draw (`zerosim validate MEASUREMENT --json > report.json`"),
    ([{"stage": 0, "step_time_s": 1.0}], read_sweep, "holds a JSON list"),
    ({"zerosim_sweep": 2, "columns": [], "rows": []}, read_sweep, "sweep format 2; this zerosim "
     "reads format 1"),
    ({"traceEvents": []}, plot_inputs.read_trace, "not a result --kind timeline can draw (no "
     "stepEvents)"),
    ({"stepEvents": [{**EVENT, "end_s": -1.0}], "memorySamples": []}, plot_inputs.read_trace,
     "stepEvents[0] needs a stage 0-3 and numbers rank, start_s <= end_s"),
    ({"stepEvents": [EVENT], "memorySamples": [{"stage": 3, "rank": 0, "t_s": 0.0,
                                                "bytes_by_category": {"params": "many"}}]},
     plot_inputs.read_trace, "memorySamples[0] needs a stage 0-3, a number t_s"),
    ({**REPORTS[0], "stage": True}, lambda p: plot_inputs.read_reports([p]),
     "stage True is not a ZeRO stage"),
    ({**REPORTS[0], "metrics": [{"name": "peak_bytes", "measured": "1 GB", "simulated": 1}]},
     lambda p: plot_inputs.read_reports([p]), "'metrics' must be a list of {name, measured"),
])
def test_wrong_kind_of_file_says_what_it_is(tmp_path, content, read, fragment):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(content))
    with pytest.raises(InputError) as error:
        read(path)
    assert str(path) in str(error.value) and fragment in str(error.value)


def test_a_sweep_csv_for_a_trace_says_so(tmp_path, rows):
    path = write_sweep(tmp_path / "s.csv", rows)
    with pytest.raises(InputError, match=r"s\.csv is a zerosim sweep CSV, not a trace \(use "
                                         r"--kind memory or tradeoff\)"):
        plot_inputs.read_trace(path)


def test_ragged_csv_names_its_line(tmp_path, write):
    path = write("s.csv", "stage,world_size\n0,4\n1,4,9\n")
    with pytest.raises(InputError, match="line 3 has 3 fields, the header has 2"):
        plot_inputs.read_sweep(path, "memory", ("stage",))


# ---- the command --------------------------------------------------------------------------------

@pytest.fixture
def zerosim():
    """`zerosim ARGV` through cli.main."""
    return run_zerosim


def test_plot_writes_self_contained_html(tmp_path, rows, zerosim):
    out = tmp_path / "fig.html"
    result = zerosim("plot", write_sweep(tmp_path / "s.csv", rows), "--kind", "memory", "-o", out,
                     "--title", "Seven & a half")
    assert result.code == 0, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"zerosim: wrote memory figure of {tmp_path / 's.csv'} to {out}"]
    html = out.read_text()
    assert re.search(r"/\*\*\s*\* plotly\.js v\d", html)  # the library itself, inline
    assert not re.search(r"<script[^>]*\bsrc=", html) and "cdn.plot.ly/plotly" not in html
    assert '"text":"Seven & a half"' in html


@pytest.mark.parametrize("make, argv, fragments", [
    (lambda p, rows: write_sweep(p / "s.csv", rows), ["--kind", "memory", "-o", "fig.svg"],
     ["write .html or .png, not '.svg'"]),
    (lambda p, rows: write_sweep(p / "s.csv", [{k: v for k, v in r.items() if k != "comm_time_s"}
                                               for r in rows]),
     ["--kind", "tradeoff", "-o", "fig.html"], ["s.csv: missing column comm_time_s"]),
    (lambda p, rows: write_sweep(p / "s.json", rows), ["--kind", "timeline", "-o", "f.html"],
     ["s.json is a zerosim sweep --out file", "use --kind memory or tradeoff"]),
    (lambda p, rows: p / "absent.json", ["--kind", "calibration", "-o", "f.html"],
     ["validate report not found", "absent.json"]),
    (lambda p, rows: write_sweep(p / "s.csv", rows), ["--kind", "memory", "--stage", "1",
                                                      "-o", "f.html"],
     ["--stage applies to --kind timeline"]),
])
def test_plot_bad_input_is_one_line(tmp_path, rows, zerosim, make, argv, fragments):
    path = make(tmp_path, rows)
    result = zerosim("plot", path, *[tmp_path / a if a.startswith("f") else a for a in argv])
    assert_one_line_error(result, *fragments)
    assert not list(tmp_path.glob("f*.*"))


def test_plot_several_files_only_for_calibration(tmp_path, rows, zerosim):
    sweep = write_sweep(tmp_path / "s.csv", rows)
    result = zerosim("plot", sweep, sweep, "--kind", "memory", "-o", tmp_path / "f.html")
    assert_one_line_error(result, "--kind memory draws one result file, got 2")
    paths = []
    for i, r in enumerate(REPORTS):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(r))
    result = zerosim("plot", *paths, "--kind", "calibration", "-o", tmp_path / "c.html")
    assert result.code == 0, result.stderr
    assert '"ZeRO-3 (mean |error| 5.0%) r1.json"' in (tmp_path / "c.html").read_text()


def test_png_without_an_engine_says_what_to_install(tmp_path, rows, zerosim, monkeypatch):
    monkeypatch.setattr(figures, "kaleido_ready", lambda: False)
    result = zerosim("plot", write_sweep(tmp_path / "s.csv", rows), "--kind", "memory", "-o",
                     tmp_path / "f.png")
    assert_one_line_error(result, "f.png", "pip install 'zerosim[png]'")


def test_timeline_stage_through_the_command(tmp_path, simulated, zerosim):
    trace_path = tmp_path / "trace.json"
    trace_path.write_text(json.dumps(simulated[0]))
    assert_one_line_error(zerosim("plot", trace_path, "--kind", "timeline", "--stage", "1", "-o",
                                  tmp_path / "t.html"),
                          "trace.json: stage 1 is not in the trace (it holds stage 0, 3)")
    result = zerosim("plot", trace_path, "--kind", "timeline", "--stage", "3", "-o",
                     tmp_path / "t.html")
    assert result.code == 0, result.stderr
    assert "One simulated step of ZeRO-3" in (tmp_path / "t.html").read_text()
    old = {k: v for k, v in simulated[0].items() if k != "memorySamples"}
    trace_path.write_text(json.dumps(old))
    assert_one_line_error(zerosim("plot", trace_path, "--kind", "timeline", "-o",
                                  tmp_path / "t.html"), "without memorySamples")
