"""A progress bar on stderr for long commands (zerosim simulate, sweep and plan)."""

from __future__ import annotations

import sys
import time
from typing import Callable

PROGRESS_AFTER_S = 2.0
"""Most commands are done in well under a second; past this, they show their progress on stderr
(jitter over thousands of ranks with --trace takes minutes, a sweep of thousands of points as
long). A run that fails early, a bad point of a short sweep, stays one line."""


class ProgressBar:
    """One line on stderr, redrawn in place on a terminal; elsewhere (a log, CI) one line per
    tenth of the work so the log stays short. With `delay_s`, nothing is shown until the command
    has run that long (counted from `start_s`): a command that is usually done in a blink stays
    quiet then, and says where it is when it is not."""

    def __init__(self, label: str, stream=None, width: int = 30, unit: str = "points",
                 delay_s: float = 0.0, start_s: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.label, self.width, self.unit = label, width, unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.clock, self.delay_s = clock, delay_s
        self.start_s = clock() if start_s is None else start_s
        self._last_tenth = -1
        self.open = False

    def __call__(self, done: int, total: int, unit: str | None = None) -> None:
        """`unit`: what is counted from now on, for a command with phases (plan: the stages'
        fewest GPU counts checked, then the GPU counts ranked)."""
        if unit is not None and unit != self.unit:
            self.close()
            self.unit, self._last_tenth = unit, -1
        elapsed_s = self.clock() - self.start_s
        if elapsed_s < self.delay_s:
            return
        tenth = done * 10 // total if total else 10
        if not self.tty and tenth == self._last_tenth:
            return
        self._last_tenth = tenth
        filled = done * self.width // total if total else self.width
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} "
                f"{self.unit}, {elapsed_s:.1f} s")
        self.open = self.tty and done < total
        self.stream.write(("\r" if self.tty else "") + line + ("" if self.open else "\n"))
        self.stream.flush()

    def close(self) -> None:
        """End a line left open on a terminal, so what follows (an error) starts on its own."""
        if self.open:
            self.stream.write("\n")
            self.open = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def after_delay(label: str, start_s: float, unit: str = "points") -> ProgressBar:
    """A command's bar: silent until the command has run PROGRESS_AFTER_S from `start_s`."""
    return ProgressBar(label, unit=unit, delay_s=PROGRESS_AFTER_S, start_s=start_s)
