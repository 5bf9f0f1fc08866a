"""Progress of a launch (`zero-real run`'s steps, calibrate's measurements): rank 0 appends one
line per item done to a file (`section done total elapsed_s detail`); the launcher follows the
file and shows it on its own stderr (the ranks' stderr is the fork server's, which tests and
callers that redirect sys.stderr never see). Elsewhere than a terminal, a line at the start, then
at least every EVERY_S seconds while items finish, and one when a section ends: a long
calibration never goes minutes without a word, and a short one prints a handful of lines.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from pathlib import Path

EVERY_S = 2.0
POLL_S = 0.2


class Progress:
    """Rank 0 appends `section done total elapsed_s detail` lines; the launcher prints them."""

    def __init__(self, path: str | None, rank: int):
        self.path = path if rank == 0 else None
        self.section, self.done, self.total, self.start = "", 0, 0, 0.0

    def begin(self, section: str, total: int) -> None:
        self.section, self.done, self.total, self.start = section, 0, total, time.perf_counter()
        self._write("")

    def tick(self, detail: str = "") -> None:
        """One item done; `detail` says which (`native all_reduce 1048576 B`)."""
        self.done += 1
        self._write(detail)

    def _write(self, detail: str) -> None:
        if self.path and self.total:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(f"{self.section} {self.done} {self.total} "
                        f"{time.perf_counter() - self.start:.3f} {detail}\n")


class ProgressPrinter:
    """Follows rank 0's progress lines: on a terminal one line rewritten in place at every
    update; elsewhere `start`, then the item just done if `every_s` seconds have passed since
    the last line shown, and each finished section with its time."""

    def __init__(self, path: str, label: str, stream, start: str = "",
                 every_s: float | None = None):
        self.path, self.label, self.stream = path, label, stream
        self.every_s = EVERY_S if every_s is None else every_s
        self.tty, self.offset, self.width, self.shown_at = stream.isatty(), 0, 0, time.monotonic()
        self.start = start
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="zero_real-progress", daemon=True)

    def __enter__(self):
        if self.start:
            self._show(f"{self.label}: {self.start}")
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._poll()
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()

    def _follow(self) -> None:
        while not self.stop.wait(POLL_S):
            self._poll()

    def _poll(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                f.seek(self.offset)
                text = f.read()
        except OSError:
            return
        lines = text[:text.rfind("\n") + 1]  # whole lines only; the rest is still being written
        self.offset += len(lines.encode())
        for line in lines.splitlines():
            section, done, total, elapsed_s, *detail = line.split(maxsplit=4)
            shown = f"{self.label}: {section} {done}/{total}"
            if self.tty:
                self._show(f"{shown} ({detail[0]})" if detail else shown)
            elif done == total:
                self._show(f"{shown} in {float(elapsed_s):.1f} s")
            elif time.monotonic() - self.shown_at >= self.every_s:
                self._show(f"{shown} ({detail[0]})" if detail else shown)

    def _show(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = max(self.width, len(text))
        else:
            self.stream.write(text + "\n")
        self.shown_at = time.monotonic()
        self.stream.flush()


@contextlib.contextmanager
def shown(label: str, stream, start: str = ""):
    """A fresh progress file for the ranks to append to (its path), followed by a
    ProgressPrinter while the block runs, removed after it."""
    fd, path = tempfile.mkstemp(prefix="zero_real-progress-", suffix=".txt")
    os.close(fd)
    try:
        with ProgressPrinter(path, label, stream, start):
            yield path
    finally:
        Path(path).unlink(missing_ok=True)
