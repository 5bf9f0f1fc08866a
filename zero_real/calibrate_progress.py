"""Calibration progress: rank 0 appends one line per measurement to a file (`section done total
elapsed_s`); the launcher follows the file and shows it on its own stderr (the ranks' stderr is
the fork server's, which tests and callers that redirect sys.stderr never see).
"""

from __future__ import annotations

import threading
import time


class Progress:
    """Rank 0 appends `section done total elapsed_s` lines; the launcher prints them."""

    def __init__(self, path: str | None, rank: int):
        self.path = path if rank == 0 else None
        self.section, self.done, self.total, self.start = "", 0, 0, 0.0

    def begin(self, section: str, total: int) -> None:
        self.section, self.done, self.total, self.start = section, 0, total, time.perf_counter()
        self._write()

    def tick(self) -> None:
        self.done += 1
        self._write()

    def _write(self) -> None:
        if self.path and self.total:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(f"{self.section} {self.done} {self.total} "
                        f"{time.perf_counter() - self.start:.3f}\n")


class ProgressPrinter:
    """Follows rank 0's progress lines: on a terminal one line rewritten in place, elsewhere one
    line per finished section."""

    def __init__(self, path: str, label: str, stream):
        self.path, self.label, self.stream = path, label, stream
        self.tty, self.offset, self.width = stream.isatty(), 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="calibrate-progress", daemon=True)

    def __enter__(self):
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
        while not self.stop.wait(0.2):
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
            section, done, total, elapsed_s = line.split()
            shown = f"{self.label}: {section} {done}/{total}"
            if self.tty:
                self.stream.write("\r" + shown.ljust(self.width))
                self.width = max(self.width, len(shown))
            elif done == total:
                self.stream.write(f"{shown} in {float(elapsed_s):.1f} s\n")
            self.stream.flush()
