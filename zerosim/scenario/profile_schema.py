"""The calibration profile's schema, checked once and completely when a profile is read.

Every field the simulator looks up (profile.py) and every field calibrate writes
(zerosim.calibration.fit) has its type, is finite and lies in its range, and the names the
lookups go by (implementations, ops, unit kinds, passes, stages) are the contract's: a lookup
later never meets a missing key, a string where a number belongs, or a typo that silently falls
back to the preset. A failure is one line naming the file and the JSON path of the field
(`fit.collectives.native.all_reduce.4.segments[0].min_bytes`). Numbers are capped at 2**53 so
that a line evaluated at any size stays finite. A box's record (`fit.record[n]`, the op model's
constants) is checked key by key: rates > 0, seconds >= 0, tiles and units whole, sequence
lengths increasing, names among the op model's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from zerosim.contract import COLLECTIVE_IMPLS, COLLECTIVE_OPS, PASSES, STAGES, UNIT_KINDS
from zerosim.errors import InputError, brief
from zerosim.hardware.op_model import MEMORY_OPS
from zerosim.scenario.checks import MAX_VALUE, is_finite_number

# The memory mechanisms a profile may hold (fit.memory; analytic/mechanisms.py prices each).
MEMORY_MECHANISMS = ("loss_backward", "optimizer_grad", "optimizer_step", "norm_saved",
                     "attention_saved", "saved_ids", "math_attention_batch1", "head_kept",
                     "bucket_pool", "last_unit_kept", "tied_grad_kept")
# The fit's sections. A version-1 profile's per-unit compute lines and per-stage in-step scales
# ("compute", "step") are gone: a fit carrying one is refused by name.
SECTIONS = ("collectives", "optimizer", "memory", "record", "grad_path")
SEGMENT_KEYS = ("alpha_s", "s_per_byte", "min_bytes", "last_bytes", "max_bytes", "points",
                "residuals_pct")
# A box's record (fit.record[n], zerosim/calibration/fit_ops.py; read by hardware/measured.py).
RECORD_DEVICES = ("cpu", "cuda")
RECORD_DTYPE_OF = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""torch's name of each training.precision: what a record's rows were measured in."""
RECORD_DTYPES = tuple(RECORD_DTYPE_OF.values())
ATTENTION_KERNELS = ("flash", "math")  # training.flash_attention true, false
RECORD_MEMORY_OPS = MEMORY_OPS  # hardware/op_model.py
RECORD_REQUIRED = ("name", "device", "dtype", "threads", "gemm", "launch_s", "autograd_node_s",
                   "bandwidth_GBps", "memory_ops")
RECORD_KEYS = (*RECORD_REQUIRED, "linear_overhead_s", "linear_residuals_pct", "attention",
               "copies", "host_dispatch_s", "backward_call_s", "unit_overhead_s", "unfitted")
GEMM_KEYS = ("tflops", "tile", "units", "launch_s", "residuals_pct")
RATE_KEYS = ("overhead_s", "bytes_per_s", "residuals_pct")
COPY_KEYS = tuple(f"{d}_{p}" for d in ("h2d", "d2h") for p in ("pinned", "pageable"))
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

    def positive(self, where: str, value: Any) -> float:
        """A finite number within 2**53, > 0 (a rate divides by it)."""
        if self.number(where, value) <= 0:
            raise self.fail(where, f"{value!r} must be > 0")
        return value

    def whole(self, where: str, value: Any, least: int = 1) -> int:
        if type(value) is not int or not least <= value <= MAX_VALUE:
            raise self.fail(where, f"must be a whole number >= {least}, got {brief(value)}")
        return value

    def choice(self, where: str, value: Any, allowed: tuple[str, ...]) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise self.fail(where, f"must be one of {', '.join(allowed)}, got {brief(value)}")
        return value

    def array(self, where: str, value: Any, length: int | None = None) -> list:
        """An array, non-empty, of `length` items where given."""
        if not isinstance(value, list) or not value or length not in (None, len(value)):
            size = "a non-empty array" if length is None else f"an array of {length}"
            raise self.fail(where, f"must be {size}, got {brief(value)}")
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


def _memory(s: _Schema, fit: dict[str, Any]) -> None:
    """Per processes count, each memory mechanism (zerosim/calibration/fit_memory.py): fixed
    bytes and bytes per count, none negative, how it was had and where from."""
    for n, by_name in s.by_count("fit.memory", fit.get("memory", {}), 1):
        for name, entry in s.by_name(f"fit.memory.{n}", by_name, MEMORY_MECHANISMS,
                                     "a memory mechanism"):
            at = f"fit.memory.{n}.{name}"
            s.object(at, entry, ("fixed_bytes", "per", "how", "source", "points",
                                 "residuals_pct", "dtype", "norm", "kernel"))
            s.number(f"{at}.fixed_bytes", s.get(at, entry, "fixed_bytes"))
            for count, value in s.mapping(f"{at}.per", s.get(at, entry, "per")).items():
                s.number(f"{at}.per.{count}", value)
            s.choice(f"{at}.how", s.get(at, entry, "how"), ("measured", "derived"))
            if not isinstance(s.get(at, entry, "source"), str):
                raise s.fail(f"{at}.source", f"must be a string, got {brief(entry['source'])}")
            _residuals(s, at, entry)


def _rate(s: _Schema, where: str, entry: Any) -> None:
    """overhead_s + bytes / bytes_per_s, with its residuals."""
    s.object(where, entry, RATE_KEYS)
    s.number(f"{where}.overhead_s", s.get(where, entry, "overhead_s"))
    s.positive(f"{where}.bytes_per_s", s.get(where, entry, "bytes_per_s"))
    _residuals(s, where, entry)


def _gemm(s: _Schema, where: str, gemm: Any) -> None:
    s.object(where, gemm, GEMM_KEYS)
    s.positive(f"{where}.tflops", s.get(where, gemm, "tflops"))
    for i, side in enumerate(s.array(f"{where}.tile", s.get(where, gemm, "tile"), 2)):
        s.whole(f"{where}.tile[{i}]", side)
    s.whole(f"{where}.units", s.get(where, gemm, "units"))
    s.number(f"{where}.launch_s", s.get(where, gemm, "launch_s"))
    _residuals(s, where, gemm)


def _attention(s: _Schema, where: str, attention: Any) -> None:
    """Overheads per call, seconds per score element (optional: the math kernel's), then
    (sequence, forward TFLOP/s, backward TFLOP/s) by increasing sequence length."""
    s.object(where, attention, ("kernel", "overhead_s", "score_s", "by_seq", "residuals_pct"))
    s.choice(f"{where}.kernel", s.get(where, attention, "kernel"), ATTENTION_KERNELS)
    for key in ("overhead_s", "score_s"):
        if key in attention or key == "overhead_s":
            for i, value in enumerate(s.array(f"{where}.{key}", s.get(where, attention, key), 2)):
                s.number(f"{where}.{key}[{i}]", value)
    previous = 0
    for i, point in enumerate(s.array(f"{where}.by_seq", s.get(where, attention, "by_seq"))):
        at = f"{where}.by_seq[{i}]"
        seq = s.whole(f"{at}[0]", s.array(at, point, 3)[0])
        if seq <= previous:
            raise s.fail(f"{at}[0]", f"sequence {seq} must be above the previous ({previous})")
        previous = seq
        s.positive(f"{at}[1]", point[1])
        s.positive(f"{at}[2]", point[2])
    _residuals(s, where, attention)


def _record_entry(s: _Schema, at: str, record: Any) -> None:
    """One box's op-model record: every key, its type and range, and every residual."""
    s.object(at, record, RECORD_KEYS)
    for key in RECORD_REQUIRED:
        s.get(at, record, key)
    name = record["name"]
    if not isinstance(name, str) or not name.strip():
        raise s.fail(f"{at}.name", f"must be a non-empty string, got {brief(name)}")
    s.choice(f"{at}.device", record["device"], RECORD_DEVICES)
    s.choice(f"{at}.dtype", record["dtype"], RECORD_DTYPES)
    s.whole(f"{at}.threads", record["threads"])
    _gemm(s, f"{at}.gemm", record["gemm"])
    for key in ("launch_s", "autograd_node_s", "backward_call_s"):
        if key in record or key != "backward_call_s":
            s.number(f"{at}.{key}", record[key])
    for kind, passes in s.by_name(f"{at}.unit_overhead_s", record.get("unit_overhead_s", {}),
                                  UNIT_KINDS, "a unit kind"):
        for i, value in enumerate(s.array(f"{at}.unit_overhead_s.{kind}", passes, 2)):
            s.number(f"{at}.unit_overhead_s.{kind}[{i}]", value)
    s.positive(f"{at}.bandwidth_GBps", record["bandwidth_GBps"])
    for key in ("linear_overhead_s", "host_dispatch_s"):
        for i, value in enumerate(s.array(f"{at}.{key}", record[key], 2) if key in record else ()):
            s.number(f"{at}.{key}[{i}]", value)
    if "linear_residuals_pct" in record:
        for i, values in enumerate(s.array(f"{at}.linear_residuals_pct",
                                           record["linear_residuals_pct"], 2)):
            _residuals(s, f"{at}.linear_residuals_pct[{i}]", {"residuals_pct": values})
    if "attention" in record:
        _attention(s, f"{at}.attention", record["attention"])
    for i, line in enumerate(s.array(f"{at}.unfitted", record["unfitted"])
                             if "unfitted" in record else ()):
        if not isinstance(line, str):
            raise s.fail(f"{at}.unfitted[{i}]", f"must be a string, got {brief(line)}")
    for op, passes in s.by_name(f"{at}.memory_ops", record["memory_ops"], RECORD_MEMORY_OPS,
                                "a memory-bound op"):
        s.object(f"{at}.memory_ops.{op}", passes, PASSES)  # a pass may be unfitted
        if op == "copy":  # the record's bandwidth
            s.get(f"{at}.memory_ops.{op}", passes, PASSES[0])
        for name, entry in passes.items():
            _rate(s, f"{at}.memory_ops.{op}.{name}", entry)
    for key, entry in s.by_name(f"{at}.copies", record.get("copies", {}), COPY_KEYS, "a copy"):
        _rate(s, f"{at}.copies.{key}", entry)


def _grad_path(s: _Schema, fit: dict[str, Any]) -> None:
    """Per processes count and stage: seconds per gradient hook and per bucket (stages 0-2),
    and optionally per hook on a micro-step that does not reduce; per pass, seconds per flat
    buffer and per byte of ZeRO-3's visits (stage 3)."""
    for n, by_stage in s.by_count("fit.grad_path", fit.get("grad_path", {}), 1):
        for stage, entry in s.by_name(f"fit.grad_path.{n}", by_stage,
                                      tuple(map(str, STAGES)), "a stage"):
            at = f"fit.grad_path.{n}.{stage}"
            if stage != "3":
                s.object(at, entry, ("hook_s", "bucket_s", "idle_hook_s"))
                for key in ("hook_s", "bucket_s"):
                    s.number(f"{at}.{key}", s.get(at, entry, key))
                if "idle_hook_s" in entry:  # optional: profiles fitted before it lack it
                    s.number(f"{at}.idle_hook_s", entry["idle_hook_s"])
                continue
            s.object(at, entry, PASSES)
            for phase in PASSES:
                where = f"{at}.{phase}"
                visit = s.get(at, entry, phase)
                s.object(where, visit, ("buffer_s", "s_per_byte", "residuals_pct"))
                for key in ("buffer_s", "s_per_byte"):
                    s.number(f"{where}.{key}", s.get(where, visit, key))
                _residuals(s, where, visit)


def check_fit(fit: Any, path: Path | str) -> None:
    """Every section of a profile's fit, every field of it."""
    s = _Schema(path)
    s.object("fit", fit, SECTIONS)
    for check in (_collectives, _memory, _grad_path):
        check(s, fit)
    for n, record in s.by_count("fit.record", fit.get("record", {}), 1):
        _record_entry(s, f"fit.record.{n}", record)
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
