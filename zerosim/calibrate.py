"""The fit: from `zero-real calibrate`'s microbenchmarks to the simulator's parameters (no torch).

- Collectives: per implementation, op and group size, time = α + β·S by least squares on relative
  error (every size counts alike, 1 KiB as much as 256 MiB). One line rarely holds from 1 KiB to
  256 MiB: libraries switch algorithms and protocols with the size (NCCL's LL/LL128/Simple,
  gloo's), so the sizes are cut into at most MAX_SEGMENTS ranges, each with its own α-β, where one
  line leaves a point more than SPLIT_ABOVE_PCT off.
- Compute: per unit kind (embedding, block, head) and pass, time = overhead + slope·work, work the
  unit's FLOPs (zerosim.model.unit_flops), or its tokens where it has none (the embedding lookup).
- Optimizer step: α-β segments over the elements of the shard it updates.
- In-step corrections, from the real stages' own timed steps (fit_step): compute in a step over
  the microbenchmarked units, each op's collectives in a step over their microbenchmark, the time in
  neither (other_s: bookkeeping such as storage resizes and copies).
- Memory: what the real stages held beyond the analytic model, per stage: activations (after
  forward), allocator residue (after the step), optimizer temporaries per element, and backward's
  workspace on top of the simulated peak (the logits' gradient, autograd temporaries).

Each fit keeps its residuals (percent of the measured value), so a profile says how well it fits.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import defaultdict
from typing import Any

import numpy as np

from zerosim.collectives import busbw_factor
from zerosim.costs import unit_kinds
from zerosim.errors import InputError
from zerosim.profile import FORMAT, UNITS, VERSION, Profile, check_fit

MAX_SEGMENTS = 4
SPLIT_ABOVE_PCT = 5.0
MIN_POINTS_PER_SEGMENT = 3


def fit_line(x, y) -> dict[str, Any]:
    """y = intercept + slope·x minimising the relative residuals (y - fit) / y. A negative
    intercept or slope is not physical (noise at one end): that term is dropped and the other
    refitted. Returns intercept, slope and the residuals in percent."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) == 0 or np.any(y <= 0) or not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
        raise InputError("a fit needs positive, finite measurements")
    w = 1.0 / y
    if len(x) >= 2 and np.ptp(x) > 0:
        design = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
        intercept, slope = np.linalg.lstsq(design, y * w, rcond=None)[0]
    else:
        intercept, slope = -1.0, 0.0
    if intercept < 0 or slope < 0:
        if intercept < 0 and np.any(x > 0):  # through the origin
            intercept, slope = 0.0, float(np.sum(x * w * w * y) / np.sum((x * w) ** 2))
        if slope < 0 or not np.any(x > 0):  # a constant
            intercept, slope = float(np.sum(w) / np.sum(w * w)), 0.0
    residuals = (intercept + slope * x - y) / y * 100
    return {"intercept": float(intercept), "slope": float(slope),
            "residuals_pct": [round(float(r), 3) for r in residuals]}


def _cost(fit: dict[str, Any]) -> float:
    return float(sum(r * r for r in fit["residuals_pct"]))


def fit_segments(sizes, times) -> list[dict[str, Any]]:
    """α-β segments over increasing sizes: the fewest (at most MAX_SEGMENTS, each of at least
    MIN_POINTS_PER_SEGMENT points) that leave no point more than SPLIT_ABOVE_PCT off, else the
    best cut into MAX_SEGMENTS. A segment's line holds from its first point (min_bytes) to its
    last (last_bytes); between two segments the lookup bridges the gap (profile.segment_line).
    max_bytes is the geometric midpoint between its last point and the next segment's first."""
    order = np.argsort(sizes)
    s, t = np.asarray(sizes, float)[order], np.asarray(times, float)[order]
    chosen = None
    for k in range(1, MAX_SEGMENTS + 1):
        best = None
        for cuts in itertools.combinations(range(1, len(s)), k - 1):
            bounds = [0, *cuts, len(s)]
            if k > 1 and min(b - a for a, b in zip(bounds, bounds[1:])) < MIN_POINTS_PER_SEGMENT:
                continue
            fits = [fit_line(s[a:b], t[a:b]) for a, b in zip(bounds, bounds[1:])]
            cost = sum(_cost(f) for f in fits)
            if best is None or cost < best[0]:
                best = (cost, bounds, fits)
        if best is None:
            break  # too few points for k segments
        chosen = best
        if max(abs(r) for f in best[2] for r in f["residuals_pct"]) <= SPLIT_ABOVE_PCT:
            break
    _, bounds, fits = chosen
    out = []
    for i, ((a, b), f) in enumerate(zip(zip(bounds, bounds[1:]), fits)):
        last = i == len(fits) - 1
        out.append({"min_bytes": float(s[a]), "last_bytes": float(s[b - 1]),
                    "max_bytes": float(s[b - 1]) if last else float(math.sqrt(s[b - 1] * s[b])),
                    "alpha_s": f["intercept"], "s_per_byte": f["slope"],
                    "points": int(b - a), "residuals_pct": f["residuals_pct"]})
    return out


def fit_collectives(rows: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        groups[r["impl"], r["op"], int(r["ranks"])].append((r["size_bytes"], r["time_s"]))
    fit: dict[str, Any] = {}
    for (impl, op, n), points in sorted(groups.items()):
        sizes, times = zip(*sorted(points))
        segments = fit_segments(sizes, times)
        big = segments[-1]
        fit.setdefault(impl, {}).setdefault(op, {})[str(n)] = {
            "segments": segments,
            # The largest messages' bus bandwidth (nccl-tests' busbw): comparable across n.
            "busbw_GBps": busbw_factor(op, n) / big["s_per_byte"] / 1e9
            if big["s_per_byte"] > 0 else None,
            "max_abs_residual_pct": max(abs(x) for seg in segments for x in seg["residuals_pct"]),
        }
    return fit


def _at(scenario, micro_batch: int, seq_len: int):
    t = dataclasses.replace(scenario.training, micro_batch=int(micro_batch), seq_len=int(seq_len))
    return dataclasses.replace(scenario, training=t)


def fit_compute(rows: list[dict[str, Any]], scenario) -> dict[str, Any]:
    from zerosim.model import unit_flops

    m = scenario.model
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        flops = unit_flops(m, _at(scenario, r["micro_batch"], r["seq_len"]).training)
        unit = flops[unit_kinds(m).index(r["unit"])]  # the first unit of that kind
        tokens = r["micro_batch"] * r["seq_len"]
        for phase in ("forward", "backward"):
            work = getattr(unit, phase)
            groups[int(r["processes"]), r["unit"], phase].append((work, tokens, r[f"{phase}_s"]))
    fit: dict[str, Any] = {}
    for (n, unit, phase), points in sorted(groups.items()):
        per = "flop" if all(work > 0 for work, _, _ in points) else "token"
        x = [work if per == "flop" else tokens for work, tokens, _ in points]
        line = fit_line(x, [t for _, _, t in points])
        fit.setdefault(str(n), {}).setdefault(unit, {})[phase] = {
            "per": per, "overhead_s": line["intercept"], "slope": line["slope"],
            "residuals_pct": line["residuals_pct"]}
    return fit


def fit_optimizer(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per process count: α-β segments over the elements of the shard (small shards live in
    cache, large ones stream from memory: one line does not fit both)."""
    groups: dict[int, list] = defaultdict(list)
    for r in rows:
        groups[int(r["processes"])].append((r["elements"], r["time_s"]))
    return {str(n): {"segments": fit_segments(*zip(*sorted(points)))}
            for n, points in sorted(groups.items())}


def _line_through(tokens, values) -> dict[str, float]:
    """fixed + per_token·tokens by ordinary least squares (values may be negative or zero)."""
    tokens, values = np.asarray(tokens, float), np.asarray(values, float)
    if len(set(tokens)) < 2:
        return {"fixed": float(values.mean()), "per_token": 0.0}
    slope, fixed = np.polyfit(tokens, values, 1)
    return {"fixed": float(fixed), "per_token": float(slope)}


def _row_scenario(scenario, row, profile):
    c = dataclasses.replace(scenario.cluster, nodes=1, gpus_per_node=int(row["processes"]))
    s = dataclasses.replace(_at(scenario, row["micro_batch"], row["seq_len"]), cluster=c,
                            profile=profile)
    c = dataclasses.replace(s.cluster, collective_impl=row.get("collectives", "native"))
    return dataclasses.replace(s, cluster=c, training=dataclasses.replace(
        s.training, zero_stage=row["stage"], overlap_comm=False))


def _simulate_row(scenario, row, profile, keep_events=False):
    from zerosim.engine import simulate

    return simulate(_row_scenario(scenario, row, profile), row["stage"], keep_events=keep_events)


def _optimizer_elements(scenario, row) -> int:
    from zerosim.memory import shard_elements
    from zerosim.model import total_params

    psi = total_params(scenario.model)
    return psi if row["stage"] == 0 else shard_elements(psi, int(row["processes"]))


ZERO_LINE = {"fixed": 0.0, "per_token": 0.0}
# A measured peak this far above every simulated candidate is set by backward's workspace.
_PEAK_SLACK_BYTES = 1024


def fit_memory(rows: list[dict[str, Any]], scenario, fit: dict[str, Any]) -> dict[str, Any]:
    """Per process count and stage, what the real stage held beyond the analytic model:
    - activations: after forward, minus the analytic activations;
    - residue: after the step, minus the model states (what the allocator keeps);
    - optimizer_per_element: the optimizer step's temporaries per element of its partition,
      where the step sets the peak (the smallest such ratio over the runs);
    - workspace: backward's transient bytes on top of the simulated backward peak, from the runs
      whose peak the optimizer step does not explain.
    Needs the timing fits in `fit` (the engine runs with them)."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        groups[int(r["processes"]), int(r["stage"])].append(r)
    memory: dict[str, Any] = {}
    for (n, stage), group in sorted(groups.items()):
        terms = {"activations": dict(ZERO_LINE), "residue": dict(ZERO_LINE),
                 "workspace": dict(ZERO_LINE), "optimizer_per_element": 0.0}
        memory.setdefault(str(n), {})[str(stage)] = terms
        profile = Profile("(fitting)", {"fit": {**fit, "memory": memory}})
        tokens = [r["micro_batch"] * r["seq_len"] for r in group]
        sims = [_simulate_row(scenario, r, profile) for r in group]
        terms["activations"] = _line_through(tokens, [
            (r["phases"]["after_forward"] - r["phases"]["after_init"])
            - (s.memory_at["after_forward"] - s.memory_at["after_init"])
            for r, s in zip(group, sims)])
        terms["residue"] = _line_through(tokens, [r["phases"]["after_step"]
                                                  - s.memory_at["after_step"]
                                                  for r, s in zip(group, sims)])
        residue, terms["residue"] = terms["residue"], dict(ZERO_LINE)  # a peak in backward
        profile = Profile("(fitting)", {"fit": {**fit, "memory": memory}})
        sims = [_simulate_row(scenario, r, profile) for r in group]
        terms["residue"] = residue
        elements = [_optimizer_elements(scenario, r) for r in group]
        terms["optimizer_per_element"] = max(0.0, min(
            (r["peak_bytes"] - r["phases"]["after_backward"]) / e
            for r, e in zip(group, elements)))
        backward = [(t, r["peak_bytes"] - s.peak_bytes) for t, r, s, e in
                    zip(tokens, group, sims, elements)
                    if r["peak_bytes"] > r["phases"]["after_backward"]
                    + terms["optimizer_per_element"] * e + _PEAK_SLACK_BYTES]
        if backward:
            terms["workspace"] = _line_through(*zip(*backward))
    return memory


def fit_step(rows: list[dict[str, Any]], scenario, fit: dict[str, Any]) -> dict[str, Any]:
    """What the real stages' timed steps show beyond the microbenchmarks, per process count and
    stage (medians over the calibration runs):
    - compute_scale: in-step compute over the simulated (hooks, bucket bookkeeping, caches);
    - collective_scale per op: in-step time of the op's collectives over the microbenchmarks'
      prediction (ranks arriving apart, caches, launch), which depends on how the stage
      interleaves compute and collectives (zero_real may also run more of them than zerosim:
      ZeRO-3 gathers token and position embeddings apart);
    - other_s: time in neither compute nor a collective (storage resizes, copies, Python)."""
    step: dict[str, Any] = {}
    bare = Profile("(fitting)", {"fit": fit})
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if r.get("timing"):
            groups[int(r["processes"]), str(r["stage"])].append(r)
    for (n, stage), runs in sorted(groups.items()):
        scales, other = [], []
        extra: dict[str, list] = defaultdict(list)
        for r in runs:
            sim = _simulate_row(scenario, r, bare, keep_events=True)
            timing = r["timing"]
            if sim.compute_s > 0:
                scales.append(timing["compute_s"] / sim.compute_s)
            simulated: dict[str, float] = defaultdict(float)
            sim_calls: dict[str, int] = defaultdict(int)
            for e in sim.ranks[0].state.events:
                if e["stream"] == "comm":
                    simulated[e["op"]] += e["end_s"] - e["start_s"]
                    sim_calls[e["op"]] += 1
            comm = 0.0
            for key, calls in timing.items():
                if not key.startswith("calls_") or not calls:
                    continue
                op = key[len("calls_"):]
                if simulated[op] > 0:  # the step's time of this op over the microbenchmarks'
                    comm += timing[f"comm_{op}_s"]
                    extra[op].append(timing[f"comm_{op}_s"] / simulated[op])
            # what the simulator has no collective for (fp16's overflow check) counts as other
            other.append(timing["step_time_s"] - timing["compute_s"] - comm)
        entry = step.setdefault(str(n), {"impl": runs[0].get("collectives", "native"),
                                         "compute_scale": {}, "collective_scale": {},
                                         "other_s": {}})
        entry["compute_scale"][stage] = float(np.median(scales)) if scales else 1.0
        entry["collective_scale"][stage] = {op: float(np.median(v)) for op, v in extra.items()}
        entry["other_s"][stage] = max(0.0, float(np.median(other)))
    return step


def build_profile(scenario, raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` (format, version, provenance, scenario, measurements) with its "fit" added."""
    if raw.get("format") != FORMAT or raw.get("version") != VERSION:
        raise InputError(f"not a version-{VERSION} {FORMAT} measurement")
    meas = raw.get("measurements", {})
    fit: dict[str, Any] = {}
    if meas.get("collectives"):
        fit["collectives"] = fit_collectives(meas["collectives"])
    if meas.get("compute") and not scenario.model.is_bare:
        fit["compute"] = fit_compute(meas["compute"], scenario)
    if meas.get("optimizer"):
        fit["optimizer"] = fit_optimizer(meas["optimizer"])
    if meas.get("memory") and not scenario.model.is_bare:
        fit["step"] = fit_step(meas["memory"], scenario, fit)
        fit["memory"] = fit_memory(meas["memory"], scenario, fit)
    check_fit(fit, "(new)")
    return {**raw, "fit": fit}


__all__ = ["UNITS", "build_profile", "fit_collectives", "fit_compute", "fit_line",
           "fit_memory", "fit_optimizer", "fit_segments", "fit_step"]
