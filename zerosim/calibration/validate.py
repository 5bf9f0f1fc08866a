"""`zerosim validate`: re-simulate exactly what `zero-real run` measured and report the error.

The measured configuration is rebuilt from the measurement JSON: its scenario and `--set`
overrides, its world (one box of `world_size` ranks), its stage, its collectives implementation,
and overlap_comm = false (zero_real's collectives are synchronous). The profile (`--profile`, or
the scenario's cluster.profile) supplies the measured costs.

Measured figures, per metric:
- times are medians over the steps timed without the memory profiler (`--timed-steps`; the
  first of them is a warm-up and dropped), or over the profiled steps after the first when there
  are none. A step runs from its first event (the first unit's forward) to its after_step mark:
  data loading and the loss's logging all-reduce are outside it, as they are outside the
  simulated step. Per step, the mean over ranks.
- compute_s sums the step's compute events; comm_<op>_s the events of each collective; and
  exposed_comm_s = step_time_s - compute_s.
- memory at each phase and the peak: the largest over ranks, from the profiled steps.

error_pct = (simulated - measured) / measured x 100; the mean and max are over the absolute errors.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Any

from zerosim.contract import (COLLECTIVE_IMPLS, COMM, COMPUTE, MEASUREMENT_REQUIRED,
                              MEMORY_POINTS, STAGES)
from zerosim.errors import InputError
from zerosim.units import GB, KB, MB


def _check(m: dict[str, Any], path: str) -> None:
    missing = [k for k in MEASUREMENT_REQUIRED if k not in m]
    if missing:
        raise InputError(f"{path}: not a zero-real measurement (missing {', '.join(missing)})")


def timed_steps(m: dict[str, Any]) -> list[int]:
    profiled, timed = m["steps"], m.get("timed_steps", 0) or 0
    if timed >= 2:
        return list(range(profiled + 1, profiled + timed))
    if timed == 1:
        return [profiled]
    return list(range(1, profiled)) or [0]


def measured_metrics(m: dict[str, Any]) -> dict[str, float]:
    out = {k: v for k, v in step_figures(m).items() if not k.startswith("calls_")}
    for point in MEMORY_POINTS:
        values = [r["phases"].get(point) for r in m["ranks"]]
        if values and all(v is not None for v in values):
            out[f"memory_{point}_bytes"] = max(values)
    out["peak_bytes"] = max(r["peak_bytes"] for r in m["ranks"])
    return out


def step_figures(m: dict[str, Any]) -> dict[str, float]:
    """Medians over the timed steps of step_time_s, compute_s, exposed_comm_s, comm_<op>_s and
    calls_<op> (collectives of that op per step)."""
    out: dict[str, float] = {}
    if not m.get("fake_world_size"):
        steps = set(timed_steps(m))
        ends = {(s["rank"], s["step"]): s["t_s"] for s in m["memory_samples"]
                if s["point"] == "after_step"}
        per: dict[tuple[int, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        starts: dict[tuple[int, int], float] = {}
        for e in m["events"]:
            key = (e["rank"], e.get("step"))
            if key[1] not in steps:
                continue
            starts[key] = min(starts.get(key, e["start_s"]), e["start_s"])
            name = "compute_s" if e["stream"] == COMPUTE else f"comm_{e['op']}_s"
            per[key][name] += e["end_s"] - e["start_s"]
            if e["stream"] != COMPUTE:
                per[key][f"calls_{e['op']}"] += 1
        for key in starts:
            per[key]["step_time_s"] = ends[key] - starts[key]
            per[key]["exposed_comm_s"] = per[key]["step_time_s"] - per[key]["compute_s"]
        if per:
            names = sorted({name for values in per.values() for name in values})
            for name in names:
                by_step = defaultdict(list)
                for (rank, step), values in per.items():
                    by_step[step].append(values.get(name, 0.0))
                out[name] = statistics.median(statistics.fmean(v) for v in by_step.values())
    return out


def simulated_metrics(result, with_times: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    if with_times:
        out.update(step_time_s=result.step_time_s, compute_s=result.compute_s,
                   exposed_comm_s=result.exposed_comm_s)
        comm: dict[str, float] = defaultdict(float)
        for e in result.ranks[0].state.events:
            if e["stream"] == COMM:
                comm[f"comm_{e['op']}_s"] += e["end_s"] - e["start_s"]
        out.update(comm)
    for point in MEMORY_POINTS:
        out[f"memory_{point}_bytes"] = result.memory_at[point]
    out["peak_bytes"] = result.peak_bytes
    return out


def compare(measured: dict[str, float], simulated: dict[str, float]) -> dict[str, Any]:
    """Per metric measured, simulated and error %; mean and max absolute error over the metrics
    with a non-zero measurement (an error relative to zero is undefined)."""
    metrics = []
    for name in list(measured) + [n for n in simulated if n not in measured]:
        meas, sim = measured.get(name), simulated.get(name)
        error = None
        if meas and sim is not None:
            error = (sim - meas) / meas * 100
        metrics.append({"name": name, "measured": meas, "simulated": sim, "error_pct": error})
    errors = [abs(x["error_pct"]) for x in metrics if x["error_pct"] is not None]
    return {"metrics": metrics,
            "mean_abs_error_pct": statistics.fmean(errors) if errors else None,
            "max_abs_error_pct": max(errors) if errors else None}


def scenario_of(m: dict[str, Any], scenario_path: str | None = None,
                profile: str | None = None):
    """The scenario exactly as it ran: overrides, one box of world_size ranks, stage, the
    collectives implementation, no overlap; the profile given here overrides the scenario's."""
    from zerosim.scenario.load import load_scenario  # here: zero_real's ranks take step_figures

    world = m.get("fake_world_size") or m["world_size"]
    overrides = [*m.get("overrides", []), "cluster.nodes=1", f"cluster.gpus_per_node={world}",
                 f"training.zero_stage={m['stage']}",
                 f"training.overlap_comm={'true' if m.get('overlap_comm') else 'false'}"]
    if m.get("collectives") in COLLECTIVE_IMPLS:
        overrides.append(f"cluster.collective_impl={m['collectives']}")
    if profile is not None:
        overrides.append(f"cluster.profile={json.dumps(profile)}")
    return load_scenario(scenario_path or m["scenario"], overrides)


def validate(m: dict[str, Any], path: str, scenario_path: str | None = None,
             profile: str | None = None) -> dict[str, Any]:
    from zerosim.sim.engine import simulate  # here: zero_real's ranks take step_figures alone

    _check(m, path)
    if m["stage"] not in STAGES or isinstance(m["stage"], bool):
        raise InputError(f"{path}: stage {m['stage']!r} is not a ZeRO stage (0-3)")
    if not isinstance(m["scenario"], str) or not isinstance(m.get("overrides", []), list) or \
            not all(isinstance(o, str) for o in m.get("overrides", [])):
        raise InputError(f"{path}: 'scenario' must be a path and 'overrides' a list of strings")
    scenario = scenario_of(m, scenario_path, profile)
    try:
        measured = measured_metrics(m)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InputError(f"{path}: malformed measurement ({type(exc).__name__}: {exc}); "
                         f"expected what zero-real run --out writes") from None
    result = simulate(scenario, m["stage"])
    report = compare(measured, simulated_metrics(result, with_times=not m.get("fake_world_size")))
    notes = []
    if m.get("timings_under_profiler") and not m.get("fake_world_size"):
        notes.append("timings were taken under the CPU memory profiler (no --timed-steps): "
                     "they carry its overhead")
    report.update(notes=notes, measurement=path, scenario=scenario_path or m["scenario"],
                  stage=m["stage"],
                  world_size=scenario.world_size,
                  profile=scenario.profile.describe() if scenario.profile else None,
                  hardware=m.get("hardware"), collectives=m.get("collectives"))
    return report


def judge(report: dict[str, Any], tolerance_pct: float) -> bool:
    """The verdict, recorded in the report: the mean absolute error is within the tolerance (no
    metric to compare is a failure)."""
    if not tolerance_pct > 0:
        raise InputError(f"--tolerance-pct {tolerance_pct:g} must be > 0")
    mean = report["mean_abs_error_pct"]
    report["tolerance_pct"] = tolerance_pct
    report["within_tolerance"] = mean is not None and mean <= tolerance_pct
    return report["within_tolerance"]


def format_report(report: dict[str, Any], tolerance_pct: float) -> str:
    def value(name: str, x: float | None) -> str:
        if x is None:
            return "-"
        if name.endswith("bytes"):
            unit, size = next(((u, v) for u, v in (("GB", GB), ("MB", MB), ("KB", KB))
                               if abs(x) >= v), ("B", 1))
            return f"{x / size:.4g} {unit}"
        unit, scale = next(((u, v) for u, v in (("s", 1), ("ms", 1e-3)) if abs(x) >= v),
                           ("us", 1e-6))
        return f"{x / scale:.4g} {unit}"

    lines = [f"zerosim validate: {report['measurement']} (stage {report['stage']}, "
             f"{report['world_size']} ranks, {report.get('hardware') or '?'})",
             f"profile: {report['profile'] or 'none (preset figures: uncalibrated)'}",
             *[f"note: {note}" for note in report.get("notes", [])], ""]
    width = max(len(x["name"]) for x in report["metrics"])
    lines.append(f"{'metric':<{width}}  {'measured':>12}  {'simulated':>12}  {'error':>8}")
    for x in report["metrics"]:
        error = "-" if x["error_pct"] is None else f"{x['error_pct']:+.1f}%"
        lines.append(f"{x['name']:<{width}}  {value(x['name'], x['measured']):>12}  "
                     f"{value(x['name'], x['simulated']):>12}  {error:>8}")
    mean, worst = report["mean_abs_error_pct"], report["max_abs_error_pct"]
    lines.append("")
    if mean is None:
        lines.append("no metric to compare")
    else:
        verdict = "within" if mean <= tolerance_pct else "ABOVE"
        lines.append(f"mean |error| {mean:.1f}%, max {worst:.1f}%: {verdict} the tolerance of "
                     f"{tolerance_pct:g}%")
    return "\n".join(lines)
