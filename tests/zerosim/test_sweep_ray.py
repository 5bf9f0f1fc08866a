"""`zerosim sweep --executor ray`: on a Ray instance this module starts (2 CPUs, as this box has),
the same file byte for byte as the local pool, progress as Ray tasks finish, the same first bad
point, and Ctrl-C as the local pool's (exit 130, one line, no file, nothing left running). Without
Ray installed, one line and exit 2.

The instance lives in a helper process for the module (its ray.init, then ray.shutdown when the
module is done), so that the test process never runs Ray's threads or signal handlers; each sweep
is a `zerosim` process joining it with --address. Every wait has a bound: a hang fails, not CI."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from zerosim.tradeoffs.sweep_ray import RAY_EXTRA, _run_chunk, chunks_of

from tests.conftest import ROOT, SCENARIOS, assert_one_line_error, run_zerosim
from tests.procs import descendants, gone

HANG_S = 120  # the only timing bound: a sweep or a Ray start that hangs would exceed any
TINY = str(SCENARIOS / "tiny_gpt_4rank_cpu.toml")
# 1000 points (4 stages x 250 micro-batches) of the tiny model: about 2 s of work on 2 cores
THOUSAND = ["--vary", "training.zero_stage=0,1,2,3",
            "--vary", "training.micro_batch=" + ",".join(map(str, range(1, 251)))]
# 200 jittered points of 64 ranks: about half a minute of work on 2 cores, past any Ctrl-C below
LONG = ["--set", "cluster.nodes=16", "--set", "variation.jitter_pct=5",
        "--vary", "variation.seed=" + ",".join(map(str, range(200)))]
# Ray (2.52 on) guards a cluster ray.init starts with a token (~/.ray/auth_token) that a driver
# joining with --address presents only when told to; RAY_ADDRESS must not redirect the drivers
ENV = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_AUTH_MODE": "token"}
HOLD = """import logging, sys, ray
ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # until the test module is done
ray.shutdown()
"""
# `zerosim ARGV` with its progress from the first point (the CLI waits 2 s), and ray unimportable
# when asked, as on a machine without the extra
ZEROSIM = """import sys
if {hide_ray}:
    sys.modules["ray"] = None
from zerosim.cli import main, progress
progress.PROGRESS_AFTER_S = 0.0
sys.exit(main(sys.argv[1:]))
"""


def zerosim(*argv, hide_ray: bool = False, env: dict | None = None) -> subprocess.Popen:
    """`zerosim ARGV` in a session of its own (so that nothing it starts outlives the test)."""
    return subprocess.Popen([sys.executable, "-c", ZEROSIM.format(hide_ray=hide_ray),
                             *map(str, argv)], cwd=ROOT, env=env or ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(proc: subprocess.Popen) -> tuple[int, list[str]]:
    """Its exit code and stderr lines, once it ends (killed with its session past HANG_S)."""
    try:
        _, err = proc.communicate(timeout=HANG_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.returncode, err.splitlines()


@dataclass(frozen=True)
class Cluster:
    address: str
    """Its GCS address, for --address."""
    pid: int
    """The process that started it: Ray's processes, workers included, are below it."""


@pytest.fixture(scope="module")
def cluster():
    """A 2-CPU Ray instance, up for the module."""
    pytest.importorskip("ray")
    holder = subprocess.Popen([sys.executable, "-c", HOLD], cwd=ROOT, env=ENV,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        ready, _, _ = select.select([holder.stdout], [], [], HANG_S)
        assert ready, f"Ray did not start in {HANG_S} s"
        line = holder.stdout.readline().strip()
        assert line, f"Ray did not start: exit code {holder.poll()}"
        yield Cluster(line, holder.pid)
        holder.stdin.close()
        holder.wait(timeout=HANG_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def sweep_tasks(cluster: Cluster) -> list[int]:
    """The cluster's workers running a sweep's task now (Ray titles a worker ray::FUNCTION)."""
    title = f"ray::{_run_chunk.__name__}".encode()
    found = []
    for pid in descendants(cluster.pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(title):
                found.append(pid)
    return found


def eventually(condition, what: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not condition():
        assert time.monotonic() < deadline, f"not {what} after {HANG_S} s"
        time.sleep(0.05)


def points_done(lines: list[str]) -> list[int]:
    """'zerosim sweep: [#..] 12/1000 points, 3.1 s' -> 12, for each progress line."""
    return [int(line.split("] ")[1].split("/")[0]) for line in lines
            if line.startswith("zerosim sweep: [")]


def test_a_thousand_points_are_dozens_of_tasks_in_order():
    chunks = chunks_of(list(range(1000)), cpus=2)
    assert [point for chunk in chunks for point in chunk] == list(range(1000))
    assert len(chunks) == 67 and {len(c) for c in chunks[:-1]} == {15}  # 1000 // (2 x 32)


def test_a_ray_sweep_of_1000_points_is_the_local_file_byte_for_byte(cluster, tmp_path):
    local = run_zerosim("sweep", TINY, *THOUSAND, "--jobs", 2, "--quiet", "--out",
                        tmp_path / "local.csv")
    assert local.code == 0, local.stderr
    code, lines = finish(zerosim("sweep", TINY, *THOUSAND, "--executor", "ray", "--address",
                                 cluster.address, "--out", tmp_path / "ray.csv"))
    assert code == 0, lines
    assert (tmp_path / "ray.csv").read_bytes() == (tmp_path / "local.csv").read_bytes()
    assert len((tmp_path / "ray.csv").read_text().splitlines()) == 1 + 1000
    done = points_done(lines)  # as the chunks of 15 finish, one line per tenth off a terminal
    assert done == sorted(done) and done[-1] == 1000 and 2 <= len(done) <= 11
    assert all(count % 15 in (0, 10) for count in done), done  # chunks of 15, the last of 10
    assert lines[-1].startswith("zerosim sweep: 1000 points, 1000 rows in "), lines


def test_json_and_one_task_at_a_time_give_the_same_bytes(cluster, tmp_path):
    argv = ["sweep", TINY, "--vary", "cluster.nodes=1,2,4", "--vary", "training.micro_batch=1,2",
            "--quiet"]
    assert run_zerosim(*argv, "--jobs", 2, "--out", tmp_path / "local.json").code == 0
    code, lines = finish(zerosim(*argv, "--executor", "ray", "--address", cluster.address,
                                 "--jobs", 1, "--out", tmp_path / "ray.json"))
    assert code == 0 and not [line for line in lines if line.startswith("zerosim")], lines
    assert (tmp_path / "ray.json").read_bytes() == (tmp_path / "local.json").read_bytes()


def test_the_first_bad_point_in_order_stops_the_sweep_as_locally(cluster, tmp_path):
    """128 points on 2 CPUs: chunks of 2. The first holds a slow point (128 jittered ranks), then
    the first bad one; the second, a bad point and a quick one, finishes first. The sweep names
    the first in order, as the pool does, and writes nothing."""
    argv = ["sweep", TINY, "--set", "variation.jitter_pct=5", "--jobs", 2,
            "--vary", "cluster.nodes=32,0,-1," + ",".join(str(n) for n in range(1, 127) if n != 32),
            "--out", tmp_path / "r.csv"]
    local = run_zerosim(*argv)
    assert_one_line_error(local, "point 1 (cluster.nodes=0)", ">= 1")
    code, lines = finish(zerosim(*argv, "--executor", "ray", "--address", cluster.address))
    assert code == 2 and lines[-1] == local.stderr.strip()  # before it: progress, if any
    assert all(line.startswith("zerosim sweep: [") for line in lines[:-1]), lines
    assert list(tmp_path.iterdir()) == []


class Running:
    """`zerosim ARGV` running, its stderr read as it comes."""

    def __init__(self, *argv, env: dict | None = None):
        self.proc = zerosim(*argv, env=env)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for_progress(self) -> None:
        """Until its first progress line: Ray joined (or started) and the first points done."""
        eventually(lambda: points_done(self.lines) or self.proc.poll() is not None, "progress")
        assert points_done(self.lines), self.lines

    def interrupt(self) -> int:
        """Ctrl-C to the main process: its exit code, once it and its stderr have ended."""
        os.kill(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout=HANG_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.reader.join(timeout=HANG_S)


def test_ctrl_c_on_a_cluster_ends_the_sweep_and_its_tasks(cluster, tmp_path):
    sweep = Running("sweep", TINY, *LONG, "--executor", "ray", "--address", cluster.address,
                    "--out", tmp_path / "r.csv")
    sweep.wait_for_progress()
    eventually(lambda: sweep_tasks(cluster), "running a task")
    assert sweep.interrupt() == 130
    assert sweep.lines[-1] == "zerosim: interrupted", sweep.lines
    assert "Traceback" not in "\n".join(sweep.lines)
    assert points_done(sweep.lines)[-1] < 200
    eventually(lambda: not sweep_tasks(cluster), "stopped")  # Ray stops an ended job's tasks
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_stops_the_ray_instance_the_sweep_started(tmp_path):
    """No --address, RAY_ADDRESS=local: the sweep starts Ray's processes below its own; after
    Ctrl-C none of them is left."""
    pytest.importorskip("ray")
    sweep = Running("sweep", TINY, *LONG, "--executor", "ray", "--out", tmp_path / "r.csv",
                    env={**ENV, "RAY_ADDRESS": "local"})
    sweep.wait_for_progress()
    ray_processes = descendants(sweep.proc.pid)
    assert ray_processes  # its GCS server, raylet, workers
    assert sweep.interrupt() == 130
    assert sweep.lines[-1] == "zerosim: interrupted", sweep.lines
    assert "Traceback" not in "\n".join(sweep.lines)
    eventually(lambda: all(gone(pid) for pid in ray_processes), "all gone")
    assert list(tmp_path.iterdir()) == []


def test_without_ray_the_executor_is_one_line_and_exit_2(tmp_path):
    code, lines = finish(zerosim("sweep", TINY, "--vary", "cluster.nodes=1,2", "--executor", "ray",
                                 "--out", tmp_path / "r.csv", hide_ray=True))
    assert (code, lines) == (2, [f"zerosim: error: {RAY_EXTRA}"])
    assert "pip install 'zerosim[ray]'" in RAY_EXTRA
    assert list(tmp_path.iterdir()) == []


def test_an_address_without_the_ray_executor_is_a_usage_error(tmp_path):
    result = run_zerosim("sweep", TINY, "--vary", "cluster.nodes=1,2", "--address", "auto",
                         "--out", tmp_path / "r.csv")
    assert_one_line_error(result, "--address auto", "--executor ray")
    assert list(tmp_path.iterdir()) == []


def test_a_million_points_are_chunks_of_at_most_16():
    """Review U3: a chunk's rows are held until it is written, so no chunk grows with the sweep
    (1,000,000 // (2 x 32) would be 15,625 points, about 1.9 GB of rows)."""
    chunks = chunks_of(range(1_000_000), cpus=2)
    assert {len(c) for c in chunks} == {16} and len(chunks) == 62_500
