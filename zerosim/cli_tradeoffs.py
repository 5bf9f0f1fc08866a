"""The trade-off commands of the `zerosim` command line: `sweep` (a grid of simulations to a file)
and `plan` (which stage, how many GPUs, how large a model). Registered by cli.build_parser."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def _gib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GiB") from None
    if not 0 < value < 2**40:  # also NaN and infinity
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of GiB")
    return value


def cmd_sweep(args: argparse.Namespace) -> int:
    from zerosim.progress import ProgressBar
    from zerosim.sweep import count_points, output_format, parse_vary, run_sweep, write_results

    output_format(args.out)  # a wrong name fails before any work (run_sweep checks the rest)
    varies = [parse_vary(text) for text in args.vary]
    total = count_points(varies)
    progress = None if args.quiet else ProgressBar("zerosim sweep:")
    start_s = time.perf_counter()
    try:
        rows = run_sweep(args.scenario, varies, args.overrides, args.deepspeed, jobs=args.jobs,
                         mode=args.mode, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    write_results(args.out, rows, args.scenario, varies, args.overrides, args.deepspeed)
    if not args.quiet:
        print(f"zerosim sweep: {total} points, {len(rows)} rows in "
              f"{time.perf_counter() - start_s:.1f} s -> {args.out}", file=sys.stderr)
    return 0


def cmd_plan(args: argparse.Namespace, load: Callable[[argparse.Namespace], Any]) -> int:
    from zerosim.plan import format_plan, plan
    from zerosim.units import GiB

    scenario = load(args)
    gib = args.gpu_memory_GiB if args.gpu_memory_GiB is not None else scenario.cluster.hbm_GiB
    result = plan(scenario, round(gib * GiB), mode=args.mode)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_plan(result))
    return 0


def add_tradeoff_commands(command: Callable[..., argparse.ArgumentParser],
                          load: Callable[[argparse.Namespace], Any]) -> None:
    """`command(name, func, help, description)` adds a subcommand taking a scenario (cli.py)."""
    sweep = command(
        "sweep", cmd_sweep, "simulate every combination of varied keys; rows to CSV or JSON",
        "The cartesian product of the --vary keys (the first changing slowest), each point "
        "simulated as `zerosim simulate --set KEY=VALUE` would: one row per point and stage "
        "with every input and output column. Stages: the varied training.zero_stage, else all "
        "four. Runs on all the cores this process may use; the same input gives the same file.")
    sweep.add_argument("--vary", action="append", required=True, metavar="TABLE.KEY=V1,V2,...",
                       help="a key and its values, e.g. --vary cluster.nodes=1,2,4,8 "
                            "--vary training.zero_stage=0,1,2,3; repeatable")
    sweep.add_argument("--out", required=True, metavar="RESULTS.csv|RESULTS.json",
                       help="where the rows go; the file name's ending picks the format")
    sweep.add_argument("--jobs", type=_positive_int, metavar="N",
                       help="processes (default: every core this process may run on)")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar or summary line")
    sweep.add_argument("--mode", choices=("auto", "symmetric", "per_rank"), default="auto",
                       help="as for zerosim simulate")

    plan = command(
        "plan", lambda args: cmd_plan(args, load),
        "which stage and how many GPUs fit the model; the largest model that fits",
        "Per stage: the largest model whose model states fit the GPU memory on the scenario's "
        "GPUs, and the largest that fits with activations and buffers at its micro-batch; the "
        "fewest GPUs on which the scenario's model fits; and, among the configurations that "
        "fit, the fastest per step and the cheapest in GPU-seconds per step. Says which term "
        "overflows where a configuration does not fit.")
    plan.add_argument("--gpu-memory-GiB", type=_gib, metavar="M",
                      help="usable memory per GPU, GiB (default: the cluster's hbm_GiB)")
    plan.add_argument("--json", action="store_true", help="print a JSON object")
    plan.add_argument("--mode", choices=("auto", "symmetric", "per_rank"), default="auto",
                      help="as for zerosim simulate")
