"""The calibration profile's schema, checked once and completely when a profile is read.

Every field the simulator looks up (profile.py) and every field calibrate writes
(zerosim.calibration.fit) has its type, is finite and lies in its range, and the names the
lookups go by (implementations, ops, unit kinds, passes, stages) are the contract's: a lookup
later never meets a missing key, a string where a number belongs, or a typo that silently falls
back to the preset. A failure is one line naming the file and the JSON path of the field
(`fit.collectives.native.all_reduce.4.segments[0].min_bytes`). Numbers are capped at 2**53 so
that a line evaluated at any size stays finite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from zerosim.contract import COLLECTIVE_IMPLS, COLLECTIVE_OPS, OPS, PASSES, STAGES, UNIT_KINDS
from zerosim.errors import InputError, brief
from zerosim.scenario.checks import MAX_VALUE, is_finite_number

# What a profile measured beyond the analytic memory model, per stage. Broadcast and reduce are not
# calibrated (COLLECTIVE_OPS are): they keep the preset's links.
MEMORY_TERMS = ("activations", "residue", "workspace")
SECTIONS = ("collectives", "compute", "optimizer", "step", "memory")
SEGMENT_KEYS = ("alpha_s", "s_per_byte", "min_bytes", "last_bytes", "max_bytes", "points",
                "residuals_pct")
LINE_KEYS = ("per", "overhead_s", "slope", "residuals_pct")
LINE_PER = ("flop", "token")
STEP_KEYS = ("impl", "compute_scale", "collective_scale", "other_s")
_KINDS = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
          list: "an array", dict: "an object", type(None): "null"}


class _Schema:
    """Errors that name the profile and the JSON path of the field."""

    def __init__(self, path: Path | str):
        self.path = path

    def fail(self, where: str, problem: str) -> InputError:
        return InputError(f"profile {self.path}: malformed {where}: {problem}")

    def mapping(self, where: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be an object, got {_kind(value)}")
        return value

    def object(self, where: str, value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
        """An object whose keys are all among `allowed` (the required ones are asked by get)."""
        for key in self.mapping(where, value):
            if key not in allowed:
                raise self.fail(where, f"unknown key {key!r} (allowed: {', '.join(allowed)})")
        return value

    def get(self, where: str, entry: dict[str, Any], key: str) -> Any:
        if key not in entry:
            raise self.fail(where, f"no {key!r}")
        return entry[key]

    def number(self, where: str, value: Any, signed: bool = False) -> float:
        """A finite number within 2**53, >= 0 unless `signed`."""
        if not is_finite_number(value):
            raise self.fail(where, f"must be a finite number, got {brief(value)}")
        if abs(value) > MAX_VALUE:
            raise self.fail(where, f"{value!r} is beyond 2**53")
        if not signed and value < 0:
            raise self.fail(where, f"{value!r} must be >= 0")
        return value

    def by_count(self, where: str, value: Any, least: int) -> Iterator[tuple[str, Any]]:
        """An object keyed by a process or rank count written plainly ("2")."""
        for key, item in self.mapping(where, value).items():
            if not key.isdigit() or not key.isascii() or str(int(key)) != key or int(key) < least:
                raise InputError(f"profile {self.path}: {where} key {key!r} must be a whole "
                                 f"number >= {least} written plainly (\"2\")")
            yield key, item

    def by_name(self, where: str, value: Any, names: tuple, what: str) -> Iterator[tuple[str, Any]]:
        for key, item in self.mapping(where, value).items():
            if key not in names:
                raise self.fail(where, f"key {key!r} is not {what} ({', '.join(map(str, names))})")
            yield key, item


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def _segments(s: _Schema, where: str, entry: dict[str, Any]) -> None:
    """α-β segments over increasing sizes: alpha_s + s_per_byte * size from min_bytes to
    last_bytes, the lookup bridging to the next segment above max_bytes ("bytes" are elements
    for the optimizer)."""
    segments = s.get(where, entry, "segments")
    if not isinstance(segments, list) or not segments:
        raise s.fail(f"{where}.segments", f"must be a non-empty array, got {brief(segments)}")
    previous_last = 0.0
    for i, seg in enumerate(segments):
        at = f"{where}.segments[{i}]"
        s.object(at, seg, SEGMENT_KEYS)
        for key in ("alpha_s", "s_per_byte", "min_bytes"):
            s.number(f"{at}.{key}", s.get(at, seg, key))
        last = s.number(f"{at}.last_bytes", seg["last_bytes"]) if "last_bytes" in seg else None
        top = s.number(f"{at}.max_bytes", s.get(at, seg, "max_bytes"))
        low = seg["min_bytes"]
        if not previous_last <= low <= (top if last is None else last) <= top:
            raise s.fail(at, f"min_bytes {low:g}, last_bytes {last}, max_bytes {top:g} must not "
                             f"decrease, nor start below the previous segment's last "
                             f"({previous_last:g})")
        previous_last = top if last is None else last
        if "points" in seg and (type(seg["points"]) is not int or seg["points"] < 1):
            raise s.fail(f"{at}.points", f"must be a whole number >= 1, got {brief(seg['points'])}")
        _residuals(s, at, seg)


def _residuals(s: _Schema, where: str, entry: dict[str, Any]) -> None:
    values = entry.get("residuals_pct", [])
    if not isinstance(values, list):
        raise s.fail(f"{where}.residuals_pct", f"must be an array, got {brief(values)}")
    for i, value in enumerate(values):
        s.number(f"{where}.residuals_pct[{i}]", value, signed=True)


def _collectives(s: _Schema, fit: dict[str, Any]) -> None:
    for impl, ops in s.by_name("fit.collectives", fit.get("collectives", {}), COLLECTIVE_IMPLS,
                               "a collective implementation"):
        for op, by_ranks in s.mapping(f"fit.collectives.{impl}", ops).items():
            if op not in COLLECTIVE_OPS:
                raise InputError(f"profile {s.path}: fit.collectives.{impl}.{op}: zerosim "
                                 f"prices only {', '.join(COLLECTIVE_OPS)} from a profile")
            for n, entry in s.by_count(f"fit.collectives.{impl}.{op}", by_ranks, 2):
                at = f"fit.collectives.{impl}.{op}.{n}"
                s.object(at, entry, ("segments", "busbw_GBps", "max_abs_residual_pct"))
                _segments(s, at, entry)
                if entry.get("busbw_GBps") is not None:
                    s.number(f"{at}.busbw_GBps", entry["busbw_GBps"])
                if "max_abs_residual_pct" in entry:
                    s.number(f"{at}.max_abs_residual_pct", entry["max_abs_residual_pct"])


def _compute(s: _Schema, fit: dict[str, Any]) -> None:
    for n, units in s.by_count("fit.compute", fit.get("compute", {}), 1):
        for unit, phases in s.by_name(f"fit.compute.{n}", units, UNIT_KINDS, "a unit kind"):
            s.object(f"fit.compute.{n}.{unit}", phases, PASSES)
            for phase in PASSES:
                at = f"fit.compute.{n}.{unit}.{phase}"
                line = s.object(at, s.get(f"fit.compute.{n}.{unit}", phases, phase), LINE_KEYS)
                if s.get(at, line, "per") not in LINE_PER:
                    raise s.fail(f"{at}.per", f"must be one of {', '.join(LINE_PER)}, got "
                                              f"{brief(line['per'])}")
                for key in ("overhead_s", "slope"):
                    s.number(f"{at}.{key}", s.get(at, line, key))
                _residuals(s, at, line)


def _step(s: _Schema, fit: dict[str, Any]) -> None:
    stages = tuple(map(str, STAGES))
    for n, entry in s.by_count("fit.step", fit.get("step", {}), 1):
        at = f"fit.step.{n}"
        s.object(at, entry, STEP_KEYS)
        if entry.get("impl", COLLECTIVE_IMPLS[0]) not in COLLECTIVE_IMPLS:
            raise s.fail(f"{at}.impl", f"must be one of {', '.join(COLLECTIVE_IMPLS)}, got "
                                       f"{brief(entry['impl'])}")
        for group in ("compute_scale", "other_s"):
            for stage, value in s.by_name(f"{at}.{group}", s.get(at, entry, group), stages,
                                          "a stage"):
                s.number(f"{at}.{group}.{stage}", value)
        for stage, ops in s.by_name(f"{at}.collective_scale", s.get(at, entry, "collective_scale"),
                                    stages, "a stage"):
            for op, value in s.by_name(f"{at}.collective_scale.{stage}", ops, OPS, "an op"):
                s.number(f"{at}.collective_scale.{stage}.{op}", value)


def _memory(s: _Schema, fit: dict[str, Any]) -> None:
    for n, by_stage in s.by_count("fit.memory", fit.get("memory", {}), 1):
        for stage, terms in s.by_name(f"fit.memory.{n}", by_stage, tuple(map(str, STAGES)),
                                      "a stage"):
            at = f"fit.memory.{n}.{stage}"
            s.object(at, terms, (*MEMORY_TERMS, "optimizer_per_element"))
            for term in MEMORY_TERMS:  # bytes beyond the analytic model: may be negative
                line = s.object(f"{at}.{term}", s.get(at, terms, term), ("fixed", "per_token"))
                for key in ("fixed", "per_token"):
                    s.number(f"{at}.{term}.{key}", s.get(f"{at}.{term}", line, key), signed=True)
            if "optimizer_per_element" in terms:
                s.number(f"{at}.optimizer_per_element", terms["optimizer_per_element"])


def check_fit(fit: Any, path: Path | str) -> None:
    """Every section of a profile's fit, every field of it."""
    s = _Schema(path)
    s.object("fit", fit, SECTIONS)
    for check in (_collectives, _compute, _step, _memory):
        check(s, fit)
    for n, entry in s.by_count("fit.optimizer", fit.get("optimizer", {}), 1):
        s.object(f"fit.optimizer.{n}", entry, ("segments",))
        _segments(s, f"fit.optimizer.{n}", entry)


def check_profile(data: dict[str, Any], path: Path | str) -> None:
    """The whole file: the provenance, scenario and raw measurements are objects (their fields are
    shown, not computed with), the fit is complete."""
    for key in ("provenance", "scenario", "measurements"):
        if key in data and not isinstance(data[key], dict):
            raise _Schema(path).fail(key, f"must be an object, got {_kind(data[key])}")
    check_fit(data["fit"], path)
