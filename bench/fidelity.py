"""The closed loop, end to end: calibrate -> run -> validate, stages 0-3, on runs the fit never saw.

    python bench/fidelity.py [--profile profiles/cpu_gloo_tiny.json] [--recalibrate]
                             [--nproc 2] [--micro-batch 3] [--timed-steps 30] [--repeats 3]

1. The profile: `zero-real calibrate` at micro-batches 1, 2, 4, 8 on 2..4 processes (skipped
   when the profile exists, unless --recalibrate).
2. Held-out runs: `zero-real run` of stages 0-3 at a micro-batch the fit did not see (3), on
   --nproc processes, memory measured in 2 profiled steps, times in --timed-steps more; each
   stage --repeats times, interleaved (one run on a 2-core box varies by about 10%).
3. `zerosim validate` of each stage's runs together with the profile: the median of all their
   timed steps.
4. Held-out collectives: a fresh measurement of all_reduce, reduce_scatter and all_gather at sizes
   between the profile's powers of two (1.5 x 2^k), against the profile's prediction: the
   geometric mean of |predicted / measured - 1| (the issue's bar), the arithmetic mean, and
   the stricter exp(mean |ln(predicted / measured)|) - 1, which counts 0.5x as 100%.

Prints per stage measured / simulated / error for step time, compute, communication and peak
memory, then the figures the calibration issue sets bars on: peak memory error per stage, step
time mean absolute error, collective time geomean error for sizes >= 64 KiB, and whether the
simulator ranks the stages by memory and by step time as measured.

The loop's pieces (calibrate, interleaved held-out runs, validating a configuration's runs
together) are shared with bench/transfer.py, which runs them over other shapes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zerosim.contract import COLLECTIVE_IMPLS

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "tiny_gpt_4rank_cpu.toml"
PROFILE = ROOT / "profiles" / "cpu_gloo_tiny.json"


def sh(*argv, check: bool = True) -> subprocess.CompletedProcess:
    """A command; exit 1 is accepted from `zerosim validate` only (over tolerance is a result)."""
    done = subprocess.run([sys.executable, "-m", *map(str, argv)], capture_output=True, text=True,
                          cwd=ROOT)
    accepted = (0, 1) if argv[:2] == ("zerosim.cli", "validate") else (0,)
    if check and done.returncode not in accepted:
        sys.exit(f"{Path(sys.argv[0]).stem}: {' '.join(map(str, argv))} failed "
                 f"({done.returncode}):\n{done.stderr.strip()}")
    return done


def calibrate(profile: Path, nproc: int, *flags) -> float:
    """`zero-real calibrate` of the tiny scenario into `profile`; the seconds it took."""
    start = time.perf_counter()
    sh("zero_real.cli", "calibrate", SCENARIO, "--nproc", nproc, "--backend", "gloo", *flags,
       "--out", profile)
    return time.perf_counter() - start


def fitted_micro_batches(profile: dict) -> list[int]:
    """Every micro-batch a measurement of the profile ran at (a held-out run must use another)."""
    return sorted({row["micro_batch"] for rows in profile["measurements"].values()
                   if isinstance(rows, list) for row in rows
                   if isinstance(row, dict) and "micro_batch" in row})


@dataclasses.dataclass(frozen=True)
class Configuration:
    """One held-out configuration: the tiny scenario with `sets` overrides, at `stage`, on
    `nproc` gloo processes."""
    name: str
    stage: int
    nproc: int = 2
    sets: tuple[str, ...] = ()


def run_interleaved(configurations, repeats: int, directory: Path, timed_steps: int,
                    collectives: str, progress=None) -> dict[str, list[Path]]:
    """`zero-real run` of every configuration `repeats` times, interleaved (a slow spell of the
    box hits every configuration alike): memory in 2 profiled steps, times in `timed_steps`
    more. The measurement files per configuration; one already in `directory` is kept, not
    re-run."""
    paths: dict[str, list[Path]] = {c.name: [] for c in configurations}
    total = repeats * len(configurations)
    for repeat in range(repeats):
        for i, c in enumerate(configurations):
            out = directory / f"{c.name}_{repeat}.json"
            paths[c.name].append(out)
            kept = out.exists()  # from an earlier loop (bench/transfer.py --runs): re-validated
            if progress:
                progress(f"run {repeat * len(configurations) + i + 1}/{total}: {c.name} "
                         f"(stage {c.stage}, {c.nproc} process{'es' if c.nproc > 1 else ''})"
                         + (f": kept {out}" if kept else ""))
            if kept:
                continue
            sh("zero_real.cli", "run", SCENARIO, "--stage", c.stage, "--nproc", c.nproc,
               "--backend", "gloo", "--collectives", collectives,
               *(x for s in c.sets for x in ("--set", s)),
               "--steps", 2, "--timed-steps", timed_steps, "--out", out)
    return paths


def validate_runs(paths: list[Path], profile: Path, memory_tolerance_pct: float = 2) -> dict:
    """`zerosim validate --json` of one configuration's runs together (the median of all their
    timed steps, their spread); the report, with `by_name`: each metric by its name."""
    done = sh("zerosim.cli", "validate", *paths, "--profile", profile, "--json",
              "--memory-tolerance-pct", memory_tolerance_pct)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:  # exit 1 is also what an uncaught exception gives
        sys.exit(f"{Path(sys.argv[0]).stem}: zerosim validate {' '.join(map(str, paths))} gave no "
                 f"report ({done.returncode}):\n{done.stderr.strip()}")
    report["by_name"] = {x["name"]: x for x in report["metrics"]}
    return report


def ranking(values: dict[int, float]) -> list[int]:
    return sorted(values, key=lambda stage: values[stage], reverse=True)


def held_out_collectives(profile_path: Path, nproc: int, impl: str,
                         seconds_per_size: float) -> list[dict]:
    """Collectives at 1.5 x 2^k bytes (none of them in the profile), measured afresh as
    calibrate measures them (its default three rounds, each row their median)."""
    from zero_real.calibration.bench import collectives_world
    from zero_real.checks.flags import DEFAULT_ROUNDS
    from zero_real.run.launch import spawn
    from zero_real.run.runconfig import CalibrationWorld
    from zerosim.scenario.profile import load_profile

    sizes = tuple(3 * 2 ** k for k in range(9, 24))  # 1.5 KiB .. 24 MiB
    world = CalibrationWorld(scenario=None, backend="gloo", nproc=nproc, timeout_s=120.0,
                             collective_modes=(impl,), sizes=sizes,
                             seconds_per_size=seconds_per_size, rounds=DEFAULT_ROUNDS)
    rows = spawn(collectives_world, nproc, world, 1200)[0]
    profile = load_profile(profile_path)
    for row in rows:
        row["predicted_s"] = profile.collective_time(row["impl"], row["op"], row["ranks"],
                                                     row["size_bytes"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", type=Path, default=PROFILE)
    parser.add_argument("--recalibrate", action="store_true")
    parser.add_argument("--calibrate-nproc", type=int, default=4)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--micro-batch", type=int, default=3)
    parser.add_argument("--timed-steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3, help="runs per stage (median)")
    parser.add_argument("--seconds-per-size", type=float, default=0.5,
                        help="timed iterations per collective size (calibrate and held-out)")
    parser.add_argument("--max-size-MiB", type=float, default=64)
    parser.add_argument("--collectives", default=COLLECTIVE_IMPLS[0], choices=COLLECTIVE_IMPLS)
    args = parser.parse_args()

    if args.recalibrate or not args.profile.exists():
        print(f"calibrating -> {args.profile} ...", flush=True)
        took_s = calibrate(args.profile, args.calibrate_nproc, "--micro-batches", "1,2,4,8",
                           "--max-size-MiB", args.max_size_MiB,
                           "--seconds-per-size", args.seconds_per_size)
        print(f"  {took_s:.0f} s", flush=True)
    profile = json.loads(args.profile.read_text())
    fitted = fitted_micro_batches(profile)
    if args.micro_batch in fitted:
        sys.exit(f"fidelity: micro-batch {args.micro_batch} is in the fit ({fitted}): not held out")
    prov = profile["provenance"]
    print(f"profile {args.profile.relative_to(ROOT) if args.profile.is_relative_to(ROOT) else args.profile}: "
          f"{prov.get('hardware')}, {prov.get('backend')}, torch {prov.get('torch_version')}, "
          f"{prov.get('date')}; measured at micro-batches {fitted}")
    print(f"held out: stages 0-3 on {args.nproc} processes at micro-batch {args.micro_batch}, "
          f"{args.collectives} collectives, {args.timed_steps} timed steps\n")

    stages = [Configuration(f"stage {s}", s, args.nproc, (f"training.micro_batch={args.micro_batch}",))
              for s in range(4)]
    with tempfile.TemporaryDirectory() as tmp:
        runs = run_interleaved(stages, args.repeats, Path(tmp), args.timed_steps, args.collectives)
        # per metric: the median of every run's timed steps against the (deterministic) simulation
        reports = {c.stage: validate_runs(runs[c.name], args.profile)["by_name"] for c in stages}
    spread = {stage: (min(r["step_time_s"]["per_run"]), max(r["step_time_s"]["per_run"]))
              for stage, r in reports.items()}

    def cell(stage: int, name: str, scale: float) -> str:
        x = reports[stage].get(name)
        if x is None or x["measured"] is None:
            return f"{'-':>26}"
        err = "" if x["error_pct"] is None else f"{x['error_pct']:+6.1f}%"
        return f"{x['measured'] * scale:8.2f} {x['simulated'] * scale:8.2f} {err:>8}"

    names = [("step_time_s", 1e3), ("compute_s", 1e3), ("exposed_comm_s", 1e3), ("peak_bytes", 1e-6)]
    print(f"{'stage':<6}" + "".join(f"{n + (' ms' if n.endswith('_s') else ' MB'):>27}" for n, _ in names))
    print(f"{'':<6}" + f"{'measured simulated   error':>27}" * len(names))
    for stage in range(4):
        print(f"{stage:<6}" + "".join(f" {cell(stage, n, k)}" for n, k in names))

    step_err = [abs(reports[s]["step_time_s"]["error_pct"]) for s in range(4)]
    peak_err = [abs(reports[s]["peak_bytes"]["error_pct"]) for s in range(4)]
    comm_names = sorted({n for s in range(4) for n in reports[s] if n.startswith("comm_")})
    for name in comm_names:
        print(f"{name:<24}" + "  ".join(cell(s, name, 1e3) if name in reports[s] else " " * 26
                                        for s in range(4)) + "   (ms, stages 0-3)")
    print()
    rank_of = {}
    for name in ("peak_bytes", "step_time_s"):
        measured = ranking({s: reports[s][name]["measured"] for s in range(4)})
        simulated = ranking({s: reports[s][name]["simulated"] for s in range(4)})
        rank_of[name] = (measured, simulated)
    print(f"peak memory error per stage: {', '.join(f'{e:.2f}%' for e in peak_err)} "
          f"(max {max(peak_err):.2f}%; bar 3%)")
    print(f"step time mean |error| over stages 0-3: {statistics.fmean(step_err):.1f}% "
          f"(per stage {', '.join(f'{e:.1f}%' for e in step_err)}; bar 10%)")
    print("measured step time spread over the runs (min-max): " + ", ".join(
        f"stage {s} {lo * 1e3:.1f}-{hi * 1e3:.1f} ms" for s, (lo, hi) in spread.items()))
    for name, (measured, simulated) in rank_of.items():
        print(f"ranking by {name}: measured {measured}, simulated {simulated}: "
              f"{'same' if measured == simulated else 'DIFFERENT'}")
    # pairs the simulator orders against the measurement, and whether the runs could tell them
    # apart at all (their min-max ranges overlap: within the box's run-to-run noise)
    for a in range(4):
        for b in range(a + 1, 4):
            m = reports[a]["step_time_s"]["measured"] - reports[b]["step_time_s"]["measured"]
            s = reports[a]["step_time_s"]["simulated"] - reports[b]["step_time_s"]["simulated"]
            if m * s < 0:
                overlap = spread[a][0] <= spread[b][1] and spread[b][0] <= spread[a][1]
                print(f"  stages {a} and {b}: measured {m * 1e3:+.2f} ms apart, simulated "
                      f"{s * 1e3:+.2f} ms; their runs {'overlap (within noise)' if overlap else 'do not overlap'}")

    rows = held_out_collectives(args.profile, args.nproc, args.collectives, args.seconds_per_size)
    big = [r for r in rows if r["size_bytes"] >= 64 * 2 ** 10]
    errors = [max(abs(r["predicted_s"] / r["time_s"] - 1), 1e-6) for r in big]
    geomean = math.exp(statistics.fmean(math.log(e) for e in errors))
    log_ratio = math.exp(statistics.fmean(abs(math.log(r["predicted_s"] / r["time_s"]))
                                          for r in big)) - 1
    print(f"\nheld-out collectives ({args.collectives}, {args.nproc} ranks, 1.5 x 2^k bytes):")
    for r in rows:
        print(f"  {r['op']:<15} {r['size_bytes']:>10,} B  measured {r['time_s'] * 1e3:9.3f} ms  "
              f"predicted {r['predicted_s'] * 1e3:9.3f} ms  "
              f"{(r['predicted_s'] / r['time_s'] - 1) * 100:+6.1f}%")
    print(f"collective time, sizes >= 64 KiB, {len(big)} points: geomean |error| "
          f"{geomean * 100:.1f}% (bar 10%); mean |error| {statistics.fmean(errors) * 100:.1f}%; "
          f"exp(mean |ln(predicted/measured)|) - 1 = {log_ratio * 100:.1f}%")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
