"""`zerosim plot`'s figures, each drawn from a small result with known numbers and read back from
the figure's data (the reading of result files and the command: test_plot_command.py)."""

import pytest

from tests.zerosim.results import NUMBERS, STAGE_NAMES, GiB, MiB, REPORTS, report, sweep_row
from zerosim.errors import InputError
from zerosim.tradeoffs import calibration_plot, plot_inputs, plots


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
