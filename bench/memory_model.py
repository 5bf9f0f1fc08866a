"""Figures for the analytic memory model: agreement with the ZeRO paper's Table 1 (Delta% per
cell, as Calculon reports its validation) and how long `zerosim memory` takes per scenario.

    python bench/memory_model.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from zerosim.scenario.load import load_scenario
from zerosim.analytic.memory import memory_table
from zerosim.report import format_memory_table

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"

# ZeRO paper Table 1, 7.5B column: Nd -> GB per device for P_os, P_os+g, P_os+g+p.
TABLE_1 = {1: (120, 120, 120), 4: (52.5, 41.3, 30), 16: (35.6, 21.6, 7.5),
           64: (31.4, 16.6, 1.88), 256: (30.4, 15.4, 0.47), 1024: (30.1, 15.1, 0.12)}
LAYOUT = {1: (1, 1), 4: (1, 4), 16: (2, 8), 64: (8, 8), 256: (32, 8), 1024: (128, 8)}


def table1() -> None:
    print("ZeRO paper Table 1 (7.5B, K = 12), per-device model states in GB: ours vs paper")
    print(f"{'Nd':>5}  {'P_os':>22}  {'P_os+g':>22}  {'P_os+g+p':>22}")
    worst = 0.0
    for nd, paper in TABLE_1.items():
        nodes, per_node = LAYOUT[nd]
        scenario = load_scenario(SCENARIOS / "zero_paper_7b5_64gpu.toml",
                                 [f"cluster.nodes={nodes}", f"cluster.gpus_per_node={per_node}"])
        ours = [row.model_states_bytes / 1e9 for row in memory_table(scenario)[1:]]
        cells = []
        for got, want in zip(ours, paper):
            delta = 100 * (got - want) / want
            worst = max(worst, abs(delta))
            cells.append(f"{got:8.3f} vs {want:6} {delta:+5.1f}%")
        print(f"{nd:>5}  " + "  ".join(cells))
    print(f"largest |Delta| = {worst:.2f}% (the paper rounds to 2-3 significant digits)\n")


def timings(repeats: int = 20) -> None:
    print(f"`zerosim memory` per scenario: in-process median of {repeats}, and a whole CLI process")
    for path in sorted(SCENARIOS.glob("*.toml")):
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            scenario = load_scenario(path)
            format_memory_table(scenario, memory_table(scenario))
            samples.append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "zerosim", "memory", str(path)], check=True,
                       capture_output=True)
        process_s = time.perf_counter() - start
        print(f"  {path.name:32} {1e3 * statistics.median(samples):7.2f} ms in-process   "
              f"{1e3 * process_s:7.1f} ms as a process")


if __name__ == "__main__":
    table1()
    timings()
