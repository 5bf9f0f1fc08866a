"""`zero-real` command line: what this box can run (`info`), and `run`: a stage for real, measured,
written as a measurement JSON. `calibrate` arrives with the calibration issue.
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


def _check_run_args(args) -> None:
    import torch

    if args.stage not in (0, 1, 2, 3):
        raise InputError(f"--stage {args.stage} is not a ZeRO stage; allowed: 0, 1, 2, 3")
    for flag, value in (("--nproc", args.nproc), ("--steps", args.steps)):
        if value < 1:
            raise InputError(f"{flag} {value} must be >= 1")
    if args.timeout_s <= 0:
        raise InputError(f"--timeout-s {args.timeout_s:g} must be > 0")
    if args.backend == "nccl" and torch.cuda.device_count() < args.nproc:
        raise InputError(f"--backend nccl needs {args.nproc} CUDA devices, this box has "
                         f"{torch.cuda.device_count()}; use --backend gloo on CPU")
    if args.fake_world_size is not None:
        if args.fake_world_size < 1:
            raise InputError(f"--fake-world-size {args.fake_world_size} must be >= 1")
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
        import torch  # noqa: F401
    except ImportError:
        raise InputError(TORCH_MISSING) from None
    from zerosim.load import load_scenario

    _check_run_args(args)
    world = args.fake_world_size or args.nproc
    # The run defines the cluster and stage the scenario describes (for the zerosim comparison).
    overrides = [*args.overrides, "cluster.nodes=1", f"cluster.gpus_per_node={world}",
                 f"training.zero_stage={args.stage}"]
    scenario = load_scenario(args.scenario, overrides)
    if scenario.model.is_bare:
        raise InputError(f"{args.scenario}: zero_real needs a model shape (hidden, heads, vocab, "
                         f"...), not a bare parameter count")
    import os

    from zero_real.launch import RankFailed, run, run_under_torchrun

    cfg = {"scenario": scenario, "scenario_path": args.scenario, "overrides": args.overrides,
           "stage": args.stage, "nproc": args.nproc, "backend": args.backend,
           "collectives": args.collectives, "steps": args.steps, "seed": args.seed, "lr": args.lr,
           "timeout_s": args.timeout_s, "fake_world_size": args.fake_world_size}
    if args.fake_world_size:
        cfg["backend"] = "fake"
    try:
        with _signals_stop_the_run():
            if "RANK" in os.environ and "WORLD_SIZE" in os.environ and not args.fake_world_size:
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
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    print(summary(result, args.out))
    return EXIT_OK


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
    run.add_argument("--nproc", type=int, default=1, help="local processes (ranks)")
    run.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    run.add_argument("--collectives", choices=("native", "ring"), default="native",
                     help="torch.distributed's collectives, or a ring built from send/recv")
    run.add_argument("--steps", type=int, default=3)
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
    run.set_defaults(func=_cmd_run)
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
