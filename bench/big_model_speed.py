"""Wall time of `zerosim simulate` as a user runs it (a fresh process, imports included), all four
stages: GPT-3 175B on 1024 GPUs, whose stages 0-2 run ~13k gradient buckets and as many
parameter all-gathers each, and the ZeRO paper's 7.5B model on 64 GPUs.

Goals (issue 17, medians of 5 runs on a 2-core machine): 175B <= 1.0 s, 7.5B <= 0.25 s. Timed
with Python's bytecode cache warm, as an installed package runs (one untimed run fills it; a
temporary cache directory keeps the tree clean), and, for reference, without it.
Run: python bench/big_model_speed.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5
CASES = (("GPT-3 175B, 1024 GPUs", "gpt3_175b_1024gpu.toml", 1.0),
         ("ZeRO paper 7.5B, 64 GPUs", "zero_paper_7b5_64gpu.toml", 0.25))


def wall_s(scenario: Path, env: dict[str, str]) -> list[float]:
    """Wall times of RUNS runs of `python -m zerosim simulate SCENARIO` (all four stages)."""
    walls = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "zerosim", "simulate", str(scenario)], check=True,
                       cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)
        walls.append(time.perf_counter() - start)
    return walls


def main() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"zerosim simulate, stages 0-3, fresh process each, median of {RUNS}, {cores} cores")
    with tempfile.TemporaryDirectory() as cache:
        warm = {**os.environ, "PYTHONPYCACHEPREFIX": cache}
        warm.pop("PYTHONDONTWRITEBYTECODE", None)
        cold = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": cache + "/x"}
        print(f"{'scenario':<26} {'median s':>8} {'goal s':>6}  {'':<4}  {'runs s':<32}"
              f"{'no bytecode cache s':>20}")
        for label, name, goal_s in CASES:
            scenario = ROOT / "scenarios" / name
            subprocess.run([sys.executable, "-m", "zerosim", "simulate", str(scenario)],
                           check=True, cwd=ROOT, env=warm, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120)
            walls = wall_s(scenario, warm)
            median = statistics.median(walls)
            verdict = "ok" if median <= goal_s else "OVER"
            runs = " ".join(f"{w:.2f}" for w in walls)
            cold_s = statistics.median(wall_s(scenario, cold))
            print(f"{label:<26} {median:>8.3f} {goal_s:>6}  {verdict:<4}  {runs:<32}"
                  f"{cold_s:>20.3f}")


if __name__ == "__main__":
    main()
