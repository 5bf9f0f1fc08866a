"""The launcher under signals: SIGTERM (or SIGHUP) stops every rank and removes the workdir; a
SIGKILLed launcher's ranks die with it; a stopped rank of a hybrid run is named within its
timeout; a rank interrupted by SIGINT is named, not its peers; a stopped fork server hangs
nothing, a dead one is named (hostile review H1, H2, W1, W2, W3)."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.conftest import SCENARIOS  # noqa: E402
from tests.procs import descendants, gone, proc_stat  # noqa: E402

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


def _launch_long_run(tmp_path, *flags, nproc: int = 2, nohup: bool = False):
    """An `nproc`-rank run far longer than the test (unless `flags` say otherwise), started with
    its workdir under tmp_path (and SIGHUP ignored, as nohup starts it, if `nohup`); returns once
    every rank is past step 0, with the launcher and every process below it."""
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONUNBUFFERED="1")
    flags = flags or ("--stage", "1", "--steps", "10000", "--timeout-s", "10")
    ignore_hup = (lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if nohup else None
    proc = subprocess.Popen([sys.executable, "-m", "zero_real.cli", "run", str(TINY), "--nproc",
                             str(nproc), *flags], preexec_fn=ignore_hup,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def running() -> bool:
        beats = list(tmp_path.glob("zero_real_*/rank*.progress"))
        return len(beats) == nproc and all(b.read_text().split()[:1] not in ([], ["-1"])
                                           for b in beats)
    try:
        assert _wait_for(running, 40), "ranks never got past step 0"
    except BaseException:
        proc.kill()
        proc.communicate(timeout=10)
        raise
    return proc, descendants(proc.pid)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_stops_every_rank_and_removes_the_workdir(tmp_path, signum):
    """SIGHUP (a closed terminal) as SIGTERM: every rank stopped, the workdir removed, one line,
    exit 128 + the signal's number (review W3: SIGHUP killed the launcher, leaving its files)."""
    proc, children = _launch_long_run(tmp_path)
    assert len(children) >= 3  # fork server and two ranks
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 128 + signum, err
    *progress, last = err.splitlines()
    assert last == f"zero-real: {signal.Signals(signum).name}: every rank stopped", err
    assert progress[0] == "run: starting 2 process(es)"
    assert all(line.startswith("run: steps ") for line in progress[1:]), err
    assert _wait_for(lambda: all(gone(pid) for pid in children), GONE_GUARD_S)
    assert not list(tmp_path.glob("zero_real*"))  # the workdir, and the progress file


def test_a_run_started_by_nohup_survives_a_hangup(tmp_path):
    """`nohup zero-real run ...` ignores SIGHUP, and so do its fork server and ranks: a hangup to
    all of them stops nothing (it stopped the launcher: its handler replaced nohup's SIG_IGN);
    SIGTERM still stops the run."""
    proc, children = _launch_long_run(tmp_path, nohup=True)
    assert len(children) >= 3  # fork server and two ranks
    for pid in (proc.pid, *children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGHUP)
    time.sleep(2)  # a process the hangup stops would be gone by then (the SIGHUP test above)
    alive, died = proc.poll() is None, [pid for pid in children if gone(pid)]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=15)
    assert alive and not died, err
    assert proc.returncode == 128 + signal.SIGTERM, err


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


def _rank_pid(tmp_path, rank: int, among: set[int]) -> int:
    """The process of `rank`: the one (of `among`) holding its heartbeat file open."""
    for pid in among:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        if any(link.endswith(f"/rank{rank}.progress") for link in links):
            return pid
    raise AssertionError(f"no process holds rank {rank}'s heartbeat")


def _helper_pid(launcher: int, module: str) -> int:
    """The launcher's child running multiprocessing's `module` (forkserver, resource_tracker);
    not a rank, which the fork server forks with its command line."""
    for pid in descendants(launcher):
        try:
            stat = proc_stat(pid)
            if (stat is not None and int(stat[1]) == launcher
                    and module.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()):
                return pid
        except OSError:
            continue
    raise AssertionError(f"no {module} below the launcher")


def _finish(proc, within_s: float) -> tuple[int | None, str]:
    """The launcher's exit code and stderr, or (None, ...) if it is still running after
    `within_s` (then killed: its fork server goes with it, and the ranks with that)."""
    try:
        _, err = proc.communicate(timeout=within_s)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)  # not its pipes: a stopped process below it may hold them open
        return None, (f"the launcher, or a process holding its stderr, still ran after "
                      f"{within_s:g} s")


def test_a_stopped_rank_of_a_hybrid_run_is_named_within_its_timeout(tmp_path):
    """Review H1: hybrid sharding's shard and replica groups waited torch's 30 minutes, not
    --timeout-s, so a SIGSTOPped rank was never named and its peers spun. Now its peers time out
    after 5 s and the launcher names it; the bound is the timeout, the launcher's 0.5 s of
    blame and 5 s of grace (a stopped rank ignores SIGTERM), and a margin for a busy box."""
    proc, children = _launch_long_run(tmp_path, "--stage", "3", "--shard-group", "2",
                                      "--steps", "10000", "--timeout-s", "5", nproc=4)
    stopped = _rank_pid(tmp_path, 2, children)
    os.kill(stopped, signal.SIGSTOP)
    try:
        code, err = _finish(proc, 5 + 0.5 + 5 + 12)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGKILL)
    assert code == 1, f"not named within the bound: {err[-500:]}"
    assert "rank 2 stopped making progress" in err.splitlines()[-1], err
    assert _wait_for(lambda: all(gone(pid) for pid in children), GONE_GUARD_S)


def test_a_rank_interrupted_by_sigint_is_named_not_its_peer(tmp_path):
    """Review W1: Ctrl-C reaching rank 1 alone was reported as rank 0's "Connection reset by
    peer". The interrupted rank dies of its signal and is the one named."""
    proc, children = _launch_long_run(tmp_path, "--stage", "2", "--steps", "10000",
                                      "--timeout-s", "10")
    os.kill(_rank_pid(tmp_path, 1, children), signal.SIGINT)
    code, err = _finish(proc, 20)
    assert code == 1, err[-500:]
    assert err.splitlines()[-1] == ("zero-real: error: rank 1 was interrupted by SIGINT; all "
                                    "ranks stopped"), err
    assert _wait_for(lambda: all(gone(pid) for pid in children), GONE_GUARD_S)


@pytest.mark.parametrize("helper", ["forkserver", "resource_tracker"])
def test_a_stopped_helper_hangs_nothing(tmp_path, helper):
    """Review H2: with the fork server SIGSTOPped, the launcher waited forever for the exit codes
    it reports, though the ranks had finished. Now the ranks' files and /proc say they did; the
    run ends as usual and the stopped helper is killed, not left behind (stopped, holding the
    launcher's stderr: a stopped resource tracker kept a reader of that pipe waiting)."""
    proc, children = _launch_long_run(tmp_path, "--stage", "1", "--steps", "2", "--timed-steps",
                                      "150", "--timeout-s", "10")
    server = _helper_pid(proc.pid, helper)
    os.kill(server, signal.SIGSTOP)
    try:
        code, err = _finish(proc, 25)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signal.SIGKILL)
    assert code == 0, f"the launcher did not end: {err[-500:]}"
    assert err.splitlines()[-1].startswith("run: steps 152/152 in "), err
    assert _wait_for(lambda: all(gone(pid) for pid in children | {server}), GONE_GUARD_S)


def test_a_dead_fork_server_is_named_not_a_rank(tmp_path):
    """Review W2: SIGKILL of the fork server (its ranks die with it) was "rank 0 died (exit code
    255)"."""
    proc, children = _launch_long_run(tmp_path)
    os.kill(_helper_pid(proc.pid, "forkserver"), signal.SIGKILL)
    code, err = _finish(proc, 20)
    assert code == 1, err[-500:]
    last = err.splitlines()[-1]
    assert last.startswith("zero-real: error: the ranks' fork server (pid "), err
    assert last.endswith("died, and its ranks with it (each asks to be killed when its parent "
                         "dies); all ranks stopped"), err
    assert _wait_for(lambda: all(gone(pid) for pid in children), GONE_GUARD_S)


class _Ended:
    """A rank's process as the launcher sees it once it is over."""

    def __init__(self, exitcode: int):
        self.pid, self.exitcode = 1, exitcode


@pytest.mark.parametrize("codes, errors, named", [
    # rank 0 only lost its peer; rank 1's error is its own
    ((1, 1), ("RuntimeError: [pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer",
              "ValueError: bad batch"), "rank 1 failed (exit code 1): ValueError: bad batch"),
    # rank 1 killed (the OOM killer's SIGKILL); rank 0 lost its peer
    ((1, -9), ("RuntimeError: Connection closed by peer [127.0.0.1]:2", None),
     "rank 1 was killed by SIGKILL"),
])
def test_blame_names_the_rank_at_fault_not_the_peer_that_lost_it(tmp_path, codes, errors, named):
    """Review W1: the first rank with an error was named, though its error only said that a
    peer went away."""
    from zero_real.run.watch import blame

    for rank, error in enumerate(errors):
        if error is not None:
            (tmp_path / f"rank{rank}.err").write_text(error, encoding="utf-8")
    assert blame(str(tmp_path), [_Ended(c) for c in codes], 10.0)[1] == named
