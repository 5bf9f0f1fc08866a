"""Wall time of `zerosim simulate` under jitter as a user runs it (a fresh process, imports
included): all four stages of the ZeRO paper's 7.5B scenario with variation.jitter_pct = 5, so
every rank is simulated, at 64, 1024 and 16384 GPUs (8 per node); also the peak memory of each
run (its maximum resident set) and the machine's load, which the timings depend on.

Goals (issue 17, medians of 5 runs on a 2-core machine): 64 ranks <= 5 s, 1024 <= 30 s,
16384 <= 300 s. Before the lockstep (sim/lockstep/): 64 ranks ~2.9 s, 256 ~11.6 s, and more
than 512 refused. Run: python bench/jitter_speed.py [RUNS]
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "scenarios" / "zero_paper_7b5_64gpu.toml"
GOALS_S = {64: 5.0, 1024: 30.0, 16384: 300.0}
RUNS = 5


def run_s(gpus: int) -> tuple[float, float]:
    """Wall seconds and peak resident GB of one `python -m zerosim simulate` (stages 0-3)."""
    argv = [sys.executable, "-m", "zerosim", "simulate", str(PAPER),
            "--set", "variation.jitter_pct=5", "--set", f"cluster.nodes={gpus // 8}"]
    start = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=1800)
    wall = time.perf_counter() - start
    # the largest child so far: the sizes run in increasing order, so this size's largest
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, peak_kib * 1024 / 1e9


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else RUNS
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"zerosim simulate, ZeRO paper 7.5B, jitter 5%, stages 0-3, fresh process each, "
          f"median of {runs}, {cores} cores, load average {os.getloadavg()[0]:.2f} at start")
    print(f"{'GPUs':>6} {'median s':>9} {'goal s':>7}  {'':<4}  {'runs s':<40} {'peak RSS GB':>11}")
    for gpus, goal_s in GOALS_S.items():
        walls, peaks = zip(*(run_s(gpus) for _ in range(runs)))
        median = statistics.median(walls)
        verdict = "ok" if median <= goal_s else "OVER"
        times = " ".join(f"{w:.2f}" for w in walls)
        print(f"{gpus:>6} {median:>9.2f} {goal_s:>7.0f}  {verdict:<4}  {times:<40} "
              f"{max(peaks):>11.2f}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
