"""`zerosim memory`, `simulate` and `collective`: one scenario, analysed or simulated, printed
(simulate's progress on stderr when it runs long); `keys`: what a scenario may say."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from zerosim.cli.common import (Command, add_mode, load, print_default_notes, ranks, size_bytes,
                                size_sweep, stage)
from zerosim.contract import EXIT_OK, OPS, STAGE_NAMES, STAGES


def run_memory(args: argparse.Namespace) -> int:
    from zerosim import report
    from zerosim.analytic import memory

    scenario = load(args)
    rows = memory.memory_table(scenario)
    if args.json:
        print(json.dumps(report.memory_json(scenario, rows), indent=2))
    else:
        print(report.format_memory_table(scenario, rows))
    print_default_notes(scenario)
    return EXIT_OK


def run_simulate(args: argparse.Namespace) -> int:
    from zerosim import report
    from zerosim.analytic import memory
    from zerosim.cli.progress import after_delay
    from zerosim.files import check_writable, write_text
    from zerosim.sim.engine import check_steps, simulate
    from zerosim.sim.trace import chrome_trace

    if args.trace is not None:
        check_writable(Path(args.trace), "--trace")  # before the work, not after it
    start_s = time.perf_counter()
    scenario = load(args)
    stages = [args.stage] if args.stage is not None else list(memory.table_stages(scenario))
    keep = args.trace is not None
    check_steps(scenario, stages, args.mode, keep)  # all of them, before any runs long
    results = []
    for i, s in enumerate(stages, 1):
        with after_delay(f"zerosim simulate: {STAGE_NAMES[s]} ({i} of {len(stages)})", start_s,
                         unit="collectives") as bar:
            results.append(simulate(scenario, s, mode=args.mode, keep_events=keep, progress=bar))
    if args.trace is not None:
        with after_delay("zerosim simulate: --trace", start_s, unit="ranks traced") as bar:
            trace = chrome_trace(results, progress=bar, scenario=scenario)
            bar(0, 1, unit="trace files written")  # the JSON text: as long again at scale
            write_text(Path(args.trace), json.dumps(trace) + "\n", "--trace")
            bar(1, 1)
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print(report.format_simulation_table(scenario, results))
    print_default_notes(scenario)
    return EXIT_OK


def run_collective(args: argparse.Namespace) -> int:
    from zerosim import report
    from zerosim.cli.progress import after_delay
    from zerosim.sim.collective_bench import simulate_collective

    start_s = time.perf_counter()
    scenario = load(args)
    sizes = args.sweep or [args.size_bytes]
    results = []
    for i, size in enumerate(sizes, 1):  # progress in ring steps of each size (one: the usual)
        label = f" ({i} of {len(sizes)}: {size:,} B)" if args.sweep else ""
        with after_delay(f"zerosim collective: {args.op}{label}", start_s,
                         unit="ring steps") as bar:
            results.append(simulate_collective(scenario, args.op, size, args.ranks,
                                               mode=args.mode, progress=bar))
    if args.sweep:
        print(json.dumps(results, indent=2) if args.json
              else report.format_collective_sweep(results))
    else:
        print(json.dumps(results[0], indent=2) if args.json
              else report.format_collective(results[0]))
    return EXIT_OK


def run_keys(args: argparse.Namespace) -> int:
    from zerosim.scenario.keys import format_keys, keys_json, scenario_keys

    keys = scenario_keys(args.table)
    print(json.dumps(keys_json(keys), indent=2) if args.json else format_keys(keys))
    return EXIT_OK


def _memory_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of a table")


def _simulate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stage", type=stage, help="simulate only this stage (default: all four)")
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per stage")
    parser.add_argument("--trace", metavar="OUT.json",
                        help="write a Chrome/Perfetto trace (chrome://tracing, ui.perfetto.dev)")
    add_mode(parser, "auto (default): one representative rank on a uniform cluster, every "
                     "straggler and degraded link besides when [variation] sets them, every rank "
                     "under jitter; per_rank forces every rank")


def _collective_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--op", required=True, choices=OPS)
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--size-bytes", type=size_bytes, metavar="S",
                      help="whole buffer in bytes (nccl-tests convention), e.g. 1e9")
    size.add_argument("--sweep", type=size_sweep, metavar="MIN:MAX:FACTOR",
                      help="sizes MIN, MIN x FACTOR, ... up to MAX, as nccl-tests' -b/-e/-f "
                           "(K, M, G = 1024, 1024^2, 1024^3), e.g. 8:8G:2; prints its table")
    parser.add_argument("--ranks", type=ranks, metavar="N",
                        help="the first N ranks of the cluster (default: all)")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    add_mode(parser, "auto (default): one representative link per role unless a link of the "
                     "group is degraded; per_rank: every rank's links")


def _keys_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", metavar="NAME",
                        help="list one table's keys, e.g. --table cluster (default: every "
                             "table)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list, one object per key (table, key, type, default, "
                             "unit, doc)")


COMMANDS = (
    Command("memory", "per-rank memory of stages 0-3 (analytic, exact)",
            "Per-rank memory of DDP and ZeRO-1/2/3: parameters, gradients, optimizer states, "
            "activations, buffers, host memory under CPU offload, and the peak.",
            run_memory, _memory_arguments),
    Command("simulate", "one training step per stage on the simulated cluster",
            "Step time, compute, exposed communication, bytes per rank per collective and per-rank "
            "peak memory of DDP and ZeRO-1/2/3, from a discrete-event simulation.",
            run_simulate, _simulate_arguments),
    Command("collective", "one collective on the simulated cluster (nccl-tests figures)",
            "Time, algbw, busbw (nccl-tests definitions) and bytes sent per rank of one collective, "
            "moved chunk by chunk over the simulated links.",
            run_collective, _collective_arguments),
    Command("keys", "every scenario key: its type, unit, default and meaning",
            "Every key the scenario tables accept, with its type, unit, default and the first "
            "sentence of its docstring, read from the tables' dataclasses.",
            run_keys, _keys_arguments, takes_scenario=False),
)
