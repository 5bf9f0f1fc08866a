"""`zero-real` command line: what this box can run (`info`); `run`: a stage for real, measured,
written as a measurement JSON; `calibrate`: this box's collectives, compute, optimizer and memory,
written as a profile for zerosim (zero_real.calibration.calibrate). Exit codes as zerosim's
(zerosim.contract): 0 ok, 1 a rank failed, 2 bad input or missing torch.

Commands parse and call: the checks are checks/preflight.py's, the launch and its signals
run/launch.py's, the training run/train.py's, the printed summary run/report.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from zero_real import __version__
from zero_real.checks import flags, preflight
from zero_real.run.runconfig import (BACKENDS, DEFAULT_TIMEOUT_S, RunConfig, portable_path,
                                     start_fork_server)
from zerosim.commandline import Parser, dispatch
from zerosim.contract import (COLLECTIVE_IMPLS, EXIT_FAILED, EXIT_OK, PIPELINE_SCHEDULES,
                              STAGES)
from zerosim.errors import InputError


def run_info(args: argparse.Namespace) -> int:
    info = preflight.box_info()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            print(f"{key:15} {value}")
    return EXIT_OK


def _check_run_args(args: argparse.Namespace, torchrun: bool) -> None:
    """What the flags' types cannot see alone (each value is in range already: checks/flags.py)."""
    preflight.check_out(args.out)
    if args.fake_world_size is not None:
        if torchrun:
            raise InputError("--fake-world-size runs one local process, not under torchrun")
        if args.nproc != 1 or args.collectives != "native":
            raise InputError("--fake-world-size runs one process with native (no-op) collectives: "
                             "leave --nproc at 1 and --collectives at native")



def _world(args: argparse.Namespace) -> tuple[tuple[int, int] | None, int, int]:
    """(torchrun's world and processes per node or None, ranks, local processes). Under torchrun
    the world is torchrun's (WORLD_SIZE ranks, LOCAL_WORLD_SIZE per node); locally it is --nproc
    processes on this one box."""
    from zero_real.run.launch import torchrun_env

    torchrun = torchrun_env()
    if torchrun is None:
        nproc = 1 if args.nproc is None else args.nproc
        return None, nproc, nproc
    world, local = torchrun
    if args.nproc is not None and args.nproc != world:
        raise InputError(f"--nproc {args.nproc} disagrees with torchrun's WORLD_SIZE={world}; "
                         f"leave --nproc out under torchrun")
    return torchrun, world, local


def _tensor_parallel(args: argparse.Namespace, world: int) -> list[str]:
    """The --set lines --tensor-parallel and --sequence-parallel stand for (none without them);
    what the model needs of t is zerosim.scenario.axes's check, made as the scenario loads."""
    sp = ["parallelism.sequence_parallel=true"] if args.sequence_parallel else []
    if args.tensor_parallel is None:
        return sp
    t = args.tensor_parallel
    if world % t:
        raise InputError(f"--tensor-parallel {t} does not divide the {world} ranks of this run "
                         f"({world} / {t} = {world / t:.4g}): give a divisor")
    return [f"parallelism.tensor_parallel={t}", *sp]


def _pipeline(args: argparse.Namespace, world: int) -> list[str]:
    """The --set lines --pipeline-parallel and --pipeline-schedule stand for; what the model and
    the world need of p is zerosim.scenario.axes's check, what zero_real runs preflight's."""
    lines = ([] if args.pipeline_schedule is None
             else [f"parallelism.pipeline_schedule={args.pipeline_schedule}"])
    if args.pipeline_parallel is None:
        return lines
    p, t = args.pipeline_parallel, args.tensor_parallel or 1
    if world % (t * p):
        raise InputError(f"--pipeline-parallel {p} x --tensor-parallel {t} does not divide the "
                         f"{world} ranks of this run ({world} / {t * p} = {world / (t * p):.4g}): "
                         f"give a divisor")
    return [f"parallelism.pipeline_parallel={p}", *lines]


def prepare_run(args: argparse.Namespace) -> tuple[RunConfig, bool]:
    """The run the arguments ask for, every refusal made first; and whether torchrun runs it."""
    torch = preflight.require_torch()
    from zerosim.scenario.load import load_scenario

    torchrun, args.nproc, local = _world(args)
    _check_run_args(args, torchrun is not None)
    preflight.check_devices(args.backend, local)
    world = args.fake_world_size or args.nproc
    nodes, per_node = (world // local, local) if torchrun else (1, world)
    # The run defines the cluster and stage the scenario describes (for the zerosim comparison);
    # flags win over --set, which wins over the file.
    shard_group = []
    if args.shard_group is not None:
        if args.shard_group and world % args.shard_group:
            raise InputError(f"--shard-group {args.shard_group} does not divide the {world} "
                             f"ranks of this run ({world} / {args.shard_group} = "
                             f"{world / args.shard_group:.4g}); give a divisor, or 0 for all")
        shard_group = [f"parallelism.shard_group={args.shard_group}"]
    tensor = _tensor_parallel(args, world) + _pipeline(args, world)
    flagged = [f"cluster.nodes={nodes}", f"cluster.gpus_per_node={per_node}",
               f"training.zero_stage={args.stage}", *shard_group, *tensor]
    # The stage is not recorded among the overrides (the measurement has its own): a --set of
    # another one would be measured as --stage's without a word.
    decided = {"training.zero_stage": ("--stage", args.stage)}
    if args.tensor_parallel is not None:
        decided["parallelism.tensor_parallel"] = ("--tensor-parallel", args.tensor_parallel)
    if args.sequence_parallel:
        decided["parallelism.sequence_parallel"] = ("--sequence-parallel", True)
    for flag in ("pipeline_parallel", "pipeline_schedule"):
        if getattr(args, flag) is not None:
            decided[f"parallelism.{flag}"] = ("--" + flag.replace("_", "-"), getattr(args, flag))
    preflight.check_overrides_agree(args.overrides, decided)
    scenario = load_scenario(args.scenario, [*args.overrides, *flagged])
    if args.sequence_parallel and scenario.parallelism.tensor_parallel == 1:
        raise InputError("--sequence-parallel splits the sequence over a tensor-parallel group: "
                         "give --tensor-parallel T with T > 1")
    for axis in ("tensor_parallel", "pipeline_parallel"):
        ways = getattr(scenario.parallelism, axis)
        if args.fake_world_size and ways > 1:
            raise InputError(f"--fake-world-size runs one rank, not a {axis.replace('_', '-')} "
                             f"group of {ways}: leave {axis.replace('_', ' ')}ism out")
    # The measurement records what validate cannot know: it sets the cluster and the stage
    # itself, but rebuilds the rest from the overrides, the shard group's flag among them.
    recorded = [*args.overrides, *shard_group, *tensor]
    preflight.check_scenario(scenario, args.scenario)
    if args.backend == "gloo" and not (args.fake_world_size and torch.cuda.is_available()):
        preflight.check_memory(scenario, args.stage, 1 if args.fake_world_size else local, world)
    cfg = RunConfig(
        scenario=scenario, scenario_path=portable_path(args.scenario),
        overrides=tuple(recorded),
        stage=args.stage, nproc=args.nproc,
        backend="fake" if args.fake_world_size else args.backend,
        collectives=args.collectives, steps=args.steps, timed_steps=args.timed_steps,
        seed=args.seed, lr=args.lr, timeout_s=args.timeout_s, run_timeout_s=args.run_timeout_s,
        fake_world_size=args.fake_world_size)
    return cfg, torchrun is not None


def _launch(cfg: RunConfig, under_torchrun: bool):
    """The run, its steps shown on stderr as they go (a local run; under torchrun every process
    is a rank and prints nothing)."""
    import dataclasses

    from zero_real.run.progress import shown
    from zero_real.run.train import run, run_under_torchrun

    if under_torchrun:
        return run_under_torchrun(cfg)
    procs = 1 if cfg.fake_world_size else cfg.nproc
    with shown("run", sys.stderr, f"starting {procs} process(es)") as progress_path:
        return run(dataclasses.replace(cfg, progress_path=progress_path))


def measure(args: argparse.Namespace) -> dict | None:
    """The run `zero-real run ARGS` asks for, made: its measurement (None on a torchrun rank
    but the first). Raises InputError before any rank starts, RankFailed or Stopped after."""
    start_fork_server()  # before prepare_run imports torch: both import it at once
    cfg, under_torchrun = prepare_run(args)
    from zero_real.run.launch import signals_stop_the_run

    with signals_stop_the_run():
        return _launch(cfg, under_torchrun)


def run_run(args: argparse.Namespace) -> int:
    from zero_real.run.launch import RankFailed, Stopped
    from zero_real.run.report import summary
    from zerosim.files import write_text

    try:
        result = measure(args)
    except RankFailed as exc:
        print(f"zero-real: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except Stopped as exc:  # the launcher stopped and reaped every rank on the way out
        print(f"zero-real: {exc.name}: every rank stopped", file=sys.stderr)
        return 128 + exc.signum
    if result is None:
        return EXIT_OK  # torchrun ranks other than 0
    if args.out is not None:
        write_text(Path(args.out), json.dumps(result, indent=1), "--out")
    print(summary(result, args.out))
    return EXIT_OK


def run_calibrate(args: argparse.Namespace) -> int:
    start_fork_server()
    from zero_real.calibration.calibrate import calibrate

    return calibrate(args)


def _run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("scenario", help="scenario TOML, e.g. scenarios/tiny_gpt_4rank_cpu.toml")
    run.add_argument("--stage", type=flags.whole(min(STAGES), max(STAGES)), required=True,
                     help="0 = DDP, 1, 2, 3 = ZeRO stages")
    run.add_argument("--nproc", type=flags.nproc, help="local processes (ranks); default 1, or "
                     "torchrun's WORLD_SIZE under torchrun")
    run.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0])
    run.add_argument("--collectives", choices=COLLECTIVE_IMPLS, default=COLLECTIVE_IMPLS[0],
                     help="torch.distributed's collectives, or a ring built from send/recv")
    run.add_argument("--steps", type=flags.steps, default=3,
                     help="steps measured for memory (under the CPU memory profiler)")
    run.add_argument("--timed-steps", type=flags.timed_steps, default=0, metavar="K",
                     help="K more steps with memory profiling off, for timings without its "
                          "overhead (what `zerosim validate` compares step times with)")
    run.add_argument("--out", metavar="FILE.json", help="write the measurement JSON here")
    run.add_argument("--set", dest="overrides", action="append", default=[],
                     metavar="TABLE.KEY=VALUE", help="override one scenario key (repeatable)")
    run.add_argument("--shard-group", type=flags.shard_group, metavar="G",
                     help="hybrid sharding (stages 1-3): model states sharded over groups of G "
                          "consecutive ranks and replicated across the groups; G divides the "
                          "ranks; 0 = all ranks (default: the scenario's parallelism.shard_group)")
    run.add_argument("--tensor-parallel", type=flags.tensor_parallel, metavar="T",
                     help="tensor parallelism (Megatron-LM's layout) over groups of T consecutive "
                          "ranks; the stage runs over the N / T ranks T apart (default: the "
                          "scenario's parallelism.tensor_parallel)")
    run.add_argument("--sequence-parallel", action="store_true",
                     help="with --tensor-parallel: Megatron's sequence parallelism (norms and "
                          "residuals on 1/T of the sequence)")
    run.add_argument("--pipeline-parallel", type=flags.pipeline_parallel, metavar="P",
                     help="pipeline parallelism: the layers split into P stages of N / P ranks "
                          "each (Megatron-LM's order: tensor, data, then pipeline), training."
                          "gradient_accumulation micro-batches per step (default: the scenario's "
                          "parallelism.pipeline_parallel)")
    run.add_argument("--pipeline-schedule", choices=PIPELINE_SCHEDULES,
                     help="the stages' order of forwards and backwards (zero-real runs gpipe "
                          "and 1f1b; default: the scenario's parallelism.pipeline_schedule)")
    run.add_argument("--fake-world-size", type=flags.nproc, metavar="W",
                     help="one rank against a fake process group of W ranks: memory at W-way "
                          "sharding without W processes (losses are not meaningful)")
    run.add_argument("--seed", type=flags.seed, default=0)
    run.add_argument("--lr", type=flags.lr, default=1e-3, help="Adam's learning rate (0, 1]")
    run.add_argument("--timeout-s", type=flags.timeout_s, default=DEFAULT_TIMEOUT_S,
                     help=f"limit on init and on each collective, seconds (default "
                          f"{DEFAULT_TIMEOUT_S:g}): a rank that stops making progress is named "
                          f"within this plus a few seconds")
    run.add_argument("--run-timeout-s", type=flags.timeout_s, metavar="S",
                     help="limit on the whole run, seconds (default: none)")


def _calibrate_arguments(cal: argparse.ArgumentParser) -> None:
    cal.add_argument("scenario", help="scenario TOML whose model is measured")
    cal.add_argument("--nproc", type=flags.nproc, required=True, metavar="N",
                     help="measure worlds of 1..N local processes, each its own record of the "
                          "box (a world of 1 runs no collectives)")
    cal.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0])
    cal.add_argument("--collectives", default=",".join(COLLECTIVE_IMPLS), metavar="MODES",
                     help=f"comma-separated: {', '.join(COLLECTIVE_IMPLS)} (default all)")
    cal.add_argument("--min-size-KiB", dest="min_size_KiB", type=flags.size_KiB, default=1.0,
                     help="smallest collective buffer, KiB (default 1)")
    cal.add_argument("--max-size-MiB", dest="max_size_MiB", type=flags.size_MiB, default=256.0,
                     help="largest collective buffer, MiB (default 256); sizes double from the "
                          "smallest")
    cal.add_argument("--seconds-per-size", dest="seconds_per_size", type=flags.seconds_per_size,
                     default=0.3, metavar="S", help="timed iterations per collective size last "
                     "about S seconds in all, S / R in each of the R rounds (5 to 500 "
                     "iterations in all; default 0.3)")
    cal.add_argument("--rounds", type=flags.rounds, default=flags.DEFAULT_ROUNDS, metavar="R",
                     help="rounds of the timed microbenchmarks (collectives, ops, whole units, "
                          "the optimizer, the gradient path), each row's times the median over "
                          "them: a slow spell of a shared box then spoils one round, not the row "
                          f"(default {flags.DEFAULT_ROUNDS})")
    cal.add_argument("--micro-batches", type=flags.micro_batches, metavar="B,B,...",
                     help="micro-batches for compute and memory (default: 1, the scenario's, "
                          "twice it)")
    cal.add_argument("--set", dest="overrides", action="append", default=[],
                     metavar="TABLE.KEY=VALUE", help="override one scenario key (repeatable)")
    cal.add_argument("--timeout-s", type=flags.timeout_s, default=DEFAULT_TIMEOUT_S,
                     help=f"limit on init and on each collective, seconds (default "
                          f"{DEFAULT_TIMEOUT_S:g})")
    cal.add_argument("--run-timeout-s", type=flags.timeout_s, metavar="S",
                     help="limit on each world of n processes, seconds (default: none)")
    cal.add_argument("--out", required=True, metavar="FILE.json", help="write the profile here")


def build_parser() -> Parser:
    parser = Parser(prog="zero-real",
                     description="DDP and ZeRO-1/2/3 for real on torch.distributed.")
    parser.add_argument("--version", action="version", version=f"zero-real {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=Parser)
    info = commands.add_parser("info", help="torch version, backends and devices of this box")
    info.add_argument("--json", action="store_true", help="print a JSON object")
    info.set_defaults(func=run_info)
    run = commands.add_parser("run", help="train a scenario's model with a ZeRO stage, measured")
    _run_arguments(run)
    run.set_defaults(func=run_run)
    cal = commands.add_parser("calibrate", help="measure this box (collectives, compute, optimizer, "
                              "memory) for zerosim; writes a profile JSON")
    _calibrate_arguments(cal)
    cal.set_defaults(func=run_calibrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("zero-real", build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
