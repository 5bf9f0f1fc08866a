"""Start ranks, run the stage, collect what each rank measured.

Local runs spawn one process per rank with a fresh FileStore rendezvous; under torchrun (RANK and
WORLD_SIZE set) the same `train` runs in each launched process. Failure is bounded at every level:
`timeout_s` on init and on every collective (gloo applies the process group's timeout to each
operation, send/recv included); and here, if any rank exits non-zero, the others are terminated,
then killed, and the error names the rank (the one that died, or the one that stopped making
progress: see watch.py). `run_timeout_s`, when given, bounds the whole run. `fake_world_size` runs one rank against torch's fake
process group: collectives do nothing, so memory is one rank's at W-way sharding (numbers are
not trained values).
"""

from __future__ import annotations

import datetime
import gc
import multiprocessing as mp
import os
import platform
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from zero_real import watch
from zerosim.config import STAGE_NAMES
from zerosim.errors import InputError
from zerosim.memory import stage_memory

KILL_GRACE_S = 5.0
# Peers of a hung rank wait this long in a collective; well under the 60 s in which a failed run
# must be over (timeout, then terminate and kill with KILL_GRACE_S).
DEFAULT_TIMEOUT_S = 30.0
# Ranks start from a fork server that has already imported these: paid once, not once per rank
# (on a 2-core box four ranks importing torch and sympy take seconds each).
PRELOAD = ["torch", "torch.distributed", "torch.fx.experimental.symbolic_shapes", "zero_real.stages",
           "zero_real.launch"]


class RankFailed(RuntimeError):
    def __init__(self, message: str, pids: list[int]):
        super().__init__(message)
        self.pids = pids  # every rank's process id, all stopped and reaped


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


def device_for(backend: str, rank: int) -> torch.device:
    if backend == "nccl" or (backend == "fake" and torch.cuda.is_available()):
        index = int(os.environ.get("LOCAL_RANK", rank)) % max(1, torch.cuda.device_count())
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} x{torch.cuda.device_count()}"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"


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


def train(rank: int, world_size: int, cfg: dict) -> dict:
    """Build the stage, run cfg["steps"] steps measuring memory and cfg["timed_steps"] more
    without the profiler, return this rank's measurements."""
    from zero_real.collectives import Collectives
    from zero_real.measure import Recorder
    from zero_real.model import build_model, random_batch
    from zero_real.stages import STAGES

    scenario, backend = cfg["scenario"], cfg["backend"]
    device = device_for(backend, rank)
    if device.type == "cpu":  # ranks share the box's cores: no oversubscription
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg.get("nproc", world_size)))
    gc.collect()  # an earlier run in this process (tests) must not free its buffers mid-measurement
    recorder = Recorder(rank, device, cfg.get("profile_memory", True))  # before any allocation
    heartbeat = watch.Heartbeat(cfg.get("progress_file"))
    watch.instrument(recorder, heartbeat, cfg, rank)
    comm = Collectives(cfg["collectives"], rank, world_size, recorder, backend)
    model = build_model(scenario.model)
    engine = STAGES[cfg["stage"]](model, scenario, rank=rank, world_size=world_size, comm=comm,
                                  recorder=recorder, device=device, seed=cfg["seed"], lr=cfg["lr"])
    recorder.mark("after_init", 0)
    t = scenario.training
    losses = []
    under_profiler = recorder.profiling
    # Memory is measured over the first `steps` steps; `timed_steps` more run with memory
    # profiling off, so their timings carry no profiler overhead.
    timed = cfg.get("timed_steps", 0)
    for step in range(cfg["steps"] + timed):
        if step == cfg["steps"] and timed:
            recorder.finish()
        rows = range(rank * t.micro_batch, (rank + 1) * t.micro_batch)
        idx, targets = random_batch(scenario.model.vocab, rows, t.seq_len, cfg["seed"], step)
        if cfg.get("die_rank") == rank and step == cfg.get("die_step", 0):
            os._exit(17)  # the kill test: a rank vanishing mid-run
        heartbeat.step = recorder.step = step
        losses.append(engine.step(idx.to(device), targets.to(device), step))
    params = None
    if cfg.get("return_params"):
        params = {k: v.float().cpu() for k, v in engine.full_parameters().items()}
    peak = recorder.finish()
    # Memory at each point as last measured (timed steps after the profiler stopped have none).
    phases = {s["point"]: s.get("measured_bytes") for s in recorder.samples
              if s.get("measured_bytes") is not None or s["step"] < cfg["steps"]}
    return {"rank": rank, "peak_bytes": peak, "phases": phases,
            "ledger": recorder.ledger.as_dict(),
            "ledger_phases": {s["point"]: s["bytes_by_category"] for s in recorder.samples},
            "events": recorder.events, "memory_samples": recorder.samples, "losses": losses,
            "params": params, "hardware": hardware(device),
            "under_profiler": under_profiler and not timed}


def _entry(fn, rank: int, world_size: int, cfg: dict, workdir: str, launcher_pid: int) -> None:
    """One spawned rank: init, run, write the result (or the error) where the parent looks."""
    watch.die_with_launcher(launcher_pid)
    try:
        cfg = dict(cfg, progress_file=f"{workdir}/rank{rank}.progress")
        world = cfg["fake_world_size"] if cfg["backend"] == "fake" else world_size
        if cfg["backend"] == "gloo":  # before init: gloo's threads inherit this rank's cores
            pin_to_cores(rank, cfg.get("nproc", world_size))
        init_distributed(rank, world, cfg["backend"], f"file://{workdir}/store", cfg["timeout_s"])
        world = dist.get_world_size()
        result = fn(rank, world, cfg)
        torch.save(result, f"{workdir}/rank{rank}.pt")
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then exit non-zero
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        if os.environ.get("ZERO_REAL_DEBUG"):
            traceback.print_exc()
        Path(f"{workdir}/rank{rank}.err").write_text(last.splitlines()[0], encoding="utf-8")
        os._exit(1)


def spawn(fn, nproc: int, cfg: dict, timeout_s: float | None = None) -> list:
    """Run fn(rank, world_size, cfg) in nproc fresh processes; results in rank order.
    `timeout_s` bounds the whole run (None: no bound; cfg["timeout_s"] bounds each collective).
    Whatever happens, including an exception here (a signal turned into one by the CLI), every
    rank is stopped and reaped before the workdir goes."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    watch.sweep_stale()
    with tempfile.TemporaryDirectory(prefix=watch.PREFIX) as workdir:
        watch.mark_owner(workdir)
        procs = [context.Process(target=_entry, args=(fn, r, nproc, cfg, workdir, os.getpid()),
                                 daemon=True) for r in range(nproc)]
        try:
            for p in procs:
                p.start()
            failure = _supervise(procs, workdir, cfg, timeout_s)
        finally:
            _stop(procs)
        if failure is not None:
            raise RankFailed(failure, [p.pid for p in procs])
        return [torch.load(f"{workdir}/rank{r}.pt", weights_only=False) for r in range(nproc)]


def _supervise(procs, workdir: str, cfg: dict, timeout_s: float | None) -> str | None:
    """Wait for the ranks; the failure message, or None when every rank finished cleanly."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while any(p.exitcode is None for p in procs):
        if any(p.exitcode not in (None, 0) for p in procs):
            # Peers of a crashed rank fail too ("connection closed"); give the crash a moment
            # to be seen before deciding whom to blame.
            time.sleep(0.5)
            _, why = watch.blame(workdir, procs, cfg["timeout_s"])
            return f"{why}; all ranks stopped"
        if deadline is not None and time.monotonic() > deadline:
            return f"ranks did not finish within --run-timeout-s {timeout_s:g} s; all stopped"
        time.sleep(0.05)
    if any(p.exitcode != 0 for p in procs):
        _, why = watch.blame(workdir, procs, cfg["timeout_s"])
        return f"{why}; all ranks stopped"
    return None


def _stop(procs) -> None:
    """Terminate what is still running, kill what ignores that, reap everything."""
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            p.terminate()
    end = time.monotonic() + KILL_GRACE_S
    for p in procs:
        if p.pid is None:
            continue  # never started
        p.join(max(0.0, end - time.monotonic()))
        if p.exitcode is None:
            p.kill()
            p.join()


def measurement(cfg: dict, results: list[dict], world_size: int) -> dict:
    """The measurement JSON: run settings, per-rank memory and ledger, events, losses."""
    scenario = cfg["scenario"]
    analytic = stage_memory(scenario, cfg["stage"]).as_dict()
    ranks = [{k: r[k] for k in ("rank", "peak_bytes", "phases", "ledger", "ledger_phases")}
             for r in results]
    return {
        "scenario": cfg["scenario_path"], "overrides": cfg["overrides"],
        "stage": cfg["stage"], "stage_name": STAGE_NAMES[cfg["stage"]],
        "world_size": world_size, "processes": len(results),
        "fake_world_size": cfg.get("fake_world_size"), "backend": cfg["backend"],
        "collectives": cfg["collectives"], "steps": cfg["steps"],
        "timed_steps": cfg.get("timed_steps", 0), "seed": cfg["seed"],
        "torch_version": torch.__version__, "hardware": results[0]["hardware"],
        "losses": results[0]["losses"], "zerosim_memory": analytic, "ranks": ranks,
        # CPU memory profiling adds per-op overhead: timings taken under it are slower. With
        # timed_steps, steps from `steps` on ran without it (memory was measured before them).
        "timings_under_profiler": any(r.get("under_profiler", False) for r in results),
        # Collectives run synchronously on the training thread: none overlaps compute.
        "overlap_comm": False,
        "events": [e for r in results for e in r["events"]],
        "memory_samples": [s for r in results for s in r["memory_samples"]],
    }


def run(cfg: dict) -> dict:
    """Local run: nproc processes, or one process against a fake world of fake_world_size."""
    if cfg.get("fake_world_size"):
        results = spawn(train, 1, cfg, cfg.get("run_timeout_s"))
        return measurement(cfg, results, cfg["fake_world_size"])
    results = spawn(train, cfg["nproc"], cfg, cfg.get("run_timeout_s"))
    return measurement(cfg, results, cfg["nproc"])


TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


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


def run_under_torchrun(cfg: dict) -> dict | None:
    """torchrun set RANK/WORLD_SIZE/MASTER_ADDR: run here; rank 0 returns the measurement."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    init_distributed(rank, world, cfg["backend"], "env://", cfg["timeout_s"])
    result = train(rank, world, cfg)
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(result, gathered, dst=0)
    dist.destroy_process_group()
    return measurement(cfg, gathered, world) if rank == 0 else None
