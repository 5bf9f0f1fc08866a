"""`zerosim validate`: the simulator against a zero_real measurement, metric by metric."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from zerosim.cli.common import Command, positive_float
from zerosim.contract import DEFAULT_TOLERANCE_PCT, EXIT_FAILED, EXIT_OK


def run_validate(args: argparse.Namespace) -> int:
    from zerosim.calibration.validate import format_report, judge, validate
    from zerosim.files import read_json_object

    measurement = read_json_object(Path(args.measurement), "measurement")
    report = validate(measurement, args.measurement, args.scenario, args.profile)
    within = judge(report, args.tolerance_pct)
    print(json.dumps(report, indent=2) if args.json else format_report(report, args.tolerance_pct))
    return EXIT_OK if within else EXIT_FAILED


def _validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("measurement", metavar="MEASUREMENT.json", help="zero-real run --out file")
    parser.add_argument("--profile", metavar="P.json",
                        help="calibration profile (default: the scenario's cluster.profile)")
    parser.add_argument("--scenario", metavar="SCENARIO.toml",
                        help="the measurement's scenario file, if it moved since the run")
    parser.add_argument("--tolerance-pct", type=positive_float, default=DEFAULT_TOLERANCE_PCT,
                        metavar="X",
                        help="largest acceptable mean absolute error, percent (default "
                             f"{DEFAULT_TOLERANCE_PCT:g})")
    parser.add_argument("--json", action="store_true", help="print a JSON object")


COMMANDS = (
    Command("validate", "simulate what zero-real measured; per-metric error",
            "Re-simulate exactly the configuration of a `zero-real run` measurement "
            "with a calibration profile and print, per metric, measured, simulated and "
            "error %, then the mean and max absolute error. Exit 1 when the mean is "
            "above the tolerance.",
            run_validate, _validate_arguments, takes_scenario=False),
)
