"""`zerosim plan --allow tp,pp` on two models, as zerosim predicts them: GPT-3 175B on 1024 A100s
(scenarios/gpt3_175b_1024gpu.toml) and a 1T GPT on 3072 A100s (the same file with the shape of
DeepSpeed's 1T GPT, references/deepspeed_azure_gpt_1t_1024xa100.toml: 128 layers, hidden 25600,
160 heads, on 384 nodes). A measuring script: it asserts nothing and fits nothing.

    python bench/pp_plan.py

Per model: the best 3-D layout (the fastest pipeline layout of the plan) against the best
pure-ZeRO configuration (ZeRO-1/2/3 without tensor or pipeline parallelism, the plain stages on
the scenario's GPUs), each with its step time and memory per GPU (the memory model's peak; the
worst pipeline stage under a pipeline), on the same global batch (one sequence per GPU a step);
and the wall time of each plan, timed around the whole `python -m zerosim plan` process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPT3 = str(ROOT / "scenarios/gpt3_175b_1024gpu.toml")
ONE_T = ("--set", 'model.name="GPT 1T"', "--set", "model.layers=128", "--set",
         "model.hidden=25600", "--set", "model.heads=160", "--set", "cluster.nodes=384")
CASES = (("GPT-3 175B, 1024 A100-80GB", (GPT3,)), ("GPT 1T, 3072 A100-80GB", (GPT3, *ONE_T)))
GiB = 2**30


def planned(args: tuple[str, ...]) -> tuple[dict, float]:
    """plan's JSON and the wall seconds of its whole process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "zerosim", "plan", *args, "--allow", "tp,pp",
                           "--json"], capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout), time.perf_counter() - start


def line(name: str, row: dict | None) -> str:
    if row is None:
        return f"  {name:<10} none fits"
    return (f"  {name:<10} {row['label']:<58} {row['step_time_s']:>8.2f} s "
            f"{row['peak_bytes'] / GiB:>8.2f} GiB")


def main() -> None:
    for title, args in CASES:
        result, wall_s = planned(args)
        plain = [dict(c, label=c["stage_name"]) for c in result["configurations"]
                 if c["world_size"] == result["world_size"] and c["stage"] >= 1]
        zero = min(plain, key=lambda c: c["step_time_s"], default=None)
        best = result["pipeline"]["fastest"]
        if best is not None:
            best = dict(best, label=f"{best['label']}, mb {best['micro_batch']} x "
                                    f"{best['micro_batches']}")
        print(f"{title}: plan --allow tp,pp in {wall_s:.1f} s (whole process)")
        print(line("3-D", best))
        print(line("ZeRO only", zero))
        few = result["pipeline"]["fewest"]
        if few is not None:
            print(f"  fewest GPUs with a pipeline: {few['world_size']:,} ({few['label']})")
        print(flush=True)


if __name__ == "__main__":
    main()
