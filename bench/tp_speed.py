"""Wall time of tensor parallelism's commands as a user runs them (a fresh process, imports
included): `zerosim simulate` of GPT-3 175B on 1024 GPUs (scenarios/gpt3_175b_1024gpu.toml),
all four stages, with t = 8 against the same without tensor parallelism, and `zerosim plan
--allow tp` of it; then `plan --allow tp` of the ZeRO paper's 7.5B (a bare Ψ: every t refused,
one note each) and of Megatron's 7.5B by shape, both on 64 V100s.

Goals (issue 29, medians of RUNS runs): simulate with t = 8 within 1.5x of without; plan
--allow tp of the 175B model under 10 s. A measuring script: it prints and asserts nothing.
Timed with Python's bytecode cache warm (one untimed run first), in a temporary cache
directory that keeps the tree clean.
Run: python bench/tp_speed.py
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
TIMEOUT_S = 300  # a run past this is a hang, not a timing
GPT3 = "scenarios/gpt3_175b_1024gpu.toml"
TP8 = ("--set", "parallelism.tensor_parallel=8")
CASES = (("simulate 175B, t = 1", ("simulate", GPT3)),
         ("simulate 175B, t = 8", ("simulate", GPT3, *TP8)),
         ("simulate 175B, t = 8, SP", ("simulate", GPT3, *TP8,
                                      "--set", "parallelism.sequence_parallel=true")),
         ("plan 175B", ("plan", GPT3)),
         ("plan 175B --allow tp", ("plan", GPT3, "--allow", "tp")),
         ("plan ZeRO paper 7.5B --allow tp", ("plan", "scenarios/zero_paper_7b5_64gpu.toml",
                                              "--allow", "tp")),
         ("plan Megatron 7.5B --allow tp", ("plan", "scenarios/megatron_7b5_64gpu.toml",
                                            "--allow", "tp")))


def wall_s(args: tuple[str, ...], env: dict[str, str]) -> list[float]:
    """Wall times of RUNS runs of `python -m zerosim ARGS`, after one untimed run."""
    walls = []
    for run in range(RUNS + 1):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "zerosim", *args], check=True, cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=TIMEOUT_S)
        if run:
            walls.append(time.perf_counter() - start)
    return walls


def main() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"wall time of a fresh process, median (min, max) of {RUNS} runs, {cores} cores")
    medians = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPYCACHEPREFIX": cache}
        for name, args in CASES:
            walls = wall_s(args, env)
            medians[name] = statistics.median(walls)
            print(f"  {name:<34}{medians[name]:>8.3f} s  ({min(walls):.3f}, {max(walls):.3f})",
                  flush=True)
    ratio = medians["simulate 175B, t = 8"] / medians["simulate 175B, t = 1"]
    print(f"simulate t = 8 / t = 1: {ratio:.2f}x (goal <= 1.5x)")
    plan_s = medians["plan 175B --allow tp"]
    print(f"plan --allow tp, 175B on 1024 GPUs: {plan_s:.2f} s (goal < 10 s)")


if __name__ == "__main__":
    main()
