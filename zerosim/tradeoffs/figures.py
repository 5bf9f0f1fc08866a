"""`zerosim plot`'s work: read the result files of a kind of figure, draw it (plots.py), and write
it as HTML or PNG.

HTML embeds plotly.js, so the file opens offline. PNG needs an image engine: kaleido >= 1
(`pip install 'zerosim[png]'`), which drives a Chrome or Chromium already on the machine.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from zerosim.errors import InputError
from zerosim.files import check_writable, write_bytes, write_text

KINDS = ("memory", "tradeoff", "timeline", "calibration")
PNG_HELP = ("PNG export needs kaleido >= 1 and a Chrome or Chromium: pip install 'zerosim[png]' "
            "(or write .html)")


def build_figure(kind: str, paths: list[str], stage: int | None = None):
    """Read the result files of `kind` and draw them."""
    from zerosim.tradeoffs import calibration_plot, plot_inputs, plots

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
    return calibration_plot.calibration_figure(plot_inputs.read_reports(paths))


def output_suffix(out: str) -> str:
    """".html" or ".png", checked before any file is read (PNG: that it can be made), with the
    place it goes (files.check_writable)."""
    suffix = Path(out).suffix.lower()
    if suffix not in (".html", ".png"):
        raise InputError(f"-o {out}: write .html or .png, not {suffix or 'no extension'!r}")
    if suffix == ".png" and not kaleido_ready():
        raise InputError(f"cannot write {Path(out)}: {PNG_HELP}")
    check_writable(Path(out), "-o")
    return suffix


def write_figure(fig, out: str) -> None:
    """HTML self-contained (works offline), or PNG through kaleido; made in memory, then written
    whole or not at all (files.write_bytes), never in place."""
    path = Path(out)
    if path.suffix.lower() == ".html":
        write_text(path, fig.to_html(include_plotlyjs=True, full_html=True), "-o")  # offline
        return
    try:
        data = fig.to_image(format="png", width=1200, height=700)
    except RuntimeError as exc:  # plotly's: kaleido found no Chrome
        raise InputError(f"cannot write {path}: {' '.join(str(exc).split())} ({PNG_HELP})") from None
    write_bytes(path, data, "-o")


def kaleido_ready() -> bool:
    """kaleido >= 1 installed (plotly 6.1+ speaks only to it; 0.x bundled its own browser)."""
    try:
        major = metadata.version("kaleido").split(".")[0]
    except metadata.PackageNotFoundError:
        return False
    return major.isdigit() and int(major) >= 1
