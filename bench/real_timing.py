"""The zero_real figures that depend on this machine's speed, measured and printed here instead of
asserted in tests (a loaded 2-core CI box breaks any bound on a measured time):

1. what `zero-real calibrate` measures on the tiny model, 2 processes: how a collective's time
   grows from 256 KiB to 16 MiB (per implementation and op), backward over forward per unit
   kind, the optimizer step from the smallest shard to the largest, and the timed iterations;
2. how long the launcher takes to stop every rank when one dies mid-run and when one hangs
   (its peers' collective timeout 5 s), the faults injected from the test side as the tests do;
3. how long SIGTERM to `zero-real run` takes to stop the launcher, and then every rank.

    python bench/real_timing.py [--skip-calibrate] [--skip-faults] [--skip-signal]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.zero_real.helpers: the faults the tests inject

from tests.procs import descendants, gone  # noqa: E402
from zerosim.contract import PASSES  # noqa: E402

TINY = ROOT / "scenarios" / "tiny_gpt_4rank_cpu.toml"
SMALL_KIB, LARGE_MIB = 256, 16


def calibrate_figures() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.json"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "zero_real.cli", "calibrate", str(TINY), "--nproc",
                        "2", "--min-size-KiB", str(SMALL_KIB), "--max-size-MiB", str(LARGE_MIB),
                        "--micro-batches", "1,2", "--seconds-per-size", "0.02", "--out", str(out)],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"calibrate --nproc 2, {SMALL_KIB} KiB..{LARGE_MIB} MiB: "
              f"{time.perf_counter() - start:.1f} s")
        m = json.loads(out.read_text())["measurements"]
    by_op: dict[tuple, dict[float, float]] = {}
    for r in m["collectives"]:
        by_op.setdefault((r["impl"], r["op"]), {})[r["size_bytes"]] = r["median_s"]
    print(f"  collective median time, {LARGE_MIB} MiB over the fastest of the 3 smallest sizes:")
    for (impl, op), times in sorted(by_op.items()):
        sizes = sorted(times)
        small = min(times[s] for s in sizes[:3])
        print(f"    {impl:>6} {op:<15} {small * 1e3:8.2f} ms -> {times[sizes[-1]] * 1e3:8.2f} ms"
              f"  x{times[sizes[-1]] / small:.1f}")
    iterations = [r["iterations"] for r in m["collectives"]]
    print(f"  timed iterations per size: {min(iterations)}..{max(iterations)}")
    for r in m["compute"]:
        forward_s, backward_s = (r[f"{phase}_s"] for phase in PASSES)
        print(f"  {r['unit']:<9} micro-batch {r['micro_batch']}: forward {forward_s * 1e3:.2f} ms,"
              f" backward {backward_s * 1e3:.2f} ms (x{backward_s / forward_s:.2f})")
    opt = sorted(m["optimizer"], key=lambda r: r["elements"])
    print(f"  optimizer: {opt[0]['elements']} elements {opt[0]['time_s'] * 1e3:.3f} ms -> "
          f"{opt[-1]['elements']} elements {opt[-1]['time_s'] * 1e3:.3f} ms "
          f"(x{opt[-1]['time_s'] / opt[0]['time_s']:.1f})")


def _until(predicate, limit_s: float) -> float | None:
    """Seconds until predicate() holds, polled every 10 ms; None past limit_s."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        if predicate():
            return time.perf_counter() - start
        time.sleep(0.01)
    return None


def fault_figures() -> None:
    from tests.zero_real.helpers import train_dying, train_hanging
    from zero_real.run.launch import RankFailed, spawn
    from zero_real.run.runconfig import RunConfig
    from zerosim.scenario.load import load_scenario

    scenario = load_scenario(TINY, ["cluster.gpus_per_node=3"])
    faults = [("rank 1 dies at step 1 (ZeRO-2, ring)", 2, "ring", 20,
               partial(train_dying, die_rank=1, die_step=1)),
              ("rank 1 hangs in step 1 (ZeRO-1, native; timeout 5 s)", 1, "native", 5,
               partial(train_hanging, hang_rank=1, hang_step=1))]
    for label, stage, collectives, timeout_s, fault in faults:
        cfg = RunConfig(scenario=scenario, stage=stage, collectives=collectives, backend="gloo",
                        steps=3, timeout_s=timeout_s, nproc=3, profile_memory=False)
        start = time.perf_counter()
        try:
            spawn(fault, 3, cfg, timeout_s=60)
            print(f"{label}: the launch did not fail")
            continue
        except RankFailed as failed:
            named_s, pids = time.perf_counter() - start, failed.pids
        gone_s = _until(lambda: all(gone(pid) for pid in pids), 60)
        print(f"{label}: failure named after {named_s:.1f} s, every rank gone "
              f"{'after 60 s: NOT' if gone_s is None else f'{gone_s:.2f} s'} later")


def signal_figures() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TMPDIR=tmp, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([sys.executable, "-m", "zero_real.cli", "run", str(TINY),
                                 "--stage", "1", "--nproc", "2", "--steps", "10000",
                                 "--timeout-s", "10"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def running() -> bool:
            beats = list(Path(tmp).glob("zero_real_*/rank*.progress"))
            return len(beats) == 2 and all(b.read_text().split()[:1] not in ([], ["-1"])
                                           for b in beats)
        started_s = _until(running, 120)
        if started_s is None:
            proc.kill()
            proc.wait()
            print("zero-real run: ranks never got past step 0 in 120 s")
            return
        children = descendants(proc.pid)
        start = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        exit_s = time.perf_counter() - start
        gone_s = _until(lambda: all(gone(pid) for pid in children), 60)
    print(f"zero-real run, 2 ranks: past step 0 after {started_s:.1f} s; SIGTERM: launcher exit "
          f"{proc.returncode} after {exit_s:.2f} s, its {len(children)} processes gone "
          f"{'after 60 s: NOT' if gone_s is None else f'{gone_s:.2f} s'} later")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for part in ("calibrate", "faults", "signal"):
        parser.add_argument(f"--skip-{part}", action="store_true")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if not args.skip_calibrate:
        calibrate_figures()
    if not args.skip_faults:
        fault_figures()
    if not args.skip_signal:
        signal_figures()


if __name__ == "__main__":
    main()
