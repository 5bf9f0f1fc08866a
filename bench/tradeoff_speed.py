"""Wall time of the trade-off commands as a user runs them (a fresh process each, imports
included): issue 6's sweep (ZeRO paper 7.5B, stages 0-3 x nodes 1..128, 32 points) on one
process and on every core, a larger sweep (x micro-batch 1, 2, 4, 8: 128 points), and
`zerosim plan` on three scenarios.

Goal (issue 6): the 32-point sweep "in a few seconds" on a 2-core machine. Run:
python bench/tradeoff_speed.py
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
PAPER = ROOT / "scenarios" / "zero_paper_7b5_64gpu.toml"
NODES = "cluster.nodes=1,2,4,8,16,32,64,128"
REPEATS = 3
GOAL_S = 5.0


def wall_s(*argv: str) -> float:
    """Median wall time of `python -m zerosim ARGV`, which must succeed."""
    walls = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "zerosim", *argv], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def main() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"median of {REPEATS} runs, {cores} cores, fresh process each (imports included)")
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "r.csv")
        issue = ["sweep", str(PAPER), "--vary", "training.zero_stage=0,1,2,3", "--vary", NODES,
                 "--out", out, "--quiet"]
        for label, extra in (("1 process", ["--jobs", "1"]), (f"all {cores} cores", [])):
            wall = wall_s(*issue, *extra)
            verdict = "ok" if wall <= GOAL_S else "OVER"
            print(f"sweep 4 stages x 8 node counts (32 points), {label:>12}: {wall:6.2f} s  "
                  f"(goal <= {GOAL_S:g} s: {verdict})")
        wall = wall_s(*issue, "--vary", "training.micro_batch=1,2,4,8")
        print(f"sweep x micro-batch 1,2,4,8 (128 points), all cores:          {wall:6.2f} s")
    for name in ("zero_paper_7b5_64gpu.toml", "llama2_7b_64gpu.toml", "gpt3_175b_1024gpu.toml"):
        print(f"plan {name:<28} {wall_s('plan', str(ROOT / 'scenarios' / name)):6.2f} s")


if __name__ == "__main__":
    main()
