"""`zerosim sweep --executor ray`: the sweep's points as Ray tasks, on a Ray instance this command
starts on this machine or on a Ray cluster (`--address`), giving the rows the local pool gives, in
the same order, so the same file.

Points go out in chunks of consecutive points, one task each (a task per point would spend more
on scheduling than on simulating), with a bounded number in flight (Ray's pattern for limiting
pending tasks with ray.wait). Progress counts points as their chunks finish, in whatever order;
rows are handed back in product order, and a bad point stops the sweep as the pool's first bad
point does: no chunk after it is sent, the ones before it finish first.

The sweep ends its Ray job when it ends (done, a bad point, Ctrl-C, SIGTERM): ray.shutdown, after
which Ray stops the job's tasks still running or queued (their owner is gone) and an instance
ray.init started here. Not ray.cancel(force=True) on each: Ray 2.60's driver aborts, now and
then, when a cancel crosses the reply of a task that just finished (task_manager.cc: "Tried to
complete task that was not pending"; ray-project/ray#54798 fixed the like race for retries).

Ray is an optional extra (`pip install 'zerosim[ray]'`), imported only here and only when asked for.
Tasks run from the driver's working directory and read the scenario, and the files it names, at the
paths the driver was given: on a cluster, a shared filesystem or the same checkout at the same place
on every node, and zerosim installed on each.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from zerosim.errors import InputError
from zerosim.tradeoffs.sweep import MAX_CHUNK_POINTS

RAY_EXTRA = "--executor ray needs the optional extra: pip install 'zerosim[ray]'"
CHUNKS_PER_CPU = 32  # as the local pool's chunksize: uneven points still spread over the CPUs
IN_FLIGHT_PER_CPU = 2  # queued behind each running task, so no CPU waits on the driver

Executor = Callable[[Callable, Sequence, Callable[[int, int], None] | None], Iterator]
"""executor(function, work, progress): function(job) for every job of `work`, the results in
its order; progress(done, total) as they finish (sweep.run_sweep takes one)."""


def executor(address: str | None = None, jobs: int | None = None) -> Executor:
    """The Ray executor for sweep.run_sweep; fails at once, one line, when Ray is not installed.
    `address`: as ray.init takes it (HOST:PORT, auto, ray://HOST:PORT); None: ray.init()'s own
    choice (RAY_ADDRESS, else a cluster `ray start` began on this machine, else a new instance).
    `jobs`: at most this many tasks at once (default: the cluster's CPUs, a queue behind each).
    A process already in Ray (a notebook) keeps its session: the sweep joins none and leaves it
    joined, and tasks it no longer needs after a bad point or Ctrl-C run to their end unwaited."""
    try:
        import ray
    except ImportError:
        raise InputError(RAY_EXTRA) from None

    def run(function: Callable, work: Sequence, progress=None) -> Iterator:
        ours = not ray.is_initialized()  # else this process joined Ray before: it stays joined
        try:
            if ours:
                _connect(ray, address)
            yield from _ordered_results(ray, function, work, progress, jobs)
        finally:
            if ours:  # the job ends: Ray stops its tasks, and an instance ray.init began
                ray.shutdown()

    return run


def _connect(ray, address: str | None) -> None:
    """Join Ray at `address`, or start it. ray.init sets a SIGTERM handler of its own in the
    driver (sys.exit); ours goes back, and a SIGTERM that Ray's took during the start is raised
    again for ours, so SIGTERM unwinds the sweep wherever it comes (commandline.dispatch)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    terminated = False
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except ConnectionError as exc:  # after Ray's own retries
        where = f"--address {address}" if address else "RAY_ADDRESS"
        raise InputError(f"{where}: cannot join a Ray cluster there: "
                         f"{' '.join(str(exc).split())}") from None
    except SystemExit:  # only ray.init's SIGTERM handler exits in there
        if not main:
            raise
        terminated = True
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    if terminated:
        signal.raise_signal(signal.SIGTERM)


def chunks_of(work: Sequence, cpus: int) -> list[Sequence]:
    """Consecutive runs of points, CHUNKS_PER_CPU per CPU and at most MAX_CHUNK_POINTS (the
    local pool's chunk size: a chunk's rows are held until it is written)."""
    size = max(1, min(len(work) // (cpus * CHUNKS_PER_CPU), MAX_CHUNK_POINTS))
    return [work[start:start + size] for start in range(0, len(work), size)]


def _run_chunk(function: Callable, chunk: Sequence, cwd: str) -> list:
    """A task: function(job) for each job of the chunk, from the driver's working directory, so
    that relative paths (the scenario, --deepspeed, a profile named with --set) mean what they
    meant there."""
    try:
        os.chdir(cwd)
    except OSError as exc:
        reason = (f"Ray node {socket.gethostname()} cannot reach the working directory {cwd} "
                  f"({exc.strerror}): the scenario and the files it names must be at the same "
                  f"paths on every node")
        return [reason] * len(chunk)
    return [function(job) for job in chunk]


def _ordered_results(ray, function: Callable, work: Sequence, progress, jobs: int | None
                     ) -> Iterator:
    """function(job) for every job as Ray tasks; the results in order, progress as chunks
    finish. A chunk holding a failure (a str, sweep._run_point's one line) is the last one
    waited for: the first failure in order is the one the sweep reports."""
    cpus = jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))
    chunks = chunks_of(work, cpus)
    task, cwd = ray.remote(_run_chunk), os.getcwd()
    function_ref = ray.put(function)
    in_flight = jobs or cpus * IN_FLIGHT_PER_CPU
    pending: dict[Any, int] = {}  # ObjectRef -> chunk index
    finished: dict[int, list] = {}
    submitted = emitted = done = 0
    last = len(chunks)  # chunks from here on are not needed: one before them failed
    while emitted < last:
        while submitted < last and len(pending) < in_flight:
            pending[task.remote(function_ref, chunks[submitted], cwd)] = submitted
            submitted += 1
        ready, _ = ray.wait(list(pending), num_returns=1)
        index = pending.pop(ready[0])
        finished[index] = ray.get(ready[0])
        done += len(finished[index])
        if progress is not None:
            progress(done, len(work))
        if any(isinstance(result, str) for result in finished[index]):
            last = index + 1
            pending = {ref: i for ref, i in pending.items() if i < last}
        while emitted in finished and emitted < last:
            yield from finished.pop(emitted)
            emitted += 1
