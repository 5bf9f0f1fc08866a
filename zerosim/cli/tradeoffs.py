"""`zerosim sweep`, `plan` and `plot`: the trade-offs over stages, GPU counts and model sizes."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

from zerosim.cli.common import (LAUNCH_FLAGS, Command, add_mode, gib, launch_of, load,
                                positive_int, print_default_notes)
from zerosim.contract import EXIT_OK, STAGES
from zerosim.errors import InputError

EXECUTORS = ("local", "ray")


def run_sweep(args: argparse.Namespace) -> int:
    from zerosim.cli.progress import after_delay
    from zerosim.tradeoffs import sweep, sweep_files

    if args.address is not None and args.executor != "ray":
        raise InputError(f"--address {args.address} is a Ray cluster's: it goes with "
                         f"--executor ray")
    sweep_files.output_format(args.out)  # a wrong name or place fails before any work
    launch = launch_of(args)
    if launch is not None:  # not carried to the sweep's points yet
        raise InputError(f"zerosim sweep: {LAUNCH_FLAGS[launch[0]]} is not taken by sweep: "
                         f"give the keys its note names (zerosim memory prints it) as --set")
    varies = [sweep.parse_vary(text) for text in args.vary]
    total = sweep.count_points(varies)
    executor, jobs = None, args.jobs
    if args.executor == "ray":
        from zerosim.tradeoffs import sweep_ray

        executor = sweep_ray.executor(args.address, args.jobs)  # no Ray: one line, now
    elif jobs is not None and jobs > sweep.default_jobs():  # more would only share the cores
        jobs = sweep.default_jobs()
        print(f"zerosim sweep: --jobs {args.jobs} is more than the {jobs} cores this process may "
              f"run on: {jobs} processes", file=sys.stderr)
    start_s = time.perf_counter()
    bar = None if args.quiet else after_delay("zerosim sweep:", start_s)
    rows = sweep.run_sweep(args.scenario, varies, args.overrides, args.deepspeed, jobs=jobs,
                           mode=args.mode, progress=bar, executor=executor)
    # each row goes to the file as it comes; closing the rows stops the workers whatever ends
    # the writing (a bad point, a full disk, Ctrl-C; SIGTERM unwinds here too: commandline)
    with bar or contextlib.nullcontext(), contextlib.closing(rows):
        count = sweep_files.write_results(args.out, rows, args.scenario, varies,
                                          args.overrides, args.deepspeed)
    if not args.quiet:
        print(f"zerosim sweep: {total} points, {count} rows in "
              f"{time.perf_counter() - start_s:.1f} s -> {args.out}", file=sys.stderr)
    return EXIT_OK


def run_plan(args: argparse.Namespace) -> int:
    from zerosim.cli.progress import after_delay
    from zerosim.tradeoffs.plan import format_plan, plan
    from zerosim.units import GiB

    start_s = time.perf_counter()
    scenario = load(args)
    budget_GiB = args.gpu_memory_GiB if args.gpu_memory_GiB is not None else scenario.cluster.hbm_GiB
    with after_delay("zerosim plan:", start_s) as bar:  # plan names what it counts
        result = plan(scenario, round(budget_GiB * GiB), mode=args.mode, progress=bar,
                      allow=args.allow)
    print(json.dumps(result, indent=2) if args.json else format_plan(result))
    print_default_notes(scenario)
    return EXIT_OK


def run_plot(args: argparse.Namespace) -> int:
    from zerosim.tradeoffs import figures

    figures.output_suffix(args.out)  # before reading anything
    fig = figures.build_figure(args.kind, args.results, args.stage)
    if args.title is not None:
        fig.update_layout(title_text=args.title)
    figures.write_figure(fig, args.out)
    print(f"zerosim: wrote {args.kind} figure of {', '.join(args.results)} to {args.out}",
          file=sys.stderr)
    return EXIT_OK


def _sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vary", action="append", required=True, metavar="TABLE.KEY=V1,V2,...",
                        help="a key and its values, e.g. --vary cluster.nodes=1,2,4,8 "
                             "--vary training.zero_stage=0,1,2,3; repeatable")
    parser.add_argument("--out", required=True, metavar="RESULTS.csv|RESULTS.json",
                        help="where the rows go; the file name's ending picks the format")
    parser.add_argument("--jobs", type=positive_int, metavar="N",
                        help="processes (default: every core this process may run on); with "
                             "--executor ray, tasks at once (default: the cluster's CPUs)")
    parser.add_argument("--executor", choices=EXECUTORS, default=EXECUTORS[0],
                        help="where the points run: local, a pool of processes on this machine "
                             "(the default); ray, tasks on a Ray cluster (pip install "
                             "'zerosim[ray]'); the same file either way")
    parser.add_argument("--address", metavar="ADDR",
                        help="with --executor ray: the Ray cluster, as ray.init(address=...) "
                             "takes it (HOST:PORT, auto, ray://HOST:PORT); default: RAY_ADDRESS, "
                             "else a cluster `ray start` began on this machine, else a Ray "
                             "instance this command starts and stops")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary line")
    add_mode(parser, "as for zerosim simulate")


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu-memory-GiB", type=gib, metavar="M",
                        help="usable memory per GPU, GiB (default: the cluster's hbm_GiB)")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.add_argument("--allow", type=_allow, default=(), metavar="SCHEME[,SCHEME...]",
                        help="also consider, on the scenario's GPUs: offload (optimizer offload "
                             "to the CPU at stages 1-3, with parameter offload at stage 3), "
                             "hybrid (hybrid sharding over shard groups of about a node), zeropp "
                             "(ZeRO-3 with ZeRO++'s hpZ, qwZ and qgZ), tp (tensor parallelism "
                             "at every stage, t each divisor of gpus_per_node: 1, 2, 4, 8 on "
                             "8-GPU nodes, less the scenario's own t; the scenario's global "
                             "batch, the N / t data-parallel ranks taking t times the "
                             "sequences in the micro-batch and micro-steps that simulate "
                             "fastest of those that fit; with the scenario's "
                             "parallelism.sequence_parallel and tp_comm_overlap, which plan "
                             "does not search: --set parallelism.sequence_parallel=true plans "
                             "with Megatron's sequence parallelism; a t the model or the world "
                             "refuses is a note saying why); a scenario's own t stays with "
                             "offload, while hybrid and zeropp, refused beside it, run at t = 1 "
                             "on its global batch; pp (pipelines: every t x p x d on the "
                             "scenario's GPUs, p dividing N / t and the layers, ZeRO-0/1 or FSDP "
                             "as the framework runs beside a pipeline, 1F1B and interleaved "
                             "v = 2, 4, every micro-batch split of the global batch; pruned by "
                             "the memory model, the best by a bubble bound simulated; with the "
                             "largest model, the fewest GPUs, the fastest and the cheapest "
                             "layout); each with its step time, "
                             "its time cost against the fastest plain stage and host memory per "
                             "node (default: none)")
    add_mode(parser, "as for zerosim simulate")


def _allow(text: str) -> tuple[str, ...]:
    from zerosim.tradeoffs.plan_family import parse_allow

    try:
        return parse_allow(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _plot_arguments(parser: argparse.ArgumentParser) -> None:
    from zerosim.tradeoffs.figures import KINDS

    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="result file; several only for --kind calibration (one report each)")
    parser.add_argument("--kind", required=True, choices=KINDS)
    parser.add_argument("-o", "--out", required=True, metavar="FIG.html",
                        help="output: .html (self-contained, works offline) or .png")
    parser.add_argument("--stage", type=int, choices=STAGES,
                        help="timeline: the stage to draw (default: the trace's first); a "
                             "pipelined trace draws the pipeline, a row per pipeline stage")
    parser.add_argument("--title", help="the figure's title (default: one that says what it shows)")


COMMANDS = (
    Command("sweep", "simulate every combination of varied keys; rows to CSV or JSON",
            "The cartesian product of the --vary keys (the first changing slowest), each point "
            "simulated as `zerosim simulate --set KEY=VALUE` would: one row per point and stage "
            "with every input and output column. Stages: the varied training.zero_stage, else all "
            "four. Runs on all the cores this process may use, or on a Ray cluster "
            "(--executor ray); the same input gives the same file.",
            run_sweep, _sweep_arguments),
    Command("plan", "which stage and how many GPUs fit the model; the largest model that fits",
            "Per stage: the largest model whose model states fit the GPU memory on the scenario's "
            "GPUs, and the largest that fits with activations and buffers at its micro-batch; the "
            "fewest GPUs on which the scenario's model fits; and, among the configurations that "
            "fit, the fastest per step and the cheapest in GPU-seconds per step. Says which term "
            "overflows where a configuration does not fit.",
            run_plan, _plan_arguments),
    Command("plot", "draw sweep, trace or validate results as plotly HTML (or PNG)",
            "Figures of the memory/communication trade-offs from result files: memory "
            "(per-rank memory against GPUs) and tradeoff (memory against communication, "
            "Pareto front) from `zerosim sweep --out`; timeline (one step's lanes and "
            "memory) from `zerosim simulate --trace`; calibration (simulated against "
            "measured) from `zerosim validate --json` reports.",
            run_plot, _plot_arguments, takes_scenario=False),
)
