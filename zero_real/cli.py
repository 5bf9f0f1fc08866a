"""`zero-real` command line: what this box can run (`info`); `run`: a stage for real, measured,
written as a measurement JSON; `calibrate`: this box's collectives, compute, optimizer and memory,
written as a profile for zerosim (zero_real.calibrate).
Exit codes as zerosim's: 0 ok, 1 a rank failed, 2 bad input or missing torch."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from typing import Any, Sequence

from zero_real import __version__
from zerosim.cli import EXIT_BAD_INPUT, EXIT_OK, Parser
from zerosim.errors import InputError

EXIT_FAILED = 1

TORCH_MISSING = ("torch is not installed; install the build you want (e.g. pip install torch), "
                 "then pip install 'zerosim[real]'")


def box_info() -> dict[str, Any]:
    """torch version, distributed backends and accelerators visible to this process."""
    import torch
    import torch.distributed as dist

    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    available = dist.is_available()
    return {
        "torch_version": torch.__version__,
        "distributed": available,
        "gloo": available and dist.is_gloo_available(),
        "nccl": available and dist.is_nccl_available(),
        "cuda_devices": devices,
        "cpu_count": os.cpu_count(),
    }


def _cmd_info(args) -> int:
    try:
        info = box_info()
    except ImportError:
        print(f"zero-real: error: {TORCH_MISSING}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            print(f"{key:15} {value}")
    return EXIT_OK


def _check_supported(scenario) -> None:
    """Scenario settings zerosim models but zero_real does not implement: refused, not ignored."""
    t, m = scenario.training, scenario.model
    unsupported = [
        ("training.optimizer", t.optimizer, t.optimizer in ("adam", "adamw"),
         "Adam only (adam, adamw)"),
        ("training.optimizer_offload", t.optimizer_offload, t.optimizer_offload == "none",
         "optimizer states on the training device only (none)"),
        ("training.activation_checkpointing", t.activation_checkpointing,
         t.activation_checkpointing == "none", "no activation checkpointing (none)"),
        ("training.flash_attention", str(t.flash_attention).lower(), not t.flash_attention,
         "plain attention only (false)"),
        ("training.gradient_reduction", t.gradient_reduction,
         t.gradient_reduction == "reduce_scatter", "the ZeRO paper's reduce_scatter only"),
    ]
    for key, value, ok, supported in unsupported:
        if not ok:
            raise InputError(f"{key} = {value} is not implemented by zero_real; it supports "
                             f"{supported}")
    if m.position == "rope" and m.head_dim % 2:
        raise InputError(f"model.position = rope needs an even head dimension; model.hidden / "
                         f"model.heads = {m.hidden} / {m.heads} = {m.head_dim} is odd")


MEMORY_FRACTION = 0.8  # of MemAvailable: leave the box room for the launcher, fork server, page cache


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None  # not Linux, or unreadable: no pre-flight


def _check_memory(scenario, stage: int, procs: int, world: int) -> None:
    """On CPU, ranks share the box's memory: refuse a run zerosim says cannot fit, rather than
    let the kernel's OOM killer pick a rank mid-run (or swap the box to a halt)."""
    from zerosim.memory import stage_memory

    available = _mem_available()
    if available is None:
        return
    per_rank = stage_memory(scenario, stage).peak_bytes
    if per_rank * procs > MEMORY_FRACTION * available:
        gib = 2**30
        raise InputError(
            f"not enough memory: {procs} process(es) x {per_rank / gib:.2f} GiB (zerosim's peak "
            f"for stage {stage} at world size {world}) = {per_rank * procs / gib:.2f} GiB > "
            f"{MEMORY_FRACTION:.0%} of MemAvailable {available / gib:.2f} GiB = "
            f"{MEMORY_FRACTION * available / gib:.2f} GiB")


def _check_run_args(args) -> None:
    import torch

    if args.stage not in (0, 1, 2, 3):
        raise InputError(f"--stage {args.stage} is not a ZeRO stage; allowed: 0, 1, 2, 3")
    for flag, value in (("--nproc", args.nproc), ("--steps", args.steps)):
        if value is not None and value < 1:
            raise InputError(f"{flag} {value} must be >= 1")
    if args.timed_steps < 0:
        raise InputError(f"--timed-steps {args.timed_steps} must be >= 0")
    if args.timeout_s <= 0:
        raise InputError(f"--timeout-s {args.timeout_s:g} must be > 0")
    if args.run_timeout_s is not None and args.run_timeout_s <= 0:
        raise InputError(f"--run-timeout-s {args.run_timeout_s:g} must be > 0")
    if args.out:  # before the run, not after it: a typo must not cost the whole run
        parent = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(parent):
            raise InputError(f"--out {args.out}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise InputError(f"--out {args.out}: directory {parent} is not writable")
    if args.backend == "nccl" and torch.cuda.device_count() < args.local_procs:
        raise InputError(f"--backend nccl needs {args.local_procs} CUDA devices, this box has "
                         f"{torch.cuda.device_count()}; use --backend gloo on CPU")
    if args.fake_world_size is not None:
        if args.fake_world_size < 1:
            raise InputError(f"--fake-world-size {args.fake_world_size} must be >= 1")
        if args.torchrun:
            raise InputError("--fake-world-size runs one local process, not under torchrun")
        if args.nproc != 1 or args.collectives != "native":
            raise InputError("--fake-world-size runs one process with native (no-op) collectives: "
                             "leave --nproc at 1 and --collectives at native")


class Stopped(BaseException):
    """SIGINT or SIGTERM, raised in the launcher's main thread so that the launch unwinds: ranks
    stopped and reaped, workdir removed (BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum, self.name = signum, signal.Signals(signum).name


@contextlib.contextmanager
def _signals_stop_the_run():
    def handler(signum, frame):
        raise Stopped(signum)

    try:
        saved = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread (an embedding caller): leave signals alone
        saved = {}
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def _cmd_run(args) -> int:
    try:
        import torch
    except ImportError:
        raise InputError(TORCH_MISSING) from None
    from zerosim.load import load_scenario

    from zero_real.launch import torchrun_env

    # Under torchrun the world is torchrun's (WORLD_SIZE ranks, LOCAL_WORLD_SIZE per node);
    # locally it is --nproc processes on this one box.
    args.torchrun = torchrun_env()
    if args.torchrun:
        world, local = args.torchrun
        if args.nproc is not None and args.nproc != world:
            raise InputError(f"--nproc {args.nproc} disagrees with torchrun's WORLD_SIZE={world}; "
                             f"leave --nproc out under torchrun")
        args.nproc = world
    else:
        args.nproc = 1 if args.nproc is None else args.nproc
        local = args.nproc
    args.local_procs = local
    _check_run_args(args)
    world = args.fake_world_size or args.nproc
    nodes, per_node = (world // local, local) if args.torchrun else (1, world)
    # The run defines the cluster and stage the scenario describes (for the zerosim comparison).
    overrides = [*args.overrides, f"cluster.nodes={nodes}", f"cluster.gpus_per_node={per_node}",
                 f"training.zero_stage={args.stage}"]
    scenario = load_scenario(args.scenario, overrides)
    if scenario.model.is_bare:
        raise InputError(f"{args.scenario}: zero_real needs a model shape (hidden, heads, vocab, "
                         f"...), not a bare parameter count")
    _check_supported(scenario)
    if args.backend == "gloo" and not (args.fake_world_size and torch.cuda.is_available()):
        _check_memory(scenario, args.stage, 1 if args.fake_world_size else args.local_procs, world)
    from zero_real.launch import RankFailed, run, run_under_torchrun

    cfg = {"scenario": scenario, "scenario_path": args.scenario, "overrides": args.overrides,
           "stage": args.stage, "nproc": args.nproc, "backend": args.backend,
           "collectives": args.collectives, "steps": args.steps, "timed_steps": args.timed_steps,
           "seed": args.seed, "lr": args.lr,
           "timeout_s": args.timeout_s, "run_timeout_s": args.run_timeout_s,
           "fake_world_size": args.fake_world_size}
    if args.fake_world_size:
        cfg["backend"] = "fake"
    try:
        with _signals_stop_the_run():
            if args.torchrun:
                result = run_under_torchrun(cfg)
            else:
                result = run(cfg)
    except RankFailed as exc:
        print(f"zero-real: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except Stopped as exc:  # the launcher stopped and reaped every rank on the way out
        print(f"zero-real: {exc.name}: every rank stopped", file=sys.stderr)
        return 128 + exc.signum
    if result is None:
        return EXIT_OK  # torchrun ranks other than 0
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=1)
        except OSError as exc:
            raise InputError(f"--out {args.out}: {exc.strerror or exc}") from None
    print(summary(result, args.out))
    return EXIT_OK


def _cmd_calibrate(args) -> int:
    from zero_real.calibrate import command

    return command(args)


def summary(result: dict, out: str | None) -> str:
    mib = 2**20
    lines = [f"{result['stage_name']} (stage {result['stage']}) on {result['world_size']} ranks, "
             f"{result['backend']}/{result['collectives']}, torch {result['torch_version']}, "
             f"{result['hardware']}",
             "losses " + " ".join(f"{x:.4f}" for x in result["losses"])]
    zerosim_states = result["zerosim_memory"]["model_states_bytes"]
    for r in result["ranks"]:
        phases = " ".join(f"{k.removeprefix('after_')} {v / mib:.2f}" for k, v in r["phases"].items()
                          if v is not None)
        lines.append(f"rank {r['rank']}: model states {r['ledger']['model_states'] / mib:.3f} MiB "
                     f"(zerosim {zerosim_states / mib:.3f}), peak {r['peak_bytes'] / mib:.2f} MiB, "
                     f"after: {phases} MiB")
    comm = [e for e in result["events"] if e["stream"] == "comm" and e["rank"] == 0]
    step_s = max((e["end_s"] for e in result["events"]), default=0.0)
    lines.append(f"rank 0: {len(comm)} collectives, {sum(e['bytes'] for e in comm) / mib:.2f} MiB, "
                 f"run {step_s:.2f} s")
    if out:
        lines.append(f"wrote {out}")
    return "\n".join(lines)


def build_parser() -> Parser:
    parser = Parser(prog="zero-real", description="DDP and ZeRO-1/2/3 for real on torch.distributed.")
    parser.add_argument("--version", action="version", version=f"zero-real {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=Parser)
    info = commands.add_parser("info", help="torch version, backends and devices of this box")
    info.add_argument("--json", action="store_true", help="print a JSON object")
    info.set_defaults(func=_cmd_info)
    run = commands.add_parser("run", help="train a scenario's model with a ZeRO stage, measured")
    run.add_argument("scenario", help="scenario TOML, e.g. scenarios/tiny_gpt_4rank_cpu.toml")
    run.add_argument("--stage", type=int, required=True, help="0 = DDP, 1, 2, 3 = ZeRO stages")
    run.add_argument("--nproc", type=int, help="local processes (ranks); default 1, or "
                     "torchrun's WORLD_SIZE under torchrun")
    run.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    run.add_argument("--collectives", choices=("native", "ring"), default="native",
                     help="torch.distributed's collectives, or a ring built from send/recv")
    run.add_argument("--steps", type=int, default=3,
                     help="steps measured for memory (under the CPU memory profiler)")
    run.add_argument("--timed-steps", type=int, default=0, metavar="K",
                     help="K more steps with memory profiling off, for timings without its "
                          "overhead (what `zerosim validate` compares step times with)")
    run.add_argument("--out", metavar="FILE.json", help="write the measurement JSON here")
    run.add_argument("--set", dest="overrides", action="append", default=[],
                     metavar="TABLE.KEY=VALUE", help="override one scenario key (repeatable)")
    run.add_argument("--fake-world-size", type=int, metavar="W",
                     help="one rank against a fake process group of W ranks: memory at W-way "
                          "sharding without W processes (losses are not meaningful)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--lr", type=float, default=1e-3)
    run.add_argument("--timeout-s", type=float, default=30.0,
                     help="limit on init and on each collective, seconds (default 30): a rank "
                          "that stops making progress is named within this plus a few seconds")
    run.add_argument("--run-timeout-s", type=float, metavar="S",
                     help="limit on the whole run, seconds (default: none)")
    run.set_defaults(func=_cmd_run)
    cal = commands.add_parser("calibrate", help="measure this box (collectives, compute, optimizer, "
                              "memory) for zerosim; writes a profile JSON")
    cal.add_argument("scenario", help="scenario TOML whose model is measured")
    cal.add_argument("--nproc", type=int, required=True, metavar="N",
                     help="measure worlds of 2..N local processes (N = 1: compute, optimizer and "
                          "memory only)")
    cal.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    cal.add_argument("--collectives", default="native,ring", metavar="MODES",
                     help="comma-separated: native, ring (default both)")
    cal.add_argument("--min-size-KiB", dest="min_size_KiB", type=float, default=1.0,
                     help="smallest collective buffer, KiB (default 1)")
    cal.add_argument("--max-size-MiB", dest="max_size_MiB", type=float, default=256.0,
                     help="largest collective buffer, MiB (default 256); sizes double from the "
                          "smallest")
    cal.add_argument("--seconds-per-size", dest="seconds_per_size", type=float, default=0.3,
                     metavar="S", help="timed iterations per collective size last about S "
                                       "seconds (5 to 500 iterations; default 0.3)")
    cal.add_argument("--micro-batches", metavar="B,B,...",
                     help="micro-batches for compute and memory (default: 1, the scenario's, "
                          "twice it)")
    cal.add_argument("--set", dest="overrides", action="append", default=[],
                     metavar="TABLE.KEY=VALUE", help="override one scenario key (repeatable)")
    cal.add_argument("--timeout-s", type=float, default=30.0,
                     help="limit on init and on each collective, seconds (default 30)")
    cal.add_argument("--run-timeout-s", type=float, metavar="S",
                     help="limit on each world of n processes, seconds (default: none)")
    cal.add_argument("--out", required=True, metavar="FILE.json", help="write the profile here")
    cal.set_defaults(func=_cmd_calibrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"zero-real: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
