"""How fast a pipelined step simulates at scale, whole process (python start, imports, the
scenario, the step, the table), on this box: the speed goals of issue 30. Prints figures; asserts
nothing (tests assert no timing).

    python bench/pp_speed.py [--repeat 3]

Cases: a 1T model at t = 8, p = 64 on 3072 GPUs with 1536 micro-batches per step (goal: under
5 s), GPT-3 175B at t = 8, p = 8 with 512 micro-batches (under 2 s), and `plan --allow tp,pp`
for GPT-3 175B on 1024 GPUs (under 20 s). Each is the median of --repeat runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZEROSIM = [sys.executable, "-m", "zerosim"]
CASES = [
    ("simulate 1T, t 8 x p 64 x d 6 on 3072 GPUs, 1536 micro-batches", 5.0,
     ["simulate", "scenarios/gpt_1t_3072gpu_3d.toml", "--stage", "1"]),
    ("simulate 175B, t 8 x p 8 x d 16 on 1024 GPUs, 512 micro-batches", 2.0,
     ["simulate", "scenarios/gpt3_175b_1024gpu_3d.toml", "--stage", "1",
      "--set", "training.gradient_accumulation=512"]),
    ("plan --allow tp,pp, 175B on 1024 GPUs", 20.0,
     ["plan", "scenarios/gpt3_175b_1024gpu_3d.toml", "--allow", "tp,pp"]),
]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([*ZEROSIM, *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'case':66} {'goal s':>7} {'median s':>9}  runs")
    for label, goal, argv in CASES:
        runs = [timed(argv) for _ in range(args.repeat)]
        print(f"{label:66} {goal:7.1f} {statistics.median(runs):9.2f}  "
              + " ".join(f"{r:.2f}" for r in runs))


if __name__ == "__main__":
    main()
