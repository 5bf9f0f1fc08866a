"""`zerosim validate`: the simulator against zero_real measurements, metric by metric."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from zerosim.cli.common import Command, positive_float
from zerosim.contract import (DEFAULT_MEMORY_TOLERANCE_PCT, DEFAULT_TIME_TOLERANCE_PCT,
                              EXIT_FAILED, EXIT_OK)
from zerosim.errors import InputError
from zerosim.scenario.load import parse_override


def run_validate(args: argparse.Namespace) -> int:
    from zerosim.calibration.validate import format_report, judge, validate
    from zerosim.files import read_json_object

    if args.references is not None:
        return _run_references(args)
    if args.overrides:
        raise InputError("--set applies to --references only (a measurement's scenario is "
                         "what was run)")
    if not args.measurements:
        raise InputError("validate needs measurement files (zero-real run --out) or "
                         "--references DIR")

    if args.tolerance_pct is not None:  # its old meaning, one mean of time and memory, hid errors
        raise InputError("--tolerance-pct is retired (it judged one mean of time and memory "
                         "errors): use --time-tolerance-pct and --memory-tolerance-pct")
    _each_file_once(args.measurements)
    runs = [read_json_object(Path(path), "measurement") for path in args.measurements]
    report = validate(runs, args.measurements, args.scenario, args.profile)
    within = judge(report, args.time_tolerance_pct, args.memory_tolerance_pct)
    print(json.dumps(report, indent=2, allow_nan=False) if args.json else format_report(report))
    return EXIT_OK if within else EXIT_FAILED


def _each_file_once(paths: list[str]) -> None:
    """One run given twice would pass for two that agree: the same file by another name (a
    link, a hard link) is refused here by its identity; a copy, by its content (validate)."""
    from zerosim.files import refuse_special

    seen: dict[tuple[int, int], str] = {}
    for path in paths:
        refuse_special(path, "cannot read measurement")
        try:
            info = os.stat(path)
        except OSError:  # missing: the reader says so
            continue
        if (info.st_dev, info.st_ino) in seen:
            raise InputError(f"measurement {path} is the file {seen[info.st_dev, info.st_ino]} "
                             f"again: each run counts once")
        seen[info.st_dev, info.st_ino] = path


def _run_references(args: argparse.Namespace) -> int:
    from zerosim.calibration.references import (format_references, judge_references,
                                                references_report)

    if args.measurements:
        raise InputError("give measurement files or --references DIR, not both")
    overrides: dict = {}
    for text in args.overrides:
        table, key, value = parse_override(text)
        overrides.setdefault(table, {})[key] = value
    report = references_report(args.references, overrides)
    print(json.dumps(report, indent=2, allow_nan=False) if args.json
          else format_references(report))
    return EXIT_OK if judge_references(report) else EXIT_FAILED


def _validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--references", metavar="DIR",
                        help="instead of measurements: every published run in DIR/*.toml "
                             "(references/) against the simulation, with the error of each")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="TABLE.KEY=VALUE",
                        help="with --references: set a key in every reference's scenario, e.g. "
                             "cluster.compute_model=flat")
    parser.add_argument("measurements", nargs="*", metavar="MEASUREMENT.json",
                        help="zero-real run --out file; several runs of one configuration are "
                             "validated together (their spread is the measurement's noise)")
    parser.add_argument("--profile", metavar="P.json",
                        help="calibration profile (default: the scenario's cluster.profile)")
    parser.add_argument("--scenario", metavar="SCENARIO.toml",
                        help="the measurement's scenario file, if it moved since the run")
    parser.add_argument("--time-tolerance-pct", type=positive_float,
                        default=DEFAULT_TIME_TOLERANCE_PCT, metavar="X",
                        help="largest acceptable error of any time metric, percent (default "
                             f"{DEFAULT_TIME_TOLERANCE_PCT:g})")
    parser.add_argument("--memory-tolerance-pct", type=positive_float,
                        default=DEFAULT_MEMORY_TOLERANCE_PCT, metavar="X",
                        help="largest acceptable error of any memory metric, percent (default "
                             f"{DEFAULT_MEMORY_TOLERANCE_PCT:g})")
    parser.add_argument("--tolerance-pct", help=argparse.SUPPRESS)  # retired: says so, exit 2
    parser.add_argument("--json", action="store_true",
                        help="print a JSON object: every metric (measured, simulated, error, "
                             "spread, category) and each category's verdict")


COMMANDS = (
    Command("validate", "simulate what zero-real measured; per-metric error and noise",
            "Re-simulate exactly the configuration of one or more `zero-real run` measurements "
            "of it with a calibration profile and print, per metric, measured, simulated, "
            "error % and the measurement's spread over its timed steps and runs. Time and "
            "memory are judged apart: exit 1 when any time metric is off by more than "
            "--time-tolerance-pct or any memory metric by more than --memory-tolerance-pct, or "
            "has no error (not measured, or measured as 0), or when no timed step was "
            "measured; exit 2 (one line) for a measurement of another configuration or one "
            "run given twice.",
            run_validate, _validate_arguments, takes_scenario=False),
)
