"""`zerosim plot`'s figures, each drawn from a small result with known numbers and read back from
the figure's data (the reading of result files and the command: test_plot_command.py)."""

import pytest

from tests.zerosim.results import NUMBERS, STAGE_NAMES, GiB, MiB, REPORTS, report, sweep_row
from zerosim.errors import InputError
from zerosim.tradeoffs import calibration_plot, plot_inputs, plot_labels, plots


# ---- memory -------------------------------------------------------------------------------------

def drawn(fig):
    """The traces that draw points (a legend key holds x = (None,))."""
    return [d for d in fig.data if d.x and d.x[0] is not None]


def test_memory_figure_one_line_per_stage_on_log_axes(rows):
    rows[0]["host_bytes"] = 3 * GiB  # one row under CPU offload
    fig = plots.memory_figure(rows)
    lines = drawn(fig)
    assert [d.name for d in lines] == STAGE_NAMES
    assert [d.name for d in fig.data if d.showlegend is not False] == STAGE_NAMES  # the keys
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    for stage, line in enumerate(lines):
        assert line.x == (4, 8)  # sorted by GPUs although the rows came 8 first
        assert line.y == (NUMBERS[stage, 4][0], NUMBERS[stage, 8][0])
        assert line.marker.symbol == ("circle", "circle")  # 16 GiB at most: all fit 32 GiB
    (limit,) = fig.layout.shapes
    assert (limit.y0, limit.y1, limit.yref, limit.xref) == (32, 32, "y", "x domain")
    assert limit.line.dash == "dash" and limit.name == "32 GiB per GPU"  # rows name no GPU
    hover = lines[3].hovertext[1]  # ZeRO-3 at 8 GPUs: 2.5 GiB = 4 x 0.625 quarters ...
    assert "params: 0.625 GiB" in hover and "activations: 0.3125 GiB" in hover
    assert "peak: 2.5 GiB" in hover and "host" not in hover and "fit" not in hover
    assert "host: 3 GiB" in next(d for d in lines if rows[0]["stage_name"] == d.name).hovertext[1]


def test_memory_figure_splits_lines_by_other_varied_inputs(rows):
    bigger = [sweep_row(s, n, 2.5 * peak, comm, t, **{"vary.model.params": 2 * 10**9})
              for (s, n), (peak, comm, t) in NUMBERS.items()]
    for row in rows:
        row["model.params"] = 10**9
    for row in rows + bigger:
        row["gpu_memory_bytes"] = 80 * GiB if row["world_size"] == 8 else 32 * GiB
    fig = plots.memory_figure(rows + bigger)
    assert [d.name for d in drawn(fig)] == [f"{name}, model.params={p}" for name in STAGE_NAMES
                                            for p in ("1e+09", "2e+09")]
    assert drawn(fig)[1].line.dash != drawn(fig)[0].line.dash
    # two GPU memories (32 GiB at 4 GPUs, 80 at 8): a line at each, and each row judged by its
    # own: DDP's 2.5 x 16 = 40 GiB does not fit 32 GiB but fits 80
    assert [s.y0 for s in fig.layout.shapes] == [32, 80]
    assert drawn(fig)[1].y == (40, 40) and drawn(fig)[1].marker.symbol == ("x", "circle")
    fig = plots.memory_figure(rows + bigger, gpu_memory_bytes=40 * GiB)  # one limit for all
    assert [(s.y0, s.name) for s in fig.layout.shapes] == [(40, "40 GiB per GPU")]
    assert drawn(fig)[1].marker.symbol == ("circle", "circle")  # 40 <= 40 fits


# Hand-made rows against a 10 GiB GPU (results.NUMBERS' peaks): DDP (16 GiB) never fits; ZeRO-1
# at 4 GPUs is exactly 10 GiB and fits (the sweep's rule is peak <= memory); ZeRO-2 at 4 GPUs
# peaks at 8 GiB but its device holds 10.5 GiB with the CUDA context: it does not fit.
NOT_FITTING = {(0, 4), (0, 8), (2, 4)}


@pytest.fixture
def ten_gib(rows):
    for row in rows:
        row.update({"gpu_memory_bytes": 10 * GiB, "cluster.gpu": "H100-80GB",
                    "model.name": "Llama-2-7B"})
        if (row["stage"], row["world_size"]) == (2, 4):
            row["device_bytes"] = int(10.5 * GiB)
    return rows


def test_points_that_do_not_fit_are_marked_and_said(ten_gib):
    for figure in (plots.memory_figure, plots.tradeoff_figure):
        fig = figure(ten_gib)
        for trace in (d for d in drawn(fig) if d.name in STAGE_NAMES):
            stage = STAGE_NAMES.index(trace.name)
            # a point by its x: GPUs on the memory figure, peak GiB on the trade-off's
            where = {n if figure is plots.memory_figure else NUMBERS[stage, n][0]: n
                     for n in (4, 8)}
            for x, symbol in zip(trace.x, trace.marker.symbol):
                want = "x" if (stage, where[x]) in NOT_FITTING else "circle"
                assert symbol == want, (figure.__name__, stage, where[x])
        key = next(d for d in fig.data if d.name == "does not fit its GPU's memory")
        assert key.marker.symbol == "x" and key.x == (None,)
        assert fig.layout.shapes[0].name == "10 GiB H100-80GB"
    memory = plots.memory_figure(ten_gib)
    zero2 = next(d for d in drawn(memory) if d.name == "ZeRO-2")
    assert "does not fit 10 GiB</b>: the device holds 10.5 GiB" in zero2.hovertext[0]
    assert "fit" not in zero2.hovertext[1]


def test_the_limit_line_sits_at_the_gpu_memory_on_each_panel(ten_gib):
    fig = plots.tradeoff_figure(ten_gib)
    assert [(s.x0, s.x1, s.xref, s.yref) for s in fig.layout.shapes] == [
        (10, 10, "x", "y domain"), (10, 10, "x2", "y2 domain")]  # GiB, the x axes' unit
    assert [s.showlegend for s in fig.layout.shapes] == [True, False]


def test_the_front_holds_only_points_that_fit(ten_gib):
    fig = plots.tradeoff_figure(ten_gib)
    left, right = [d for d in fig.data if d.name == "Pareto front (of what fits)"]
    # Fitting (peak GiB, GB): ZeRO-1 (10, 6), (7, 7); ZeRO-2 (5, 7); ZeRO-3 (4, 9), (2.5, 10.5).
    # (7, 7) loses to (5, 7). Counting every point, ZeRO-2's (8, 6) would replace (10, 6).
    assert list(zip(left.x, left.y)) == [(2.5, 10.5), (4, 9), (5, 7), (10, 6)]
    # On time DDP at 4 GPUs (16 GiB, 0.1 s) is fastest, but does not fit.
    assert list(zip(right.x, right.y)) == [(2.5, 0.4), (4, 0.3), (5, 0.22), (10, 0.12)]


def test_titles_name_the_model_and_the_cluster(ten_gib):
    # results.sweep_row: 4 GPUs a node, 1 node at 4 GPUs and 2 at 8
    fig = plots.memory_figure(ten_gib)
    assert fig.layout.title.text == ("Llama-2-7B, 1-2 x 4 H100-80GB: per-rank memory against "
                                     "GPU count")
    fig = plots.tradeoff_figure([r for r in ten_gib if r["world_size"] == 8])
    assert fig.layout.title.text.startswith("Llama-2-7B, 2 x 4 H100-80GB: memory against")
    fig = plots.memory_figure(ten_gib, model="GPT-3 175B", gpu="B200")
    assert fig.layout.title.text.startswith("GPT-3 175B, 1-2 x 4 B200:")
    assert fig.layout.shapes[0].name == "10 GiB B200"
    older = [{k: v for k, v in r.items() if not k.startswith(("model.", "cluster."))}
             for r in ten_gib]  # a sweep file from before these columns: what it says
    assert plots.memory_figure(older).layout.title.text.startswith("1B parameters: per-rank")
    bare = [{k: v for k, v in r.items() if k != "params"} for r in older]
    assert plots.memory_figure(bare).layout.title.text == "Per-rank memory against GPU count"


def test_log_axes_are_labelled_with_whole_values(ten_gib):
    # 2.5 to 16 GiB (the 10 GiB line between): under one decade, so 1, 2, 3 and 5 x 10^k from
    # 10^0 to 10^2, each written as its value: "30", where plotly's own log axis writes "3"
    whole = ("1", "2", "3", "5", "10", "20", "30", "50", "100", "200", "300", "500")
    fig = plots.memory_figure(ten_gib)
    assert fig.layout.yaxis.tickvals == (1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 300, 500)
    assert fig.layout.yaxis.ticktext == whole and fig.layout.yaxis.tickmode == "array"
    assert fig.layout.xaxis.tickvals == (4, 8) and fig.layout.xaxis.ticktext == ("4", "8")
    fig = plots.tradeoff_figure(ten_gib)
    assert fig.layout.xaxis.ticktext == fig.layout.xaxis2.ticktext == whole
    assert plot_labels.log_ticks(2.5, 32) == [1, 2, 5, 10, 20, 50, 100, 200, 500]  # > a decade
    assert plot_labels.log_ticks(0.57, 3) == [0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5, 10, 20, 30, 50]
    assert plot_labels.log_ticks(3, 2e6) == [1, 10, 100, 1000, 10**4, 10**5, 10**6, 10**7]
    assert [plot_labels.tick_text(v) for v in (0.3, 30, 2000)] == ["0.3", "30", "2000"]


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
    left = [d for d in drawn(fig) if d.xaxis == "x"]
    right = [d for d in drawn(fig) if d.xaxis == "x2"]
    front = "Pareto front (of what fits)"
    assert [d.name for d in left] == [*STAGE_NAMES, front] == [d.name for d in right]
    assert [d.name for d in fig.data if d.showlegend is not False] == [*STAGE_NAMES, front]
    assert fig.layout.xaxis.type == fig.layout.xaxis2.type == "log"
    assert fig.layout.xaxis2.matches == "x"
    for stage in range(4):
        assert left[stage].x == right[stage].x == tuple(NUMBERS[stage, n][0] for n in (4, 8))
        assert left[stage].y == tuple(NUMBERS[stage, n][1] for n in (4, 8))
        assert right[stage].y == tuple(NUMBERS[stage, n][2] for n in (4, 8))
        assert left[stage].marker.color == right[stage].marker.color
        assert left[stage].text == ("4", "8")  # the GPU count on each point
    assert list(zip(left[4].x, left[4].y)) == [(2.5, 10.5), (4, 9), (5, 7), (8, 6)]
    assert list(zip(right[4].x, right[4].y)) == [(2.5, 0.4), (4, 0.3), (5, 0.22), (8, 0.12),
                                                 (16, 0.1)]  # all fit 32 GiB: DDP too
    assert left[4].marker.symbol == "circle-open" and left[4].mode == "lines+markers"
    assert "ZeRO-1, 8 GPUs" in left[1].hovertext[1] and "7 GB per rank" in left[1].hovertext[1]
    assert "does not fit its GPU's memory" not in [d.name for d in fig.data]  # all fit


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


def test_timeline_title_names_the_model_and_the_cluster(simulated):
    trace, _ = simulated
    named = {**trace, "scenario": {"model": "", "params": 1_700_000_000, "gpu": "H100-80GB",
                                   "gpu_memory_bytes": 80 * GiB, "nodes": 1, "gpus_per_node": 4}}
    fig = plots.timeline_figure(named, stage=3)  # a model without a name: its parameter count
    assert fig.layout.title.text == ("1.7B parameters, 1 x 4 H100-80GB: one simulated step of "
                                     "ZeRO-3 (4 simulated ranks)")
    fig = plots.timeline_figure(named, stage=3, model="Llama-2-7B", gpu="B200")
    assert fig.layout.title.text.startswith("Llama-2-7B, 1 x 4 B200: one simulated step")


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


@pytest.mark.parametrize("low, high, inside", [
    (60, 79.6, [60, 70]),     # under one decade, no 1-2-3-5 tick inside: every mantissa
    (2.5, 16, [3, 5, 10]),
])
def test_a_narrow_log_axis_still_has_labels(low, high, inside):
    from zerosim.tradeoffs.plot_labels import log_axis

    axis = log_axis([low, high])
    assert [t for t in axis["tickvals"] if low <= t <= high] == inside
    assert axis["ticktext"][axis["tickvals"].index(inside[0])] == f"{inside[0]:g}"


def test_a_range_too_narrow_for_any_mantissa_is_left_to_plotly():
    from zerosim.tradeoffs.plot_labels import log_axis

    assert log_axis([12, 18]) == {"type": "log"}  # no tick of 1-9 x 10^k between 12 and 18


def test_the_peak_memory_axis_reaches_every_peak_and_the_limit_line():
    # peaks of 0.3 and 2 GiB under an 80 GiB GPU: the axis both figures draw peak memory on
    # spans the smallest peak (the first row) and the limit line, so neither falls off it
    rows = [sweep_row(0, 4, 0.3, 1, 1), sweep_row(0, 8, 2, 1, 1)]
    for row in rows:
        row["gpu_memory_bytes"] = 80 * GiB
    axis = plot_labels.memory_axis(rows)
    assert min(axis["tickvals"]) <= 0.3 and max(axis["tickvals"]) >= 80
    assert plots.memory_figure(rows).layout.yaxis.tickvals == tuple(axis["tickvals"])
    assert plots.tradeoff_figure(rows).layout.xaxis.tickvals == tuple(axis["tickvals"])
    lower = plot_labels.memory_axis(rows, gpu_memory_bytes=1 * GiB)  # one limit for all
    assert 1 <= max(lower["tickvals"]) < 80
