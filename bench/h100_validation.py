"""The simulator against every committed H100 measurement, with the H100's record built from
its microbenchmarks alone (profiles/h100_record_2026-11-24.json, bench/h100/record.py): for each
run in profiles/measurements/h100_2026-11-24/, `zerosim validate`; then the 1.3B calibration
runs kept in profiles/h100/calibrate_gpt1b3_2026-11-24.json (measurements.memory (stages 0-3, micro-batches 1, 2, 4,
one process), held out now that nothing is fitted on real steps. A table of the errors (peak
allocated, peak reserved, memory after forward, compute and step time where the run timed a
real step), and the timed runs' figures in milliseconds. Runs on any machine: the measurements
are files.

    python bench/h100_validation.py [--profile PATH]

Every run adds cluster.gpu = H100-80GB to its overrides: the runs ran on one (the scenario file
names a V100 cluster; the record replaces the GPU's compute, the catalogue keeps its memory and
CUDA context). Goals (issue 31): step time of the 350M and 1.3B runs within 10%, peak allocated
within 3%, reserved within 10%. Counts against each goal are printed; nothing is judged here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zerosim.calibration.validate import validate  # noqa: E402
from zerosim.files import read_json_object  # noqa: E402
from zerosim.scenario.load import load_scenario  # noqa: E402
from zerosim.sim.engine import simulate  # noqa: E402

RUNS = ROOT / "profiles" / "measurements" / "h100_2026-11-24"
PROFILE = ROOT / "profiles" / "h100_record_2026-11-24.json"
CALIBRATION = ROOT / "profiles" / "h100" / "calibrate_gpt1b3_2026-11-24.json"  # measurements only
GPU = "cluster.gpu=H100-80GB"
COLUMNS = {"peak_bytes": "peak alloc", "peak_reserved_bytes": "peak reserved",
           "memory_after_forward_bytes": "after fwd", "compute_s": "compute",
           "step_time_s": "step time"}
GOALS = {"peak_bytes": 3.0, "peak_reserved_bytes": 10.0, "step_time_s": 10.0}


def committed_runs(profile: Path) -> list[tuple[str, dict, dict]]:
    """(name, error % by metric, (measured, simulated) of the times) per committed run."""
    out = []
    for path in sorted(RUNS.glob("*.json")):
        m = read_json_object(path, "measurement")
        m["overrides"] = [*m.get("overrides", []), GPU]
        report = validate([m], [str(path)], profile=str(profile))
        errors = {x["name"]: x["error_pct"] for x in report["metrics"]}
        times = {x["name"]: (x["measured"], x["simulated"]) for x in report["metrics"]
                 if x["name"] in ("compute_s", "step_time_s") and x["error_pct"] is not None}
        out.append((path.stem, errors, times))
    return out


def calibration_runs(profile: Path) -> list[tuple[str, dict, dict]]:
    """The 1.3B runs `zero-real calibrate` measured (profiles/h100/calibrate_gpt1b3_2026-11-24.json), simulated
    as they ran: its scenario and overrides, one H100, the entry's stage and micro-batch."""
    data = json.loads(CALIBRATION.read_text())
    base = data["provenance"]
    out = []
    for e in data["measurements"]["memory"]:
        scenario = load_scenario(ROOT / base["scenario"], [
            *base["overrides"], GPU, "cluster.nodes=1", "cluster.gpus_per_node=1",
            f"training.zero_stage={e['stage']}", f"training.micro_batch={e['micro_batch']}",
            f"training.seq_len={e['seq_len']}", "training.overlap_comm=false",
            f"cluster.collective_impl={e['collectives']}",
            f"cluster.profile={json.dumps(str(profile))}"])
        r = simulate(scenario, e["stage"])
        pairs = {"peak_bytes": (e["peak_bytes"], r.peak_bytes),
                 "memory_after_forward_bytes": (e["phases"]["after_forward"],
                                                r.memory_at.get("after_forward")),
                 "compute_s": (e["timing"]["compute_s"], r.compute_s),
                 "step_time_s": (e["timing"]["step_time_s"], r.step_time_s)}
        errors = {k: (s - m) / m * 100 for k, (m, s) in pairs.items() if s is not None}
        times = {k: pairs[k] for k in ("compute_s", "step_time_s")}
        out.append((f"gpt1b3_s{e['stage']}_w1_mb{e['micro_batch']} (cal)", errors, times))
    return out


def table(rows: list[tuple[str, dict, dict]]) -> None:
    print(f"{'run':34s}" + "".join(f"{c:>15s}" for c in COLUMNS.values()))
    errors: dict[str, list[float]] = {name: [] for name in COLUMNS}
    for name, row, _ in rows:
        cells = []
        for metric in COLUMNS:
            value = row.get(metric)
            if value is not None:
                errors[metric].append(value)
            cells.append(f"{value:+14.1f}%" if value is not None else f"{'-':>15s}")
        print(f"{name:34s}" + "".join(cells))
    print()
    for metric, label in COLUMNS.items():
        values = errors[metric]
        if not values:
            continue
        line = (f"{label:14s} mean |error| {statistics.fmean(abs(v) for v in values):5.1f}% "
                f"over {len(values)}, worst {max(values, key=abs):+.1f}%")
        if metric in GOALS:
            within = sum(abs(v) <= GOALS[metric] for v in values)
            line += f"; within the {GOALS[metric]:g}% goal: {within} of {len(values)}"
        print(line)


def times(rows: list[tuple[str, dict, dict]]) -> None:
    print(f"\n{'timed run (ms)':34s}{'compute meas.':>15s}{'sim.':>9s}"
          f"{'step meas.':>13s}{'sim.':>9s}")
    for name, _, t in rows:
        if "step_time_s" in t:
            (cm, cs), (sm, ss) = t["compute_s"], t["step_time_s"]
            print(f"{name:34s}{cm * 1e3:15.1f}{cs * 1e3:9.1f}{sm * 1e3:13.1f}{ss * 1e3:9.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=PROFILE, help="a version-2 profile")
    profile = ap.parse_args(argv).profile.resolve()
    print(f"Every H100 run against {profile} (microbenchmarks only; no run fitted)\n")
    rows = committed_runs(profile) + calibration_runs(profile)
    table(rows)
    times(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
