"""A progress bar on stderr for long commands (zerosim sweep)."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    """One line on stderr, redrawn in place on a terminal; elsewhere (a log, CI) one line per
    tenth of the work so the log stays short."""

    def __init__(self, label: str, stream=None, width: int = 30) -> None:
        self.label, self.width = label, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start_s = time.perf_counter()
        self._last_tenth = -1
        self.open = False

    def __call__(self, done: int, total: int) -> None:
        tenth = done * 10 // total
        if not self.tty and tenth == self._last_tenth:
            return
        self._last_tenth = tenth
        filled = done * self.width // total
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} "
                f"points, {time.perf_counter() - self.start_s:.1f} s")
        self.open = self.tty and done < total
        self.stream.write(("\r" if self.tty else "") + line + ("" if self.open else "\n"))
        self.stream.flush()

    def close(self) -> None:
        """End a line left open on a terminal, so what follows (an error) starts on its own."""
        if self.open:
            self.stream.write("\n")
            self.open = False
