"""What every `zerosim` command module shares: how a command is declared, the scenario arguments
and their loading, and the argument types that turn text into checked values (argparse reports a
bad one as one line, exit 2)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

from zerosim.commandline import whole_number
from zerosim.contract import SIM_MODES, STAGES


@dataclass(frozen=True)
class Command:
    """One subcommand: cli.build_parser adds it, with the scenario arguments first when it takes
    a scenario, then its own; `run` returns the exit code."""

    name: str
    help: str
    description: str
    run: Callable[[argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None]
    takes_scenario: bool = True


def add_scenario_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file, e.g. scenarios/zero_paper_7b5_64gpu.toml")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="TABLE.KEY=VALUE",
                        help="override one scenario key, value parsed as TOML (a bare word is a "
                             "string); repeatable, e.g. --set cluster.nodes=16 --set training.precision=fp32")
    configs = parser.add_mutually_exclusive_group()
    configs.add_argument("--deepspeed", metavar="DS_CONFIG.json",
                         help="take zero stage, offload, precision, bucket sizes and micro-batch from a "
                              "DeepSpeed config (applied after the scenario, before --set)")
    configs.add_argument("--accelerate", metavar="ACCELERATE.yaml",
                         help="take the run from an Accelerate config (FSDP, DeepSpeed or DDP: "
                              "stage, precision, offload, machines and processes; after the "
                              "scenario, before --set)")
    configs.add_argument("--torchtitan", metavar="JOB.toml",
                         help="take the run from a torchtitan job config (FSDP2, TP, PP, batch, "
                              "precision, checkpointing; after the scenario, before --set)")
    configs.add_argument("--megatron-args", metavar="FILE",
                         help="take the model and the run from a Megatron-LM argument list or "
                              "launch script (shape, TP, PP, batch, precision, recomputation; "
                              "after the scenario, before --set)")


LAUNCH_FLAGS = {"accelerate": "--accelerate", "torchtitan": "--torchtitan",
                "megatron": "--megatron-args"}
"""Each launch config (launch.KINDS) and the flag that names its file."""


def launch_of(args: argparse.Namespace) -> tuple[str, str] | None:
    """(kind, path) of the launch config the arguments name (launch.KINDS), or None."""
    for kind, flag in LAUNCH_FLAGS.items():
        path = getattr(args, flag.removeprefix("--").replace("-", "_"), None)
        if path is not None:
            return kind, path
    return None


def add_mode(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--mode", choices=SIM_MODES, default=SIM_MODES[0], help=help)


def load(args: argparse.Namespace, kept: list[str] | None = None):
    """The scenario the arguments name, refused if what it makes passes 2**53 (memory.check_scale,
    check_device_scale; a collective's sizes: check_sends); what a DeepSpeed config contributed
    goes to stderr, once the scenario is accepted, and so does what a launch config
    (--accelerate, --torchtitan, --megatron-args) did; each also into `kept` where one is given
    (a report shows them)."""
    from zerosim.analytic.memory import check_scale
    from zerosim.scenario.load import load_scenario
    from zerosim.sim.device import check_device_scale

    notes: list[str] = []
    scenario = check_device_scale(check_scale(load_scenario(
        args.scenario, args.overrides, args.deepspeed, notes=notes, launch=launch_of(args))))
    if getattr(args, "op", None) is not None:  # `collective`: before it simulates
        from zerosim.sim.collective_bench import check_sends

        check_sends(args.op, args.sweep or [args.size_bytes])
    for note in notes:
        print(f"zerosim: note: {note}", file=sys.stderr)
    if kept is not None:
        kept.extend(notes)
    return scenario


def print_default_notes(scenario) -> None:
    """The defaults that decided the answer (scenario.default_notes), on stderr, once the
    command has printed it: a command that fails says its one line alone."""
    for note in scenario.default_notes:
        print(f"zerosim: note: {note}", file=sys.stderr)


def stage(text: str) -> int:
    if text not in map(str, STAGES):
        raise argparse.ArgumentTypeError(f"{text!r} is not a ZeRO stage (0, 1, 2 or 3)")
    return int(text)


def size_bytes(text: str) -> int:
    """A positive whole number of bytes; 1e9 and 1_000_000 are accepted. Digits are read as an
    integer, not through a float, which would round 2**53 + 1 down into the range."""
    digits = text.replace("_", "")
    try:
        value = whole_number(digits)
        value = float(digits) if value is None else value
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes") from None
    if not 1 <= value <= 2**53 or value != int(value):  # also NaN and infinity
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number of bytes in 1..2**53")
    return int(value)


_BINARY_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30}
"""nccl-tests' size suffixes for -b and -e: powers of 1024 (NVIDIA/nccl-tests src/common.cu,
parsesize, at a0b82b2)."""


def size_sweep(text: str) -> list[int]:
    """'MIN:MAX:FACTOR' -> the sizes MIN, MIN x FACTOR, ... up to MAX, as nccl-tests' -b, -e and
    -f; MIN and MAX take its K, M and G suffixes (8, 128M, 8G) or any form --size-bytes takes."""
    parts = text.split(":")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN:MAX:FACTOR, e.g. 8:8G:2")
    bounds = []
    for part in parts[:2]:
        unit = _BINARY_SUFFIX.get(part[-1:].upper(), 1)
        number = size_bytes(part[:-1] if unit > 1 else part)
        bounds.append(size_bytes(str(number * unit)))
    low, high = bounds
    factor = whole_number(parts[2])
    if factor is None or factor < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: FACTOR must be a whole number >= 2")
    if low > high:
        raise argparse.ArgumentTypeError(f"{text!r}: MIN is larger than MAX")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return sizes  # at most 54: 1..2**53 by factors of 2


def ranks(text: str) -> int:
    if whole_number(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of ranks")
    return int(text)


def positive_int(text: str) -> int:
    if (whole_number(text) or 0) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


def gib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GiB") from None
    if not 0 < value <= 2**23:  # also NaN and infinity; 2**23 GiB = 2**53 bytes, exact in JSON
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of GiB in (0, 2**23]")
    return value
