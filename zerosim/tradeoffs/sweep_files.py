"""The results file of `zerosim sweep`: CSV (the rows; every resolved input is a column) or JSON
(the rows plus how they were made). Whichever executor ran the points (sweep.py's pool, Ray), the
same rows give the same bytes."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zerosim.errors import InputError
from zerosim.files import check_writable, write_text
from zerosim.tradeoffs.sweep import Vary

FORMAT_VERSION = 1


def columns_of(rows: Sequence[dict]) -> list[str]:
    return list(rows[0]) if rows else []


def _csv_cell(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else json.dumps(list(value)) if isinstance(value, (list, tuple)) \
        else value


def to_csv(rows: Sequence[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = columns_of(rows)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_cell(row[c]) for c in columns])
    return out.getvalue()


def to_json(rows: Sequence[dict], scenario_path: str, varies: Sequence[Vary],
            overrides: Sequence[str], deepspeed: str | None = None) -> str:
    return json.dumps({"zerosim_sweep": FORMAT_VERSION, "scenario": scenario_path,
                       "deepspeed": deepspeed, "vary": {v.key: list(v.values) for v in varies},
                       "overrides": list(overrides), "columns": columns_of(rows),
                       "rows": list(rows)}, indent=1, allow_nan=False) + "\n"


def output_format(path: str) -> str:
    """'csv' or 'json', from the name; checked before a sweep starts, with the place it goes
    (files.check_writable)."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".json"):
        raise InputError(f"--out {path}: the file name must end in .csv or .json")
    check_writable(Path(path), "--out")
    return suffix[1:]


def write_results(path: str, rows: Sequence[dict], scenario_path: str, varies: Sequence[Vary],
                  overrides: Sequence[str], deepspeed: str | None = None) -> None:
    """CSV (the rows: every resolved input is a column) or JSON (rows plus how they were made)."""
    text = (to_csv(rows) if Path(path).suffix.lower() == ".csv"
            else to_json(rows, scenario_path, varies, overrides, deepspeed))
    write_text(Path(path), text, "sweep results")
