"""`zerosim` command line. Exit codes (zerosim.contract): 0 success, 1 what ran failed, 2 bad input
(one line on stderr, no traceback).

One module per command group, each declaring its commands as `COMMANDS` (cli.common.Command), all
registered the same way by build_parser, in the order `--help` lists them:
- simulation.py: `memory` (analytic per-rank memory), `simulate` (one training step per stage on
  the simulated cluster), `collective` (one collective, nccl-tests figures);
- tradeoffs.py: `sweep` (a grid of simulations to a file), `plan` (which stage, how many GPUs, how
  large a model), `plot` (figures of results);
- page.py: `report` (one self-contained HTML page of a scenario: tables, figures, plan, notes);
- calibration.py: `validate` (simulate what zero-real measured, report the error).
Commands parse, call the library, print; the work and its formatting live in the library.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from zerosim.version import __version__
from zerosim.cli import calibration, page, simulation, tradeoffs
from zerosim.cli.common import add_scenario_args
from zerosim.commandline import Parser, dispatch

COMMANDS = (*simulation.COMMANDS, *tradeoffs.COMMANDS, *page.COMMANDS, *calibration.COMMANDS)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="zerosim", description="Memory and time of DDP and ZeRO-1/2/3 on N GPUs.")
    parser.add_argument("--version", action="version", version=f"zerosim {__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                        parser_class=Parser)
    for command in COMMANDS:
        sub = subcommands.add_parser(command.name, help=command.help,
                                     description=command.description)
        if command.takes_scenario:
            add_scenario_args(sub)
        command.arguments(sub)
        sub.set_defaults(func=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if hasattr(sys.stdout, "reconfigure"):  # a name from a JSON file may hold a lone surrogate
        sys.stdout.reconfigure(errors="backslashreplace")
    return dispatch("zerosim", build_parser().parse_args(argv))
