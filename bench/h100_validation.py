"""The simulator against the committed H100 measurements it was not fitted on: for each run in
profiles/measurements/h100_2026-11-24/, `zerosim validate` with profiles/h100_gpt1b3.json, and a
table of the errors (peak allocated, peak reserved, memory after forward, compute and step time
where the run timed a real step). Runs on any machine: the measurements are files.

    python bench/h100_validation.py

Goals (issue "On a real H100"): peak allocated within 3%, reserved within 10%, step time within
10%. Counts against each goal are printed; nothing is judged here.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zerosim.calibration.validate import validate  # noqa: E402
from zerosim.files import read_json_object  # noqa: E402

RUNS = ROOT / "profiles" / "measurements" / "h100_2026-11-24"
PROFILE = ROOT / "profiles" / "h100_gpt1b3.json"
COLUMNS = {"peak_bytes": "peak alloc", "peak_reserved_bytes": "peak reserved",
           "memory_after_forward_bytes": "after fwd", "compute_s": "compute",
           "step_time_s": "step time"}
GOALS = {"peak_bytes": 3.0, "peak_reserved_bytes": 10.0, "step_time_s": 10.0}


def main() -> int:
    paths = sorted(RUNS.glob("*.json"))
    print(f"{len(paths)} H100 runs held out from {PROFILE.relative_to(ROOT)} "
          f"(fitted on gpt1b3, 1 process, seq 2048, micro-batches 1, 2, 4)\n")
    print(f"{'run':30s}" + "".join(f"{c:>15s}" for c in COLUMNS.values()))
    errors: dict[str, list[float]] = {name: [] for name in COLUMNS}
    for path in paths:
        report = validate([read_json_object(path, "measurement")], [str(path)],
                          profile=str(PROFILE))
        row = {m["name"]: m["error_pct"] for m in report["metrics"]}
        cells = []
        for name in COLUMNS:
            value = row.get(name)
            if value is not None:
                errors[name].append(value)
            cells.append(f"{value:+14.1f}%" if value is not None else f"{'-':>15s}")
        print(f"{path.stem:30s}" + "".join(cells))
    print()
    for name, label in COLUMNS.items():
        values = errors[name]
        if not values:
            continue
        line = (f"{label:14s} mean |error| {statistics.fmean(abs(v) for v in values):5.1f}% "
                f"over {len(values)}, worst {max(values, key=abs):+.1f}%")
        if name in GOALS:
            within = sum(abs(v) <= GOALS[name] for v in values)
            line += f"; within the {GOALS[name]:g}% goal: {within} of {len(values)}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
