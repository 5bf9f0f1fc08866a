"""What every rank of one calibration world measures, all ranks at once (they share the box as
they do in a run, timing.py): collectives, the op model's constants (ops.py), one unit of each
kind forward and backward (their host work beyond their ops), Adam on a flat shard, the stages'
gradient path (grad_path.py), the memory mechanisms and the real stages' memory. Rank 0's
numbers are reported.

Collectives follow nccl-tests (common.cu): a barrier, warm-up, then timed iterations; sizes are
the whole buffer (reduce_scatter/all_gather: n x piece), fp32. Each iteration is timed on every
rank and reduced with MAX over ranks (the collective is done when its last rank is); a round
keeps their mean, the row the median over the rounds. They go through
zero_real.parts.collectives.Collectives, the code the stages run.
"""

from __future__ import annotations

import gc
import statistics
import time

import torch

from zero_real.calibration.grad_path import measure_grad_path
from zero_real.calibration.memory_bench import measure_memory
from zero_real.calibration.ops import measure_ops
from zero_real.calibration.timing import (WARMUP, barrier, flush_caches, iterations, release_flush,
                                         max_over_ranks, sync, timed, until)
from zero_real.parts.collectives import Collectives
from zero_real.parts.measure import ActivationTracker, Ledger, Recorder
from zero_real.parts.model import build_model, materialize
from zero_real.parts.optim import LossScale, ShardAdam
from zero_real.run import watch
from zero_real.run.progress import Progress
from zero_real.run.runconfig import CalibrationWorld, RunConfig
from zero_real.run.train import device_for, hardware, share_cores, train
from zero_real.stages import DTYPES
from zerosim.calibration.measured import step_figures
from zerosim.contract import (BLOCK, COLLECTIVE_OPS, EMBEDDING, HEAD, PASSES, UNIT_KINDS,
                              busbw_factor)
from zerosim.units import GB, MiB

COLLECTIVE_ITERATIONS = (5, 500)
LARGE_BYTES = 16 * MiB  # from here one warm-up iteration is enough (nccl-tests' large sizes)
TIMED_STEPS = 12  # the first is a warm-up after the profiler stops; validate drops it
MEMORY_STEPS = 2


def measure_world(rank: int, world_size: int, cfg: CalibrationWorld) -> dict:
    """Everything one rank measures in a world of world_size processes (spawned by launch.spawn)."""
    device = device_for(cfg.backend, rank)
    share_cores(device, world_size)  # exactly as train: ranks share the box's cores
    progress = Progress(cfg.progress_path, rank)
    out = {"rank": rank, "device": device.type, "hardware": hardware(device)}
    # Each round every timed section, the collectives with 1/rounds of --seconds-per-size and of
    # their least and most iterations: a slow spell (a calibration whose 2-process collectives
    # all came out 40-48% slow) then spoils one round of a row, the others minutes apart; the
    # timed iterations take as long as in one sweep, each round adding its warm-up.
    rounds = [{"collectives": collectives(rank, world_size, cfg, device, progress,
                                          cfg.seconds_per_size / cfg.rounds),
               **timed_sections(rank, world_size, cfg, device, progress)}
              for _ in range(cfg.rounds)]
    for section in rounds[0]:
        out[section] = [median_row([r[section][i] for r in rounds])
                        for i in range(len(rounds[0][section]))]
    out["collectives"] = [_bandwidths(row) for row in out["collectives"]]
    t = cfg.scenario.training
    out["memory_mechanisms"] = measure_memory(world_size, DTYPES[t.precision], device,
                                              cfg.scenario.model.norm, t.flash_attention)
    out["memory"] = memory(rank, world_size, cfg, device, progress)
    return out


def timed_sections(rank: int, n: int, cfg: CalibrationWorld, device, progress) -> dict:
    """One round of the timed microbenchmarks. Whole units after the ops: a fresh process's
    first seconds run slow (on the 2-core box the tiny block's forward took 1.54 ms at
    micro-batch 1 and 1.20 ms at 4 as a world of one's first rows, 0.78-0.99 ms later), and
    their host work is what they take beyond their ops as the record prices them
    (fit_ops.fit_unit_overhead)."""
    return {"ops": measure_ops(n, cfg, device, progress),
            "compute": compute(n, cfg, device, progress),
            "optimizer": optimizer(n, cfg, device, progress),
            "grad_path": measure_grad_path(rank, n, cfg, device, progress)}


def median_row(rows: list[dict]) -> dict:
    """The same row of each round: its times ("*_s" numbers) the median over the rounds, its
    iterations their sum, the rest as the first round has them. Rounds, not one long row: on a
    shared box the speed moves by tens of percent for seconds at a time (five calibrations of
    the tiny GPT on the 2-core box priced one held-out run from 4.8 to 7.6 ms), and a slow spell
    then spoils one round of a row, not the row; the median over the rounds is the row as the
    box usually runs it."""
    out = dict(rows[0])
    for key, value in rows[0].items():
        values = [r.get(key) for r in rows]
        if key.endswith("_s") and all(type(v) in (int, float) for v in values):
            out[key] = statistics.median(values)
    if "iterations" in out:
        out["iterations"] = sum(r["iterations"] for r in rows)
    return out


def _bandwidths(row: dict) -> dict:
    """A collective's row with algbw and busbw (nccl-tests' definitions) of its time."""
    algbw = row["size_bytes"] / row["time_s"] / GB
    return {**row, "algbw_GBps": algbw, "busbw_GBps": algbw * busbw_factor(row["op"], row["ranks"])}


def collectives_world(rank: int, world_size: int, cfg: CalibrationWorld) -> list[dict]:
    """Only the collectives, at cfg.sizes (bench/fidelity's held-out sizes), in cfg.rounds
    rounds as measure_world times them."""
    device = device_for(cfg.backend, rank)
    share_cores(device, world_size)
    rounds = [collectives(rank, world_size, cfg, device, Progress(None, rank),
                          cfg.seconds_per_size / cfg.rounds) for _ in range(cfg.rounds)]
    return [_bandwidths(median_row(list(rows))) for rows in zip(*rounds)]


def _collective_call(comm: Collectives, op: str, size_bytes: int, n: int, device):
    """A buffer of size_bytes (fp32; the whole buffer, nccl-tests' convention) and the call that
    runs `op` on it in place, as the stages call it."""
    piece = size_bytes // (4 * n)  # fp32 elements per rank
    if op == "all_reduce":
        buf = torch.zeros(size_bytes // 4, device=device)
        return buf, lambda: comm.all_reduce(buf)
    buf = torch.zeros(n * piece, device=device)
    return buf, lambda: getattr(comm, op)(buf, [piece] * n)


def collectives(rank: int, n: int, cfg: CalibrationWorld, device, progress: Progress,
                seconds_per_size: float) -> list[dict]:
    """One sweep over cfg's modes, ops and sizes, each size timed for about seconds_per_size;
    rows without bandwidths (_bandwidths adds them to the row kept). The iterations' bounds
    are COLLECTIVE_ITERATIONS' shared out over cfg.rounds."""
    if n == 1:
        return []
    least, most = COLLECTIVE_ITERATIONS
    bounds = (-(-least // cfg.rounds), max(1, most // cfg.rounds))
    recorder = Recorder(rank, device, profile_memory=False)  # as the stages call them
    watch.instrument(recorder, watch.Heartbeat(cfg.progress_file))
    progress.begin("collectives",
                   len(cfg.collective_modes) * len(COLLECTIVE_OPS) * len(cfg.sizes))
    rows = []
    for impl in cfg.collective_modes:
        comm = Collectives(impl, rank, n, recorder, cfg.backend, timeout_s=cfg.timeout_s)
        for op in COLLECTIVE_OPS:
            for size in cfg.sizes:
                buf, run = _collective_call(comm, op, size, n, device)
                barrier(device)
                warm = [timed(run, device) for _ in range(1 if size >= LARGE_BYTES else WARMUP)]
                k = iterations(warm[-1], seconds_per_size, bounds, device)
                times = max_over_ranks([timed(run, device) for _ in range(k)], device)
                # The mean, as nccl-tests reports it (a loop's time over its iterations): on a
                # CPU box a collective's time is bimodal (the peer's thread awake or not), and
                # the median jumps between the modes from one size to the next.
                rows.append({"impl": impl, "op": op, "ranks": n,
                             "size_bytes": buf.numel() * buf.element_size(),
                             "time_s": statistics.fmean(times),
                             "median_s": statistics.median(times), "iterations": k})
                recorder.events.clear()
                del buf, run
                progress.tick(f"{impl} {op} {rows[-1]['size_bytes']} B")
    return rows


def _units(scenario, device):
    """Embedding, first block and head, materialised alone, with a call and an input each."""
    m, t = scenario.model, scenario.training
    dtype = DTYPES[t.precision]
    model = build_model(m, flash=t.flash_attention)
    embedding = materialize(model.embedding, 0, dtype, device)
    block = materialize(model.blocks[0], 0, dtype, device)
    head = materialize(model.head, 0, dtype, device)
    params = [*embedding.parameters(), *block.parameters(), *head.parameters()]
    for p in params:  # gradients accumulate in place, as into DDP's flat buffer
        p.grad = torch.zeros_like(p)

    def inputs(b: int):
        idx = torch.randint(0, m.vocab, (b, t.seq_len), device=device)
        x = torch.randn(b, t.seq_len, m.hidden, device=device).to(dtype)
        return idx, x

    calls = {EMBEDDING: lambda x, targets: embedding(x),
             BLOCK: lambda x, targets: block(x),
             HEAD: lambda x, targets: head(x, embedding.tok.weight, targets)}
    return calls, inputs, params


def compute(n: int, cfg: CalibrationWorld, device, progress: Progress) -> list[dict]:
    scenario = cfg.scenario
    calls, inputs, params = _units(scenario, device)
    ptrs = {p.untyped_storage().data_ptr() for p in params}
    tracker = ActivationTracker(Ledger(), lambda ptr: ptr in ptrs)  # DDP.step's saved-tensor hooks
    loss_grad = torch.tensor(LossScale(scenario.training.precision).value, device=device)
    progress.begin("compute", len(UNIT_KINDS) * len(cfg.micro_batches))
    rows = []
    for b in cfg.micro_batches:
        idx, x = inputs(b)
        for unit in UNIT_KINDS:
            grad = None

            def once():
                nonlocal grad
                for p in params:
                    p.grad.zero_()
                x_in = idx if unit == EMBEDDING else x.detach().requires_grad_()
                sync(device)
                start = time.perf_counter()
                with tracker.hooks():
                    out = calls[unit](x_in, idx)
                sync(device)
                middle = time.perf_counter()
                if grad is None:
                    grad = loss_grad if unit == HEAD else torch.ones_like(out)
                torch.autograd.backward(out, grad)
                sync(device)
                end = time.perf_counter()
                tracker.release()
                return middle - start, end - middle

            barrier(device)
            passes = list(zip(*until(once, sum, device)))
            rows.append({"processes": n, "unit": unit, "micro_batch": b,
                         "seq_len": scenario.training.seq_len,
                         **{f"{name}_s": statistics.median(times)
                            for name, times in zip(PASSES, passes)},
                         "iterations": len(passes[0])})
            progress.tick(f"{unit} micro-batch {b}")
    return rows


def optimizer(n: int, cfg: CalibrationWorld, device, progress: Progress) -> list[dict]:
    """What the stages time as "optimizer": unscaled_grad + step, on a flat shard."""
    precision = cfg.scenario.training.precision
    dtype, scale = DTYPES[precision], LossScale(precision).value
    progress.begin("optimizer", len(cfg.optimizer_elements))
    rows = []
    for elements in cfg.optimizer_elements:
        step = _optimizer_step(elements, dtype, scale, n, cfg.lr, device)
        barrier(device)
        times = until(step, float, device)
        del step  # its buffers, before the next size's
        rows.append({"processes": n, "precision": precision, "elements": elements,
                     "time_s": statistics.median(times), "iterations": len(times)})
        progress.tick(f"{elements} elements")
    release_flush(device)  # else the memory runs' allocator peaks would carry it (CUDA)
    return rows


def _optimizer_step(elements: int, dtype, scale: float, n: int, lr: float, device):
    """One timed optimizer step over a fresh shard of `elements`, as a call (its buffers go
    with it)."""
    param = (torch.randn(elements, device=device) * 0.02).to(dtype)
    grad = torch.empty(elements, dtype=dtype, device=device)
    opt = ShardAdam(param, grad, world_size=n, ledger=Ledger(), ideal_elements=elements, lr=lr)

    def once() -> float:
        grad.fill_(1e-3)  # fp32 divides it in place: refill, or it decays into denormals
        flush_caches(device)  # the step finds its states cold, as after forward and backward
        return timed(lambda: opt.step(opt.unscaled_grad(scale)), device)

    return once


def memory(rank: int, n: int, cfg: CalibrationWorld, device, progress: Progress) -> list[dict]:
    """train.train itself, per (stage, micro-batch): memory from the allocator (CPU: profiler)
    and ledger over MEMORY_STEPS steps, then step timings over TIMED_STEPS more without the
    profiler: kept in the profile as measurements of the real stages, which nothing is fitted to
    (the record is the microbenchmarks'): a held-out check of the box's own record."""
    progress.begin("memory", len(cfg.memory_scenarios))
    rows = []
    for (stage, b), scenario in cfg.memory_scenarios.items():
        gc.collect()
        if device.type == "cuda":
            # As a run's fresh process starts: no blocks cached by the sections before (the
            # GEMM grid, the replays) in its reserved figures, and train reports the peak since
            # the last reset, this run's only.
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        result = train(rank, n, RunConfig(
            scenario=scenario, stage=stage, backend=cfg.backend,
            collectives=cfg.collective_modes[0], steps=MEMORY_STEPS, timed_steps=TIMED_STEPS,
            seed=0, lr=cfg.lr, nproc=n, timeout_s=cfg.timeout_s,
            progress_file=cfg.progress_file))
        # The same step figures `zerosim validate` takes from a run, for this rank.
        timing = step_figures({"steps": MEMORY_STEPS, "timed_steps": TIMED_STEPS,
                               "events": result["events"],
                               "memory_samples": result["memory_samples"]})
        rows.append({"stage": stage, "micro_batch": b, "peak_bytes": result["peak_bytes"],
                     "phases": result["phases"], "timing": timing,
                     "ledger_phases": {point: sum(by_category.values())
                                       for point, by_category in result["ledger_phases"].items()}})
        del result
        progress.tick(f"stage {stage} micro-batch {b}")
    return rows
