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

Exit codes: the fork server, the ranks' parent, reports each rank's exit code to the launcher.
A stopped (SIGSTOP) or dead fork server reports none, so a rank is over when its process is no
longer running (`ended`: gone, or a zombie its stopped parent cannot reap), and whether it
succeeded is read from its files (`failed`: an error file, or no result file) where no code came.
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


def state(pid: int) -> str | None:
    """The process's state letter in /proc (R, S, T stopped, Z zombie, ...); None once it is gone
    or where there is no /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


HAS_PROC = Path("/proc/self/stat").exists()
"""Decided once: without /proc (macOS), a missing /proc/N/stat says nothing about process N."""


def alive(pid: int) -> bool:
    """Running, not a zombie (a SIGKILLed launcher is a zombie until its own parent reaps it).
    Without /proc, signal 0 says whether the pid exists (a zombie counts as alive there)."""
    if not HAS_PROC:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:  # exists, someone else's
            return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def die_with_launcher(launcher_pid: int) -> None:
    """In a rank: exit at once if the fork server or the launcher goes away."""
    parent = os.getppid()
    try:  # Linux: the kernel SIGKILLs us when our parent (the fork server) dies
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the thread below still watches

    def watch() -> None:
        while os.getppid() == parent and alive(launcher_pid):
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
        if not alive(pid):
            shutil.rmtree(d, ignore_errors=True)


def ended(proc) -> bool:
    """The rank's process is over: its exit code came, or it runs no more (a zombie whose parent,
    the fork server, is stopped and reports nothing)."""
    return proc.pid is not None and (proc.exitcode is not None or not alive(proc.pid))


def failed(workdir: str, rank: int, proc) -> bool:
    """An ended rank failed: a non-zero exit code, or where none came, an error file or no
    result (a rank writes its result, whole, before it exits 0: launch._entry)."""
    if proc.exitcode is not None:
        return proc.exitcode != 0
    return _error(workdir, rank) is not None or not Path(workdir, f"rank{rank}.pt").exists()


INTERRUPTED = "interrupted by SIGINT"
"""A rank's error message when Ctrl-C (SIGINT) reached it alone (launch._entry)."""


# What a rank reports when a peer went away, not a fault of its own (gloo's tcp transport).
PEER_GONE = ("connection reset by peer", "connection closed by peer", "broken pipe",
             "socket closed")


def blame(workdir: str, procs, timeout_s: float, fork_server_pid: int | None = None
          ) -> tuple[int | None, str]:
    """The rank to name (None: a helper), and why. The fork server first, if it died (its ranks
    die with it); then a rank killed or interrupted by a signal; then one that died without a
    word (os._exit, the OOM killer); if peers timed out, the alive rank that made least progress
    (hung, not dead); else the first rank that reported an error of its own, before those that
    only saw a peer go away."""
    if fork_server_pid is not None and not alive(fork_server_pid):
        return None, (f"the ranks' fork server (pid {fork_server_pid}) died, and its ranks with "
                      f"it (each asks to be killed when its parent dies)")
    dead = [r for r, p in enumerate(procs) if ended(p) and failed(workdir, r, p)]
    errors = {r: _error(workdir, r) for r in dead}
    for r in dead:
        code = procs[r].exitcode
        if code is not None and code < 0:
            how = "interrupted by" if code == -signal.SIGINT else "killed by"
            return r, f"rank {r} was {how} {_signal_name(-code)}"
        if errors[r] == INTERRUPTED:  # its code was not reported (a stopped fork server)
            return r, f"rank {r} was interrupted by SIGINT"
    silent = [r for r in dead if errors[r] is None]
    if silent:
        r = silent[0]
        code = procs[r].exitcode
        return r, (f"rank {r} died (exit code {code}): no error message" if code is not None else
                   f"rank {r} died without a result or an error message")
    timed_out = any("timed out" in (e or "").lower() or "timeout" in (e or "").lower()
                    for e in errors.values())
    running = [r for r, p in enumerate(procs) if not ended(p)]
    if timed_out and running:
        progress = {r: read_progress(Path(workdir, f"rank{r}.progress")) for r in running}
        r = min(running, key=lambda r: progress[r][:2])
        step, seq, name = progress[r]
        where = (f"at step {step} after collective {seq} ({name})" if seq else
                 "before its first collective")
        return r, (f"rank {r} stopped making progress {where}; its peers timed out after "
                   f"{timeout_s:g} s waiting for it")
    own = [r for r in dead if not any(g in errors[r].lower() for g in PEER_GONE)]
    r = (own or dead or [0])[0]
    code = procs[r].exitcode
    return r, f"rank {r} failed (exit code {'unknown' if code is None else code}): {errors.get(r)}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _error(workdir: str, rank: int) -> str | None:
    err = Path(workdir, f"rank{rank}.err")
    return err.read_text(encoding="utf-8") if err.exists() else None
