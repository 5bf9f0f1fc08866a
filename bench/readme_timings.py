"""The README's timing claims, measured on this machine: each command as a user types it, as a
whole process (interpreter start-up and imports included), run RUNS times; the median is what the
README may state ("median of 5 whole-process runs on <machine>"), min and max show the spread.
Tests assert no timing (a loaded CI box would break any bound): speed is measured here.

    python bench/readme_timings.py [--runs 5] [--skip-real]

--skip-real leaves out `zero-real run` (it needs torch, and takes seconds per run).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER = "scenarios/zero_paper_7b5_64gpu.toml"
TINY = "scenarios/tiny_gpt_4rank_cpu.toml"


def command(name: str) -> list[str]:
    """The console script beside this interpreter (as `pip install -e .` puts it), else
    `python -m` of its package."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found:
        return [found]
    return [sys.executable, "-m", name.replace("-", "_") + (".cli" if name == "zero-real" else "")]


def claims(out_dir: str, with_real: bool) -> list[tuple[str, str, list[str]]]:
    """(the README's words, the command line as shown, argv) for each timed claim."""
    zerosim = command("zerosim")
    sweep = ["sweep", PAPER, "--vary", "training.zero_stage=0,1,2,3",
             "--vary", "cluster.nodes=1,2,4,8,16,32,64,128", "--out", f"{out_dir}/sweep.csv"]
    rows = [("simulates ... in 0.32 s", f"zerosim simulate {PAPER}",
             [*zerosim, "simulate", PAPER]),
            ("memory (0.17 s)", f"zerosim memory {PAPER}", [*zerosim, "memory", PAPER]),
            ("plan, in 0.52 s", f"zerosim plan {PAPER}", [*zerosim, "plan", PAPER]),
            ("sweep, 32 points, 0.62 s on 2 cores", "zerosim sweep ... --out sweep.csv",
             [*zerosim, *sweep])]
    if with_real:
        rows.append(("zero-real run, in 3.9 s",
                     f"zero-real run {TINY} --stage 3 --nproc 2 --out m.json",
                     [*command("zero-real"), "run", TINY, "--stage", "3", "--nproc", "2",
                      "--out", f"{out_dir}/m.json"]))
    return rows


def whole_process_s(argv: list[str], runs: int) -> list[float]:
    """Wall seconds of each of `runs` runs of argv from the repository root; each must succeed."""
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600)
        walls.append(time.perf_counter() - start)
    return walls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-real", action="store_true")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"median of {args.runs} whole-process runs; {platform.machine()}, {cores} cores, "
          f"Python {platform.python_version()}")
    print(f"{'median s':>8}  {'min-max s':>11}  README claim / command")
    with tempfile.TemporaryDirectory() as out_dir:
        for words, shown, cmd in claims(out_dir, not args.skip_real):
            walls = whole_process_s(cmd, args.runs)
            spread = f"{min(walls):.2f}-{max(walls):.2f}"
            print(f"{statistics.median(walls):>8.2f}  {spread:>11}  {words}: {shown}")


if __name__ == "__main__":
    main()
