"""The fit: from `zero-real calibrate`'s microbenchmarks to the simulator's parameters (no torch).

- Collectives: per implementation, op and group size, time = α + β·S by least squares on relative
  error (every size counts alike, 1 KiB as much as 256 MiB). One line rarely holds from 1 KiB to
  256 MiB: libraries switch algorithms and protocols with the size (NCCL's LL/LL128/Simple,
  gloo's), so the sizes are cut into at most MAX_SEGMENTS ranges, each with its own α-β, where one
  line leaves a point more than SPLIT_ABOVE_PCT off.
- Compute: the box's record, per world size, the op model's constants each measured by its own
  microbenchmark (fit_ops.py): GEMM rate, tile and units, attention by sequence length, each
  memory-bound op's rate, launches. The real stages' steps are measurements to compare against,
  never fitted.
- Optimizer step: α-β segments over the elements of the shard it updates.
- Gradient path (zero_real/calibration/grad_path.py): the host seconds of one gradient hook and
  of one bucket's reduction beyond its collective at stages 0-2 (its totals over its counts);
  at stage 3 of each unit's visits, per flat buffer and per byte, a line per pass.

Each fit keeps its residuals (percent of the measured value), so a profile says how well it fits.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any

import numpy as np

from zerosim.calibration.fit_memory import fit_memory, nonnegative_fit
from zerosim.calibration.fit_ops import fit_record, fit_unit_overhead
from zerosim.calibration.lines import fit_line
from zerosim.contract import PROFILE_FORMAT, PROFILE_VERSION, busbw_factor
from zerosim.errors import InputError
from zerosim.scenario.profile import check_fit
from zerosim.units import GB

MAX_SEGMENTS = 4
SPLIT_ABOVE_PCT = 5.0
MIN_POINTS_PER_SEGMENT = 3


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
            "busbw_GBps": busbw_factor(op, n) / big["s_per_byte"] / GB
            if big["s_per_byte"] > 0 else None,
            "max_abs_residual_pct": max(abs(x) for seg in segments for x in seg["residuals_pct"]),
        }
    return fit


def fit_optimizer(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per process count: α-β segments over the elements of the shard (small shards live in
    cache, large ones stream from memory: one line does not fit both)."""
    groups: dict[int, list] = defaultdict(list)
    for r in rows:
        groups[int(r["processes"])].append((r["elements"], r["time_s"]))
    return {str(n): {"segments": fit_segments(*zip(*sorted(points)))}
            for n, points in sorted(groups.items())}


def _fit_visits(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One pass of ZeRO-3's visits: seconds = buffer_s x flat buffers + s_per_byte x their
    bytes, least squares with neither below zero (fit_memory.nonnegative_fit)."""
    counts = np.array([[float(r["counts"]["groups"]), float(r["counts"]["bytes"])] for r in rows])
    values = np.array([float(r["time_s"]) for r in rows])
    coef = nonnegative_fit(counts, values)
    fitted = counts @ coef
    return {"buffer_s": float(coef[0]), "s_per_byte": float(coef[1]),
            "residuals_pct": [round(float((f - v) / v * 100), 3) if v > 0 else 0.0
                              for f, v in zip(fitted, values)]}


def fit_grad_path(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per process count and stage. Stages 0-2: the hooks' work over the hooks fired, the
    buckets' host work over the buckets reduced; stages 0-1 also the hooks' work on a
    micro-step that does not reduce (idle_hook_s, where the row measured it). Each is a median
    difference of two timings, which a noisy box can leave below zero: a mechanism costs no less
    than nothing, so 0 then (the row keeps it). Stage 3: per pass, each visit's seconds per flat
    buffer and per byte."""
    fit: dict[str, Any] = {}
    visits: dict[tuple[str, str], list] = defaultdict(list)
    for r in rows:
        if "pass" in r:
            visits[str(r["processes"]), r["pass"]].append(r)
            continue
        entry = fit.setdefault(str(r["processes"]), {})[str(r["stage"])] = {
            "hook_s": max(0.0, r["hooks_s"] / r["hooks"]) if r["hooks"] else 0.0,
            "bucket_s": max(0.0, r["buckets_s"] / r["buckets"]) if r["buckets"] else 0.0}
        if r.get("idle_hooks_s") is not None:  # stages 0-1, calibrated since 83fa72f
            idle = r["idle_hooks_s"]
            entry["idle_hook_s"] = max(0.0, idle / r["hooks"]) if r["hooks"] else 0.0
    for (n, phase), group in sorted(visits.items()):
        fit.setdefault(n, {}).setdefault("3", {})[phase] = _fit_visits(group)
    return fit


def build_profile(scenario, raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` (format, version, provenance, scenario, measurements) with its "fit" added: the
    collectives', the box's record per world size (its units' overhead priced on `scenario`'s
    model, the one calibrate measured) and the optimizer's."""
    if raw.get("format") != PROFILE_FORMAT or raw.get("version") != PROFILE_VERSION:
        raise InputError(f"not a version-{PROFILE_VERSION} {PROFILE_FORMAT} measurement")
    meas = raw.get("measurements", {})
    fit: dict[str, Any] = {}
    if meas.get("collectives"):
        fit["collectives"] = fit_collectives(meas["collectives"])
    if meas.get("ops"):
        fit["record"] = fit_record(meas["ops"], raw.get("provenance", {}).get("hardware"))
        if meas.get("compute") and not scenario.model.is_bare:
            for n, record in fit["record"].items():
                units = [r for r in meas["compute"] if str(r["processes"]) == n]
                if units:
                    record["unit_overhead_s"] = fit_unit_overhead(units, scenario, record)
    if meas.get("optimizer"):
        fit["optimizer"] = fit_optimizer(meas["optimizer"])
    if meas.get("memory_mechanisms"):
        fit["memory"] = fit_memory(meas["memory_mechanisms"])
    if meas.get("grad_path"):
        fit["grad_path"] = fit_grad_path(meas["grad_path"])
    check_fit(fit, "(new)")
    return {**raw, "fit": fit}


__all__ = ["build_profile", "fit_collectives", "fit_grad_path", "fit_line", "fit_optimizer",
           "fit_segments"]
