"""`zerosim report`: one scenario's memory, step, timeline, trade-offs, plan and notes on one
self-contained HTML page (tradeoffs/page.py), with the time, GPU-hours and cost of a token
budget."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from zerosim.cli.common import Command, add_mode, load, positive_float, print_default_notes
from zerosim.commandline import whole_number
from zerosim.contract import EXIT_OK
from zerosim.errors import InputError


def run_report(args: argparse.Namespace) -> int:
    from zerosim.cli.progress import after_delay
    from zerosim.files import check_writable, write_text
    from zerosim.tradeoffs import page

    if Path(args.out).suffix.lower() != ".html":
        raise InputError(f"-o {args.out}: a report is an .html page")
    if args.price_per_gpu_hour is not None and args.tokens is None:
        raise InputError(f"--price-per-gpu-hour {args.price_per_gpu_hour:g} prices a token "
                         f"budget: give --tokens too (e.g. --tokens 2T)")
    check_writable(Path(args.out), "-o")  # before the work, not after it
    start_s = time.perf_counter()
    notes: list[str] = []
    scenario = load(args, kept=notes)
    command = shlex.join(["zerosim", *sys.argv[1:]]) if sys.argv[1:2] == ["report"] else None
    with after_delay("zerosim report:", start_s, unit="parts") as bar:
        gathered = page.gather(scenario, notes=tuple(notes), tokens=args.tokens,
                               price_per_gpu_hour=args.price_per_gpu_hour, gpus=args.gpus,
                               mode=args.mode, command=command, progress=bar)
    write_text(Path(args.out), page.render(gathered), "-o")
    print(f"zerosim: wrote the report of {args.scenario} to {args.out}", file=sys.stderr)
    print_default_notes(scenario)
    return EXIT_OK


def tokens(text: str) -> int:
    from zerosim.tradeoffs.budget import parse_tokens

    try:
        return parse_tokens(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--tokens {text!r} ")) from None


def gpu_counts(text: str) -> tuple[int, ...]:
    counts = tuple(whole_number(part.strip()) for part in text.split(","))
    if not counts or any(c is None or not 1 <= c <= 2**20 for c in counts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of GPU counts in 1..2**20, "
                                         f"e.g. 64,128,256")
    return counts


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--out", required=True, metavar="REPORT.html",
                        help="the page: self-contained HTML (plotly.js inlined), opens offline")
    parser.add_argument("--tokens", type=tokens, metavar="T",
                        help="a token budget (2T, 300B, 15e9: decimal suffixes K M B/G T): the "
                             "time to train it and its GPU-hours, per stage")
    parser.add_argument("--price-per-gpu-hour", type=positive_float, metavar="P",
                        help="with --tokens: the cost, at P (any currency) per GPU-hour")
    parser.add_argument("--gpus", type=gpu_counts, default=(), metavar="N1,N2,...",
                        help="the trade-off figures' world sizes (default: 1/8, 1/4, 1/2, 1 "
                             "and 2 times the scenario's, in whole nodes)")
    add_mode(parser, "as for zerosim simulate")


COMMANDS = (
    Command("report", "one self-contained HTML page: memory, step, timeline, trade-offs, plan",
            "A page to share: the scenario and every key, the notes on its defaults, the memory "
            "and step tables, the step's timeline, memory against GPU count and against "
            "communication, the plan, and with --tokens the time to train, GPU-hours and cost; "
            "the version and date; its numbers are the --json ones, embedded as JSON too.",
            run_report, _report_arguments),
)
