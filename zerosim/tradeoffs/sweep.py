"""`zerosim sweep`: the cartesian product of varied scenario keys, each point simulated.

A point is the scenario with one value of every varied key applied after its `--set` overrides,
exactly as `zerosim simulate --set table.key=value` would apply it; so each row equals what
`zerosim memory` and `zerosim simulate` print for that point. Rows come out in product order
whatever the number of processes and wherever they run (here, a pool on this machine; or Ray:
sweep_ray.py), so the same input gives the same file (sweep_files.py).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from zerosim.contract import COLLECTIVE_OPS, STAGE_NAMES, STAGES
from zerosim.errors import InputError
from zerosim.analytic.memory import check_scale, fits, stage_memory
from zerosim.sim.device import check_device_scale
from zerosim.analytic.model import total_params
from zerosim.parallel.mesh import mesh_of
from zerosim.report import op_bytes
from zerosim.scenario.load import load_scenario, parse_override
from zerosim.sim.costs import op_model
from zerosim.sim.engine import simulate

MAX_POINTS = 1_000_000  # a million points is already gigabytes of file
ORPHAN_POLL_S = 0.5  # how soon a worker notices its parent is gone
CHUNKS_PER_JOB = 32  # points go to workers in chunks: uneven points still spread over them
MAX_CHUNK_POINTS = 16  # at most: a chunk's rows (~30 kB each) are held until written
IN_FLIGHT_PER_JOB = 2  # chunks queued or running per worker, so no worker waits on the parent
STOP_TIMEOUT_S = 30.0  # a stopped pool's manager thread ends in milliseconds; never wait forever
RESULT_COLUMNS = ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes",  # as simulated
                  "tokens_per_s_per_gpu", "mfu", "algorithm")
MEMORY_COLUMNS = ("params_bytes", "grads_bytes", "optimizer_bytes", "model_states_bytes",
                  "activations_bytes", "buffers_bytes", "host_bytes", "peak_bytes")
INPUT_TABLES = ("model", "cluster", "training", "parallelism", "variation")


@dataclass(frozen=True)
class Vary:
    """One `--vary table.key=v1,v2,...`: the key, and each value as text (applied as --set)."""

    key: str
    texts: tuple[str, ...]
    values: tuple[Any, ...]


def _split_values(text: str) -> list[str]:
    """Comma-separated values; commas inside [...] or quotes belong to the value."""
    values, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            values.append(text[start:i].strip())
            start = i + 1
    values.append(text[start:].strip())
    return values


def parse_vary(text: str) -> Vary:
    """'cluster.nodes=1,2,4' -> Vary; each value is checked as `--set cluster.nodes=1` would be."""
    lhs, sep, rhs = text.partition("=")
    if not sep or not rhs.strip():
        raise InputError(f"--vary {text!r}: expected table.key=v1,v2,..., e.g. "
                         f"--vary cluster.nodes=1,2,4,8")
    texts = _split_values(rhs)
    if any(not value for value in texts):
        raise InputError(f"--vary {text!r}: an empty value (two commas in a row, or a trailing one)")
    parsed = [parse_override(f"{lhs.strip()}={value}", "--vary") for value in texts]
    table, key, _ = parsed[0]
    values = tuple(value for _, _, value in parsed)
    seen: dict[str, str] = {}
    for value, value_text in zip(values, texts):
        canonical = json.dumps(_same_numbers(value), sort_keys=True)
        if canonical in seen:
            raise InputError(f"--vary {text!r}: {value_text} and {seen[canonical]} are the same "
                             f"value; give each once")
        seen[canonical] = value_text
    return Vary(f"{table}.{key}", tuple(texts), values)


def _same_numbers(value: Any) -> Any:
    """The value with every number that equals a float written as that float, so that values
    equal after parsing (1, 1.0 and 1e0; [1] and [1.0]) compare the same; a bool stays a bool."""
    if isinstance(value, list):
        return [_same_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: _same_numbers(item) for key, item in value.items()}
    if isinstance(value, int) and not isinstance(value, bool) and float(value) == value:
        return float(value)
    return value


def check_varies(varies: Sequence[Vary], overrides: Sequence[str]) -> None:
    keys = [v.key for v in varies]
    for key in keys:
        if keys.count(key) > 1:
            raise InputError(f"--vary {key} is given twice; put all its values in one --vary")
    for text in overrides:
        table, key, _ = parse_override(text)
        if f"{table}.{key}" in keys:
            raise InputError(f"{table}.{key} is both set (--set {text}) and varied (--vary): "
                             f"drop one")


@dataclass(frozen=True)
class Point:
    index: int
    values: tuple[Any, ...]
    sets: tuple[str, ...]
    """One `table.key=value` per varied key."""
    overrides: tuple[str, ...]
    """The scenario's --set overrides, then `sets`."""
    stages: tuple[int, ...]
    """Stages to simulate; () means the scenario's training.zero_stage (it is varied)."""

    def describe(self) -> str:
        return ", ".join(self.sets)


def count_points(varies: Sequence[Vary]) -> int:
    return math.prod(len(v.values) for v in varies)


def points(varies: Sequence[Vary], overrides: Sequence[str]) -> Iterator[Point]:
    """Every combination, the first --vary changing slowest. Stages: all four (as `zerosim
    simulate` and `memory` show), or () for the loaded scenario's when training.zero_stage is
    varied."""
    keys = [v.key for v in varies]
    stages = () if "training.zero_stage" in keys else STAGES
    choices = [list(zip(v.texts, v.values)) for v in varies]
    for index, combo in enumerate(itertools.product(*choices)):
        sets = tuple(f"{key}={text}" for key, (text, _) in zip(keys, combo))
        yield Point(index, tuple(value for _, value in combo), sets, (*overrides, *sets), stages)


def rows_of(scenario, stages: Sequence[int], first: dict[str, Any],
            mode: str = "auto") -> list[dict]:
    """One row per stage: the `first` columns, memory (analytic), the simulated step, then every
    input of the scenario."""
    t, c = scenario.training, scenario.cluster
    inputs = {f"{table}.{key}": list(value) if isinstance(value, tuple) else value
              for table in INPUT_TABLES for key, value in asdict(getattr(scenario, table)).items()}
    if "training.zero_stage" not in first:  # each row's `stage` says which stage it is
        del inputs["training.zero_stage"]
    # what timed the row's compute (unset means "op" where it applies, else "flat")
    inputs["cluster.compute_model"] = ("profile" if scenario.profile is not None else
                                       "op" if op_model(scenario) is not None else "flat")
    gpu_memory_bytes = round(c.hardware.memory_bytes)
    rows = []
    for stage in stages:
        stage_row = stage_memory(scenario, stage)
        memory = stage_row.as_dict()
        result = simulate(scenario, stage, mode=mode, keep_events=False)
        comm = result.comm_bytes_per_rank
        row = {**first, "stage": stage, "stage_name": STAGE_NAMES[stage],
               "world_size": scenario.world_size,
               "params": total_params(scenario.model),
               # a tensor-parallel group's t ranks share their tokens: N / t take their own
               "tokens_per_step": t.tokens_per_rank * mesh_of(scenario, stage).data_parallel,
               **{key: memory[key] for key in MEMORY_COLUMNS},
               "gpu_memory_bytes": gpu_memory_bytes,
               "fits_gpu_memory": fits(scenario, result.device_bytes),
               "step_time_s": result.step_time_s, "compute_s": result.compute_s,
               "exposed_comm_s": result.exposed_comm_s, "comm_time_s": result.comm_time_s,
               "comm_bytes_per_rank_total": sum(comm.values()),
               **{f"comm_bytes_{op}": op_bytes(comm, op) for op in COLLECTIVE_OPS},
               "host_bytes_per_rank_total": sum(result.host_bytes_per_rank.values()),
               "host_time_s": result.host_time_s,
               "simulated_peak_bytes": result.peak_bytes,
               "gpu_seconds_per_step": result.step_time_s * scenario.world_size,
               **{key: getattr(result, key) for key in RESULT_COLUMNS}}
        rows.append({**row, **{k: v for k, v in inputs.items() if k not in row}})
    return rows


def _run_point(job: tuple) -> list[dict] | str:
    """Worker: a point's rows, or the one-line reason it cannot be simulated."""
    scenario_path, deepspeed, point, varies, mode = job
    try:
        scenario = check_device_scale(check_scale(load_scenario(scenario_path, point.overrides,
                                                                deepspeed)))
        first = {"point": point.index, **{v.key: x for v, x in zip(varies, point.values)}}
        return rows_of(scenario, point.stages or (scenario.training.zero_stage,), first, mode)
    except InputError as exc:
        return f"point {point.index} ({point.describe()}): {exc}"


def _init_worker(parent_pid: int) -> None:
    """Workers leave Ctrl-C to the parent, which cancels what is queued and says so once; die on
    SIGTERM (not by the parent's handler a fork copies: a worker would catch it and go on); and
    die with the parent: killed with no chance to stop them (SIGKILL, a crash), it would leave
    them blocked forever on a queue it no longer feeds. A thread watching the parent's pid, not
    Linux's PR_SET_PDEATHSIG: it works on every platform and start method, and does not hinge on
    which of the parent's threads forked the worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()


def _exit_when_orphaned(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(ORPHAN_POLL_S)
    os._exit(1)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Drop the queued points and stop the running ones now (a point can take minutes), as
    Python 3.14's ProcessPoolExecutor.terminate_workers does; then wait for the pool's manager
    thread to close its pipes. Left running, it raced the interpreter's exit: atexit's
    concurrent.futures._python_exit wakes it through a pipe it may be closing that instant, and
    printed "_send_bytes ... OSError: [Errno 9] Bad file descriptor" (review T4; CPython 3.11's
    _ThreadWakeup checks `_closed` without a lock; CPython's gh-125451 gave it one, on 3.12 on)."""
    workers = list((pool._processes or {}).values())  # shutdown forgets them
    manager = getattr(pool, "_executor_manager_thread", None)  # and its thread
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join()
    if manager is not None:  # the dead workers break the pool: it cleans up and ends
        manager.join(STOP_TIMEOUT_S)


def default_jobs() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def run_sweep(scenario_path: str, varies: Sequence[Vary], overrides: Sequence[str] = (),
              deepspeed: str | None = None, jobs: int | None = None, mode: str = "auto",
              progress: Callable[[int, int], None] | None = None,
              executor=None) -> Iterator[dict]:
    """The rows, in product order, as they are ready (sweep_files writes each as it comes, so
    what is held is the points in flight, not the sweep). The first point that cannot be
    simulated stops the sweep. `executor` runs the points elsewhere (sweep_ray.executor: Ray);
    else a pool of `jobs` processes, at most the cores this process may run on."""
    check_varies(varies, overrides)
    total = count_points(varies)
    if total > MAX_POINTS:
        raise InputError(f"the --vary keys make {total:,} points (the product of "
                         f"{' x '.join(str(len(v.values)) for v in varies)}); at most "
                         f"{MAX_POINTS:,} per sweep: split it")
    work = ((scenario_path, deepspeed, point, tuple(varies), mode)
            for point in points(varies, overrides))

    def collect(results: Iterator, report=progress) -> Iterator[dict]:
        for done, result in enumerate(results, 1):
            if isinstance(result, str):
                raise InputError(result)
            yield from result
            if report is not None:
                report(done, total)

    if executor is not None:  # it reports progress itself, as points finish in any order
        with contextlib.closing(executor(_run_point, list(work), progress)) as results:
            yield from collect(results, report=None)
        return
    jobs = min(jobs or default_jobs(), default_jobs(), total)
    if jobs <= 1:
        yield from collect(map(_run_point, work))
        return
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method),
                               initializer=_init_worker, initargs=(os.getpid(),))
    chunk = max(1, min(total // (jobs * CHUNKS_PER_JOB), MAX_CHUNK_POINTS))
    try:
        yield from collect(in_order(lambda c: pool.submit(_run_points, c),
                                    _chunks(work, chunk), jobs * IN_FLIGHT_PER_JOB))
    except BaseException:  # a bad point, Ctrl-C, SIGTERM (cli): no more work, no orphans
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)


def _run_points(jobs: Sequence[tuple]) -> list:
    """Worker: _run_point of each job of a chunk, up to the first that fails."""
    results = []
    for job in jobs:
        results.append(_run_point(job))
        if isinstance(results[-1], str):
            break
    return results


def _chunks(work: Iterator, size: int) -> Iterator[list]:
    while chunk := list(itertools.islice(work, size)):
        yield chunk


def in_order(submit: Callable[[Any], Any], chunks: Iterator, in_flight: int) -> Iterator:
    """Each chunk's results in order: submit(chunk) gives a future of its list; at most
    `in_flight` chunks are submitted and not yet handed on, so the results held wait on the
    slowest of a few chunks, never on the whole sweep (ProcessPoolExecutor.map submits every
    chunk at once, and keeps every finished one until its turn)."""
    pending: collections.deque = collections.deque()
    for chunk in chunks:
        if len(pending) == in_flight:
            yield from pending.popleft().result()
        pending.append(submit(chunk))
    while pending:
        yield from pending.popleft().result()
