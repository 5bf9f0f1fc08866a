"""Wall time of `zerosim simulate` for the ZeRO paper's 7.5B model, all four stages, at 64, 1024
and 16384 GPUs (8 per node), and how the cost grows with N. Also the per-rank mode, which a
cluster with jitter needs, at 16 to 4096 ranks (every rank at once: sim/lockstep/), and the
classes mode a straggler needs.

Goals (issue 3, on a 2-core machine): 64 GPUs <= 0.5 s, 1024 <= 2 s, 16384 <= 10 s, all four
stages together. Run: python bench/simulator_speed.py
Whole-process figures for GPT-3 175B on 1024 GPUs and this 7.5B model on 64 (issue 17's goals):
bench/big_model_speed.py; under jitter at 64 to 16384 GPUs: bench/jitter_speed.py.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

from zerosim.sim.engine import simulate
from zerosim.scenario.load import load_scenario

PAPER = Path(__file__).resolve().parents[1] / "scenarios" / "zero_paper_7b5_64gpu.toml"
GOALS_S = {64: 0.5, 1024: 2.0, 16384: 10.0}
REPEATS = 3


def all_stages_s(scenario, mode: str = "auto") -> float:
    """Median wall time of simulating stages 0-3 once each (as `zerosim simulate` does)."""
    walls = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for stage in range(4):
            simulate(scenario, stage, mode=mode, keep_events=False)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def main() -> None:
    print("symmetric mode (uniform cluster), ZeRO paper 7.5B, stages 0-3, median of", REPEATS)
    print(f"{'GPUs':>6}  {'nodes':>5}  {'wall s':>7}  {'goal s':>6}  {'step s (stage 0/1/2/3)':>30}")
    previous = None
    for gpus in (64, 1024, 16384):
        s = load_scenario(PAPER, [f"cluster.nodes={gpus // 8}", "cluster.gpus_per_node=8"])
        wall = all_stages_s(s)
        steps = "/".join(f"{simulate(s, st, keep_events=False).step_time_s:.3f}" for st in range(4))
        growth = "" if previous is None else (
            f"  x{wall / previous[1]:.2f} for x{gpus // previous[0]} GPUs"
            f" (exponent {math.log(wall / previous[1]) / math.log(gpus / previous[0]):.2f})")
        verdict = "ok" if wall <= GOALS_S[gpus] else "OVER"
        print(f"{gpus:>6}  {gpus // 8:>5}  {wall:>7.3f}  {GOALS_S[gpus]:>6}  {steps:>30}  {verdict}{growth}")
        previous = (gpus, wall)
    print("\none straggler (rank 5, slowdown 1.2): classes mode simulates 2 ranks")
    for gpus in (64, 1024, 16384):
        s = load_scenario(PAPER, [f"cluster.nodes={gpus // 8}", "cluster.gpus_per_node=8",
                                  "variation.slow_ranks=[5]", "variation.slowdown=1.2"])
        print(f"{gpus:>6}  {all_stages_s(s):>7.3f} s")
    print("\nper-rank mode (every rank simulated, as jitter requires), reduce buckets 200 MiB")
    for gpus in (16, 256, 4096):
        s = load_scenario(PAPER, [f"cluster.nodes={gpus // 8}", "cluster.gpus_per_node=8",
                                  "training.reduce_bucket_MiB=200"])
        print(f"{gpus:>6}  {all_stages_s(s, mode='per_rank'):>7.3f} s")


if __name__ == "__main__":
    main()
