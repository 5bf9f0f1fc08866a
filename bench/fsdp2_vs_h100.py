"""zerosim's FSDP2 memory and compute against our own H100 measurement of FSDP2
(profiles/h100/fsdp2_memory_2026-11-24.json: bench/h100/fsdp2_memory.py, one H100 against a
fake process group of W ranks, so collectives cost nothing and the step is compute alone).

    python bench/fsdp2_vs_h100.py

Per configuration: peak allocated and peak reserved (max_memory_allocated / _reserved since the
start), and the compute of a step (the measured step time, median of the steps after the first)
under both compute models (cluster.compute_model = flat and op). The configurations are ours,
not published runs: they check the mechanisms (FSDP2's fp32 shards, gradients made in backward,
the caching allocator) on a machine we ran, before references/ tests the whole.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zerosim.scenario.load import build_scenario  # noqa: E402
from zerosim.sim.engine import simulate  # noqa: E402
from zerosim.units import GiB  # noqa: E402

MEASURED = ROOT / "profiles" / "h100" / "fsdp2_memory_2026-11-24.json"


def scenario(c: dict, compute_model: str):
    """The measured configuration as a scenario: torchtitan's Llama on H100 SXM presets,
    FSDP2 with bf16 parameters and fp32 reduction, AdamW, flash attention."""
    tables = {
        "model": {"name": c["name"], "layers": c["layers"], "hidden": c["hidden"],
                  "heads": c["heads"], "kv_heads": c["kv_heads"], "ffn": c["ffn"],
                  "vocab": c["vocab"], "mlp": "swiglu", "norm": "rmsnorm", "bias": False,
                  "position": "rope", "tied_embeddings": False, "dropout": False},
        "cluster": {"nodes": max(1, c["world"] // 8), "gpus_per_node": min(8, c["world"]),
                    "gpu": "H100-80GB", "compute_model": compute_model},
        "training": {"framework": "fsdp2", "reduce_dtype": c["reduce_dtype"], "zero_stage": 3,
                     "precision": "bf16", "optimizer": "adamw", "micro_batch": c["batch"],
                     "seq_len": c["seq"], "activation_checkpointing": c["ac"],
                     "flash_attention": True},
        "variation": {}}
    return build_scenario(tables, base_dir=ROOT, source=str(MEASURED))


def pct(sim: float, meas: float) -> str:
    return f"{sim:7.2f} {100 * (sim - meas) / meas:+6.1f}%"


def main() -> int:
    runs = [r for r in json.loads(MEASURED.read_text()) if not r.get("oom")]
    print(f"{MEASURED.relative_to(ROOT)}: {len(runs)} runs (GiB, s; simulated and its error)\n")
    print(f"{'configuration':30s} {'fused':>5s} {'alloc':>6s} {'sim':>15s} {'reserved':>9s} "
          f"{'sim':>15s} {'step s':>7s} {'flat':>15s} {'op':>15s}")
    errors: dict[str, list[float]] = {"alloc": [], "reserved": [], "flat": [], "op": []}
    for r in runs:
        c = r["config"]
        peaks = r["peak_since_start"]
        alloc, reserved = peaks["max_memory_allocated"] / GiB, peaks["max_memory_reserved"] / GiB
        step = statistics.median(s["seconds"] for s in r["steps"][1:])
        flat, op = (simulate(scenario(c, m), 3, keep_events=False) for m in ("flat", "op"))
        sims = {"alloc": flat.peak_allocated_bytes / GiB,
                "reserved": flat.peak_reserved_bytes / GiB,
                "flat": flat.compute_s, "op": op.compute_s}
        for key, meas in (("alloc", alloc), ("reserved", reserved), ("flat", step),
                          ("op", step)):
            errors[key].append(100 * (sims[key] - meas) / meas)
        print(f"{c['name']:30s} {str(c['fused']):>5s} {alloc:6.2f} {pct(sims['alloc'], alloc)} "
              f"{reserved:9.2f} {pct(sims['reserved'], reserved)} {step:7.3f} "
              f"{pct(sims['flat'], step)} {pct(sims['op'], step)}")
    print()
    for key, label in (("alloc", "peak allocated"), ("reserved", "peak reserved"),
                       ("flat", "compute, flat model"), ("op", "compute, op model")):
        values = errors[key]
        print(f"{label:20s} mean |error| {statistics.fmean(abs(v) for v in values):5.1f}%, "
              f"mean {statistics.fmean(values):+5.1f}%, worst {max(values, key=abs):+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
