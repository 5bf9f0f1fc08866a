"""`zerosim sweep` stopped from outside, as a real process with two workers: SIGTERM to its main
process alone (what a job scheduler or `kill PID` sends), SIGKILL, Ctrl-C to the main process or to
its group. Each time no worker survives it, the queued points are dropped, and no results file (or
temporary) is left. The bounds below (generous) are on a hang, not on speed: a surviving worker
is blocked forever."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, SCENARIOS
from tests.procs import descendants, gone

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds workers in /proc")

HANG_S = 30  # the only timing bound: a worker blocked forever would exceed any
SEEDS = 400  # 400 points of 64 jittered ranks: about a minute of work on 2 cores, past any bound


def cmdline(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def alive(pid: int, command: bytes) -> bool:
    """Running (not a zombie nobody reaped) and still the worker we saw (not a reused pid)."""
    return not gone(pid) and cmdline(pid) == command


def workers_of(pid: int) -> list[int]:
    """Processes below `pid` running what it runs (forked pool workers; not its resource
    tracker)."""
    return sorted(p for p in descendants(pid) if cmdline(p) == cmdline(pid))


class Sweep:
    """`python -m zerosim sweep` in a session of its own, its stderr read as it comes."""

    def __init__(self, out: Path):
        argv = [sys.executable, "-m", "zerosim", "sweep", str(SCENARIOS / "tiny_gpt_4rank_cpu.toml"),
                "--set", "cluster.nodes=16", "--set", "variation.jitter_pct=5", "--jobs", "2",
                "--vary", "variation.seed=" + ",".join(map(str, range(SEEDS))), "--out", str(out)]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.command = cmdline(self.proc.pid)

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for_work(self) -> list[int]:
        """The workers, once both exist and a first point is done."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            workers = workers_of(self.proc.pid)
            if len(workers) == 2 and any("points" in line for line in self.lines):
                return workers
            assert self.proc.poll() is None, self.lines
            time.sleep(0.05)
        raise AssertionError(f"no two working workers after 120 s: {self.lines}")

    def survivors(self, workers: list[int]) -> list[int]:
        deadline = time.monotonic() + HANG_S
        while any(alive(w, self.command) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        return [w for w in workers if alive(w, self.command)]

    def end(self) -> None:
        """Whatever the test found, leave nothing running: the session holds every process we
        started, orphans included."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.reader.join(timeout=HANG_S)


@pytest.fixture
def sweep(tmp_path):
    started = Sweep(tmp_path / "results.csv")
    yield started
    started.end()


def done_points(lines: list[str]) -> int:
    """Points done at the last progress line ('zerosim sweep: [#..] 12/1000 points, 3.1 s')."""
    counts = [int(line.split("] ")[1].split("/")[0]) for line in lines if " points, " in line]
    return counts[-1]


@pytest.mark.parametrize("how", ["SIGTERM to the main process", "SIGKILL to the main process"])
def test_stopping_the_main_process_leaves_no_worker(sweep, tmp_path, how):
    workers = sweep.wait_for_work()
    os.kill(sweep.proc.pid, signal.SIGTERM if "TERM" in how else signal.SIGKILL)
    code = sweep.proc.wait(timeout=HANG_S)
    assert sweep.survivors(workers) == []
    assert list(tmp_path.iterdir()) == []  # no results, no temporary
    if "TERM" in how:
        sweep.reader.join(timeout=HANG_S)
        assert code == 128 + signal.SIGTERM, sweep.lines
        assert sweep.lines[-1] == "zerosim: terminated"
        assert "Traceback" not in "\n".join(sweep.lines)


@pytest.mark.parametrize("target", ["main process", "process group"])
def test_ctrl_c_cancels_the_queued_points(sweep, tmp_path, target):
    workers = sweep.wait_for_work()
    if target == "main process":
        os.kill(sweep.proc.pid, signal.SIGINT)
    else:
        os.killpg(sweep.proc.pid, signal.SIGINT)
    assert sweep.proc.wait(timeout=HANG_S) == 130  # the queued points never ran
    sweep.reader.join(timeout=HANG_S)
    assert sweep.lines[-1] == "zerosim: interrupted"
    assert "Traceback" not in "\n".join(sweep.lines)
    assert done_points(sweep.lines) < SEEDS
    assert sweep.survivors(workers) == []
    assert list(tmp_path.iterdir()) == []


def test_sigterm_to_a_long_simulate_ends_it_cleanly(tmp_path):
    """Every command unwinds on SIGTERM (commandline.dispatch): a jittered simulate, stopped once
    its progress shows, exits 143 with one line and leaves no trace file or temporary."""
    argv = [sys.executable, "-m", "zerosim", "simulate", str(SCENARIOS / "zero_paper_7b5_64gpu.toml"),
            "--set", "variation.jitter_pct=5",  # 64 ranks one by one: seconds per stage
            "--trace", str(tmp_path / "step.json")]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        first = proc.stderr.readline()  # the first progress line: past start-up, mid-work
        assert first.startswith("zerosim simulate: "), first
        os.kill(proc.pid, signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=HANG_S) == 128 + signal.SIGTERM
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert rest.splitlines()[-1] == "zerosim: terminated" and "Traceback" not in rest
    assert list(tmp_path.iterdir()) == []
