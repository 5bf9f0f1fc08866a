"""What a `zero-real run` measurement says, read for `zerosim validate`: its shape checked (one
InputError line naming the file and the key), the steps whose times count, each timed step's
figures, the memory per rank, and the samples of one or more runs pooled into a measured value
with its spread.

Times, per timed step: the mean over ranks. Timed steps are those run without the memory
profiler (`--timed-steps`; the first is a warm-up and dropped), or the profiled steps after the
first when there are none. A step runs from its first event to its after_step mark (data loading
and the loss's logging are outside it, as outside the simulated step). compute_s sums its compute
events, comm_<op>_s the events of each collective, exposed_comm_s = step_time_s - compute_s.
Memory at each phase and the peak: the largest over ranks (profiled steps), once per run.

The measured value is the median of every sample (times: every timed step of every run; memory:
every run); the spread is half their interquartile range relative to it: the middle half of the
samples lies within about ±spread of the median, whatever a few outlying steps did (a loaded
2-core box has steps at half and twice the median; a range would call every error noise). An
error inside the spread is within the noise: the simulation is as close to the measured median as
a typical measured step is, so the measurement cannot tell that error from its own step-to-step
and run-to-run variation. One sample has no spread, nor a median so near 0 that the spread
overflows.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from zerosim.contract import COMPUTE, MEASUREMENT_REQUIRED, MEMORY_POINTS, STAGES
from zerosim.errors import InputError, brief
from zerosim.scenario.checks import MAX_VALUE  # no measured figure is larger (bytes, seconds)

def check_measurement(m: dict[str, Any], path: str) -> None:
    """The keys validate reads, of the types it needs; the events and samples are read (and
    their junk refused) by run_samples."""
    missing = [k for k in MEASUREMENT_REQUIRED if k not in m]
    if missing:
        raise InputError(f"{path}: not a zero-real measurement (missing {', '.join(missing)})")
    if type(m["stage"]) is not int or m["stage"] not in STAGES:
        raise InputError(f"{path}: stage {brief(m['stage'])} is not a ZeRO stage (0-3)")
    overrides = m.get("overrides", [])
    if not isinstance(m["scenario"], str) or not isinstance(overrides, list) or \
            not all(isinstance(o, str) for o in overrides):
        raise InputError(f"{path}: 'scenario' must be a path and 'overrides' a list of strings")
    for key, low in (("world_size", 1), ("steps", 0), ("timed_steps", 0), ("fake_world_size", 0)):
        value = m.get(key)
        if (value is not None or key in MEASUREMENT_REQUIRED) and not (
                type(value) is int and low <= value <= MAX_VALUE):
            raise InputError(f"{path}: '{key}' must be a whole number >= {low}, got {brief(value)}")
    for key in ("events", "ranks", "memory_samples"):
        if not isinstance(m[key], list):
            raise InputError(f"{path}: '{key}' must be a list, got {brief(m[key])}")
    if not m["ranks"]:
        raise InputError(f"{path}: 'ranks' is empty: no rank's memory to compare")
    if not isinstance(m.get("zerosim_memory", {}), dict):
        raise InputError(f"{path}: 'zerosim_memory' must be an object of bytes")


def timed_steps(m: dict[str, Any]) -> range:
    """The steps whose times count (a range: `in` stays O(1) whatever the file claims)."""
    profiled, timed = m["steps"], m.get("timed_steps") or 0
    if timed >= 2:
        return range(profiled + 1, profiled + timed)
    if timed == 1:
        return range(profiled, profiled + 1)
    return range(1, profiled) if profiled > 1 else range(1)


def per_step_figures(m: dict[str, Any]) -> dict[int, dict[str, float]]:
    """Per timed step, the mean over ranks of step_time_s, compute_s, exposed_comm_s,
    comm_<op>_s and calls_<op> (collectives of that op in the step)."""
    steps = timed_steps(m)
    ends = {(s["rank"], s["step"]): s["t_s"] for s in m["memory_samples"]
            if s["point"] == "after_step"}
    per: dict[tuple[Any, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    starts: dict[tuple[Any, int], float] = {}
    for e in m["events"]:
        if type(e["step"]) is not int or e["step"] not in steps:
            continue
        key = (e["rank"], e["step"])
        if not e["start_s"] <= e["end_s"]:  # also NaN: a time that cannot have been measured
            raise ValueError(f"an event of rank {brief(key[0])} step {key[1]} runs from "
                             f"{brief(e['start_s'])} to {brief(e['end_s'])} s")
        starts[key] = min(starts.get(key, e["start_s"]), e["start_s"])
        name = "compute_s" if e["stream"] == COMPUTE else f"comm_{e['op']}_s"
        per[key][name] += e["end_s"] - e["start_s"]
        if e["stream"] != COMPUTE:
            per[key][f"calls_{e['op']}"] += 1
    for key in starts:
        if key not in ends:
            raise ValueError(f"rank {brief(key[0])} step {key[1]} has events but no after_step "
                             f"sample")
        if not starts[key] <= ends[key]:
            raise ValueError(f"rank {brief(key[0])} step {key[1]} ends (after_step at "
                             f"{brief(ends[key])} s) before its first event starts")
        per[key]["step_time_s"] = ends[key] - starts[key]
        per[key]["exposed_comm_s"] = per[key]["step_time_s"] - per[key]["compute_s"]
    names = sorted({name for values in per.values() for name in values})
    by_step: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (_, step), values in per.items():
        for name in names:
            by_step[step][name].append(values.get(name, 0.0))
    return {step: {name: statistics.fmean(v) for name, v in figures.items()}
            for step, figures in sorted(by_step.items())}


def step_figures(m: dict[str, Any]) -> dict[str, float]:
    """Medians over the timed steps of per_step_figures (what calibration fits steps to)."""
    steps = list(per_step_figures(m).values())
    return {name: statistics.median(s[name] for s in steps) for name in (steps[:1] or [{}])[0]}


def memory_figures(m: dict[str, Any]) -> dict[str, float]:
    """The largest over ranks at each memory point every rank measured, and of the peaks
    (allocated; reserved where every rank measured it, i.e. on CUDA)."""
    out = {}
    for point in MEMORY_POINTS:
        values = [r["phases"].get(point) for r in m["ranks"]]
        if values and all(v is not None for v in values):
            out[f"memory_{point}_bytes"] = max(values)
    out["peak_bytes"] = max(r["peak_bytes"] for r in m["ranks"])
    reserved = [r.get("peak_reserved_bytes") for r in m["ranks"]]
    if reserved and all(v is not None for v in reserved):  # CUDA runs: the caching allocator's
        out["peak_reserved_bytes"] = max(reserved)
    return out


def run_samples(m: dict[str, Any], path: str) -> tuple[dict[str, list[float]], int]:
    """One run's samples per metric (times per timed step, memory once) and its timed steps."""
    try:
        steps = {} if m.get("fake_world_size") else per_step_figures(m)
        samples: dict[str, list[float]] = defaultdict(list)
        for figures in [*steps.values(), memory_figures(m)]:
            for name, value in figures.items():
                if not name.startswith("calls_"):
                    samples[name].append(value)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise InputError(f"{path}: malformed measurement ({type(exc).__name__}: {exc}); "
                         f"expected what zero-real run --out writes") from None
    for name, values in samples.items():
        for value in values:
            if type(value) not in (int, float) or not -MAX_VALUE <= value <= MAX_VALUE:
                raise InputError(f"{path}: malformed measurement: {name} is {brief(value)}, "
                                 f"not a number within ±2**53")
    return samples, len(steps)


def measured_metrics(runs: list[dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    """Per metric over the runs: the median of every sample, its spread (half their
    interquartile range over the median, %) and each run's own median."""
    out = {}
    for name in dict.fromkeys(n for run in runs for n in run):
        per_run = [run.get(name, []) for run in runs]
        pooled = [v for values in per_run for v in values]
        median = statistics.median(pooled)
        spread = None
        if len(pooled) > 1 and median:
            low, _, high = statistics.quantiles(pooled, n=4, method="inclusive")
            spread = (high - low) / 2 / abs(median) * 100
            if not math.isfinite(spread):  # a median so near 0 (5e-324) that it overflows
                spread = None
        out[name] = {"measured": median, "spread_pct": spread,
                     "per_run": [statistics.median(v) if v else None for v in per_run]}
    return out
