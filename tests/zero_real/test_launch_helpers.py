"""The launcher's small parts, without a run: which signals stop it (one the caller ignores stays
ignored), whether a process is alive where there is no /proc, and a stopped helper killed before
the launch goes on."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from zero_real.run import launch, watch  # noqa: E402


def test_a_signal_the_caller_ignores_stays_ignored_within_the_run():
    """`nohup zero-real run`: SIGHUP ignored before the run stays ignored (a handler would also
    reach a restarted fork server as the default, by exec); SIGTERM still stops the run."""
    before = {s: signal.signal(s, h) for s, h in ((signal.SIGHUP, signal.SIG_IGN),
                                                   (signal.SIGTERM, signal.SIG_DFL))}
    try:
        with launch.signals_stop_the_run():
            inside = signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing is raised
            with pytest.raises(launch.Stopped):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)  # the handler runs between bytecodes; this is a bound, not a wait
        after = signal.getsignal(signal.SIGHUP), signal.getsignal(signal.SIGTERM)
    finally:
        for s, h in before.items():
            signal.signal(s, h)
    assert inside[0] is signal.SIG_IGN
    assert inside[1] not in (signal.SIG_IGN, signal.SIG_DFL)
    assert after == (signal.SIG_IGN, signal.SIG_DFL)


def test_without_proc_a_process_is_alive_while_its_pid_exists(monkeypatch, tmp_path):
    """Where there is no /proc (macOS), alive() asks kill(pid, 0); it used to read the missing
    /proc/N/stat, whose FileNotFoundError said every process, this one too, was dead."""
    no_proc = tmp_path / "no-proc"

    def path(text, *rest):  # /proc/... is absent, as on a system without it
        text = str(text)
        return Path(no_proc / text[len("/proc/"):] if text.startswith("/proc/") else text, *rest)

    monkeypatch.setattr(watch, "Path", path)
    monkeypatch.setattr(watch, "HAS_PROC", False, raising=False)  # before the fix: no such flag
    over = subprocess.Popen([sys.executable, "-c", "pass"])
    over.wait(timeout=60)  # reaped: its pid names no process (until the system reuses it)
    assert watch.alive(os.getpid())
    assert watch.alive(os.getppid())
    assert not watch.alive(over.pid)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_stopped_helper_is_dead_when_its_kill_returns(monkeypatch):
    """forkserver.ensure_running asks waitpid(WNOHANG) whether its server lives: one SIGKILLed
    but not yet dead still answers "alive" and is handed the next rank. _kill_if_stopped returns
    once the kernel shows a zombie, and leaves it for ensure_running to reap."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        end = time.monotonic() + 30
        while watch.state(child.pid) != "T" and time.monotonic() < end:
            time.sleep(0.01)
        seen = []

        def state(pid):
            seen.append(letter := watch_state(pid))
            return letter

        watch_state = watch.state
        monkeypatch.setattr(watch, "state", state)
        launch._kill_if_stopped(child.pid)
        assert seen[0] == "T" and seen[-1] == "Z", seen
        assert os.waitpid(child.pid, os.WNOHANG) == (child.pid, signal.SIGKILL)  # not reaped
    finally:
        if child.returncode is None:
            child.kill()
