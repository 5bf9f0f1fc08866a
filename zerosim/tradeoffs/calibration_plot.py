"""Simulated against measured (plotly): `zerosim validate --json` reports drawn on log-log axes,
time and memory apart, with y = x and each category's tolerance band around it (validate judges
them apart; a report from before that carries one `tolerance_pct` for both). Reads reports that
already exist; plot_inputs.read_reports checks them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from zerosim.calibration.validate import MEMORY, TIME
from zerosim.contract import DEFAULT_MEMORY_TOLERANCE_PCT, DEFAULT_TIME_TOLERANCE_PCT, STAGE_NAMES
from zerosim.errors import InputError
from zerosim.tradeoffs import plot_labels as labels
from zerosim.tradeoffs.plots import MS_PER_S, STAGE_COLORS
from zerosim.units import MiB


def _tolerance(reports: list[dict[str, Any]], tolerance_pct: float | None,
               category: str, default: float) -> tuple[float, str]:
    """The band of one panel: as given, else the reports' tolerance of its category (the widest
    when they differ), else the default."""
    if tolerance_pct is not None:
        return tolerance_pct, ""
    given = sorted({r.get("categories", {}).get(category, {}).get(
        "tolerance_pct", r.get("tolerance_pct")) for r in reports} - {None})
    if not given:
        return default, " (default)"
    if len(given) > 1:
        return given[-1], f" (widest of the reports' {', '.join(f'{t:g}' for t in given)} %)"
    return given[0], ""


# name suffix: panel, scale, unit, validate's category and its default tolerance
_PANELS = {"_s": (1, MS_PER_S, "ms", TIME, DEFAULT_TIME_TOLERANCE_PCT),
           "_bytes": (2, 1 / MiB, "MiB", MEMORY, DEFAULT_MEMORY_TOLERANCE_PCT)}


def _calibration_points(reports: list[dict[str, Any]]) -> tuple[dict[int, list], list[str]]:
    """(report, metric) pairs per panel (time, memory), and the metrics a log axis cannot draw."""
    points: dict[int, list[tuple[dict, dict]]] = {1: [], 2: []}
    skipped = []
    for report in reports:
        for m in report["metrics"]:
            col = next((p[0] for suffix, p in _PANELS.items() if m["name"].endswith(suffix)), None)
            if col and (m["measured"] or 0) > 0 and (m["simulated"] or 0) > 0:  # log axes
                points[col].append((report, m))
            else:
                skipped.append(f"{m['name']} ({STAGE_NAMES[report['stage']]})")
    if not points[1] and not points[2]:
        raise InputError("nothing to plot: no metric of the reports has a positive measured and "
                         "simulated value")
    return points, skipped


def calibration_figure(reports: list[dict[str, Any]],
                       tolerance_pct: float | None = None) -> go.Figure:
    """Simulated against measured, time metrics (`*_s`, ms) left and memory (`*_bytes`, MiB)
    right, log-log, with y = x and a band of ±tolerance around it (`tolerance_pct` for both
    panels, or each category's from the reports)."""
    points, skipped = _calibration_points(reports)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("time (ms)", "memory (MiB)"))
    legend: set[str] = set()

    def add(col: int, name: str, **trace: Any) -> None:  # each name in the legend once
        fig.add_scatter(name=name, legendgroup=name, showlegend=name not in legend, row=1,
                        col=col, **trace)
        legend.add(name)

    for col, scale, unit, category, default in _PANELS.values():
        values = [m[k] * scale for _, m in points[col] for k in ("measured", "simulated")]
        if not values:
            continue
        x = [min(values) / 1.5, max(values) * 1.5]
        tolerance, how = _tolerance(reports, tolerance_pct, category, default)
        band = f"within ±{tolerance:g}%{how}"
        fig.add_scatter(x=x, y=[max(1 - tolerance / 100, 1e-6) * v for v in x], mode="lines",
                        line={"width": 0}, legendgroup=band, showlegend=False, hoverinfo="skip",
                        row=1, col=col)  # the band's lower edge, which the next trace fills to
        add(col, band, x=x, y=[(1 + tolerance / 100) * v for v in x], mode="lines",
            fill="tonexty", fillcolor="rgba(120,120,120,0.2)", line={"width": 0}, hoverinfo="skip")
        add(col, "simulated = measured", x=x, y=x, mode="lines", hoverinfo="skip",
            line={"color": "black", "dash": "dash", "width": 1})
        for report in reports:
            members = [m for r, m in points[col] if r is report]
            if members:
                add(col, _report_name(report, several=len(reports) > 1), mode="markers",
                    x=[m["measured"] * scale for m in members],
                    y=[m["simulated"] * scale for m in members],
                    marker={"color": STAGE_COLORS[report["stage"]], "size": 9}, hoverinfo="text",
                    hovertext=[f"{m['name']} ({STAGE_NAMES[report['stage']]})<br>measured "
                               f"{m['measured'] * scale:.4g} {unit}<br>simulated "
                               f"{m['simulated'] * scale:.4g} {unit}<br>error "
                               f"{(m['simulated'] / m['measured'] - 1) * 100:+.1f}%"
                               for m in members])
        axis = labels.log_axis(x)  # whole values at 1, 2, 5 x 10^k, never a bare "3" for 30
        fig.update_xaxes(title_text=f"measured ({unit})", row=1, col=col, **axis)
        fig.update_yaxes(title_text=f"simulated ({unit})", row=1, col=col, **axis)
    title = "Simulated against measured"
    if skipped:
        title += (f"<br><sup>{len(skipped)} metric{'s' * (len(skipped) > 1)} skipped (no positive "
                  f"measured and simulated value): {', '.join(skipped[:6])}"
                  f"{', ...' if len(skipped) > 6 else ''}</sup>")
    fig.update_layout(title_text=title, hovermode="closest")
    return fig


def _report_name(report: dict[str, Any], several: bool) -> str:
    """The stage and its worst error per category (a report from before: its one mean)."""
    name = STAGE_NAMES[report["stage"]]
    worst = {c: v for c, summary in report.get("categories", {}).items()
             if isinstance(v := summary.get("max_abs_error_pct"), (int, float))}
    if worst:
        name += f" (max |error| {', '.join(f'{c} {v:.1f}%' for c, v in worst.items())})"
    elif isinstance(report.get("mean_abs_error_pct"), (int, float)):
        name += f" (mean |error| {report['mean_abs_error_pct']:.1f}%)"
    if several and report.get("source"):
        name += f" {Path(report['source']).name}"
    return name
