"""`zerosim plot`: draw result files (sweep, trace, validate reports) as plotly HTML or PNG.

HTML embeds plotly.js, so the file opens offline. PNG needs an image engine: kaleido >= 1
(`pip install 'zerosim[png]'`), which drives a Chrome or Chromium already on the machine.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

from zerosim.errors import InputError

KINDS = ("memory", "tradeoff", "timeline", "calibration")
PNG_HELP = ("PNG export needs kaleido >= 1 and a Chrome or Chromium: pip install 'zerosim[png]' "
            "(or write .html)")


def add_plot_command(commands, Parser) -> argparse.ArgumentParser:
    """Add `plot` to cli.py's sub-commands. `commands` already makes its parsers with `Parser`
    (add_subparsers(parser_class=Parser)), whose usage errors are one line and exit 2."""
    sub = commands.add_parser(
        "plot", help="draw sweep, trace or validate results as plotly HTML (or PNG)",
        description="Figures of the memory/communication trade-offs from result files: memory "
                    "(per-rank memory against GPUs) and tradeoff (memory against communication, "
                    "Pareto front) from `zerosim sweep --out`; timeline (one step's lanes and "
                    "memory) from `zerosim simulate --trace`; calibration (simulated against "
                    "measured) from `zerosim validate --json` reports.")
    assert isinstance(sub, Parser), "commands must be made with parser_class=Parser"
    sub.add_argument("results", nargs="+", metavar="RESULTS",
                     help="result file; several only for --kind calibration (one report each)")
    sub.add_argument("--kind", required=True, choices=KINDS)
    sub.add_argument("-o", "--out", required=True, metavar="FIG.html",
                     help="output: .html (self-contained, works offline) or .png")
    sub.add_argument("--stage", type=int, choices=(0, 1, 2, 3),
                     help="timeline: the stage to draw (default: the trace's first)")
    sub.add_argument("--title", help="the figure's title (default: one that says what it shows)")
    sub.set_defaults(func=run_plot)
    return sub


def build_figure(kind: str, paths: list[str], stage: int | None = None):
    """Read the result files of `kind` and draw them."""
    from zerosim import plot_inputs, plots

    if len(paths) > 1 and kind != "calibration":
        raise InputError(f"--kind {kind} draws one result file, got {len(paths)} (several only "
                         f"for --kind calibration)")
    if stage is not None and kind != "timeline":
        raise InputError(f"--stage applies to --kind timeline, not --kind {kind}")
    if kind == "memory":
        return plots.memory_figure(plot_inputs.read_sweep(paths[0], kind, plots.MEMORY_COLUMNS))
    if kind == "tradeoff":
        return plots.tradeoff_figure(plot_inputs.read_sweep(paths[0], kind,
                                                            plots.TRADEOFF_COLUMNS))
    if kind == "timeline":
        trace = plot_inputs.read_trace(paths[0])
        try:
            return plots.timeline_figure(trace, stage)
        except InputError as exc:
            raise InputError(f"{paths[0]}: {exc}") from None
    return plots.calibration_figure(plot_inputs.read_reports(paths))


def run_plot(args: argparse.Namespace) -> int:
    out = Path(args.out)
    suffix = out.suffix.lower()
    if suffix not in (".html", ".png"):
        raise InputError(f"-o {args.out}: write .html or .png, not {suffix or 'no extension'!r}")
    if suffix == ".png" and not _kaleido_ready():
        raise InputError(f"cannot write {out}: {PNG_HELP}")
    fig = build_figure(args.kind, args.results, args.stage)
    if args.title is not None:
        fig.update_layout(title_text=args.title)
    try:
        if suffix == ".html":
            fig.write_html(out, include_plotlyjs=True, full_html=True)  # embedded: opens offline
        else:
            fig.write_image(out, width=1200, height=700)
    except OSError as exc:
        raise InputError(f"{out}: cannot write: {exc.strerror or exc}") from None
    except RuntimeError as exc:  # plotly's: kaleido found no Chrome
        raise InputError(f"cannot write {out}: {' '.join(str(exc).split())} ({PNG_HELP})") from None
    print(f"zerosim: wrote {args.kind} figure of {', '.join(args.results)} to {out}",
          file=sys.stderr)
    return 0


def _kaleido_ready() -> bool:
    """kaleido >= 1 installed (plotly 6.1+ speaks only to it; 0.x bundled its own browser)."""
    try:
        major = metadata.version("kaleido").split(".")[0]
    except metadata.PackageNotFoundError:
        return False
    return major.isdigit() and int(major) >= 1
