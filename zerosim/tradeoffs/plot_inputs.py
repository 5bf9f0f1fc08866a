"""Reading the result files `zerosim plot` draws: sweep results (CSV or JSON), simulated traces
and validate reports. Every way a file can be unusable (missing, malformed, the wrong kind of
result, a missing column, a value that is not a number) becomes one InputError line that names
the file, so the figures in plots.py can trust what they are given. Also which inputs a sweep's
rows vary besides stage and GPU count (series_columns), from the sweep's `table.key` columns.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from zerosim.errors import InputError, brief
from zerosim.files import parse_json, read_text

SWEEP_FORMAT = 1  # the "zerosim_sweep" value this reader understands
_TEXT_COLUMNS = {"stage_name"}  # of those the figures need; every other one must be a number
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")

# What each kind of zerosim JSON output holds, the kinds that draw it, and what to do instead.
_WHAT = (("zerosim sweep --out", ("zerosim_sweep",), ("memory", "tradeoff"),
          "use --kind memory or tradeoff"),
         ("zerosim simulate --trace", ("stepEvents",), ("timeline",), "use --kind timeline"),
         ("zerosim validate --json", ("metrics",), ("calibration",),
          "use --kind calibration"),
         ("zero-real run --out measurement", ("events", "memory_samples", "ranks"), (),
          "`zerosim validate MEASUREMENT --json > report.json` makes what --kind calibration "
          "draws"))


def _read_json(path: Path, what: str, text: str | None = None) -> Any:
    """The file's JSON, within files.parse_json's limits of size and nesting, like every JSON
    file zerosim reads; a sweep CSV given where JSON belongs is named as what it is."""
    text = read_text(path, what) if text is None else text
    try:
        return parse_json(text, f"{what} {path}")
    except InputError:
        header = text.partition("\n")[0]
        if not header.lstrip().startswith(("{", "[")) and "world_size," in header:  # a sweep CSV
            raise InputError(f"{path} is a zerosim sweep CSV, not a {what} (use --kind memory or "
                             f"tradeoff)") from None
        raise


def _expect(data: Any, path: Path, kind: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """`data` must be a JSON object holding `keys`; otherwise say what the file is instead."""
    if isinstance(data, dict) and all(k in data for k in keys):
        return data
    if isinstance(data, list):
        raise InputError(f"{path} holds a JSON list (like `zerosim simulate --json`), not a result "
                         f"--kind {kind} can draw")
    for name, marks, kinds, instead in _WHAT:
        if isinstance(data, dict) and all(k in data for k in marks) and kind not in kinds:
            raise InputError(f"{path} is a {name} file, not a result --kind {kind} can draw "
                             f"({instead})")
    absent = [k for k in keys if not isinstance(data, dict) or k not in data]
    raise InputError(f"{path}: not a result --kind {kind} can draw (no {', '.join(absent)})")


# ---- sweep results: one row per (point, stage) -------------------------------------------------

def csv_value(text: str) -> Any:
    """A CSV cell back to what the sweep wrote: int, float, bool, None (empty) or the string."""
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def _read_csv(path: Path, text: str) -> tuple[list[str], list[dict[str, Any]]]:
    try:
        lines = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise InputError(f"sweep results {path}: invalid CSV: {exc}") from None
    lines = [line for line in lines if line]  # a trailing blank line is not a row
    if not lines:
        raise InputError(f"sweep results {path} is empty")
    columns = lines[0]
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if len(line) != len(columns):
            raise InputError(f"sweep results {path}: line {number} has {len(line)} fields, "
                             f"the header has {len(columns)}")
        rows.append({c: csv_value(v) for c, v in zip(columns, line)})
    return columns, rows


def read_sweep(path: str | Path, kind: str, needed: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of a `zerosim sweep --out` file (.csv or .json), with `needed` columns present and
    each a number (stage_name text, stage 0-3) in every row."""
    path = Path(path)
    text = read_text(path, "sweep results")
    if text.lstrip().startswith(("{", "[")):
        data = _expect(_read_json(path, "sweep results", text), path, kind, ("zerosim_sweep",))
        if data["zerosim_sweep"] != SWEEP_FORMAT:
            raise InputError(f"{path}: sweep format {data['zerosim_sweep']!r}; this zerosim reads "
                             f"format {SWEEP_FORMAT}")
        columns, rows = data.get("columns"), data.get("rows")
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows) or \
                not isinstance(columns, list):
            raise InputError(f"{path}: a sweep needs 'columns' (a list) and 'rows' (objects)")
    else:
        columns, rows = _read_csv(path, text)
    missing = [c for c in needed if c not in columns]
    if missing:
        raise InputError(f"{path}: missing column {', '.join(missing)} (--kind {kind} reads "
                         f"`zerosim sweep --out` results)")
    if not rows:
        raise InputError(f"{path}: no rows to plot")
    checked = [*needed, *(c for c in _READ_IF_PRESENT if c in columns and c not in needed)]
    for number, row in enumerate(rows, start=1):
        for column in checked:
            _check_cell(path, number, column, row.get(column))
    return rows


_LOG_AXIS_COLUMNS = ("world_size", "peak_bytes", "gpu_memory_bytes")
_READ_IF_PRESENT = ("device_bytes",)  # whether a point fits (plot_labels.fits), where simulated


def _check_cell(path: Path, number: int, column: str, value: Any) -> None:
    if column in _TEXT_COLUMNS:
        ok = isinstance(value, str)
    elif column == "stage":
        ok = _is_stage(value)
    elif column in _LOG_AXIS_COLUMNS:  # a log axis cannot draw 0: say so, don't drop the point
        ok = _is_number(value) and value > 0
    else:  # bytes, seconds, counts: the figures divide them
        ok = _is_number(value) and value >= 0
    if not ok:
        what = ("a ZeRO stage (0-3)" if column == "stage" else "a positive number (a log axis)"
                if column in _LOG_AXIS_COLUMNS else "a usable value")
        raise InputError(f"{path}: row {number}: {column} = {value!r} is not {what}")


def key_of(value: Any) -> str:
    """A cell as a hashable, comparable key."""
    return json.dumps(value, sort_keys=True, default=str)  # lists (slow_ranks) are values too


def _determined(rows: list[dict[str, Any]], column: str, by: list[str]) -> bool:
    """Whether the values of `by` fix the value of `column` in every row."""
    values: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for row in rows:
        values[tuple(key_of(row.get(c)) for c in by)].add(key_of(row.get(column)))
    return all(len(v) == 1 for v in values.values())


def series_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The `table.key` inputs that tell lines apart besides stage and world size: those whose
    values differ across rows, less those the rest fix together with stage and world size (a
    sweep over cluster.nodes moves along one line; one over model.params draws one per value)."""
    columns = list(dict.fromkeys(c for row in rows for c in row if "." in c))
    keep = [c for c in columns if len({key_of(row.get(c)) for row in rows}) > 1]
    # cluster.nodes goes first: more GPUs along the x axis usually means more nodes. Then the
    # resolved inputs (later columns) before the varied keys, which the sweep writes first.
    for column in sorted(keep, key=lambda c: (c != "cluster.nodes", -columns.index(c))):
        others = [c for c in keep if c != column]
        if _determined(rows, column, ["stage", "world_size", *others]):
            keep = others
    return keep


# ---- a simulated step: zerosim simulate --trace -------------------------------------------------

_EVENT_KEYS = ("stage", "rank", "queue", "name", "phase", "op", "bytes", "start_s", "end_s")
_SAMPLE_KEYS = ("stage", "rank", "t_s", "bytes_by_category")


def read_trace(path: str | Path) -> dict[str, Any]:
    """A `zerosim simulate --trace` file: its stepEvents and memorySamples, checked."""
    path = Path(path)
    data = _expect(_read_json(path, "trace"), path, "timeline", ("stepEvents",))
    if "memorySamples" not in data:
        raise InputError(f"{path}: a trace without memorySamples (written by an older zerosim): "
                         f"run `zerosim simulate --trace` again")
    for key, fields in (("stepEvents", _EVENT_KEYS), ("memorySamples", _SAMPLE_KEYS)):
        records = data[key]
        if not isinstance(records, list) or not all(
                isinstance(r, dict) and all(f in r for f in fields) for r in records):
            raise InputError(f"{path}: {key} must be a list of objects with "
                             f"{', '.join(fields)}")
    for i, e in enumerate(data["stepEvents"]):
        _check_event(path, i, e)
    for i, s in enumerate(data["memorySamples"]):
        by_category = s["bytes_by_category"]
        if not _is_stage(s["stage"]) or not _is_number(s["t_s"]) or not isinstance(
                by_category, dict) or not all(_is_number(v) for v in by_category.values()):
            raise InputError(f"{path}: memorySamples[{i}] needs a stage 0-3, a number t_s and "
                             f"bytes_by_category of numbers")
    if "scenario" in data:
        _check_subject(path, data["scenario"])
    if "pipelineEvents" in data:
        _check_pipeline(path, data)
    elif not data["stepEvents"]:
        raise InputError(f"{path}: the trace holds no step events")
    return data


_SUBJECT = (("model", str), ("gpu", str), ("params", int), ("gpu_memory_bytes", int),
            ("nodes", int), ("gpus_per_node", int))


def _check_subject(path: Path, subject: Any) -> None:
    """The trace's "scenario" (sim/trace.subject), which a figure's title reads: the model's name
    and the GPU's as text, the counts as whole numbers >= 0 (a trace from before it has none)."""
    for key, kind in _SUBJECT:
        value = subject.get(key) if isinstance(subject, dict) else None
        if type(value) is not kind or (kind is int and value < 0):
            raise InputError(f"{path}: scenario.{key} is {brief(value, json.dumps)}, not "
                             f"{'text' if kind is str else 'a whole number >= 0'} (the trace's "
                             f"\"scenario\" names the model and the cluster)")


_PIPELINE_RECORDS = (
    ("pipelineEvents", ("stage", "pipeline_stage", "lane", "kind", "name", "start_s", "end_s",
                        "micro", "chunk"),
     "numbers start_s <= end_s, micro and chunk, and text lane, kind and name"),
    ("pipelineMemory", ("stage", "pipeline_stage", "t_s", "bytes"), "numbers t_s and bytes"))
_TEXT = ("lane", "kind", "name")


def _check_pipeline(path: Path, data: dict[str, Any]) -> None:
    """What the pipeline's timeline reads of a pipelined trace (sim/trace.py, pipeline_trace):
    its layout, and events and memory samples of numbers, each on a pipeline stage."""
    if not isinstance(data.get("pipeline"), dict) or not data["pipelineEvents"]:
        raise InputError(f"{path}: a pipelined trace needs its \"pipeline\" layout and "
                         f"pipelineEvents")
    for key, fields, needs in _PIPELINE_RECORDS:
        records = data.get(key)
        if not isinstance(records, list) or not all(
                isinstance(r, dict) and all(f in r for f in fields) for r in records):
            raise InputError(f"{path}: {key} must be a list of objects with "
                             f"{', '.join(fields)}")
        for i, r in enumerate(records):
            numbers = [r[f] for f in fields[2:] if f not in _TEXT]
            if (not _is_stage(r["stage"]) or type(r["pipeline_stage"]) is not int
                    or r["pipeline_stage"] < 0 or not all(_is_number(n) for n in numbers)
                    or not all(isinstance(r[f], str) for f in fields if f in _TEXT)
                    or r.get("end_s", 0) < r.get("start_s", 0)):
                raise InputError(f"{path}: {key}[{i}] needs a stage 0-3, a pipeline_stage >= 0 "
                                 f"and {needs}")


def _check_event(path: Path, i: int, e: dict[str, Any]) -> None:
    """What timeline_figure reads of a step event (contract.SimulatedEvent): numbers for the bar,
    and the text and bytes that name it (a list where text belongs is unhashable; text where the
    bytes belong breaks their format)."""
    numbers = all(_is_number(e[k]) for k in ("rank", "start_s", "end_s"))
    if not _is_stage(e["stage"]) or not numbers or e["end_s"] < e["start_s"]:
        raise InputError(f"{path}: stepEvents[{i}] needs a stage 0-3 and numbers rank, "
                         f"start_s <= end_s")
    for key in ("name", "phase", "queue", "op"):
        if not isinstance(e[key], str) and not (key == "op" and e[key] is None):
            raise InputError(f"{path}: stepEvents[{i}].{key} is {brief(e[key], json.dumps)}, "
                             f"not a string{' or null' * (key == 'op')}")
    size = e["bytes"]
    if not (_is_number(size) and size >= 0) and not (size is None and not e["op"]):
        raise InputError(f"{path}: stepEvents[{i}].bytes is {brief(size, json.dumps)}, not a "
                         f"number >= 0 (null only without an op)")


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond any float (10**400)
        return False


def _is_stage(value: Any) -> bool:
    return type(value) is int and 0 <= value <= 3  # type(): True is an int too


# ---- predicted vs measured: zerosim validate --json ---------------------------------------------

def read_reports(paths: list[str | Path]) -> list[dict[str, Any]]:
    """`zerosim validate --json` reports, each with `source` (its file) added."""
    reports = []
    for path in map(Path, paths):
        report = _expect(_read_json(path, "validate report"), path, "calibration", ("metrics",))
        _check_report(path, report)
        reports.append({**report, "source": str(path)})
    return reports


def _check_report(path: Path, report: dict[str, Any]) -> None:
    """Each field calibration_figure reads: a metric's name, measured and simulated (each
    present, null where there is none), the stage, and the percentages in its legend and band."""
    metrics = report["metrics"]
    wanted = "a list of {name, measured, simulated} with numbers or null"
    if not isinstance(metrics, list):
        raise InputError(f"{path}: 'metrics' must be {wanted}")
    for i, m in enumerate(metrics):
        if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not all(
                k in m and (m[k] is None or _is_number(m[k])) for k in ("measured", "simulated")):
            raise InputError(f"{path}: 'metrics' must be {wanted} (metrics[{i}] is "
                             f"{brief(m, json.dumps)})")
    if not _is_stage(report.get("stage")):
        raise InputError(f"{path}: stage {report.get('stage')!r} is not a ZeRO stage (0-3)")
    mean = report.get("mean_abs_error_pct")  # the legend of a report from before categories
    if mean is not None and not _is_number(mean):
        raise InputError(f"{path}: mean_abs_error_pct is {brief(mean, json.dumps)}, not a "
                         f"finite number or null")
    categories = report.get("categories", {})  # validate's verdict per category
    if not isinstance(categories, dict) or not all(
            isinstance(c, dict) and all(c.get(k) is None or _is_number(c[k])
                                        for k in ("tolerance_pct", "max_abs_error_pct"))
            for c in categories.values()):
        raise InputError(f"{path}: 'categories' must map each category to "
                         f"{{tolerance_pct, max_abs_error_pct}} with numbers or null")
    for tolerance in [report.get("tolerance_pct"),
                      *(c.get("tolerance_pct") for c in categories.values())]:
        if tolerance is not None and not (_is_number(tolerance) and tolerance > 0):
            raise InputError(f"{path}: tolerance_pct {tolerance!r} is not a positive number")
