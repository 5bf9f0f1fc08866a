"""`zerosim` command line. Exit codes: 0 success, 1 a check failed, 2 bad input (one line on stderr).

Commands: `memory` (analytic per-rank memory), `simulate` (one training step per stage on the
simulated cluster), `collective` (one collective, nccl-tests figures), `validate` (simulate what zero-real measured,
with a calibration profile, and report the error), `sweep` (a grid of simulations to a file),
`plan` (which stage, how many GPUs, how large a model: cli_tradeoffs.py) and `plot` (figures of
results: cli_plot.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from zerosim import __version__
from zerosim.errors import InputError

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage block) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_scenario_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", help="scenario TOML file, e.g. scenarios/zero_paper_7b5_64gpu.toml")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="TABLE.KEY=VALUE",
                        help="override one scenario key, value parsed as TOML (a bare word is a "
                             "string); repeatable, e.g. --set cluster.nodes=16 --set training.precision=fp32")
    parser.add_argument("--deepspeed", metavar="DS_CONFIG.json",
                        help="take zero stage, offload, precision, bucket sizes and micro-batch from a "
                             "DeepSpeed config (applied after the scenario, before --set)")


def _load(args: argparse.Namespace):
    from zerosim.load import load_scenario

    notes: list[str] = []
    scenario = load_scenario(args.scenario, args.overrides, args.deepspeed, notes=notes)
    for note in notes:
        print(f"zerosim: note: {note}", file=sys.stderr)
    return scenario


def _cmd_memory(args: argparse.Namespace) -> int:
    from zerosim import memory, report

    scenario = _load(args)
    rows = memory.memory_table(scenario)
    if args.json:
        print(json.dumps(report.memory_json(scenario, rows), indent=2))
    else:
        print(report.format_memory_table(scenario, rows))
    return EXIT_OK


def _stage(text: str) -> int:
    if text not in ("0", "1", "2", "3"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a ZeRO stage (0, 1, 2 or 3)")
    return int(text)


def _size_bytes(text: str) -> int:
    """A positive whole number of bytes; 1e9 and 1_000_000 are accepted."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes") from None
    if not 1 <= value <= 2**53 or value != int(value):  # also NaN and infinity
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number of bytes in 1..2**53")
    return int(value)


def _ranks(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of ranks")
    return int(text)


def _cmd_simulate(args: argparse.Namespace) -> int:
    from zerosim import report
    from zerosim.engine import simulate
    from zerosim.trace import chrome_trace

    scenario = _load(args)
    stages = [args.stage] if args.stage is not None else [0, 1, 2, 3]
    keep = args.trace is not None
    results = [simulate(scenario, stage, mode=args.mode, keep_events=keep) for stage in stages]
    if args.trace is not None:
        _write_json(args.trace, chrome_trace(results))
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print(report.format_simulation_table(scenario, results))
    return EXIT_OK


def _write_json(path: str, data) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            json.dump(data, out)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _cmd_collective(args: argparse.Namespace) -> int:
    from zerosim.collectives import simulate_collective

    scenario = _load(args)
    result = simulate_collective(scenario, args.op, args.size_bytes, args.ranks, mode=args.mode)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['op']} of {result['size_bytes']:,} bytes on {result['ranks']} ranks "
              f"({result['algorithm']})")
        for key in ("time_s", "algbw_GBps", "busbw_GBps", "bytes_sent_per_rank"):
            print(f"  {key:20} {result[key]:.6g}")
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from zerosim.files import read_json_object
    from zerosim.validate import format_report, validate

    if not args.tolerance_pct > 0:
        raise InputError(f"--tolerance-pct {args.tolerance_pct:g} must be > 0")
    measurement = read_json_object(Path(args.measurement), "measurement")
    report = validate(measurement, args.measurement, args.scenario, args.profile)
    mean = report["mean_abs_error_pct"]
    report["tolerance_pct"] = args.tolerance_pct
    report["within_tolerance"] = mean is not None and mean <= args.tolerance_pct
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report, args.tolerance_pct))
    return EXIT_OK if report["within_tolerance"] else EXIT_CHECK_FAILED


def _positive_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="zerosim", description="Memory and time of DDP and ZeRO-1/2/3 on N GPUs.")
    parser.add_argument("--version", action="version", version=f"zerosim {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=Parser)

    def command(name: str, func, help: str, description: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=description)
        _add_scenario_args(sub)
        sub.set_defaults(func=func)
        return sub

    mem = command(
        "memory", _cmd_memory, "per-rank memory of stages 0-3 (analytic, exact)",
        "Per-rank memory of DDP and ZeRO-1/2/3: parameters, gradients, optimizer states, "
        "activations, buffers, host memory under CPU offload, and the peak.")
    mem.add_argument("--json", action="store_true", help="print a JSON object instead of a table")

    sim = command(
        "simulate", _cmd_simulate, "one training step per stage on the simulated cluster",
        "Step time, compute, exposed communication, bytes per rank per collective and per-rank "
        "peak memory of DDP and ZeRO-1/2/3, from a discrete-event simulation.")
    sim.add_argument("--stage", type=_stage, help="simulate only this stage (default: all four)")
    sim.add_argument("--json", action="store_true", help="print a JSON list, one object per stage")
    sim.add_argument("--trace", metavar="OUT.json",
                     help="write a Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev)")
    sim.add_argument("--mode", choices=("auto", "symmetric", "per_rank"), default="auto",
                     help="auto (default): one representative rank on a uniform cluster, every "
                          "straggler and degraded link besides when [variation] sets them, every "
                          "rank under jitter; per_rank forces every rank")

    coll = command(
        "collective", _cmd_collective, "one collective on the simulated cluster (nccl-tests figures)",
        "Time, algbw, busbw (nccl-tests definitions) and bytes sent per rank of one collective, "
        "moved chunk by chunk over the simulated links.")
    coll.add_argument("--op", required=True, choices=("all_reduce", "reduce_scatter", "all_gather",
                                                      "broadcast", "reduce"))
    coll.add_argument("--size-bytes", required=True, type=_size_bytes, metavar="S",
                      help="whole buffer in bytes (nccl-tests convention), e.g. 1e9")
    coll.add_argument("--ranks", type=_ranks, metavar="N",
                      help="the first N ranks of the cluster (default: all)")
    coll.add_argument("--json", action="store_true", help="print a JSON object")
    coll.add_argument("--mode", choices=("auto", "symmetric", "per_rank"), default="auto",
                      help="auto (default): one representative link per role unless a link of "
                           "the group is degraded; per_rank: every rank's links")

    from zerosim.cli_tradeoffs import add_tradeoff_commands

    add_tradeoff_commands(command, _load)
    from zerosim.cli_plot import add_plot_command

    add_plot_command(commands, Parser)

    val = commands.add_parser(
        "validate", help="simulate what zero-real measured; per-metric error",
        description="Re-simulate exactly the configuration of a `zero-real run` measurement "
                    "with a calibration profile and print, per metric, measured, simulated and "
                    "error %, then the mean and max absolute error. Exit 1 when the mean is "
                    "above the tolerance.")
    val.add_argument("measurement", metavar="MEASUREMENT.json", help="zero-real run --out file")
    val.add_argument("--profile", metavar="P.json",
                     help="calibration profile (default: the scenario's cluster.profile)")
    val.add_argument("--scenario", metavar="SCENARIO.toml",
                     help="the measurement's scenario file, if it moved since the run")
    val.add_argument("--tolerance-pct", type=_positive_float, default=10.0, metavar="X",
                     help="largest acceptable mean absolute error, percent (default 10)")
    val.add_argument("--json", action="store_true", help="print a JSON object")
    val.set_defaults(func=_cmd_validate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if hasattr(sys.stdout, "reconfigure"):  # a name from a JSON file may hold a lone surrogate
        sys.stdout.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"zerosim: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:  # Ctrl-C: files are written whole or not at all (files.write_text)
        print("zerosim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `zerosim memory ... | head`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
