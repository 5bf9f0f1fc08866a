"""The figures of the trade-offs (plotly): per-rank memory against GPU count, memory against
communication, one simulated step as a timeline, a pipelined one as the pipeline diagram
(simulated against measured is calibration_plot.py).

Each function takes results that already exist (sweep rows, a trace, validate reports) and returns
a `plotly.graph_objects.Figure`; nothing here simulates (STYLE.md 10). plot_inputs.py reads and
checks the files, figures.py picks the figure for `zerosim plot` and writes it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from zerosim.contract import (ALL_GATHER, OPS, P2P, QUEUES, REDUCE_SCATTER, STAGE_NAMES,
                              STEP_PHASES, STAGES)
from zerosim.errors import InputError
from zerosim.tradeoffs import plot_labels as labels
from zerosim.tradeoffs.plot_inputs import key_of, series_columns
from zerosim.units import GB, GiB, KiB, MiB  # communication in GB, as `zerosim simulate` prints

MS_PER_S = 1e3

STACK = ("params", "grads", "optimizer", "activations", "buffers", "host")  # sweep <name>_bytes
MEMORY_COLUMNS = ("stage", "stage_name", "world_size", *(f"{c}_bytes" for c in STACK),
                  "peak_bytes", "gpu_memory_bytes")
TRADEOFF_COLUMNS = ("stage", "stage_name", "world_size", "peak_bytes", "gpu_memory_bytes",
                    "comm_bytes_per_rank_total", "comm_time_s")

STAGE_COLORS = dict(zip(STAGES, ("#636efa", "#ef553b", "#00cc96", "#ab63fa")))
# A step event's kind (_kind): its phase or its collective op; legends in this order.
KIND_COLORS = dict(zip((*STEP_PHASES, *OPS),
                       ("#4c78a8", "#72b7b2", "#54a24b", "#e45756", "#f58518",
                        "#b279a2", "#9d755d", "#eeca3b")))
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


# ---- memory against GPU count ------------------------------------------------------------------

SHORT_NAMES = {"parallelism.tensor_parallel": "t", "parallelism.sequence_parallel": "SP"}
"""The inputs a legend names as papers write them: "ZeRO-3, t=8" (Narayanan et al. 2021's t)."""


def _label(row: dict[str, Any], series: list[str]) -> str:
    return ", ".join([row["stage_name"], *(f"{SHORT_NAMES.get(c, c)}={_shown(row.get(c))}"
                                           for c in series)])


def _shown(value: Any) -> str:
    return f"{value:g}" if type(value) in (int, float) else str(value)  # 7.5e+09, not 7500000000.0


def _gib(size_bytes: float) -> str:
    return f"{size_bytes / GiB:.4g} GiB"


def _stack_text(row: dict[str, Any], series: list[str], limit_bytes: float) -> str:
    lines = [f"{_label(row, series)}, {row['world_size']} GPUs"]
    lines += [f"{c}: {_gib(row[f'{c}_bytes'])}" for c in STACK
              if c != "host" or row["host_bytes"]]  # host only under CPU offload
    lines += [f"<b>peak: {_gib(row['peak_bytes'])}</b>"]
    return "<br>".join([*lines, labels.not_fit_text(row, limit_bytes)]).removesuffix("<br>")


def _limit_lines(fig: go.Figure, rows: list[dict[str, Any]], gpu_memory_bytes: float | None,
                 gpu: str | None, axis: str, **where: Any) -> None:
    """A dashed line at each GPU memory of the rows (in GiB on `axis`, across the panel's whole
    other axis), labelled with the memory and the GPU, in the legend once."""
    other = "x" if axis == "y" else "y"
    for i, (limit, text) in enumerate(labels.limits(rows, gpu_memory_bytes, gpu)):
        fig.add_shape(type="line", **{f"{axis}ref": axis, f"{axis}0": limit / GiB,
                                      f"{axis}1": limit / GiB, f"{other}ref": f"{other} domain",
                                      f"{other}0": 0, f"{other}1": 1},
                      name=text, legendgroup=f"limit {i}",
                      showlegend=where.get("col", 1) == 1,
                      line={"color": "black", "dash": "dash", "width": 1.5},
                      label={"text": text, "textposition": "end", "font": {"size": 11},
                             **({} if axis == "y" else _ACROSS_THE_TOP)}, **where)


_ACROSS_THE_TOP = {"textangle": 0, "xanchor": "left", "yanchor": "top"}
"""A vertical line's label written level, right of its top end, inside the panel (rotated it
crosses the panel's title)."""


def _legend_key(fig: go.Figure, name: str, group: str, color: str, **style: Any) -> None:
    """The legend's entry for a series drawn without one: plotly's legend shows a trace's first
    marker, which may be the not-fitting one; the key always shows the series' own circle."""
    fig.add_scatter(x=[None], y=[None], name=name, legendgroup=group, hoverinfo="skip",
                    marker={"symbol": labels.FIT_SYMBOL, "color": color, "size": 8}, **style)


def _not_fit_legend(fig: go.Figure, symbols: list[str]) -> None:
    """One legend entry saying what the not-fitting marker means, where a point has it."""
    if labels.NOT_FIT_SYMBOL in symbols:
        fig.add_scatter(x=[None], y=[None], mode="markers", name="does not fit its GPU's memory",
                        marker={"symbol": labels.NOT_FIT_SYMBOL, "color": "gray", "size": 9},
                        hoverinfo="skip")


def memory_figure(rows: list[dict[str, Any]], gpu_memory_bytes: float | None = None, *,
                  model: str | None = None, gpu: str | None = None) -> go.Figure:
    """Peak memory per rank against GPUs, one line per stage (and per value of any other input
    the rows vary), the stack by category in each point's hover; a dashed line at each GPU's
    memory (`gpu_memory_bytes` for all rows, else each row's own), a point that does not fit
    it marked with an x. The title names the model and the cluster the rows share (`model`,
    `gpu` replace the rows' names)."""
    series = series_columns(rows)
    lines: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        lines[(row["stage"], *(key_of(row.get(c)) for c in series))].append(row)
    variants = sorted({key[1:] for key in lines})
    fig = go.Figure()
    every_symbol = []
    for key in sorted(lines):
        members = sorted(lines[key], key=lambda r: r["world_size"])
        symbols = labels.symbols(members, gpu_memory_bytes)
        every_symbol += symbols
        name, line = _label(members[0], series), {
            "color": STAGE_COLORS[key[0]], "dash": _DASHES[variants.index(key[1:]) % len(_DASHES)]}
        _legend_key(fig, name, name, line["color"], mode="lines+markers", line=line)
        fig.add_scatter(x=[r["world_size"] for r in members],
                        y=[r["peak_bytes"] / GiB for r in members], mode="lines+markers",
                        name=name, legendgroup=name, showlegend=False, line=line,
                        marker={"symbol": symbols, "size": 8},
                        hovertext=[_stack_text(r, series, labels.limit_of(r, gpu_memory_bytes))
                                   for r in members], hoverinfo="text")
    _not_fit_legend(fig, every_symbol)
    _limit_lines(fig, rows, gpu_memory_bytes, gpu, "y")
    world_sizes = sorted({r["world_size"] for r in rows})
    fig.update_xaxes(type="log", title_text="GPUs (world size)", tickmode="array",
                     tickvals=world_sizes, ticktext=[str(n) for n in world_sizes])
    fig.update_yaxes(title_text="peak memory per rank (GiB)",
                     **labels.memory_axis(rows, gpu_memory_bytes))
    fig.update_layout(hovermode="closest", title_text=labels.titled(
        labels.sweep_subject(rows, model, gpu), "per-rank memory against GPU count"))
    return fig


# ---- memory against communication ----------------------------------------------------------------

def pareto_front(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point dominates (lower is better on both coordinates: another point
    is at least as low on both and differs), sorted so the front draws as a line."""
    return sorted(p for p in points
                  if not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points))


def _point_text(row: dict[str, Any], series: list[str], limit_bytes: float) -> str:
    text = (f"{_label(row, series)}, {row['world_size']} GPUs<br>peak {_gib(row['peak_bytes'])}"
            f"<br>{row['comm_bytes_per_rank_total'] / GB:.4g} GB per rank per step"
            f"<br>{row['comm_time_s']:.4g} s in collectives")
    why = labels.not_fit_text(row, limit_bytes)
    return f"{text}<br>{why}" if why else text


def tradeoff_figure(rows: list[dict[str, Any]], gpu_memory_bytes: float | None = None, *,
                    model: str | None = None, gpu: str | None = None) -> go.Figure:
    """Peak memory per rank against communication per step, bytes (left) and time (right), one
    point per (stage, GPUs) labelled with both, coloured by stage; the GPU's memory as a dashed
    line (`gpu_memory_bytes` for all rows, else each row's own), a point that does not fit it
    marked with an x, and each panel's Pareto front of the points that fit. The title names the
    model and the cluster (`model`, `gpu` replace the rows' names)."""
    series = series_columns(rows)
    panels = (("comm_bytes_per_rank_total", GB, "GB per rank per step"),
              ("comm_time_s", 1, "communication s per step"))
    fig = make_subplots(rows=1, cols=2, shared_xaxes="all", horizontal_spacing=0.1,
                        subplot_titles=("bytes on the wire", "time in collectives"))
    fitting = [r for r in rows if labels.fits(r, labels.limit_of(r, gpu_memory_bytes))]
    for col, (column, scale, title) in enumerate(panels, start=1):
        for stage in sorted({r["stage"] for r in rows}):
            members = sorted((r for r in rows if r["stage"] == stage),
                             key=lambda r: (r["world_size"], r["peak_bytes"]))
            if col == 1:
                _legend_key(fig, members[0]["stage_name"], f"stage {stage}", STAGE_COLORS[stage],
                            mode="markers")
            fig.add_scatter(
                x=[r["peak_bytes"] / GiB for r in members], y=[r[column] / scale for r in members],
                mode="markers+text", name=members[0]["stage_name"], legendgroup=f"stage {stage}",
                showlegend=False, marker={"color": STAGE_COLORS[stage], "size": 9,
                                             "symbol": labels.symbols(members, gpu_memory_bytes)},
                text=[str(r["world_size"]) for r in members],
                textposition="top center", textfont={"size": 8, "color": STAGE_COLORS[stage]},
                hoverinfo="text", hovertext=[
                    _point_text(r, series, labels.limit_of(r, gpu_memory_bytes))
                    for r in members], row=1, col=col)
        front = pareto_front([(r["peak_bytes"], r[column]) for r in fitting])
        fig.add_scatter(x=[x / GiB for x, _ in front], y=[y / scale for _, y in front],
                        mode="lines+markers", name="Pareto front (of what fits)",
                        legendgroup="front", showlegend=col == 1, hoverinfo="skip",
                        line={"color": "black", "dash": "dot", "width": 1},
                        marker={"symbol": "circle-open", "size": 16, "color": "black",
                                "line": {"width": 2}}, row=1, col=col)
        _limit_lines(fig, rows, gpu_memory_bytes, gpu, "x", row=1, col=col)
        fig.update_yaxes(title_text=title, rangemode="tozero", row=1, col=col)
    _not_fit_legend(fig, labels.symbols(rows, gpu_memory_bytes))
    fig.update_xaxes(title_text="peak memory per rank (GiB)",
                     **labels.memory_axis(rows, gpu_memory_bytes))
    fig.update_layout(legend_title_text="stage (labels: GPUs)", title_text=labels.titled(
        labels.sweep_subject(rows, model, gpu),
        "memory against communication per step (lower left is better)"))
    return fig


# ---- one simulated step --------------------------------------------------------------------------

def _kind(event: dict[str, Any]) -> str:
    if event["op"]:
        return event["op"]
    return event["phase"]


def _ordered(names, known: Sequence[str]) -> list:
    """`names` in the order of `known`, unknown ones after them by name."""
    return sorted(names, key=lambda n: (known.index(n) if n in known else len(known), n))


def _bytes_unit(size_bytes: float) -> tuple[int, str]:
    return next(((s, u) for s, u in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")) if size_bytes >= s),
                (1, "bytes"))


def timeline_figure(trace: dict[str, Any], stage: int | None = None, max_ranks: int = 8, *,
                    model: str | None = None, gpu: str | None = None) -> go.Figure:
    """One simulated step of `stage` (default: the trace's first): a lane per rank and queue with
    a bar per event coloured by kind, and under it the first shown rank's memory by category.
    A pipelined trace draws the pipeline (pipeline_figure). The title names the model and the
    cluster the trace records (`model`, `gpu` replace its names)."""
    if trace.get("pipelineEvents"):
        return pipeline_figure(trace, stage, model=model, gpu=gpu)
    stage = _pick_stage(trace["stepEvents"], stage)
    events = [e for e in trace["stepEvents"] if e["stage"] == stage]
    ranks = sorted({e["rank"] for e in events})
    shown = ranks[:max_ranks]
    events = [e for e in events if e["rank"] in shown]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4],
                        vertical_spacing=0.1)
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_kind[_kind(e)].append(e)
    for kind in _ordered(by_kind, list(KIND_COLORS)):
        members = by_kind[kind]
        fig.add_bar(
            orientation="h", name=kind, marker_color=KIND_COLORS.get(kind, "#888888"),
            base=[e["start_s"] * MS_PER_S for e in members],
            x=[(e["end_s"] - e["start_s"]) * MS_PER_S for e in members],
            y=[f"rank {e['rank']} {e['queue']}" for e in members], hoverinfo="text",
            hovertext=[f"{e['name']} ({e['phase']}, layer {e.get('layer')})"
                       + (f"<br>{e['op']} of {e['bytes']:,} bytes" if e["op"] else "")
                       + f"<br>{e['start_s'] * MS_PER_S:.4g} to {e['end_s'] * MS_PER_S:.4g} ms"
                       for e in members], row=1, col=1)
    lanes = [f"rank {rank} {queue}" for rank in shown
             for queue in _ordered({e["queue"] for e in events if e["rank"] == rank}, QUEUES)]
    fig.update_yaxes(categoryorder="array", categoryarray=lanes, autorange="reversed",
                     row=1, col=1)
    samples = sorted((s for s in trace["memorySamples"]
                      if s["stage"] == stage and s["rank"] == shown[0]), key=lambda s: s["t_s"])
    if samples:
        end_s = max(samples[-1]["t_s"], max(e["end_s"] for e in events))
        _memory_curve(fig, [*samples, {**samples[-1], "t_s": end_s}], shown[0])  # held to the end
    fig.update_xaxes(title_text="time in the step (ms)", row=2, col=1)
    more = f", first {len(shown)} shown" if len(shown) < len(ranks) else ""
    fig.update_layout(barmode="overlay", hovermode="closest", title_text=labels.titled(
        labels.trace_subject(trace, model, gpu), f"one simulated step of {STAGE_NAMES[stage]} "
        f"({len(ranks)} simulated rank{'s' * (len(ranks) > 1)}{more})"))
    return fig


def _pick_stage(records: list[dict[str, Any]], stage: int | None) -> int:
    """`stage`, or the trace's first; one the trace does not hold is the user's mistake."""
    stages = list(dict.fromkeys(r["stage"] for r in records))
    if stage is None:
        return stages[0]
    if stage not in stages:
        raise InputError(f"stage {stage} is not in the trace (it holds stage "
                         f"{', '.join(map(str, stages))})")
    return stage


def _memory_curve(fig: go.Figure, samples: list[dict[str, Any]], rank: int) -> None:
    """Memory by category stacked as steps in the second row, the total drawn on top."""
    totals = [sum(s["bytes_by_category"].values()) for s in samples]
    scale, unit = _bytes_unit(max(totals))
    t_ms = [s["t_s"] * MS_PER_S for s in samples]
    for category in dict.fromkeys(c for s in samples for c in s["bytes_by_category"]):
        values = [s["bytes_by_category"].get(category, 0) / scale for s in samples]
        if any(values):
            fig.add_scatter(x=t_ms, y=values, name=category, stackgroup="memory", mode="lines",
                            line={"shape": "hv", "width": 0.5}, legendgroup="memory",
                            legendgrouptitle_text="memory", row=2, col=1)
    fig.add_scatter(x=t_ms, y=[t / scale for t in totals], name="total", mode="lines",
                    line={"shape": "hv", "color": "black", "width": 1.5}, legendgroup="memory",
                    row=2, col=1)
    fig.update_yaxes(title_text=f"rank {rank} memory ({unit})", row=2, col=1)


# ---- one pipelined step ------------------------------------------------------------------------

# A pipeline stage's row: the compute bar across the middle, its comm and its sends as thin bars
# below and above it (offset and width in rows; y grows downwards, autorange reversed).
_PIPELINE_BARS = {"compute": (-0.3, 0.6), "comm": (0.32, 0.14), "send": (-0.46, 0.14)}
_GATHER_QUEUE, _REDUCE_QUEUE = QUEUES[2:]  # the comm lane's kinds (sim/pipeline/events.py)
_COMM_COLORS = {_GATHER_QUEUE: KIND_COLORS[ALL_GATHER], _REDUCE_QUEUE: KIND_COLORS[REDUCE_SCATTER],
                ALL_GATHER: KIND_COLORS[ALL_GATHER], P2P: "#ff9da6"}  # p2p: no collective's colour
_OPTIMIZER_COLOR = KIND_COLORS["step"]


def pipeline_figure(trace: dict[str, Any], stage: int | None = None, *,
                    model: str | None = None, gpu: str | None = None) -> go.Figure:
    """The pipeline diagram of one simulated step of `stage` (default: the trace's first), as
    Narayanan et al. 2021 draw their schedules (Figures 3 and 4): a row per pipeline stage, a bar
    per forward and backward with its micro-batch's number (chunks shaded lighter), its comm and
    its sends as thin bars; under it each stage's memory over the step."""
    stage = _pick_stage(trace["pipelineEvents"], stage)
    events = [e for e in trace["pipelineEvents"] if e["stage"] == stage]
    rows = sorted({e["pipeline_stage"] for e in events})
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4],
                        vertical_spacing=0.1)
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_kind[e["kind"]].append(e)
    for kind in _ordered(by_kind, [*STEP_PHASES, "optimizer", *_COMM_COLORS]):
        _pipeline_bars(fig, kind, by_kind[kind])
    fig.update_yaxes(categoryorder="array", categoryarray=[f"stage {i}" for i in rows],
                     autorange="reversed", row=1, col=1)
    end_s = max(e["end_s"] for e in events)
    samples = [s for s in trace.get("pipelineMemory", ()) if s["stage"] == stage]
    if samples:
        scale, unit = _bytes_unit(max(s["bytes"] for s in samples))
        for i in rows:
            mine = sorted((s for s in samples if s["pipeline_stage"] == i),
                          key=lambda s: s["t_s"])
            mine += mine[-1:]  # held to the end of the step
            fig.add_scatter(x=[s["t_s"] * MS_PER_S for s in mine[:-1]] + [end_s * MS_PER_S],
                            y=[s["bytes"] / scale for s in mine], name=f"stage {i}",
                            mode="lines", line={"shape": "hv"}, legendgroup="memory",
                            legendgrouptitle_text="memory", row=2, col=1)
        fig.update_yaxes(title_text=f"memory per rank ({unit})", row=2, col=1)
    fig.update_xaxes(title_text="time in the step (ms)", row=2, col=1)
    fig.update_layout(barmode="overlay", hovermode="closest",
                      title_text=_pipeline_title(trace.get("pipeline", {}), stage, end_s,
                                                 labels.trace_subject(trace, model, gpu)))
    return fig


def _pipeline_bars(fig: go.Figure, kind: str, members: list[dict[str, Any]]) -> None:
    """One legend entry per kind: forwards and backwards numbered by micro-batch, each chunk
    past the first lighter; comm and sends thin."""
    lane = members[0]["lane"]
    offset, width = _PIPELINE_BARS.get(lane, _PIPELINE_BARS["comm"])
    passes = kind in STEP_PHASES
    color = (KIND_COLORS[kind] if passes else _OPTIMIZER_COLOR if lane == "compute"
             else _COMM_COLORS.get(kind, "#888888"))
    fig.add_bar(
        orientation="h", name=kind, marker_color=color,
        marker_opacity=[1.0 / (1 + max(e["chunk"], 0)) if passes else 1.0 for e in members],
        base=[e["start_s"] * MS_PER_S for e in members],
        x=[(e["end_s"] - e["start_s"]) * MS_PER_S for e in members],
        y=[f"stage {e['pipeline_stage']}" for e in members], offset=offset, width=width,
        text=[str(e["micro"]) for e in members] if passes else None,
        textposition="inside", insidetextanchor="middle", hoverinfo="text",
        hovertext=[f"{e['name']} ({e['lane']})<br>{e['start_s'] * MS_PER_S:.4g} to "
                   f"{e['end_s'] * MS_PER_S:.4g} ms" for e in members], row=1, col=1)


def _pipeline_title(layout: dict[str, Any], stage: int, end_s: float, subject: str) -> str:
    """The model and the cluster (`subject`), the layout (Narayanan et al. 2021's t, p, d; the
    schedule, v; m micro-batches) and the step time; what the trace does not say (written
    without the scenario) is left out."""
    axes = [f"{name}={layout[key]}" for name, key in (
        ("t", "tensor_parallel"), ("p", "pipeline_parallel"), ("d", "data_parallel"))
            if key in layout]
    axes += [str(layout["schedule"])] if "schedule" in layout else []
    axes += [f"v={layout['virtual_stages']}"] if layout.get("virtual_stages", 1) != 1 else []
    axes += [f"m={layout['micro_batches']}"] if "micro_batches" in layout else []
    return (f"{subject + ', ' if subject else ''}{STAGE_NAMES[stage]}: {', '.join(axes)}; one step "
            f"{end_s * MS_PER_S:.4g} ms")
