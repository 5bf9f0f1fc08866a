"""Supervision of local ranks: progress heartbeats, blame, and ranks that die with their launcher.

Heartbeats: each rank keeps a small file in the run's workdir with its step and the sequence
number of the collective it is entering, rewritten in place (one pwrite, no fsync) at every
collective. When peers time out waiting, the launcher blames the rank that got least far: the one
that stopped making progress, not the peer that happened to time out first.

Launcher death: ranks are children of multiprocessing's fork server, not of the launcher, so they
would outlive a killed launcher (reparented to init, spinning in gloo). Each rank asks the kernel
for SIGKILL when its parent (the fork server, which exits with the launcher) dies, and a daemon
thread also polls the launcher itself. A workdir that a SIGKILLed launcher could not remove is
swept by the next launch (`sweep_stale`).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

PREFIX = "zero_real_"
RECORD = 96  # bytes: fixed width, so an in-place rewrite never leaves a longer old tail
POLL_S = 0.5


class Heartbeat:
    """This rank's progress file: `step seq name`. Cheap enough for every collective."""

    def __init__(self, path: str | None):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600) if path else None
        self.step, self.seq = -1, 0

    def beat(self, name: str) -> None:
        self.seq += 1
        if self.fd is not None:
            text = f"{self.step} {self.seq} {name}"[:RECORD - 1]
            os.pwrite(self.fd, text.ljust(RECORD - 1).encode() + b"\n", 0)


def read_progress(path: Path) -> tuple[int, int, str]:
    """(step, collectives entered, name of the last one); (-1, 0, ...) before the first."""
    try:
        step, seq, name = (path.read_text(encoding="utf-8").split(maxsplit=2) + ["", "", ""])[:3]
        return int(step), int(seq), name.strip()
    except (OSError, ValueError):
        return -1, 0, "initialisation"


def instrument(recorder, heartbeat: Heartbeat) -> None:
    """Wrap recorder.comm (entered by every collective of every stage) to beat the heartbeat."""
    comm = recorder.comm

    def beating(name, op, nbytes):
        heartbeat.beat(f"{op}:{name}")
        return comm(name, op, nbytes)

    recorder.comm = beating


def _alive(pid: int) -> bool:
    """Running, not a zombie (a SIGKILLed launcher is a zombie until its own parent reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: signal 0 says whether the pid exists
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True


def die_with_launcher(launcher_pid: int) -> None:
    """In a rank: exit at once if the fork server or the launcher goes away."""
    parent = os.getppid()
    try:  # Linux: the kernel SIGKILLs us when our parent (the fork server) dies
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the thread below still watches

    def watch() -> None:
        while os.getppid() == parent and _alive(launcher_pid):
            time.sleep(POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="zero_real-launcher-watch", daemon=True).start()


def mark_owner(workdir: str) -> None:
    Path(workdir, "launcher.pid").write_text(str(os.getpid()), encoding="utf-8")


def sweep_stale() -> None:
    """Remove workdirs of launchers that were killed (SIGKILL leaves no chance to clean up)."""
    for d in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            if d.stat().st_uid != os.getuid():
                continue
            pid = int((d / "launcher.pid").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not ours, or a launch still setting up
        if not _alive(pid):
            shutil.rmtree(d, ignore_errors=True)


def blame(workdir: str, procs, timeout_s: float) -> tuple[int, str]:
    """The rank to name, and why. A rank that died without a word (killed, os._exit) first; then,
    if peers timed out, the alive rank that made least progress (hung, not dead); else the first
    rank that reported an error."""
    dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
    errors = {r: _error(workdir, r) for r in dead}
    silent = [r for r in dead if errors[r] is None]
    if silent:
        r = silent[0]
        return r, f"rank {r} died (exit code {procs[r].exitcode}): no error message"
    timed_out = any("timed out" in (e or "").lower() or "timeout" in (e or "").lower()
                    for e in errors.values())
    alive = [r for r, p in enumerate(procs) if p.exitcode is None]
    if timed_out and alive:
        progress = {r: read_progress(Path(workdir, f"rank{r}.progress")) for r in alive}
        r = min(alive, key=lambda r: progress[r][:2])
        step, seq, name = progress[r]
        where = (f"at step {step} after collective {seq} ({name})" if seq else
                 "before its first collective")
        return r, (f"rank {r} stopped making progress {where}; its peers timed out after "
                   f"{timeout_s:g} s waiting for it")
    r = dead[0] if dead else 0
    return r, f"rank {r} failed (exit code {procs[r].exitcode}): {errors.get(r)}"


def _error(workdir: str, rank: int) -> str | None:
    err = Path(workdir, f"rank{rank}.err")
    return err.read_text(encoding="utf-8") if err.exists() else None
