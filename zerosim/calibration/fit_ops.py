"""A box's record: the op model's constants fitted from `zero-real calibrate`'s op rows (no torch).

zero_real measures each constant of zerosim's op model (sim/op_costs.py) by a microbenchmark of
its own, in each world of n ranks (ranks share a CPU box's cores and memory bandwidth: each world
size gets its own record), and writes the rows to measurements["ops"]. Here they become
`fit.record[n]`, which zerosim/hardware/measured.py turns into a `Gpu` with an `OpModel`:

    memory_ops  per op and pass: seconds = overhead_s + minimum bytes / bytes_per_s, the bytes
                as op_costs.min_bytes counts them (16-bit elements at 2 bytes whatever the
                dtype: the rate absorbs it); the copy's rate is the record's bandwidth
    gemm        OpCosts.gemm's law: tiles = ceil(m/tm) ceil(n/tn), waves = ceil(tiles / U),
                seconds = launch + max(waves 2 tm tn k U / R, element bytes (mk + kn + mn) /
                bandwidth); the tile and U searched (U: the SM count on CUDA), (launch, 1/R)
                by least squares on relative error at each, the best kept
    linear      the median of what a linear layer takes beyond its GEMMs (forward; dX + dW)
    launch      the median per op (x.add_(1) in a loop) and per autograd node
    attention   fit_attention.py: flash's per-call overhead and rate by sequence length; the
                math kernel's overhead, seconds per score element and one rate
    copies      host <-> device copies (CUDA), overhead + bytes / rate per direction and pinning

Every fit keeps its residuals (percent of the measured time, in the order of its rows).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections import defaultdict
from typing import Any

import numpy as np

from zerosim.calibration.fit_attention import (Unfitted, fit_attention, fit_math_attention,
                                               residuals_pct)
from zerosim.calibration.lines import fit_line
from zerosim.contract import EMBEDDING, HEAD, PASSES
from zerosim.errors import InputError, brief
from zerosim.scenario.checks import is_finite_number
from zerosim.scenario.profile_schema import RECORD_DEVICES, RECORD_DTYPES
from zerosim.hardware.op_model import MEMORY_OPS
from zerosim.sim.op_costs import BYTES, min_bytes
from zerosim.units import GB

# Tile sides searched, both orders: the catalogue's CUBLAS_TILE (256 x 128, hardware/op_model.py,
# [GUIDE] [CUTL]) down to the 8-wide blocks of small problems and CPU BLAS (design, issue 31).
TILE_SIDES = (8, 16, 32, 64, 128, 256)
CPU_UNITS = (1, 2, 4, 8, 16, 32, 64)  # cores (or core groups) a CPU GEMM's waves fill
ROW_KEYS = {  # what each kind of row holds (besides processes, threads, dtype, device, kind)
    "gemm": ("m", "n", "k", "time_s"),
    "linear": ("tokens", "n_in", "n_out", "forward_s", "backward_s"),
    "launch": ("per_op_s", "autograd_node_s"),
    "attention": ("kernel", "batch", "heads", "seq", "head_dim", "forward_s", "backward_s"),
    "memory_op": ("op", "tokens", "width", "forward_s"),
    "copy_host": ("direction", "pinned", "bytes", "time_s"),
}
DIFFERENCES = ("autograd_node_s", "backward_call_s")  # launch rows' times that are differences
REQUIRED_KINDS = ("gemm", "launch", "memory_op")  # the record's rate, launch and bandwidth


def element_bytes_of(dtype: str) -> int:
    """A GEMM operand's bytes as the op model counts them: 2 whatever the dtype (its 16-bit
    convention, sim/op_costs.BYTES), as the copy's rate, the record's bandwidth, is counted, so
    that an fp32 GEMM's traffic over that bandwidth takes its true time."""
    return BYTES


def gemm_seconds(gemm: dict[str, Any], element_bytes: int, bandwidth_bytes_per_s: float,
                 m: int, n: int, k: int) -> float:
    """OpCosts.gemm's law (sim/op_costs.py) at a record's GEMM constants: its launch plus the
    longer of the wave-quantized compute and the operands' traffic."""
    tm, tn = gemm["tile"]
    units = gemm["units"]
    waves = math.ceil(math.ceil(m / tm) * math.ceil(n / tn) / units)
    compute = waves * 2 * tm * tn * k * units / (gemm["tflops"] * 1e12)
    memory = element_bytes * (m * k + k * n + m * n) / bandwidth_bytes_per_s
    return gemm["launch_s"] + max(compute, memory)


def _compute_at_one_tflops(shapes: np.ndarray, tile: tuple[int, int], units: int) -> np.ndarray:
    """Each GEMM's wave-quantized compute seconds at 1 TFLOP/s."""
    m, n, k = shapes.T
    tiles = -(-m // tile[0]) * -(-n // tile[1])
    waves = -(-tiles // units)
    return waves * 2.0 * tile[0] * tile[1] * k * units / 1e12


def _launch_and_rate(compute: np.ndarray, memory: np.ndarray,
                     measured: np.ndarray) -> tuple[float, float, float]:
    """(cost, launch, x = 1/R) minimising sum(((launch + max(compute x, memory) - t) / t)^2),
    launch >= 0. Between two consecutive breakpoints memory_i / compute_i the rows bound by
    compute are fixed and the problem is linear: each interval's 2 x 2 normal equations are
    solved, the solution held inside its interval, and the best kept."""
    order = np.argsort(memory / compute)
    c, mem, t = compute[order], memory[order], measured[order]
    low = mem / c  # interval j: x in [low[j], low[j + 1]], rows 0..j bound by compute
    high = np.append(low[1:], np.inf)
    w2 = 1.0 / t ** 2
    s0, sa, saa = w2.sum(), np.cumsum(w2 * c), np.cumsum(w2 * c * c)
    say = np.cumsum(w2 * c * t)
    sy = (w2 * t).sum() - ((w2 * mem).sum() - np.cumsum(w2 * mem))  # memory rows: t - memory
    with np.errstate(divide="ignore", invalid="ignore"):
        det = s0 * saa - sa * sa
        x = (s0 * say - sa * sy) / det
        launch = (saa * sy - sa * say) / det
        x = np.where(np.isfinite(x) & (launch >= 0), x, say / saa)  # launch 0: through the origin
    x = np.clip(np.nan_to_num(x, nan=0.0), low, high)
    predicted = np.maximum(np.outer(x, c), mem)  # one row per interval's solution
    launch = np.maximum(0.0, (w2 * (t - predicted)).sum(axis=1) / s0)
    cost = ((((launch[:, None] + predicted) - t) / t) ** 2).sum(axis=1)
    best = int(np.argmin(cost))
    return float(cost[best]), float(launch[best]), float(x[best])


def fit_gemm(rows: list[dict[str, Any]], element_bytes: int, bandwidth_bytes_per_s: float,
             units: int | None = None) -> dict[str, Any]:
    """The GEMM law's tile, units (`units` where the device reports them, else CPU_UNITS
    searched), rate in TFLOP/s and launch, at the least sum of squared relative residuals."""
    shapes = np.array([[r["m"], r["n"], r["k"]] for r in rows], dtype=np.int64)
    measured = np.array([r["time_s"] for r in rows], dtype=float)
    m, n, k = shapes.T.astype(float)
    memory = element_bytes * (m * k + k * n + m * n) / bandwidth_bytes_per_s
    best = None
    for tile in itertools.product(TILE_SIDES, repeat=2):
        for u in (units,) if units else CPU_UNITS:
            cost, launch, x = _launch_and_rate(_compute_at_one_tflops(shapes, tile, u), memory,
                                               measured)
            if best is None or cost < best[0]:
                best = (cost, tile, u, launch, x)
    _, tile, u, launch, x = best
    gemm = {"tflops": 1.0 / x, "tile": [int(tile[0]), int(tile[1])], "units": int(u),
            "launch_s": launch}
    predicted = [gemm_seconds(gemm, element_bytes, bandwidth_bytes_per_s, *map(int, s))
                 for s in shapes]
    return {**gemm, "residuals_pct": residuals_pct(predicted, measured)}


def fit_linear_overhead(rows: list[dict[str, Any]], gemm: dict[str, Any], element_bytes: int,
                        bandwidth_bytes_per_s: float) -> dict[str, Any]:
    """What a linear layer takes beyond its GEMMs as OpCosts.linear prices them (forward
    (tokens x n_in)(n_in x n_out); backward dX (tokens x n_out)(n_out x n_in) and dW (n_in x
    tokens)(tokens x n_out)): the median over the rows, floored at 0, forward and backward."""
    def gemms(m, n, k):
        return gemm_seconds(gemm, element_bytes, bandwidth_bytes_per_s, m, n, k)

    models = [(gemms(t, n_out, n_in), gemms(t, n_in, n_out) + gemms(n_in, n_out, t))
              for t, n_in, n_out in ((r["tokens"], r["n_in"], r["n_out"]) for r in rows)]
    overhead, residuals = [], []
    for p, key in enumerate(("forward_s", "backward_s")):
        measured = [r[key] for r in rows]
        extra = max(0.0, statistics.median(t - model[p] for t, model in zip(measured, models)))
        overhead.append(extra)
        residuals.append(residuals_pct([model[p] + extra for model in models], measured))
    return {"linear_overhead_s": overhead, "linear_residuals_pct": residuals}


def fit_launch(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per dispatched op, per autograd node and per backward call beyond its nodes
    (0 where the rows did not measure it): the median over the rows."""
    return {"launch_s": float(statistics.median(r["per_op_s"] for r in rows)),
            "autograd_node_s": float(statistics.median(r["autograd_node_s"] for r in rows)),
            "backward_call_s": float(statistics.median(r.get("backward_call_s", 0.0)
                                                       for r in rows))}


def without_call(rows: list[dict[str, Any]], call_s: float) -> list[dict[str, Any]]:
    """The rows with one backward call's setup taken out of each backward time: each op's
    backward was timed with a torch.autograd.backward of its own, where a unit's ops share one
    (OpModel.backward_call_s adds it back per unit). What the call leaves is held above a
    thousandth of the measured time (an op the call alone explains)."""
    if not call_s:
        return rows
    return [{**r, "backward_s": max(r["backward_s"] - call_s, 1e-3 * r["backward_s"])}
            if r.get("backward_s") is not None else r for r in rows]


GROWTH = 0.01  # the least share of the largest size's time its bytes must explain


def _rate_line(points: list[tuple[float, float]], what: str) -> dict[str, Any]:
    """overhead_s + bytes / bytes_per_s through (bytes, seconds), on relative error. Unfitted
    where the bytes' term explains under GROWTH of the largest size's time: the rows show no
    rate, only an overhead (or noise)."""
    nbytes, seconds = zip(*points)
    line = fit_line(nbytes, seconds)
    largest = max(range(len(points)), key=lambda i: nbytes[i])
    if line["slope"] * nbytes[largest] <= GROWTH * seconds[largest]:
        raise Unfitted(f"measurements.ops: {what}: the time does not grow with the bytes over "
                       f"{len(points)} sizes (measure larger ones, on a quieter box)")
    return {"overhead_s": line["intercept"], "bytes_per_s": 1.0 / line["slope"],
            "residuals_pct": line["residuals_pct"]}


def fit_memory_ops(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per op and pass: overhead + the op's minimum bytes (op_costs.min_bytes) / rate. A copy
    has no backward (its row's backward_s is null)."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for r in rows:
        op = r["op"]
        if op not in MEMORY_OPS:
            raise InputError(f"measurements.ops: memory op {brief(op)} is not one of "
                             f"{', '.join(MEMORY_OPS)}")
        width = r.get("vocab", r["width"]) if op == "cross_entropy" else r["width"]
        for backward, name in enumerate(PASSES):
            seconds = r.get(f"{name}_s")
            if seconds is not None:
                nbytes = min_bytes(op, bool(backward), r["tokens"], width, r.get("head_dim", 0))
                groups[op, name].append((nbytes, seconds))
    out: dict[str, Any] = {}
    for (op, name), points in sorted(groups.items()):
        try:
            out.setdefault(op, {})[name] = _rate_line(points, f"memory op {op} {name}")
        except Unfitted as exc:
            out.setdefault(UNFITTED, []).append(str(exc))
    return out


UNFITTED = "(unfitted)"
"""Where fit_memory_ops lists what it could not fit (popped into the record's `unfitted`)."""


def fit_unit_overhead(rows: list[dict[str, Any]], scenario,
                      record: dict[str, Any]) -> dict[str, list[float]]:
    """What a whole unit (the embedding, a block, the head), timed alone as zero_real's stages
    run it (its saved-tensor hooks, one autograd call; calibration/bench.py `compute`), takes
    beyond the sum of its ops as the record prices them: per kind and pass, the least over the
    micro-batches measured of (measured - op model), floored at 0. The least, not the median: a
    shared box's interference only adds time, and a slow spell can cover two of three rows (one
    calibration on the 2-core box timed the tiny block's forward at 1.54 and 1.78 ms at
    micro-batches 1 and 2 and 1.20 ms at 4, where a quiet one took 0.78-0.99 ms; the median put
    a millisecond of noise into every block of every prediction). The framework's per-unit host
    work (module calls, views, its hooks), which no op's microbenchmark holds; a constant per
    call by nature, so it carries to other shapes. The op model adds it after the host floor
    (op_costs.unit_host_work), as it is measured here. The model is priced without dropout, which
    zero_real's units do not run (zero_real/parts/model.py), and without recomputation, which
    bench.compute's units do not checkpoint."""
    from zerosim.hardware import DEVICES
    from zerosim.hardware.measured import record_gpu
    from zerosim.sim.op_costs import OpCosts, unit_seconds

    costs = OpCosts(record_gpu(record, DEVICES[scenario.cluster.gpu]), record["bandwidth_GBps"])
    model = dataclasses.replace(scenario.model, dropout=False)
    extra: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        t = dataclasses.replace(scenario.training, activation_checkpointing="none",
                                micro_batch=int(r["micro_batch"]),
                                seq_len=int(r["seq_len"]))
        index = {EMBEDDING: 0, HEAD: -1}.get(r["unit"], 1)
        for name, seconds in zip(PASSES, unit_seconds(costs, model, t)):
            extra[r["unit"], name].append(r[f"{name}_s"] - seconds[index])
    return {unit: [max(0.0, float(min(extra[unit, name]))) for name in PASSES]
            for unit in sorted({u for u, _ in extra})}


def fit_copies(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Host <-> device copies: overhead + bytes / rate per direction and pinning
    ("h2d_pinned", "d2h_pageable", ...)."""
    groups: dict[str, list] = defaultdict(list)
    for r in rows:
        key = f"{r['direction']}_{'pinned' if r['pinned'] else 'pageable'}"
        groups[key].append((r["bytes"], r["time_s"]))
    return {key: _rate_line(points, f"copy {key}") for key, points in sorted(groups.items())}


def _check_row(i: int, row: Any) -> None:
    """One line naming the row and the key, not a KeyError, for a row that lacks one."""
    where = f"measurements.ops[{i}]"
    kind = row.get("kind") if isinstance(row, dict) else None
    if kind not in ROW_KEYS:
        raise InputError(f"{where}: kind {brief(kind)} is not one of {', '.join(ROW_KEYS)}")
    for key in ("processes", "threads", "dtype", "device", *ROW_KEYS[kind]):
        if key not in row:
            raise InputError(f"{where}: a {kind} row without {key!r}")
    for key, value in row.items():
        # a difference of two times (a node, a call beyond its node) may be measured as 0
        least_ok = 0.0 if key in DIFFERENCES else None
        if key.endswith("_s") and value is not None and not (
                is_finite_number(value) and (value > 0 or value == least_ok)):
            raise InputError(f"{where}: {key} {brief(value)} is not a positive time")
    for key, allowed in (("dtype", RECORD_DTYPES), ("device", RECORD_DEVICES)):
        if row[key] not in allowed:
            raise InputError(f"{where}: {key} {brief(row[key])} is not one of "
                             f"{', '.join(allowed)}")


def _one(rows: list[dict[str, Any]], key: str, where: str) -> Any:
    values = {r.get(key) for r in rows}
    if len(values) != 1:
        raise InputError(f"{where}: rows disagree on {key} ({', '.join(map(brief, values))})")
    return values.pop()


def _record(rows: list[dict[str, Any]], name: str | None) -> dict[str, Any]:
    """The record of one world size's rows."""
    where = f"measurements.ops of {rows[0]['processes']} processes"
    device, dtype = _one(rows, "device", where), _one(rows, "dtype", where)
    kinds: dict[str, list] = defaultdict(list)
    for r in rows:
        kinds[r["kind"]].append(r)
    for kind in REQUIRED_KINDS:
        if not kinds[kind]:
            raise InputError(f"{where}: no {kind} rows (a record needs them)")
    launch = fit_launch(kinds["launch"])
    for kind in ("memory_op", "linear", "attention"):
        kinds[kind] = without_call(kinds[kind], launch["backward_call_s"])
    memory_ops = fit_memory_ops(kinds["memory_op"])
    unfitted = memory_ops.pop(UNFITTED, [])
    if "copy" not in memory_ops:
        raise InputError(f"{where}: no copy fitted (the record's bandwidth is the copy's rate): "
                         f"{'; '.join(unfitted) or 'no copy rows'}")
    bandwidth = memory_ops["copy"]["forward"]["bytes_per_s"]
    element_bytes = element_bytes_of(dtype)
    units = _one(kinds["gemm"], "sm_count", where) if device == "cuda" else None
    if device == "cuda" and not isinstance(units, int):
        raise InputError(f"{where}: CUDA gemm rows need the device's sm_count, got {brief(units)}")
    gemm = fit_gemm(kinds["gemm"], element_bytes, bandwidth, units)
    record = {"name": name or device, "device": device, "dtype": dtype,
              "threads": int(_one(rows, "threads", where)), "gemm": gemm,
              **launch, "bandwidth_GBps": bandwidth / GB,
              "memory_ops": memory_ops}
    if kinds["linear"]:
        record.update(fit_linear_overhead(kinds["linear"], gemm, element_bytes, bandwidth))
    if kinds["attention"]:
        try:
            record["attention"] = fit_attention(kinds["attention"])
        except Unfitted as exc:
            unfitted.append(str(exc))
    if kinds["copy_host"]:
        try:
            record["copies"] = fit_copies(kinds["copy_host"])
        except Unfitted as exc:
            unfitted.append(str(exc))
    if unfitted:
        record["unfitted"] = unfitted
    return record


def fit_record(rows: list[dict[str, Any]], name: str | None = None) -> dict[str, dict[str, Any]]:
    """measurements["ops"] -> {str(processes): record}, one record per world size; `name` the
    box (the provenance's hardware, e.g. "x86_64, 2 CPUs"), else its device."""
    by_world: dict[int, list] = defaultdict(list)
    for i, row in enumerate(rows):
        _check_row(i, row)
        by_world[int(row["processes"])].append(row)
    return {str(n): _record(group, name) for n, group in sorted(by_world.items())}


__all__ = ["element_bytes_of", "fit_attention", "fit_copies", "fit_gemm", "fit_launch",
           "fit_math_attention", "fit_unit_overhead",
           "fit_linear_overhead", "fit_memory_ops", "fit_record", "gemm_seconds"]
