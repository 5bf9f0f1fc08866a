"""What keeps a figure's meaning once it is shared without its command line: the subject in the
title (the model and the cluster, read from the sweep's rows or the trace), the GPU's memory as a
limit with which points fit under it, and log axes whose labels are whole numbers.

plotly labels a log axis spanning less than a few decades with bare mantissas between the
decades ("2", "5": 20 and 50 GiB read as 2 and 5); `log_axis` puts ticks at 1, 2 and 5 times the
powers of ten and writes each as its value. Nothing here draws; plots.py and calibration_plot.py
do.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from zerosim.units import GiB

DECADES_FOR_125 = 4
"""Up to this many decades a log axis gets ticks at 1, 2 and 5 x 10^k (about a dozen labels at
most); wider, at the powers of ten alone, so labels do not run into each other; within one
decade, at 1, 2, 3 and 5 x 10^k, so that it shows more than two."""
NOT_FIT_SYMBOL = "x"
"""The marker of a point that does not fit its GPU's memory; one that fits keeps the circle."""
FIT_SYMBOL = "circle"


# ---- the subject: the model and the cluster -----------------------------------------------------

def _one(rows: list[dict[str, Any]], column: str) -> Any:
    """The column's value if every row holds the same one, else None (absent, or several)."""
    values = {repr(row.get(column)) for row in rows}
    return rows[0].get(column) if len(values) == 1 else None


def model_text(name: Any, params: Any) -> str:
    """The model as its scenario names it, else its parameter count ("7.5B parameters")."""
    if name is not None and not isinstance(name, bool) and str(name).strip():
        return str(name).strip()  # a CSV cell reads "7" back as the number 7
    if isinstance(params, (int, float)) and not isinstance(params, bool) and params > 0:
        return f"{params / 1e9:.3g}B parameters"
    return ""


def cluster_text(nodes: Any, gpus_per_node: Any, gpu: Any) -> str:
    """"8 x 8 GPU-NAME" (nodes x GPUs a node), "1-128 x 8 GPU-NAME" over a range of nodes; what
    is unknown or varies left out."""
    gpu = gpu if isinstance(gpu, str) and gpu else "GPUs"
    if not isinstance(gpus_per_node, int):
        return gpu if gpu != "GPUs" else ""
    if isinstance(nodes, int):
        return f"{nodes} x {gpus_per_node} {gpu}"
    if isinstance(nodes, tuple) and nodes:
        return f"{nodes[0]}-{nodes[-1]} x {gpus_per_node} {gpu}"
    return f"{gpus_per_node} {gpu} a node"


def sweep_subject(rows: list[dict[str, Any]], model: str | None = None,
                  gpu: str | None = None) -> str:
    """"Model, 8 x 8 GPU" of a sweep's rows: what the rows share (the `model.*` and `cluster.*`
    input columns `zerosim sweep` writes), `model` and `gpu` replacing the rows' names. A file
    without those columns (an older sweep, hand-made rows) gives what it has, maybe nothing."""
    nodes = sorted({r.get("cluster.nodes") for r in rows if type(r.get("cluster.nodes")) is int})
    one_node_count = _one(rows, "cluster.nodes")
    node_text = (one_node_count if type(one_node_count) is int
                 else tuple(nodes) if nodes and len(nodes) > 1 else None)
    parts = (model_text(model if model is not None else _one(rows, "model.name"),
                        _one(rows, "params")),
             cluster_text(node_text, _one(rows, "cluster.gpus_per_node"),
                          gpu if gpu is not None else _one(rows, "cluster.gpu")))
    return ", ".join(p for p in parts if p)


def trace_subject(trace: dict[str, Any], model: str | None = None,
                  gpu: str | None = None) -> str:
    """"Model, 8 x 8 GPU" of a `zerosim simulate --trace` file (its "scenario"; a trace written
    before it has none, and a pipelined one names its model under "pipeline")."""
    about = trace.get("scenario") or {}
    name = model if model is not None else about.get(
        "model", (trace.get("pipeline") or {}).get("model"))
    parts = (model_text(name, about.get("params")),
             cluster_text(about.get("nodes"), about.get("gpus_per_node"),
                          gpu if gpu is not None else about.get("gpu")))
    return ", ".join(p for p in parts if p)


def titled(subject: str, what: str) -> str:
    """"Subject: what", or `what` capitalised when there is no subject."""
    return f"{subject}: {what}" if subject else what[:1].upper() + what[1:]


# ---- the GPU's memory and what fits under it --------------------------------------------------

def limit_of(row: dict[str, Any], gpu_memory_bytes: float | None = None) -> float:
    """The memory a row's rank must fit: `gpu_memory_bytes` where given (one limit for all),
    else the row's own GPU's (`gpu_memory_bytes`, cluster.hbm_GiB in bytes)."""
    return row["gpu_memory_bytes"] if gpu_memory_bytes is None else gpu_memory_bytes


def fits(row: dict[str, Any], limit_bytes: float) -> bool:
    """Whether the row's rank fits `limit_bytes`: its peak (what the figures draw) and, where the
    sweep simulated it, what the device holds besides (`device_bytes`: the allocator's reserve,
    the CUDA context and the libraries' buffers), as the sweep's `fits_gpu_memory` judges it."""
    device = row.get("device_bytes")
    return row["peak_bytes"] <= limit_bytes and (
        not isinstance(device, (int, float)) or device <= limit_bytes)


def not_fit_text(row: dict[str, Any], limit_bytes: float) -> str:
    """A hover's line saying why a point does not fit; "" for one that fits."""
    if fits(row, limit_bytes):
        return ""
    if row["peak_bytes"] > limit_bytes:
        return f"<b>does not fit {limit_bytes / GiB:.4g} GiB</b>"
    return (f"<b>does not fit {limit_bytes / GiB:.4g} GiB</b>: the device holds "
            f"{row['device_bytes'] / GiB:.4g} GiB with the CUDA context and buffers")


def limits(rows: list[dict[str, Any]], gpu_memory_bytes: float | None = None,
           gpu: str | None = None) -> list[tuple[float, str]]:
    """Each distinct limit of the rows with its label ("80 GiB GPU-NAME"), smallest first."""
    found: dict[float, set[str]] = {}
    for row in rows:
        name = gpu if gpu is not None else row.get("cluster.gpu")
        found.setdefault(limit_of(row, gpu_memory_bytes), set()).add(
            name if isinstance(name, str) and name and gpu_memory_bytes is None else "")
    return [(limit, f"{limit / GiB:.4g} GiB {' / '.join(sorted(names - {''})) or 'per GPU'}")
            for limit, names in sorted(found.items())]


def symbols(rows: list[dict[str, Any]], gpu_memory_bytes: float | None = None) -> list[str]:
    """The marker of each row: NOT_FIT_SYMBOL where it does not fit, FIT_SYMBOL where it does."""
    return [FIT_SYMBOL if fits(r, limit_of(r, gpu_memory_bytes)) else NOT_FIT_SYMBOL
            for r in rows]


# ---- log axes ------------------------------------------------------------------------------------

def log_ticks(low: float, high: float) -> list[float]:
    """Tick values of a log axis over [low, high] (both > 0): 1, 2 and 5 x 10^k from the decade
    at or below `low` to the one at or above `high`; the powers of ten alone past DECADES_FOR_125
    decades, 1, 2, 3 and 5 x 10^k within one. Ticks beyond the drawn range are not shown, so
    the ends may spill."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    return [m * 10**k if k >= 0 else m / 10**-k  # 2 / 10 is 0.2 exactly as written; 2e-1 too
            for k in range(first, last + 1) for m in _mantissas(low, high)]


def _mantissas(low: float, high: float) -> tuple[int, ...]:
    decades = math.log10(high / low)
    return ((1,) if decades > DECADES_FOR_125 else (1, 2, 5) if decades > 1 else (1, 2, 3, 5))


def tick_text(value: float) -> str:
    """A tick's value as a reader writes it: 0.5, 20, 100, 2000 (never a bare mantissa)."""
    return f"{value:g}"


def log_axis(values: Iterable[float]) -> dict[str, Any]:
    """A log axis's settings (for update_xaxes / update_yaxes) labelled with whole values over
    the positive `values`."""
    positive = [v for v in values if v > 0]
    if not positive:
        return {"type": "log"}
    low, high = min(positive), max(positive)
    ticks = log_ticks(low, high)
    if sum(low <= t <= high for t in ticks) < 2:  # a narrow range (60-80 GiB): every mantissa
        ticks = [m * t for t in log_ticks(low, high)[::len(_mantissas(low, high))]
                 for m in range(1, 10)]
    if sum(low <= t <= high for t in ticks) < 2:  # narrower still (12-18): plotly's own
        return {"type": "log"}                     # ticks, which label a sub-decade range whole
    return {"type": "log", "tickmode": "array", "tickvals": ticks,
            "ticktext": [tick_text(t) for t in ticks]}


def memory_axis(rows: list[dict[str, Any]],
                gpu_memory_bytes: float | None = None) -> dict[str, Any]:
    """log_axis over the rows' peaks and the GPUs' memory lines (limits), in GiB: the axis that
    memory_figure and tradeoff_figure draw peak memory on, so each limit line stays in range."""
    return log_axis([r["peak_bytes"] / GiB for r in rows]
                    + [limit / GiB for limit, _ in limits(rows, gpu_memory_bytes)])
