"""Start ranks, supervise them, stop them: every rank is reaped, whatever happens.

Local runs spawn one process per rank with a fresh FileStore rendezvous; under torchrun (RANK and
WORLD_SIZE set) the same training function runs in each launched process (train.py). Failure is
bounded at every level: `timeout_s` on init and on every collective (gloo applies the process
group's timeout to each operation, send/recv included); and here, if any rank exits non-zero, the
others are terminated, then killed, and the error names the rank (the one that died, or the one
that stopped making progress: see watch.py). A run's `run_timeout_s`, when given, bounds the whole
run. SIGINT, SIGTERM and SIGHUP unwind the launch the same way (signals_stop_the_run), but
one the caller ignores (nohup) stays ignored.

The fork server that starts the ranks is watched too: its death is named (its ranks die with
it), and no wait depends on it answering. Exit codes it does not report (stopped by SIGSTOP) are
read from the ranks' files and /proc (watch.ended, watch.failed), and a fork server still stopped
when the ranks are over is killed, so that neither this launch nor the interpreter's exit (which
joins every child) waits on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import multiprocessing as mp
import os
import signal
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from zero_real.run import watch
from zero_real.run.runconfig import PRELOAD
from zerosim.errors import InputError

KILL_GRACE_S = 5.0
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))  # no SIGHUP on Windows
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class RankFailed(RuntimeError):
    def __init__(self, message: str, pids: list[int]):
        super().__init__(message)
        self.pids = pids  # every rank's process id, all stopped and reaped


class Stopped(BaseException):
    """SIGINT, SIGTERM or SIGHUP (a closed terminal), raised in the launcher's main thread so that
    the launch unwinds: ranks stopped and reaped, workdir removed (BaseException: no `except
    Exception` swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum, self.name = signum, signal.Signals(signum).name


@contextlib.contextmanager
def signals_stop_the_run():
    """Within: SIGINT, SIGTERM and SIGHUP raise Stopped in the main thread; one the caller
    ignores (`nohup zero-real run ...`) stays ignored, so that a fork server started within
    (spawn restarts a stopped one) and its ranks inherit SIG_IGN (exec resets a handler)."""
    def handler(signum, frame):
        raise Stopped(signum)

    try:
        saved = {s: signal.signal(s, handler) for s in STOP_SIGNALS
                 if signal.getsignal(s) is not signal.SIG_IGN}
    except ValueError:  # not the main thread (an embedding caller): leave signals alone
        saved = {}
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def init_distributed(rank: int, world_size: int, backend: str, init_method: str | None,
                     timeout_s: float) -> None:
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size,
                                timeout=timeout)
    else:
        dist.init_process_group(backend, init_method=init_method, rank=rank,
                                world_size=world_size, timeout=timeout)


def pin_to_cores(rank: int, nproc: int) -> None:
    """Rank r and its gloo threads keep to their own share of the box's cores when there are
    enough (as numactl or torchrun --bind users do): a rank the scheduler moves, or that waits
    behind its neighbour's threads, makes every synchronous collective wait for it. On a 2-core
    box collectives get slower (a rank's gloo thread shares its core) but step times repeat to
    about 1% from run to run instead of 10-20%, which is what calibration needs."""
    if not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if nproc <= len(cores):
        share = len(cores) // nproc
        os.sched_setaffinity(0, cores[rank * share:(rank + 1) * share])


def _entry(fn, rank: int, world_size: int, cfg, workdir: str, launcher_pid: int) -> None:
    """One spawned rank: init, run, write the result (or the error) where the parent looks."""
    watch.die_with_launcher(launcher_pid)
    try:
        cfg = dataclasses.replace(cfg, progress_file=f"{workdir}/rank{rank}.progress")
        world = cfg.fake_world_size if cfg.backend == "fake" else world_size
        if cfg.backend == "gloo":  # before init: gloo's threads inherit this rank's cores
            pin_to_cores(rank, cfg.nproc)
        init_distributed(rank, world, cfg.backend, f"file://{workdir}/store", cfg.timeout_s)
        world = dist.get_world_size()
        result = fn(rank, world, cfg)
        # Whole or absent: where the fork server reports no exit code, this file says success.
        torch.save(result, f"{workdir}/rank{rank}.pt.tmp")
        os.replace(f"{workdir}/rank{rank}.pt.tmp", f"{workdir}/rank{rank}.pt")
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then exit non-zero
        interrupted = isinstance(exc, KeyboardInterrupt)
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        if os.environ.get("ZERO_REAL_DEBUG"):
            traceback.print_exc()
        Path(f"{workdir}/rank{rank}.err").write_text(
            watch.INTERRUPTED if interrupted else last.splitlines()[0], encoding="utf-8")
        if interrupted:  # die of the signal, so the launcher names this rank, not its peers
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(1)


def spawn(fn, nproc: int, cfg, timeout_s: float | None = None) -> list:
    """Run fn(rank, world_size, cfg) in nproc fresh processes; results in rank order. `cfg` is a
    runconfig.RankSetup (each rank gets it with its own progress_file). `timeout_s` bounds the
    whole run (None: no bound; cfg.timeout_s bounds each collective). Whatever happens,
    including an exception here (a signal turned into one), every rank is stopped and reaped
    before the workdir goes."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    _kill_if_stopped(_fork_server_pid())  # a stopped one would never start a rank: a new one will
    watch.sweep_stale()
    with tempfile.TemporaryDirectory(prefix=watch.PREFIX) as workdir:
        watch.mark_owner(workdir)
        procs = [context.Process(target=_entry, args=(fn, r, nproc, cfg, workdir, os.getpid()),
                                 daemon=True) for r in range(nproc)]
        try:
            for p in procs:
                p.start()
            failure = _supervise(procs, workdir, cfg.timeout_s, timeout_s, _fork_server_pid())
        finally:
            _stop(procs)
        if failure is not None:
            raise RankFailed(failure, [p.pid for p in procs])
        return [torch.load(f"{workdir}/rank{r}.pt", weights_only=False) for r in range(nproc)]


def _supervise(procs, workdir: str, collective_timeout_s: float, timeout_s: float | None,
               fork_server_pid: int | None) -> str | None:
    """Wait for the ranks; the failure message, or None when every rank finished cleanly."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        ended = [r for r, p in enumerate(procs) if watch.ended(p)]
        failed = any(watch.failed(workdir, r, procs[r]) for r in ended)
        if not failed and len(ended) == len(procs):
            return None
        if failed or (fork_server_pid is not None and not watch.alive(fork_server_pid)):
            # Peers of a crashed rank fail too ("connection closed"); give the crash a moment
            # to be seen before deciding whom to blame.
            time.sleep(0.5)
            _, why = watch.blame(workdir, procs, collective_timeout_s, fork_server_pid)
            return f"{why}; all ranks stopped"
        if deadline is not None and time.monotonic() > deadline:
            return f"ranks did not finish within --run-timeout-s {timeout_s:g} s; all stopped"
        time.sleep(0.05)


def _stop(procs) -> None:
    """Terminate what is still running, kill what ignores that, reap everything; every wait
    bounded. A rank that is over but whose exit code never came (its parent, the fork server,
    stopped) is released by killing the fork server, which the next launch starts anew."""
    started = [p for p in procs if p.pid is not None]  # not those that never started
    for p in started:
        if not watch.ended(p):
            p.terminate()
    _wait_ended(started, KILL_GRACE_S)
    for p in started:
        if not watch.ended(p):
            p.kill()  # SIGKILL: a stopped (SIGSTOP) rank too
    _wait_ended(started, KILL_GRACE_S)
    if any(p.exitcode is None for p in started):
        _kill_if_stopped(_fork_server_pid())
    end = time.monotonic() + KILL_GRACE_S
    for p in started:
        p.join(max(0.0, end - time.monotonic()))
    # A stopped resource tracker hangs nothing here, but it would outlive this process holding
    # its stderr, and whoever reads that pipe (`zero-real run ... | tee`) would wait forever.
    _kill_if_stopped(_resource_tracker_pid())


def _wait_ended(procs, within_s: float) -> None:
    end = time.monotonic() + within_s
    while not all(watch.ended(p) for p in procs) and time.monotonic() < end:
        time.sleep(0.02)


def _fork_server_pid() -> int | None:
    """The pid of multiprocessing's fork server (CPython's own record of it), None before it
    starts."""
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def _resource_tracker_pid() -> int | None:
    """The pid of multiprocessing's resource tracker, which the fork server was started with."""
    from multiprocessing import resource_tracker

    return getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)


def _kill_if_stopped(pid: int | None) -> None:
    """SIGKILL a helper (the fork server, the resource tracker) if it is stopped (SIGSTOP, or a
    job-control stop it was not continued from): a stopped fork server neither starts ranks nor
    reports their exit codes. Returns once it is a zombie (or gone, or KILL_GRACE_S passed): a
    dying fork server is still "running" to forkserver.ensure_running (waitpid WNOHANG), which
    would hand it the next rank. Not reaped here: ensure_running reaps it and starts the next."""
    if pid is not None and watch.state(pid) in ("T", "t"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + KILL_GRACE_S
        while watch.state(pid) not in (None, "Z", "X") and time.monotonic() < end:
            time.sleep(0.01)


def torchrun_env(environ=os.environ) -> tuple[int, int] | None:
    """(world size, processes per node) when torchrun launched us, None for a local run. All of
    torchrun's variables or none: a stray RANK in a shell must not silently switch modes."""
    present = [k for k in TORCHRUN_VARS if k in environ]
    if not present:
        return None
    missing = [k for k in TORCHRUN_VARS if k not in environ]
    if missing:
        raise InputError(f"{', '.join(present)} set but {', '.join(missing)} not: under torchrun "
                         f"all of {', '.join(TORCHRUN_VARS)} are set; unset the others for a "
                         f"local run")
    try:
        world = int(environ["WORLD_SIZE"])
        local = int(environ.get("LOCAL_WORLD_SIZE", world))
    except ValueError:
        raise InputError(f"WORLD_SIZE={environ['WORLD_SIZE']!r} and LOCAL_WORLD_SIZE="
                         f"{environ.get('LOCAL_WORLD_SIZE')!r} must be integers") from None
    if world < 1 or local < 1 or world % local:
        raise InputError(f"WORLD_SIZE={world} is not a whole number of nodes of "
                         f"LOCAL_WORLD_SIZE={local} processes")
    return world, local
