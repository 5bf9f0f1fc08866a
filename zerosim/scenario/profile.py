"""Calibration profiles: what `zero-real calibrate` measured on a box, and the simulator's
parameters fitted from it (zerosim.calibration.fit). A scenario names one with
`[cluster] profile = "profiles/x.json"`; its numbers then replace the preset's.

A profile is one JSON object:

    format, version            contract.PROFILE_FORMAT, PROFILE_VERSION
    provenance                 host, hardware, backend, device, torch_version, date, command, ...
    scenario                   the model and training settings the measurements were taken with
    measurements               raw microbenchmarks: collectives, compute, optimizer, memory
    fit                        collectives[impl][op][ranks] -> α-β segments by message size
                               record[processes] -> the box's op-model constants (GEMM rate,
                               tile and units, attention by sequence, each memory-bound op's
                               rate, launch): zerosim/hardware/measured.py
                               optimizer[processes] -> α-β segments by shard elements
                               memory[processes][mechanism] -> bytes a real step holds beyond
                               the analytic model, each from a mechanism measured once or
                               derived from the code (fixed + per count, none negative)

Everything here is read-only lookups, on a file whose every field profile_schema.py checked when
it was read; the fitting lives in zerosim.calibration.fit. It sits in
the scenario layer because a profile is a file the scenario names, read with the scenario, like a
Hugging Face or DeepSpeed config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zerosim.contract import (PROFILE_FORMAT, PROFILE_VERSION, busbw_factor as _busbw_factor,
                              ring_steps as _ring_steps)
from zerosim.errors import InputError
from zerosim.files import read_json_object
from zerosim.scenario.profile_schema import check_fit, check_profile
from zerosim.units import GB


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

    def record(self, processes: int) -> dict[str, Any] | None:
        """The box's op-model record (zerosim/hardware/measured.py) measured in the world of as
        many processes as share a box here, or the nearest; None when the profile has none."""
        return self._by_processes("record", processes)

    def optimizer_time(self, processes: int, elements: int) -> float | None:
        entry = self._by_processes("optimizer", processes)
        if entry is None:
            return None
        alpha, beta = segment_line(entry["segments"], elements)
        return alpha + beta * elements

    def grad_path(self, processes: int, stage: int) -> dict[str, float] | None:
        """fit.grad_path's seconds per gradient hook and per bucket (hook_s, bucket_s) at
        `stage`, in the world nearest `processes`; None when the profile measured none."""
        entry = self._by_processes("grad_path", processes)
        return None if entry is None else entry.get(str(stage))

    # memory
    def memory_mechanisms(self, processes: int) -> dict[str, Any] | None:
        """fit.memory's mechanisms for the world nearest `processes`
        (zerosim/calibration/fit_memory.py; priced by analytic/mechanisms.py)."""
        return self._by_processes("memory", processes)


def load_profile(path: str | Path) -> Profile:
    path = Path(path)
    data = read_json_object(path, "profile")
    if data.get("format") != PROFILE_FORMAT:
        raise InputError(f"profile {path}: not a zerosim profile (format {data.get('format')!r}, "
                         f"expected {PROFILE_FORMAT!r})")
    if data.get("version") != PROFILE_VERSION:
        raise InputError(f"profile {path}: version {data.get('version')!r} is not supported "
                         f"(this zerosim reads version {PROFILE_VERSION}: re-run zero-real "
                         f"calibrate, which now measures the op model's constants)")
    if "fit" not in data:
        raise InputError(f"profile {path}: no 'fit' section (raw measurements only); fit it "
                         f"with zero-real calibrate")
    check_profile(data, path)
    return Profile(str(path), data)


__all__ = ["Profile", "check_fit", "load_profile", "segment_line"]
