"""`zerosim validate`: re-simulate exactly what `zero-real run` measured, report the error per
metric beside how much the measurement itself varied (calibration/measured.py), and judge time
and memory apart.

The measured configuration is rebuilt from the measurement JSON: its scenario and `--set`
overrides, its world (one box of `world_size` ranks), its stage, its collectives implementation,
and overlap_comm = false (zero_real's collectives are synchronous). The profile (`--profile`, or
the scenario's cluster.profile) supplies the measured costs. Refused in one line (exit 2): a file
whose `zerosim_memory` (zerosim's memory when it ran) differs from zerosim's memory of the
scenario as loaded here (another scenario, or one edited since the run); and, when several files
are validated together, one that is not a run of the first one's configuration (IDENTITY), or
one run given twice: the same file by another name (the command compares st_dev and st_ino) or
the same measured data in a copy (hashed here).

error_pct = (simulated - measured) / measured x 100. The verdict is per category because memory
is ~0% off by construction (the profile fits it): averaged with time it hid a step 20% off. Every
time metric must lie within the time tolerance, every memory metric within the memory tolerance;
exit 1 when either fails. A metric the simulation reports and the run did not measure, measured
as 0 (where the simulation says otherwise), or so near 0 that the error overflows, has no error
(error_pct null, `not_compared` says why) and fails its category: left out, it let a run whose
peak was zeroed pass. So does a metric the run measured and the simulation has not (a collective
it never runs). A measurement with no timed step fails (exit 1, not 2): it is a well-formed file
whose memory is still compared and shown, but time cannot pass with nothing compared. A
--fake-world-size run (one process, a fake process group) times no real collective: its time is
not judged, and the report says so.

`--scenario` (the scenario moved since the run) must be the configuration that ran: where the
scenario the measurement names is still there, both are loaded with the run's overrides and
compared key by key (a copy with slow ranks added has the same memory but another step); where it
is not, only zerosim's memory can be compared, and the report notes it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import statistics
from collections import defaultdict
from typing import Any

from zerosim.calibration.measured import check_measurement, measured_metrics, run_samples
from zerosim.contract import COLLECTIVE_IMPLS, COMM, MEMORY_POINTS
from zerosim.errors import InputError, brief
from zerosim.scenario.load import parse_override
from zerosim.scenario.presets import preset_of_hardware
from zerosim.sim.network import HOST_OPS
from zerosim.units import GB, KB, MB

TIME, MEMORY = "time", "memory"
IDENTITY = ("scenario", "overrides", "stage", "world_size", "fake_world_size", "collectives",
            "backend", "hardware", "zerosim_memory")
"""What several measurements validated together must share: runs of one configuration."""
MEASURED_WHERE_AVAILABLE = ("peak_reserved_bytes", *(f"comm_{op}_s" for op in HOST_OPS))
"""Metrics a run measures only where it can: the caching allocator's reservation (on CUDA alone,
contract.RankMeasurement) and offload's host operations (zero_real's recorder times compute and
collectives; its host copies and CPU Adam lie inside its step and optimizer times). Without one
the simulated figure is shown and not judged; step_time_s judges the whole step."""
NOT_MEASURED = "not measured"
UNEXPLAINED_MEMORY = {
    2: "zero_real keeps the gradient buckets it fills as a pool from step to step, which a "
       "profile prices as its bucket_pool mechanism (one fitted before that mechanism has none: "
       "re-fit it with zero-real calibrate)",
    3: "zero_real holds a block's backward transients (activation gradients, weight-gradient "
       "outputs) beside the gathered units, which no mechanism prices; the head kept gathered "
       "into its backward and the tied matrix's gradient are a profile's last_unit_kept and "
       "tied_grad_kept mechanisms (one fitted before them has neither)",
}
"""What zero_real's stages hold that a profile may not price (measured on the 2-core box, issue
31: 1-5% of the tiny GPT's phases before the mechanisms, -1.6% left at stage 3 on 3 processes):
validate names it when memory is off."""


def category(name: str) -> str:
    return MEMORY if name.endswith("_bytes") else TIME


def _identity(m: dict[str, Any]) -> dict[str, Any]:
    """IDENTITY's values, zerosim_memory key by key (so a difference names the key)."""
    out = {name: m.get(name, [] if name == "overrides" else None) for name in IDENTITY}
    out["scenario"] = os.path.normpath(out["scenario"])
    if isinstance(out["overrides"], list):
        out["overrides"] = _settings(out["overrides"])
    if isinstance(out["zerosim_memory"], dict):
        out.update({f"zerosim_memory.{k}": v for k, v in out.pop("zerosim_memory").items()})
    return out


def _settings(overrides: list) -> dict[str, Any]:
    """What recorded overrides set, key by key as the loader reads them (the last of one key
    wins; the old spelling of a [parallelism] key is its new one; a value compares as parsed,
    however it was written); one it cannot read stands as written."""
    out: dict[str, Any] = {}
    for text in overrides:
        try:
            table, key, value = parse_override(str(text))
        except InputError:
            out[str(text)] = None
            continue
        out[f"{table}.{key}"] = value
    return dict(sorted(out.items()))


def _same_configuration(runs: list[dict[str, Any]], paths: list[str]) -> None:
    """Refuse a measurement that is not a run of the first one's configuration, naming the first
    difference."""
    first = _identity(runs[0])
    for m, path in zip(runs[1:], paths[1:]):
        mine = _identity(m)
        for name in {**first, **mine}:
            if mine.get(name) != first.get(name):
                raise InputError(f"{path}: {name} {brief(mine.get(name))} differs from "
                                 f"{paths[0]}'s {brief(first.get(name))}: measurements validated "
                                 f"together must be runs of one configuration")


def _distinct_runs(runs: list[dict[str, Any]], paths: list[str]) -> None:
    """Refuse a run given twice under other names (a copy, a hard link): its measured data
    (events, samples, ranks) hashed; two real runs never time every event alike."""
    seen: dict[str, str] = {}
    for m, path in zip(runs, paths):
        data = json.dumps([m.get(k) for k in ("events", "memory_samples", "ranks")],
                          sort_keys=True).encode()  # a NaN hashes too: run_samples refuses it
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            raise InputError(f"measurement {path} holds the same measured data as {seen[digest]}: "
                             f"a copy of one run counts once")
        seen[digest] = path


def _settings_of(scenario) -> dict[str, Any]:
    """Every key of the scenario as built (a Hugging Face config read into the model's keys),
    less the model's name, a label; the calibration profile is no key of it (validate's choice,
    not the run's)."""
    out = {}
    for table in ("model", "cluster", "training", "parallelism", "variation"):
        config = getattr(scenario, table)
        out.update({f"{table}.{f.name}": getattr(config, f.name)
                    for f in dataclasses.fields(config)})
    del out["model.name"]
    return out


def _check_moved(m: dict[str, Any], path: str, scenario, scenario_path: str,
                 profile: str | None) -> list[str]:
    """Refuse a --scenario that is not the configuration the run names, key by key; where that
    scenario is gone (moved) or no longer loads, say that only zerosim's memory was compared."""
    ran = m["scenario"]
    if os.path.normpath(scenario_path) == os.path.normpath(ran):
        return []
    try:
        recorded = _settings_of(scenario_of(m, None, profile))
    except InputError as exc:
        return [f"the measured scenario {ran} cannot be loaded here ({exc}): only zerosim's "
                f"memory of it was compared with {scenario_path}"]
    given = _settings_of(scenario)
    for key, value in given.items():
        if recorded.get(key) != value:
            raise InputError(f"{path}: measured another configuration than {scenario_path}: "
                             f"{key} is {brief(value)} there, {brief(recorded.get(key))} in the "
                             f"measured {ran} with its overrides")
    return []


MODELLED_MEMORY = ("buffers_bytes", "peak_bytes", "step_bytes")
"""zerosim_memory's figures that are zerosim's model of the stage's buffers, not counts of the
configuration: a change of them since the run is noted, not refused (the model improves; the
model states and activations still identify the configuration)."""


def _check_memory(m: dict[str, Any], path: str, scenario, scenario_path: str) -> list[str]:
    """Refuse a measurement whose zerosim memory at run time is not this scenario's now, but
    for MODELLED_MEMORY, whose changes are noted."""
    from zerosim.analytic.memory import stage_memory

    if "zerosim_memory" not in m:
        return ["the measurement carries no zerosim_memory: its configuration was not checked"]
    expected = stage_memory(scenario, m["stage"]).as_dict()
    notes = []
    for name, value in expected.items():
        was = m["zerosim_memory"].get(name)
        if was != value and name in MODELLED_MEMORY:
            notes.append(f"zerosim's {name} was {brief(was)} at run time, {value} now: its "
                         f"memory model changed since the run")
        elif was != value:
            raise InputError(
                f"{path}: measured another configuration than {scenario_path} with its "
                f"overrides: zerosim's {name} was {brief(was)} at run time, {value} now "
                f"(another scenario, or it or zerosim's memory model changed since the run)")
    return notes


PIPELINE_METRICS = ("step_time_s", "compute_s", "exposed_comm_s", "peak_bytes",
                    "peak_reserved_bytes")
"""What a pipelined step's simulation says of a run (validate)."""


def simulated_metrics(result, with_times: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    if with_times:
        out.update(step_time_s=result.step_time_s, compute_s=result.compute_s,
                   exposed_comm_s=result.exposed_comm_s)
        comm: dict[str, float] = defaultdict(float)
        for e in (result.ranks[0].state.events if result.ranks else ()):
            if e["stream"] == COMM:
                comm[f"comm_{e['op']}_s"] += e["end_s"] - e["start_s"]
        out.update(comm)
    for point in MEMORY_POINTS:
        if point in result.memory_at:
            out[f"memory_{point}_bytes"] = result.memory_at[point]
    out["peak_bytes"] = result.peak_bytes
    # The allocator model's reservation (sim/allocator.py); compared only where the run measured
    # one (CUDA), since compare() leaves simulated-only figures without an error.
    out["peak_reserved_bytes"] = result.peak_reserved_bytes
    return out


def _error_pct(simulated: float | None, measured: float | None) -> float | None:
    """(simulated - measured) / measured x 100; 0 where both are 0; None where no finite error
    can be taken (either missing, a measured 0, or one so near 0 that the error overflows)."""
    if simulated is None or measured is None:
        return None
    if measured == 0:
        return 0.0 if simulated == 0 else None
    error = (simulated - measured) / measured * 100
    return error if math.isfinite(error) else None


def _not_compared(name: str, got: dict[str, Any], simulated: float | None) -> str | None:
    """Why a metric that must be judged has no error (None: it has one, or it is measured only
    where the run can and this run did not)."""
    measured, per_run = got.get("measured"), got.get("per_run", [])
    if measured is None:
        return None if name in MEASURED_WHERE_AVAILABLE or simulated is None else NOT_MEASURED
    if simulated is None:
        return "measured, not simulated"
    if None in per_run:
        return f"not measured by run {per_run.index(None) + 1}"
    if _error_pct(simulated, measured) is not None:
        return None
    return "measured as 0" if measured == 0 else \
        f"measured as {measured:.3g}: the error relative to it overflows"


def compare(measured: dict[str, dict[str, Any]], simulated: dict[str, float]) -> list[dict]:
    """Per metric: measured, simulated, error % (None where none can be taken, and why in
    `not_compared` when that fails the verdict), spread, whether the error lies within it, and
    each run's value and error."""
    metrics = []
    for name in [*measured, *(n for n in simulated if n not in measured)]:
        got, sim = measured.get(name, {}), simulated.get(name)
        why = _not_compared(name, got, sim)
        err = None if why else _error_pct(sim, got.get("measured"))
        spread = got.get("spread_pct")
        metrics.append({"name": name, "category": category(name),
                        "measured": got.get("measured"), "simulated": sim, "error_pct": err,
                        "not_compared": why,
                        "spread_pct": spread, "within_noise": None if err is None or spread is
                        None else abs(err) <= spread, "within_tolerance": None,
                        "per_run": got.get("per_run", []),
                        "per_run_error_pct": [_error_pct(sim, x) for x in got.get("per_run", [])]})
    return metrics


def scenario_of(m: dict[str, Any], scenario_path: str | None = None,
                profile: str | None = None):
    """The scenario exactly as it ran: overrides, one box of world_size ranks, stage, the
    collectives implementation, no overlap; the profile given here overrides the scenario's."""
    from zerosim.scenario.load import load_scenario

    world = m.get("fake_world_size") or m["world_size"]
    overrides = [*m.get("overrides", []), "cluster.nodes=1", f"cluster.gpus_per_node={world}",
                 f"training.zero_stage={m['stage']}",
                 f"training.overlap_comm={'true' if m.get('overlap_comm') is True else 'false'}"]
    if m.get("collectives") in COLLECTIVE_IMPLS:
        overrides.append(f"cluster.collective_impl={m['collectives']}")
    if profile is not None:
        overrides.append(f"cluster.profile={json.dumps(profile)}")
    ran_on = preset_of_hardware(m.get("hardware"))
    if ran_on is not None:  # the box it ran on, whatever GPU the scenario file names
        overrides.append(f"cluster.gpu={json.dumps(ran_on)}")
    return load_scenario(scenario_path or m["scenario"], overrides)


def validate(runs: list[dict[str, Any]], paths: list[str], scenario_path: str | None = None,
             profile: str | None = None) -> dict[str, Any]:
    """The report of one or more runs of one configuration (judge adds the verdict)."""
    from zerosim.sim.engine import simulate

    for m, path in zip(runs, paths):
        check_measurement(m, path)
    _same_configuration(runs, paths)
    _distinct_runs(runs, paths)
    first, fake = runs[0], bool(runs[0].get("fake_world_size"))
    scenario = scenario_of(first, scenario_path, profile)
    notes = _check_memory(first, paths[0], scenario, scenario_path or first["scenario"])
    if preset_of_hardware(first.get("hardware")) is not None:
        notes.append(f"simulated on cluster.gpu = {scenario.cluster.gpu!r}, the GPU the runs "
                     f"ran on ({first.get('hardware')})")
    if scenario_path is not None:
        notes += _check_moved(first, paths[0], scenario, scenario_path, profile)
    samples = [run_samples(m, path) for m, path in zip(runs, paths)]
    if scenario.model.dropout:
        # zero_real's model has no dropout (zero_real/parts/model.py: runs must be
        # bit-comparable with one process): simulate what ran, without its masks and kernels
        scenario = dataclasses.replace(scenario, model=dataclasses.replace(scenario.model,
                                                                           dropout=False))
        notes.append("simulated with model.dropout = false: zero_real's model runs no dropout")
    result = simulate(scenario, first["stage"])
    measured = measured_metrics([s for s, _ in samples])
    if result.pipeline:
        # A pipelined step is simulated stage by stage (sim/pipeline/): its step, compute and
        # exposed time, and the worst stage's peak; the memory points and each collective's
        # time of one rank's step have no counterpart in it.
        measured = {k: v for k, v in measured.items() if k in PIPELINE_METRICS}
        notes.append("pipeline: compared on the step's times and the worst stage's peak (the "
                     "memory points and each collective's time are not simulated per rank)")
    metrics = compare(measured, simulated_metrics(result, with_times=not fake))
    if any(m.get("timings_under_profiler") for m in runs) and not fake:
        notes.append("timings were taken under the CPU memory profiler (no --timed-steps): "
                     "they carry its overhead")
    return {"metrics": metrics, "notes": notes, "measurements": list(paths),
            "timed_steps": [steps for _, steps in samples],
            "scenario": scenario_path or first["scenario"], "stage": first["stage"],
            "world_size": scenario.world_size, "fake_world_size": first.get("fake_world_size"),
            "profile": scenario.profile.describe() if scenario.profile else None,
            "hardware": first.get("hardware"), "collectives": first.get("collectives")}


def judge(report: dict[str, Any], time_tolerance_pct: float,
          memory_tolerance_pct: float) -> bool:
    """The verdict, recorded in the report: per category, every compared metric within that
    category's tolerance and none left without an error (`not_compared`); a category with
    nothing compared fails (time of a fake-world run is not judged). Each metric gets
    `within_tolerance`; each category its summary."""
    report["categories"] = {}
    for name, tolerance in ((TIME, time_tolerance_pct), (MEMORY, memory_tolerance_pct)):
        if not (math.isfinite(tolerance) and tolerance > 0):
            raise InputError(f"--{name}-tolerance-pct {tolerance:g} must be a finite number > 0")
        mine = [x for x in report["metrics"] if x["category"] == name]
        compared = [x for x in mine if x["error_pct"] is not None]
        missing = [x["name"] for x in mine if x["not_compared"]]
        for x in compared:
            x["within_tolerance"] = abs(x["error_pct"]) <= tolerance
        for x in mine:
            if x["not_compared"]:
                x["within_tolerance"] = False
        errors = [abs(x["error_pct"]) for x in compared]
        judged = not (name == TIME and report["fake_world_size"])
        report["categories"][name] = {
            "tolerance_pct": tolerance, "judged": judged, "compared": len(compared),
            "mean_abs_error_pct": _mean(errors) if errors else None,
            "max_abs_error_pct": max(errors, default=None),
            "worst": max(compared, key=lambda x: abs(x["error_pct"]))["name"] if compared else None,
            "above_tolerance": [x["name"] for x in compared if not x["within_tolerance"]],
            "not_compared": missing,
            "within_tolerance": (bool(compared) and max(errors) <= tolerance and not missing)
            if judged else None}
    report["within_tolerance"] = all(c["within_tolerance"] is not False
                                     for c in report["categories"].values())
    unexplained = UNEXPLAINED_MEMORY.get(report["stage"])
    if unexplained and report["categories"][MEMORY]["within_tolerance"] is False:
        report.setdefault("notes", []).append(f"memory the model does not explain at stage {report['stage']}: "
                               f"{unexplained}")
    return report["within_tolerance"]


def _mean(errors: list[float]) -> float:
    """Their mean; each divided first where their sum would overflow (errors of 1e300 %)."""
    try:
        return statistics.fmean(errors)
    except OverflowError:
        return math.fsum(e / len(errors) for e in errors)


def _value(name: str, x: float | None) -> str:
    if x is None:
        return "-"
    if name.endswith("bytes"):
        unit, size = next(((u, v) for u, v in (("GB", GB), ("MB", MB), ("KB", KB)) if abs(x) >= v),
                          ("B", 1))
        return f"{x / size:.4g} {unit}"
    unit, scale = next(((u, v) for u, v in (("s", 1), ("ms", 1e-3)) if abs(x) >= v), ("us", 1e-6))
    return f"{x / scale:.4g} {unit}"


def _verdict(report: dict[str, Any], name: str) -> list[str]:
    """The category's line, then step_time_s and every error above the tolerance, each with its
    spread and whether it lies within the noise."""
    c, runs = report["categories"][name], len(report["measurements"])
    if not c["judged"]:
        return [f"{name}: not judged: a --fake-world-size run times no real collective"]
    unjudged = [x for x in report["metrics"] if x["category"] == name and x["not_compared"]]
    missing = [f"  {x['name']} not compared: {x['not_compared']} (the {name} verdict fails)"
               for x in unjudged]
    if not c["compared"]:
        if all(x["not_compared"] == NOT_MEASURED for x in unjudged):
            return [f"{name}: FAILED: no {name} metric compared (no timed step in the measurement)"]
        return [f"{name}: FAILED: no {name} metric compared", *missing]
    over, steps = f"{runs} run{'s' * (runs > 1)}", report["timed_steps"]
    if name == TIME:  # "3 runs x 29 steps", or the total when the runs timed different counts
        over += f" x {steps[0]} step{'s' * (steps[0] > 1)}" if len(set(steps)) == 1 else \
            f", {sum(steps)} steps"
    within = c["max_abs_error_pct"] <= c["tolerance_pct"]
    lines = [f"{name}: max |error| {c['max_abs_error_pct']:.1f}% ({c['worst']}), mean "
             f"{c['mean_abs_error_pct']:.1f}%: {'within' if within else 'ABOVE'} "
             f"the tolerance of {c['tolerance_pct']:g}%"]
    named = [x for x in report["metrics"] if x["category"] == name and x["error_pct"] is not None
             and (x["name"] == "step_time_s" or not x["within_tolerance"])]
    for x in named:
        noise = "(one sample): no spread to tell the noise by" if x["spread_pct"] is None else (
            f"(spread ±{x['spread_pct']:.1f}% over {over}): "
            f"{'within' if x['within_noise'] else 'beyond'} the noise")
        lines.append(f"  {x['name']} {x['error_pct']:+.1f}% {noise}")
    if c["above_tolerance"] and all(x["within_noise"] for x in named if not x["within_tolerance"]):
        lines.append(f"  every {name} error above the tolerance lies within the noise: more runs "
                     f"or timed steps can tell")
    return lines + missing


def format_report(report: dict[str, Any]) -> str:
    """The table (measured, simulated, error, spread), each run's step-time error when there are
    several, then the verdict of each category and the whole."""
    lines = [f"zerosim validate: {', '.join(report['measurements'])} (stage {report['stage']}, "
             f"{report['world_size']} ranks, {report.get('hardware') or '?'})",
             f"profile: {report['profile'] or 'none (preset figures: uncalibrated)'}",
             *[f"note: {note}" for note in report.get("notes", [])], ""]
    width = max(len(x["name"]) for x in report["metrics"])
    lines.append(f"{'metric':<{width}}  {'measured':>12}  {'simulated':>12}  {'error':>8}  "
                 f"{'spread':>7}")
    for x in report["metrics"]:
        error = "-" if x["error_pct"] is None else f"{x['error_pct']:+.1f}%"
        spread = "-" if x["spread_pct"] is None else f"±{x['spread_pct']:.1f}%"
        lines.append(f"{x['name']:<{width}}  {_value(x['name'], x['measured']):>12}  "
                     f"{_value(x['name'], x['simulated']):>12}  {error:>8}  {spread:>7}")
    lines.append("")
    step = next((x for x in report["metrics"] if x["name"] == "step_time_s"), None)
    if step and len(step["per_run"]) > 1:
        lines.append("step_time_s per run: " + ", ".join(
            "-" if e is None else f"{e:+.1f}%" for e in step["per_run_error_pct"]))
    for name in report["categories"]:
        lines += _verdict(report, name)
    failed = [n for n, c in report["categories"].items() if c["within_tolerance"] is False]
    lines.append(f"verdict: FAILED ({' and '.join(failed)})" if failed else "verdict: PASSED")
    return "\n".join(lines)
