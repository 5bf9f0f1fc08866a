"""The launcher under signals: SIGTERM stops every rank and removes the workdir; a SIGKILLed
launcher's ranks die with it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.conftest import SCENARIOS  # noqa: E402
from tests.procs import descendants, gone  # noqa: E402

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
# Hang guards, not timings: a rank that outlives its launcher fails the test after this long.
# How soon ranks go in practice is what bench/real_timing.py prints.
GONE_GUARD_S = 60
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def _wait_for(predicate, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _launch_long_run(tmp_path):
    """A 2-rank run far longer than the test, started with its workdir under tmp_path; returns
    once both ranks are past step 0, with the launcher and every process below it."""
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "zero_real.cli", "run", str(TINY), "--stage",
                             "1", "--nproc", "2", "--steps", "10000", "--timeout-s", "10"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def running() -> bool:
        beats = list(tmp_path.glob("zero_real_*/rank*.progress"))
        return len(beats) == 2 and all(b.read_text().split()[:1] not in ([], ["-1"])
                                       for b in beats)
    try:
        assert _wait_for(running, 40), "ranks never got past step 0"
    except BaseException:
        proc.kill()
        proc.communicate(timeout=10)
        raise
    return proc, descendants(proc.pid)


def test_sigterm_stops_every_rank_and_removes_the_workdir(tmp_path):
    proc, children = _launch_long_run(tmp_path)
    assert len(children) >= 3  # fork server and two ranks
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 128 + signal.SIGTERM, err
    *progress, last = err.splitlines()
    assert last == "zero-real: SIGTERM: every rank stopped", err
    assert progress[0] == "run: starting 2 process(es)"
    assert all(line.startswith("run: steps ") for line in progress[1:]), err
    assert _wait_for(lambda: all(gone(pid) for pid in children), GONE_GUARD_S)
    assert not list(tmp_path.glob("zero_real*"))  # the workdir, and the progress file


def test_ranks_die_with_a_sigkilled_launcher(tmp_path):
    proc, children = _launch_long_run(tmp_path)
    proc.kill()
    proc.communicate(timeout=10)
    assert _wait_for(lambda: all(gone(pid) for pid in children), GONE_GUARD_S)


def test_the_fork_server_starts_before_the_launcher_imports_torch():
    """`zero-real run` starts the ranks' fork server first, so it imports torch while the
    launcher does; not under torchrun (RANK set), which starts the processes itself."""
    probe = ("import sys\n"
             "from multiprocessing import forkserver\n"
             "from zero_real.run.runconfig import start_fork_server\n"
             "start_fork_server()\n"
             "print('torch' in sys.modules, forkserver._forkserver._forkserver_pid is not None)\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True)
    assert run.stdout.split() == ["False", "True"]
    env = {**os.environ, "RANK": "0"}
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True, env=env)
    assert run.stdout.split() == ["False", "False"]
