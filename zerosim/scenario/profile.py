"""Calibration profiles: what `zero-real calibrate` measured on a box, and the simulator's
parameters fitted from it (zerosim.calibration.fit). A scenario names one with
`[cluster] profile = "profiles/x.json"`; its numbers then replace the preset's.

A profile is one JSON object:

    format, version            contract.PROFILE_FORMAT, PROFILE_VERSION
    provenance                 host, hardware, backend, device, torch_version, date, command, ...
    scenario                   the model and training settings the measurements were taken with
    measurements               raw microbenchmarks: collectives, compute, optimizer, memory
    fit                        collectives[impl][op][ranks] -> α-β segments by message size
                               compute[processes][unit][forward|backward] -> overhead + slope
                               optimizer[processes] -> α-β segments by shard elements
                               step[processes] -> compute_scale[stage],
                               collective_scale[stage][op], other_s[stage]: what real steps
                               showed beyond the microbenchmarks
                               memory[processes][stage] -> activations, allocator residue,
                               workspace (bytes = fixed + per_token * tokens), and the
                               optimizer's temporaries per element

Everything here is read-only lookups; the fitting lives in zerosim.calibration.fit. It sits in
the scenario layer because a profile is a file the scenario names, read with the scenario, like a
Hugging Face or DeepSpeed config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerosim.contract import (COLLECTIVE_OPS, PASSES, PROFILE_FORMAT, PROFILE_VERSION,
                              busbw_factor as _busbw_factor, ring_steps as _ring_steps)
from zerosim.errors import InputError
from zerosim.files import read_json_object
from zerosim.units import GB

# What a profile measured beyond the analytic memory model, per stage. Broadcast and reduce are not
# calibrated (COLLECTIVE_OPS are): they keep the preset's links.
MEMORY_TERMS = ("activations", "residue", "workspace")


def segment_line(segments: list[dict[str, Any]], size: float) -> tuple[float, float]:
    """(intercept, slope) at `size`: the segment whose measured range holds it; in the gap
    between two segments, the line joining the first's value at its last point to the second's
    at its first (a regime change between two measured sizes is not extrapolated across);
    below the first or above the last segment, that segment's line."""
    for seg, after in zip(segments, [*segments[1:], None]):
        last = seg.get("last_bytes", seg["max_bytes"])
        if size <= last or after is None:
            return seg["alpha_s"], seg["s_per_byte"]
        if size < after["min_bytes"]:
            x0, x1 = last, after["min_bytes"]
            y0 = seg["alpha_s"] + seg["s_per_byte"] * x0
            y1 = after["alpha_s"] + after["s_per_byte"] * x1
            slope = (y1 - y0) / (x1 - x0)
            return y0 - slope * x0, slope
    raise ValueError("no segments")


def _nearest(keys, n: int) -> int:
    """The measured count closest to n (the larger on a tie: more sharing, more like a big run)."""
    return min(keys, key=lambda k: (abs(k - n), -k))


@dataclass(frozen=True)
class Profile:
    path: str
    data: dict[str, Any]

    @property
    def fit(self) -> dict[str, Any]:
        return self.data["fit"]

    @property
    def provenance(self) -> dict[str, Any]:
        return self.data.get("provenance", {})

    def describe(self) -> str:
        p = self.provenance if isinstance(self.provenance, dict) else {}
        return (f"{self.path} ({p.get('hardware', '?')}, {p.get('backend', '?')}, "
                f"torch {p.get('torch_version', '?')}, {str(p.get('date', '?'))[:10]})")

    # collectives
    def collective_time(self, impl: str, op: str, n: int, size_bytes: float) -> float | None:
        """Seconds for `op` over a buffer of size_bytes on n ranks of one box (or node); None when
        the profile measured no such op. A group size it did not measure is priced from the
        nearest one by the ring's law: latency per ring step and bus bandwidth carry over."""
        line = self._collective_line(impl, op, n, size_bytes)
        if line is None:
            return None
        m, alpha, beta = line
        if m != n:
            alpha *= _ring_steps(op, n) / _ring_steps(op, m)
            beta *= _busbw_factor(op, n) / _busbw_factor(op, m)
        return alpha + beta * size_bytes

    def _collective_line(self, impl: str, op: str, n: int,
                         size_bytes: float) -> tuple[int, float, float] | None:
        """(the measured group size nearest n, intercept, slope) at this size, or None."""
        by_ranks = self.fit.get("collectives", {}).get(impl, {}).get(op)
        if not by_ranks or n < 2:
            return None
        m = _nearest([int(k) for k in by_ranks], n)
        return (m, *segment_line(by_ranks[str(m)]["segments"], size_bytes))

    def cluster_numbers(self, impl: str) -> dict[str, float]:
        """The preset's intra-node link figures as measured: all_reduce at the largest group,
        bus bandwidth of the largest messages and latency per ring step of the smallest. They are
        what `zerosim collective` and tables show; the engine prices each op from the fit."""
        by_ranks = self.fit.get("collectives", {}).get(impl, {}).get("all_reduce")
        if not by_ranks:
            return {}
        n = max(int(k) for k in by_ranks)
        segments = by_ranks[str(n)]["segments"]
        out = {"intra_node_latency_us": segments[0]["alpha_s"] / _ring_steps("all_reduce", n) * 1e6}
        if segments[-1]["s_per_byte"] > 0:
            out["intra_node_bandwidth_GBps"] = (_busbw_factor("all_reduce", n)
                                                / segments[-1]["s_per_byte"] / GB)
        return out

    def ring_terms(self, impl: str, op: str, n: int,
                   size_bytes: float) -> tuple[float, float] | None:
        """(latency per ring step in s, bus bandwidth in bytes/s) that make a ring of n ranks
        take exactly the fitted time for this message size; None when not measured."""
        line = self._collective_line(impl, op, n, size_bytes)
        if line is None:
            return None
        m, alpha, beta = line
        if alpha < 0:  # a steep bridge between segments: the same time, as bandwidth alone
            alpha, beta = 0.0, (alpha + beta * size_bytes) / size_bytes
        latency = alpha / _ring_steps(op, m)
        beta = beta * _busbw_factor(op, n) / _busbw_factor(op, m)
        return latency, (_busbw_factor(op, n) / beta if beta > 0 else float("inf"))

    # compute
    def _by_processes(self, section: str, processes: int) -> dict[str, Any] | None:
        table = self.fit.get(section) or {}
        if not table:
            return None
        return table[str(_nearest([int(k) for k in table], processes))]

    def unit_time(self, processes: int, unit: str, phase: str, flops: float,
                  tokens: int) -> float | None:
        table = self._by_processes("compute", processes)
        if table is None or unit not in table:
            return None
        line = table[unit][phase]
        x = flops if line["per"] == "flop" else tokens
        return line["overhead_s"] + line["slope"] * x

    def optimizer_time(self, processes: int, elements: int) -> float | None:
        entry = self._by_processes("optimizer", processes)
        if entry is None:
            return None
        alpha, beta = segment_line(entry["segments"], elements)
        return alpha + beta * elements

    # in-step corrections
    def compute_scale(self, processes: int, stage: int) -> float:
        entry = self._by_processes("step", processes)
        return entry["compute_scale"].get(str(stage), 1.0) if entry else 1.0

    def collective_scale(self, processes: int, stage: int, op: str, impl: str) -> float:
        """In-step time of `op` over its microbenchmark, measured with the implementation the
        calibration's stage runs used (1 for another)."""
        entry = self._by_processes("step", processes)
        if not entry or entry.get("impl", "native") != impl:
            return 1.0
        return entry["collective_scale"].get(str(stage), {}).get(op, 1.0)

    def other_s(self, processes: int, stage: int) -> float:
        entry = self._by_processes("step", processes)
        return entry["other_s"].get(str(stage), 0.0) if entry else 0.0

    # memory
    def memory_terms(self, processes: int, stage: int, tokens: int) -> dict[str, int] | None:
        """Bytes beyond the analytic model that the real stage showed, at this many tokens."""
        table = self._by_processes("memory", processes)
        if table is None or str(stage) not in table:
            return None
        terms = table[str(stage)]
        out = {k: terms[k]["fixed"] + terms[k]["per_token"] * tokens for k in MEMORY_TERMS}
        out["optimizer_per_element"] = terms.get("optimizer_per_element", 0.0)
        return out


def _check_number(where: str, value: Any, path: Path, signed: bool = False) -> None:
    """A finite number, >= 0 unless `signed` (times, sizes and rates cannot be negative)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"profile {path}: {where} must be a finite number, got {value!r}")
    if not signed and value < 0:
        raise InputError(f"profile {path}: {where} = {value!r} must be >= 0")


def _check_count(where: str, key: Any, path: Path, least: int) -> None:
    if not isinstance(key, str) or not key.isdigit() or str(int(key)) != key or int(key) < least:
        raise InputError(f"profile {path}: {where} key {key!r} must be a whole number >= {least} "
                         f"written plainly (\"2\")")


def _check_segments(where: str, entry: Any, path: Path) -> None:
    """α-β segments: alpha_s + s_per_byte * size for sizes up to max_bytes ("bytes" are
    elements for the optimizer)."""
    if not entry["segments"]:
        raise KeyError(f"{where}.segments")
    for i, seg in enumerate(entry["segments"]):
        for key in ("alpha_s", "s_per_byte", "max_bytes"):
            _check_number(f"{where}.segments[{i}].{key}", seg[key], path)


def check_fit(fit: Any, path: Path) -> None:
    """Every number the simulator will read is present and finite (one line naming the first
    that is not)."""
    if not isinstance(fit, dict):
        raise InputError(f"profile {path}: 'fit' must be an object")
    try:
        for impl, ops in fit.get("collectives", {}).items():
            for op, by_ranks in ops.items():
                if op not in COLLECTIVE_OPS:
                    raise InputError(f"profile {path}: fit.collectives.{impl}.{op}: zerosim prices "
                                     f"only {', '.join(COLLECTIVE_OPS)} from a profile")
                for n, entry in by_ranks.items():
                    _check_count(f"fit.collectives.{impl}.{op}", n, path, 2)
                    _check_segments(f"fit.collectives.{impl}.{op}.{n}", entry, path)
        for n, units in fit.get("compute", {}).items():
            _check_count("fit.compute", n, path, 1)
            for unit, phases in units.items():
                for phase in PASSES:
                    line = phases[phase]
                    for key in ("overhead_s", "slope"):
                        _check_number(f"fit.compute.{n}.{unit}.{phase}.{key}", line[key], path)
                    if line["per"] not in ("flop", "token"):
                        raise KeyError(f"{unit}.{phase}.per")
        for n, entry in fit.get("optimizer", {}).items():
            _check_count("fit.optimizer", n, path, 1)
            _check_segments(f"fit.optimizer.{n}", entry, path)
        for n, entry in fit.get("step", {}).items():
            _check_count("fit.step", n, path, 1)
            for group in ("compute_scale", "other_s"):
                for key, value in entry[group].items():
                    _check_number(f"fit.step.{n}.{group}.{key}", value, path)
            for stage, ops in entry["collective_scale"].items():
                for op, value in ops.items():
                    _check_number(f"fit.step.{n}.collective_scale.{stage}.{op}", value, path)
        for n, stages in fit.get("memory", {}).items():
            _check_count("fit.memory", n, path, 1)
            for stage, terms in stages.items():
                for term in MEMORY_TERMS:  # bytes beyond the analytic model: may be negative
                    for key in ("fixed", "per_token"):
                        _check_number(f"fit.memory.{n}.{stage}.{term}.{key}", terms[term][key],
                                      path, signed=True)
                _check_number(f"fit.memory.{n}.{stage}.optimizer_per_element",
                              terms.get("optimizer_per_element", 0.0), path)
    except InputError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise InputError(f"profile {path}: malformed 'fit' section ({type(exc).__name__}: "
                         f"{exc}); re-run zero-real calibrate") from None


def load_profile(path: str | Path) -> Profile:
    path = Path(path)
    data = read_json_object(path, "profile")
    if data.get("format") != PROFILE_FORMAT:
        raise InputError(f"profile {path}: not a zerosim profile (format {data.get('format')!r}, "
                         f"expected {PROFILE_FORMAT!r})")
    if data.get("version") != PROFILE_VERSION:
        raise InputError(f"profile {path}: version {data.get('version')!r} is not supported "
                         f"(this zerosim reads version {PROFILE_VERSION})")
    if "fit" not in data:
        raise InputError(f"profile {path}: no 'fit' section (raw measurements only); fit it "
                         f"with zero-real calibrate")
    check_fit(data["fit"], path)
    return Profile(str(path), data)
