"""Published end-to-end training runs against the simulation (`zerosim validate --references
DIR`). Each `DIR/*.toml` is one run someone else measured and published (references/README.md
gives the schema): where it comes from, what was measured, and the run as a zerosim scenario.
They are a TEST SET: nothing in zerosim is fitted to them; this only reports how far the
simulation lands, and judges it by the bar of issue 16 (mean |error| <= 10% for throughput and
for memory, every reference within 25%). A run zerosim cannot express (pipeline
parallelism, Float8, ...) is listed with why, never dropped. Nothing compared meets no bar: a folder of
runs zerosim cannot express fails (exit 1), and a run it can express that measured none of the
figures compared is refused when it is read, like a measured figure so near 0 that the error
relative to it overflows (one line, exit 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zerosim.errors import InputError
from zerosim.files import read_text, refuse_special
from zerosim.analytic.model import unit_flops
from zerosim.report import columns
from zerosim.scenario.checks import is_finite_number
from zerosim.scenario.load import build_scenario, check_keys, relocate_legacy
from zerosim.scenario.parallelism_table import canonical_key
from zerosim.scenario.parse import TOMLDecodeError, parse_toml
from zerosim.units import GiB

MEAN_BAR_PCT, WORST_BAR_PCT = 10.0, 25.0
REQUIRED = ("title", "source", "where", "published", "framework", "hardware", "expressible")
OPTIONAL = ("why", "settings_not_in_scenario")
MEASURED = ("tokens_per_s_per_gpu", "tflops_per_gpu", "tflops_formula", "mfu", "memory_GiB",
            "memory_kind", "derivation")
NUMBERS = ("tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "memory_GiB")
SCENARIO_TABLES = ("model", "cluster", "training", "parallelism")
# Which simulated figure answers each kind of published memory figure.
SIMULATED_MEMORY = {"max_memory_allocated": "peak_allocated_bytes",
                    "max_memory_reserved": "peak_reserved_bytes", "nvidia-smi": "device_bytes"}


@dataclass
class Reference:
    path: Path
    info: dict[str, Any]
    measured: dict[str, Any]
    scenario: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.stem


def _table(raw: dict, key: str, path: Path, allowed: tuple[str, ...]) -> dict[str, Any]:
    table = raw.get(key, {})
    if not isinstance(table, dict):
        raise InputError(f"{path}: [{key}] must be a table")
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise InputError(f"{path}: unknown key {key}.{unknown[0]} (allowed: {', '.join(allowed)})")
    return table


def read_reference(path: Path) -> Reference:
    try:
        raw = parse_toml(read_text(path, "reference"), str(path))
    except TOMLDecodeError as exc:
        raise InputError(f"{path}: TOML syntax error: {exc}") from None
    extra = sorted(set(raw) - {"reference", "measured", "scenario"})
    if extra:
        raise InputError(f"{path}: unknown table [{extra[0]}] (allowed: [reference], "
                         f"[measured], [scenario])")
    info = _table(raw, "reference", path, REQUIRED + OPTIONAL)
    missing = [key for key in REQUIRED if key not in info]
    if missing:
        raise InputError(f"{path}: [reference] has no {missing[0]!r}")
    if not isinstance(info["expressible"], bool):
        raise InputError(f"{path}: reference.expressible must be true or false")
    if not info["expressible"] and not info.get("why"):
        raise InputError(f"{path}: a reference zerosim cannot express says why (reference.why)")
    measured = _table(raw, "measured", path, MEASURED)
    for key in NUMBERS:
        value = measured.get(key)
        if value is not None and not (is_finite_number(value) and value > 0):
            raise InputError(f"{path}: measured.{key} = {value!r} must be a positive number")
    if info["expressible"] and not any(key in measured for key in NUMBERS):
        raise InputError(f"{path}: [measured] has none of {', '.join(NUMBERS)}: nothing to "
                         f"compare (a run zerosim cannot express sets expressible = false)")
    scenario = _table(raw, "scenario", path, SCENARIO_TABLES)
    for name, table in scenario.items():
        if not isinstance(table, dict):
            raise InputError(f"{path}: scenario.{name} must be a table")
    scenario = {name: dict(table) for name, table in scenario.items()}
    if "training" in scenario:
        relocate_legacy(scenario, str(path))
    for name, table in scenario.items():
        check_keys(name, table, str(path))
    return Reference(path, info, measured, scenario)


def read_references(folder: str | Path) -> list[Reference]:
    folder = Path(folder)
    refuse_special(folder, "--references")  # is_dir raises on a name too long, EACCES, a loop
    if not folder.is_dir():
        raise InputError(f"--references {folder}: not a folder of reference TOML files")
    paths = sorted(folder.glob("*.toml"))
    if not paths:
        raise InputError(f"--references {folder}: no *.toml file in it")
    return [read_reference(path) for path in paths]


def _throughput(ref: Reference, result, scenario) -> tuple[str, float, float] | None:
    """(metric, measured, simulated): tokens/s per GPU, else TFLOP/s per GPU (hardware FLOPs
    when the source counted recomputation), else MFU. One per reference."""
    m = ref.measured
    if "tokens_per_s_per_gpu" in m:
        return "tokens/s/GPU", m["tokens_per_s_per_gpu"], result.tokens_per_s_per_gpu
    if "tflops_per_gpu" in m:
        formula = str(m.get("tflops_formula", "")).lower()
        if "recomput" in formula or "hfu" in formula or "hardware" in formula:
            t = scenario.training
            flops = sum(u.forward + u.backward for u in unit_flops(scenario.model, t))
            # The whole model's FLOPs for a micro-batch, which the t x p ranks of a tensor-
            # and pipeline-parallel group share: per GPU, a (t p)-th of them (Megatron's formula
            # divides by all GPUs).
            p = scenario.parallelism
            done = flops * t.gradient_accumulation / (p.tensor_parallel * p.pipeline_parallel
                                                      * result.step_time_s)
            return "TFLOP/s/GPU (hardware)", m["tflops_per_gpu"], done / 1e12
        peak = scenario.cluster.peak_tflops
        return "TFLOP/s/GPU (model)", m["tflops_per_gpu"], result.mfu * peak
    if "mfu" in m:
        return "MFU", m["mfu"], result.mfu
    return None


def _row(ref: Reference, category: str, metric: str, measured: float, simulated: float,
         note: str = "") -> dict[str, Any]:
    error_pct = 100.0 * (simulated - measured) / measured
    if not math.isfinite(error_pct):  # measured 5e-324: no error can be taken relative to it
        raise InputError(f"{ref.path}: {metric} measured {measured!r}, simulated {simulated:.4g}: "
                         f"the error relative to the measurement overflows")
    return {"reference": ref.name, "category": category, "metric": metric,
            "measured": measured, "simulated": simulated, "error_pct": error_pct, "note": note}


def compare(ref: Reference, overrides: dict[str, dict[str, Any]] | None = None
            ) -> list[dict[str, Any]]:
    """The reference's figures against one simulated step of its scenario's stage, with
    `overrides` ({table: {key: value}}) set over the reference's own keys (to compare models)."""
    from zerosim.sim.engine import simulate

    tables = {"variation": {}, **{name: dict(ref.scenario.get(name, {}))
                                  for name in SCENARIO_TABLES}}
    for table, keys in (overrides or {}).items():
        for key, value in keys.items():  # the old [training] spelling of a [parallelism] key
            name, key = canonical_key(table, key)
            tables[name][key] = value
    try:
        scenario = build_scenario(tables, base_dir=ref.path.parent, source=str(ref.path))
        result = simulate(scenario, scenario.training.zero_stage, keep_events=False)
    except InputError as exc:
        raise InputError(f"{ref.path}: {exc}") from None
    rows, throughput = [], _throughput(ref, result, scenario)
    if throughput is not None:
        rows.append(_row(ref, "throughput", *throughput))
    if "memory_GiB" in ref.measured:
        kind = ref.measured.get("memory_kind", "unknown")
        simulated = getattr(result, SIMULATED_MEMORY.get(kind, "peak_reserved_bytes"))
        note = "" if kind in SIMULATED_MEMORY else "which figure is unknown; compared: reserved"
        rows.append(_row(ref, "memory", f"memory GiB ({kind})", ref.measured["memory_GiB"],
                         simulated / GiB, note))
    return rows


def references_report(folder: str | Path,
                      overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    refs = read_references(folder)
    rows, not_expressible = [], []
    for ref in refs:
        if ref.info["expressible"]:
            rows += compare(ref, overrides)
        else:
            not_expressible.append({"reference": ref.name, "title": ref.info["title"],
                                    "why": ref.info["why"]})
    summary = {}
    for category in ("throughput", "memory"):
        errors = [abs(r["error_pct"]) for r in rows if r["category"] == category]
        mean = sum(errors) / len(errors) if errors else None
        if mean is not None and not math.isfinite(mean):  # errors of 1e308 %: divide first
            mean = math.fsum(e / len(errors) for e in errors)
        summary[category] = {"count": len(errors), "mean_abs_error_pct": mean,
                             "worst_abs_error_pct": max(errors) if errors else None}
    return {"folder": str(folder), "references": len(refs), "overrides": overrides or {},
            "rows": rows,
            "not_expressible": not_expressible, "summary": summary,
            "bar": {"mean_pct": MEAN_BAR_PCT, "worst_pct": WORST_BAR_PCT}}


def judge_references(report: dict[str, Any]) -> bool:
    """Issue 16's bar: each category's mean |error| within 10%, every row within 25%; nothing
    compared (every run listed as not expressible) fails."""
    if not report["rows"]:
        return False
    for stats in report["summary"].values():
        if stats["count"] and (stats["mean_abs_error_pct"] > MEAN_BAR_PCT
                               or stats["worst_abs_error_pct"] > WORST_BAR_PCT):
            return False
    return True


def format_references(report: dict[str, Any]) -> str:
    head = ["reference", "metric", "measured", "simulated", "error", "note"]
    body = [[r["reference"], r["metric"], f"{r['measured']:.4g}", f"{r['simulated']:.4g}",
             f"{r['error_pct']:+.1f}%", f"({r['note']})" if r["note"] else ""]
            for r in report["rows"]]
    given = ", ".join(f"{table}.{key}={value!r}" for table, keys in report["overrides"].items()
                      for key, value in keys.items())
    lines = [f"{report['references']} published runs in {report['folder']} (a test set: nothing "
             f"is fitted to them)" + (f"; every scenario with {given}" if given else ""), ""]
    lines += columns(head, body)
    for category, stats in report["summary"].items():
        if stats["count"]:
            lines.append(f"{category}: mean |error| {stats['mean_abs_error_pct']:.1f}% over "
                         f"{stats['count']}, worst {stats['worst_abs_error_pct']:.1f}% (bar: mean "
                         f"<= {MEAN_BAR_PCT:g}%, each <= {WORST_BAR_PCT:g}%)")
    if not report["rows"]:
        lines.append("nothing compared: no run here is one zerosim can express (FAILED)")
    if report["not_expressible"]:
        lines += ["", "not expressible in zerosim (listed, not dropped):"]
        lines += [f"  {r['reference']}: {r['why']}" for r in report["not_expressible"]]
    return "\n".join(lines)


