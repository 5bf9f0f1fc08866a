"""Processes seen through Linux's /proc, for the tests (and bench scripts) that check that no
process outlives the run that started it: a rank after its launcher, a worker after its sweep."""

from __future__ import annotations

import os


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first, then the parent pid),
    or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def gone(pid: int) -> bool:
    """Exited: no longer listed, or a zombie its parent has not reaped yet."""
    stat = proc_stat(pid)
    return stat is None or stat[0] in ("Z", "X")


def descendants(root: int) -> set[int]:
    """Every process below `root` now: children, their children, and so on."""
    parents = {int(e): int(s[1]) for e in os.listdir("/proc")
               if e.isdigit() and (s := proc_stat(int(e))) is not None}
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found
