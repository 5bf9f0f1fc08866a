"""The results file of `zerosim sweep`: CSV (the rows; every resolved input is a column) or JSON
(the rows plus how they were made), written row by row as the points finish, so that a sweep's
memory is bounded by the points in flight, not by the points. Whichever executor ran the points
(sweep.py's pool, Ray), the same rows give the same bytes, and the file appears whole or not at
all (files.AtomicFile). Text cells that a spreadsheet would run as a formula are escaped (FORMULA_STARTS)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from zerosim import files
from zerosim.errors import InputError
from zerosim.files import check_writable
from zerosim.tradeoffs.sweep import Vary

FORMAT_VERSION = 1
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A text cell starting with one of these is a formula to a spreadsheet (`=HYPERLINK(...)` in a
model's name); it is written after a single quote, as OWASP's CSV-injection page advises. Numbers
are written as numbers, a negative one too: only text (names, paths, JSON lists) is escaped."""


def _csv_cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    text = json.dumps(list(value)) if isinstance(value, (list, tuple)) else value
    if isinstance(text, str) and text.startswith(FORMULA_STARTS):
        return "'" + text
    return text


def _csv_line(cells: Iterable[Any]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


def csv_pieces(rows: Iterable[dict]) -> Iterator[str]:
    """The CSV's text, a row at a time: the header (the first row's columns), then the rows."""
    columns = None
    for row in rows:
        if columns is None:
            columns = list(row)
            yield _csv_line(columns)
        yield _csv_line(_csv_cell(row[c]) for c in columns)
    if columns is None:
        yield "\n"  # no rows: an empty header, as csv.writer writes it


def json_pieces(rows: Iterable[dict], scenario_path: str, varies: Sequence[Vary],
                overrides: Sequence[str], deepspeed: str | None = None) -> Iterator[str]:
    """The JSON's text, a row at a time, byte for byte what json.dumps(..., indent=1) gives for
    the whole object: the columns (the first row's) come before the rows, so the head waits for
    the first row."""
    head = {"zerosim_sweep": FORMAT_VERSION, "scenario": scenario_path, "deepspeed": deepspeed,
            "vary": {v.key: list(v.values) for v in varies}, "overrides": list(overrides)}
    first = True
    for row in rows:
        text = "  " + json.dumps(row, indent=1, allow_nan=False).replace("\n", "\n  ")
        if first:  # the head, without its closing brace
            yield json.dumps({**head, "columns": list(row)}, indent=1)[:-2] + ',\n "rows": [\n'
            yield text
            first = False
        else:
            yield ",\n" + text
    if first:
        yield json.dumps({**head, "columns": [], "rows": []}, indent=1) + "\n"
    else:
        yield "\n ]\n}\n"


def output_format(path: str) -> str:
    """'csv' or 'json', from the name; checked before a sweep starts, with the place it goes
    (files.check_writable)."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".json"):
        raise InputError(f"--out {path}: the file name must end in .csv or .json")
    check_writable(Path(path), "--out")
    return suffix[1:]


def write_results(path: str, rows: Iterable[dict], scenario_path: str, varies: Sequence[Vary],
                  overrides: Sequence[str], deepspeed: str | None = None) -> int:
    """CSV (the rows: every resolved input is a column) or JSON (rows plus how they were made),
    each row written as `rows` yields it; the number of rows. Whatever stops the rows (a bad
    point, Ctrl-C) leaves the previous file, or none, as it was."""
    count = [0]

    def counted() -> Iterator[dict]:
        for row in rows:
            count[0] += 1
            yield row

    pieces = (csv_pieces(counted()) if Path(path).suffix.lower() == ".csv"
              else json_pieces(counted(), scenario_path, varies, overrides, deepspeed))
    with files.AtomicFile(path, "sweep results") as out:
        for piece in pieces:
            out.write_text(piece)
    return count[0]
