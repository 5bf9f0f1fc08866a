"""The shareable report: one scenario's memory, step, timeline, trade-offs and plan on one
self-contained HTML page (`zerosim report`), opened offline and sent as one file.

`gather` runs what the commands run (memory_table, simulate, plan, rows_of over GPU counts) and
keeps their JSON as the commands print it; `render` turns that into the page, reading only the
gathered data and the figures drawn from it (plots.py). Every number in a table cell carries the
exact value it shows (`data-path`, `data-value`), and the whole of the data is in the page as
JSON (`<script id="zerosim-data">`), so a reader, or a test, can check the page against `--json`.
plotly.js is inlined once in <head>: the page needs no network.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, Callable

from zerosim.analytic.memory import memory_table, table_stages
from zerosim.errors import InputError, brief
from zerosim.scenario.config import Scenario
from zerosim.tradeoffs.budget import budget_rows, duration_text

GPU_FACTORS = (1 / 8, 1 / 4, 1 / 2, 1, 2)
"""The trade-off figures' world sizes, as multiples of the scenario's (whole nodes from one node
on): where a stage starts to fit, and what doubling the cluster buys."""
TABLES = ("model", "cluster", "training", "parallelism", "variation")
GB_BYTES = 10**9  # the tables' unit, as `zerosim simulate` prints


def generated_at() -> str:
    """Now in UTC, or SOURCE_DATE_EPOCH's time where it is set (reproducible-builds.org's
    convention: the docs' screenshot is remade byte for byte)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is not None:
        try:
            if not (epoch.isascii() and epoch.isdigit()):
                raise ValueError
            moment = datetime.fromtimestamp(int(epoch), tz=timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise InputError(f"SOURCE_DATE_EPOCH={brief(epoch)} is not a whole number of "
                             f"seconds since 1970 up to the year 9999") from None
    else:
        moment = datetime.now(timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def report_gpus(scenario: Scenario, gpus: tuple[int, ...] = ()) -> list[int]:
    """The world sizes of the trade-off figures: `gpus` as given, or GPU_FACTORS times the
    scenario's, each one the scenario's own keys allow (t x p and the shard group divide it)."""
    from zerosim.tradeoffs.plan import allowed_index, gpu_count, gpu_index

    if gpus:
        bad = [g for g in gpus if allowed_index(scenario, gpu_index(scenario, g))
               != gpu_index(scenario, g) or gpu_count(scenario, gpu_index(scenario, g)) != g]
        if bad:
            raise InputError(f"--gpus {bad[0]}: not a world size this scenario allows (whole "
                             f"nodes of {scenario.cluster.gpus_per_node} past one node, and "
                             f"divisible by its tensor x pipeline degree and shard group)")
        return sorted(set(gpus))
    sizes = set()
    for factor in GPU_FACTORS:
        index = gpu_index(scenario, max(1, round(scenario.world_size * factor)))
        sizes.add(gpu_count(scenario, allowed_index(scenario, index)))
    return sorted(sizes)


def gather(scenario: Scenario, *, notes: tuple[str, ...] = (), tokens: int | None = None,
           price_per_gpu_hour: float | None = None, gpus: tuple[int, ...] = (),
           mode: str = "auto", command: str | None = None,
           progress: Callable[..., None] | None = None) -> dict[str, Any]:
    """Everything the page shows, as the commands' --json: memory, simulate (each stage),
    the budget (with `tokens`), plan, the trade-off rows (sweep's, one per world size and
    stage), the notes; and the trace of the scenario's own stage for its timeline."""
    from zerosim import report
    from zerosim.version import __version__
    from zerosim.sim.engine import check_steps, simulate
    from zerosim.sim.trace import chrome_trace
    from zerosim.tradeoffs.plan import plan
    from zerosim.tradeoffs.plan_axes import with_world
    from zerosim.tradeoffs.sweep import rows_of
    from zerosim.units import GiB

    stages = list(table_stages(scenario))
    timed = scenario.training.seq_len is not None  # a bare Ψ without a sequence: memory alone
    if tokens is not None and not timed:
        raise InputError("--tokens needs a step time, and a scenario without training.seq_len "
                         "has none: set training.seq_len")
    sizes = report_gpus(scenario, gpus) if timed else []
    total, done = (2 + len(stages) + len(sizes)) if timed else 1, 0  # + the trace, the plan

    def tick(unit: str = "parts") -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, unit)

    data: dict[str, Any] = {"zerosim": __version__, "generated": generated_at(),
                            "command": command, "notes": [*notes, *scenario.default_notes],
                            "inputs": {t: asdict(getattr(scenario, t)) for t in TABLES},
                            "memory": report.memory_json(scenario, rows := memory_table(scenario))}
    data["simulate"], data["budget"], data["sweep"], data["plan"] = [], None, [], None
    data["summary"] = report.format_memory_table(scenario, rows)  # the same rows: once
    trace = None
    if timed:
        check_steps(scenario, stages, mode, False)
        own = scenario.training.zero_stage if scenario.training.zero_stage in stages else stages[0]
        results = []
        for stage in stages:  # the timeline's stage keeps its events: simulated once
            results.append(simulate(scenario, stage, mode=mode, keep_events=stage == own))
            tick("stages simulated")
        data["simulate"] = [r.as_dict() for r in results]
        data["summary"] = report.format_simulation_table(scenario, results)
        trace = chrome_trace([results[stages.index(own)]], scenario=scenario)
        data["timeline_stage"] = own
        tick("parts")
        if tokens is not None:
            data["budget"] = budget_rows(data["simulate"], scenario.world_size, tokens,
                                         price_per_gpu_hour)
        for size in sizes:
            data["sweep"] += rows_of(with_world(scenario, size), stages, {}, mode)
            tick("world sizes simulated")
    data["plan"] = plan(scenario, round(scenario.cluster.hbm_GiB * GiB), mode=mode)
    tick()
    # as JSON holds it (tuples as lists), so the API's to_dict() equals the page's data
    return {"data": json.loads(json.dumps(data, allow_nan=False)), "trace": trace}


MAX_TIMELINE_EVENTS = 100_000
"""Past this many events a step's timeline is left off the page: GPT-1T's 64 pipeline stages of
1536 micro-batches drew 53 MB that a browser could not open; `zerosim simulate --trace` and
ui.perfetto.dev draw such a step."""


def timeline_events(trace: dict[str, Any]) -> int:
    return len(trace.get("stepEvents", ())) + len(trace.get("pipelineEvents", ()))


def figures(gathered: dict[str, Any]) -> list[tuple[str, Any]]:
    """The page's figures, drawn from the gathered data alone (STYLE.md 10)."""
    from zerosim.tradeoffs import plots

    data, out, trace = gathered["data"], [], gathered["trace"]
    if trace is not None and timeline_events(trace) <= MAX_TIMELINE_EVENTS:
        out.append(("One step on the simulated cluster", plots.timeline_figure(trace)))
    if data["sweep"]:  # each row judged against its own GPU's memory, named on its line
        out.append(("Per-rank memory against GPU count", plots.memory_figure(data["sweep"])))
        out.append(("Memory against communication", plots.tradeoff_figure(data["sweep"])))
    return out


# ---- the page ----------------------------------------------------------------------------------

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 0.5em 0; }
th, td { padding: 0.2em 0.7em; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.no { color: #b00; font-weight: bold; } tr.own { background: #f3f6ff; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
.meta { color: #555; } li { margin: 0.3em 0; }
"""

MEMORY_CELLS = (("params GB", "params_bytes"), ("grads GB", "grads_bytes"),
                ("optimizer GB", "optimizer_bytes"), ("activations GB", "activations_bytes"),
                ("buffers GB", "buffers_bytes"), ("host GB", "host_bytes"),
                ("peak GB", "peak_bytes"))
STEP_CELLS = (("step s", "step_time_s"), ("compute s", "compute_s"),
              ("exposed comm s", "exposed_comm_s"), ("comm GB/rank", "comm_bytes_per_rank_total"),
              ("peak GB", "peak_bytes"), ("device GB", "device_bytes"),
              ("tokens/s/GPU", "tokens_per_s_per_gpu"), ("MFU", "mfu"))


def shown(key: str, value: Any) -> str:
    """A cell's text for the value under `key`, in the units its header names."""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if value is None:
        return ""
    if key.endswith("_bytes") or key.endswith("_bytes_per_rank_total"):
        return f"{value / GB_BYTES:.2f}"
    if key == "mfu":
        return f"{value:.1%}"
    if key in ("tokens_per_s_per_gpu", "tokens_per_s"):
        return f"{value:.4g}"
    if key == "seconds":
        return duration_text(value)
    if key in ("gpu_hours", "cost"):
        return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _cell(path: str, key: str, value: Any) -> str:
    cls = ' class="no"' if value is False else ""
    return (f'<td{cls} data-path="{html.escape(path)}" '
            f"data-value='{html.escape(json.dumps(value))}'>{html.escape(shown(key, value))}</td>")


def _table(source: str, rows: list[dict[str, Any]], cells, own: int | None) -> str:
    head = "".join(f"<th>{html.escape(title)}</th>" for title, _ in (("stage", ""), *cells))
    body = []
    for i, row in enumerate(rows):
        mark = ' class="own"' if row["stage"] == own else ""
        name = f"{row['stage']} {html.escape(row['name'])}{' *' if row['stage'] == own else ''}"
        tds = "".join(_cell(f"{source}.{i}.{key}", key, row[key]) for _, key in cells)
        body.append(f"<tr{mark}><td>{name}</td>{tds}</tr>")
    return f'<table id="{source}"><tr>{head}</tr>{"".join(body)}</table>'


def _budget(data: dict[str, Any], own: int) -> str:
    rows = data["budget"]
    if rows is None:
        return ("<p>Give <code>--tokens</code> (e.g. 2T) for the time to train and the "
                "GPU-hours, and <code>--price-per-gpu-hour</code> for the cost.</p>")
    cells = [("time", "seconds"), ("GPU-hours", "gpu_hours"),
             ("tokens/s (all GPUs)", "tokens_per_s")]
    if rows[0]["cost"] is not None:
        cells.append((f"cost at {rows[0]['price_per_gpu_hour']:g} a GPU-hour", "cost"))
    first = rows[0]
    return (f"<p>{first['tokens']:,} tokens on {first['world_size']:,} GPUs, each stage at its "
            f"simulated step's throughput (the step alone: no evaluation, checkpoints, restarts "
            f"or queueing, so a lower bound).</p>" + _table("budget", rows, cells, own))


def _inputs(data: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{html.escape(table)}.{html.escape(key)}</td>"
                   f"<td>{html.escape(json.dumps(value))}</td></tr>"
                   for table, keys in data["inputs"].items() for key, value in keys.items())
    return f"<details><summary>every scenario key</summary><table>{rows}</table></details>"


def _script_json(value: Any) -> str:
    """JSON safe inside <script>: no <, > or & at all (a '</script>' would close the element,
    a '<!--<script>' would make the parser skip the real end), as plotly writes its own."""
    text = json.dumps(value, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render(gathered: dict[str, Any]) -> str:
    """The page: head (plotly.js inlined), then each section, then the data as JSON."""
    from plotly.offline import get_plotlyjs

    from zerosim.tradeoffs.plot_labels import model_text

    data = gathered["data"]
    memory = data["memory"]
    own = memory["zero_stage"]
    model = model_text(memory["model"], memory["params"]) or "a model"
    title = f"{model} on {memory['world_size']:,} x {memory['gpu']}"
    figs = "".join(f"<h2>{html.escape(name)}</h2>"
                   + fig.to_html(full_html=False, include_plotlyjs=False,
                                 default_width="100%", default_height="560px")
                   for name, fig in figures(gathered))
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in data["notes"]) or "<li>none</li>"
    step = (_table("simulate", data["simulate"], STEP_CELLS, own) if data["simulate"] else
            "<p>No step: the scenario has no sequence (training.seq_len), so memory alone.</p>")
    fits = [("fits", "fits_gpu_memory")]
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">zerosim {html.escape(data["zerosim"])}, {html.escape(data["generated"])}'
        + (f" | <code>{html.escape(data['command'])}</code>" if data["command"] else "") + "</p>",
        f"<pre>{html.escape(data['summary'])}</pre>", _inputs(data),
        "<h2>Notes: the defaults that decided the answer</h2>", f"<ul>{notes}</ul>",
        f"<h2>Memory per rank (1 GB = 10^9 bytes; fits: {memory['gpu_memory_GiB']:g} GiB less "
        f"{memory['overhead_bytes'] / GB_BYTES:.2f} GB of CUDA context and NCCL buffers)</h2>",
        _table("memory", memory["stages"], (*MEMORY_CELLS, *fits), own),
        "<h2>One training step per stage (* = training.zero_stage)</h2>", step,
        *(["<h2>Time to train</h2>", _budget(data, own)] if data["simulate"] else []),
        _left_out(gathered), figs, FITS_NOTE if data["sweep"] else "",
        "<h2>Plan: which stage, how many GPUs, how large a model</h2>",
        f"<pre>{html.escape(_plan_text(data['plan']))}</pre>",
        f'<script type="application/json" id="zerosim-data">{_script_json(data)}</script>',
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}: zerosim report</title><style>{STYLE}</style>"
            f"<script>{get_plotlyjs()}</script></head>\n<body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


FITS_NOTE = ("<p>The figures judge each point by its simulated device memory (the caching "
             "allocator's rounded segments, the CUDA context and NCCL's buffers: the sweep's "
             "fits_gpu_memory), the memory table by the analytic peak beside the context and "
             "buffers, so a point near the line can fit in one and not the other.</p>")


def _left_out(gathered: dict[str, Any]) -> str:
    """A sentence where the step's timeline is too large for a page."""
    trace = gathered["trace"]
    if trace is None or timeline_events(trace) <= MAX_TIMELINE_EVENTS:
        return ""
    return (f"<p>The step's timeline ({timeline_events(trace):,} events) is too large for a "
            f"page: <code>zerosim simulate --trace</code> writes it for ui.perfetto.dev.</p>")


def _plan_text(result: dict[str, Any]) -> str:
    from zerosim.tradeoffs.plan import format_plan

    return format_plan(result)
