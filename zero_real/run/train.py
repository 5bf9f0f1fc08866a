"""What one rank does in a run: build the stage, train it for the measured steps, return what it
measured; and the measurement file assembled from every rank's results.

`run` is a local run (launch.spawn: nproc processes, or one process against a fake world of
fake_world_size: collectives do nothing, so memory is one rank's at W-way sharding, and the
numbers are not trained values); `run_under_torchrun` is one process of a torchrun launch.
"""

from __future__ import annotations

import gc
import os
import platform

import torch
import torch.distributed as dist

from zero_real.run import watch
from zero_real.run.launch import init_distributed, spawn
from zero_real.run.runconfig import RunConfig
from zerosim.contract import STAGE_NAMES, Measurement, RankMeasurement
from zerosim.analytic.memory import pipeline_memory, stage_memory


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


def share_cores(device: torch.device, nproc: int) -> None:
    """Ranks on one CPU box share its cores: no oversubscription."""
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // nproc))


def train(rank: int, world_size: int, cfg: RunConfig) -> dict:
    """Build the stage, run cfg.steps steps measuring memory and cfg.timed_steps more without
    the profiler, return this rank's measurements."""
    from zero_real.parts.collectives import Collectives
    from zero_real.parts.measure import Recorder
    from zero_real.parts.model import micro_batches
    from zero_real.run.progress import Progress
    from zero_real.stages import STAGES

    scenario = cfg.scenario
    device = device_for(cfg.backend, rank)
    share_cores(device, cfg.nproc)
    gc.collect()  # an earlier run in this process (tests) must not free its buffers mid-measurement
    recorder = Recorder(rank, device, cfg.profile_memory)  # before any allocation
    heartbeat = watch.Heartbeat(cfg.progress_file)
    watch.instrument(recorder, heartbeat)
    comm = Collectives(cfg.collectives, rank, world_size, recorder, cfg.backend,
                       timeout_s=cfg.timeout_s)
    engine, data = build_stage(scenario, comm, STAGES[cfg.stage], recorder=recorder,
                               device=device, seed=cfg.seed, lr=cfg.lr)
    recorder.mark("after_init", 0)
    t, pipeline = scenario.training, scenario.parallelism.pipeline_parallel
    rank_losses = []
    under_profiler = recorder.profiling
    progress = Progress(cfg.progress_path, rank)
    progress.begin("steps", cfg.steps + cfg.timed_steps)
    # Memory is measured over the first `steps` steps; `timed_steps` more run with memory
    # profiling off, so their timings carry no profiler overhead.
    try:
        for step in range(cfg.steps + cfg.timed_steps):
            if step == cfg.steps and cfg.timed_steps:
                recorder.finish()
            # One optimizer step's micro-batches, made one by one; a TP group's ranks share theirs.
            batches = micro_batches(scenario.model.vocab, t, data.rank, data.world_size, cfg.seed,
                                    step, device)
            heartbeat.step = recorder.step = step
            rank_losses.append(engine.step(batches, step))
            progress.tick()
        losses = global_losses(rank_losses, world_size, device, world_size // pipeline)
        params = None
        if cfg.return_params:
            params = {k: v.float().cpu() for k, v in engine.full_parameters().items()}
    finally:
        # Unhook the stage: autograd holds its gradient hooks from C++, out of the garbage
        # collector's sight, so a hooked stage would outlive the run with all its buffers.
        for handle in getattr(engine, "hooks", ()):
            handle.remove()
    peak = recorder.finish()
    # Memory at each point as last measured (timed steps after the profiler stopped have none).
    phases = {s["point"]: s.get("measured_bytes") for s in recorder.samples
              if s.get("measured_bytes") is not None or s["step"] < cfg.steps}
    return {"rank": rank, "peak_bytes": peak, "peak_reserved_bytes": recorder.peak_reserved_bytes,
            "peak_device_used_bytes": recorder.peak_device_used_bytes,
            "phases": phases,
            "ledger": recorder.ledger.as_dict(),
            "ledger_phases": {s["point"]: s["bytes_by_category"] for s in recorder.samples},
            "events": recorder.events, "memory_samples": recorder.samples, "losses": losses,
            "params": params, "hardware": hardware(device),
            "pipeline_stage": rank // (world_size // pipeline),  # Megatron's order tp-dp-pp
            "under_profiler": under_profiler and not cfg.timed_steps}


def build_stage(scenario, comm, stage_cls, **engine_kwargs):
    """(the rank's stage, built by `stage_cls` with `engine_kwargs`; its data-parallel group's
    Collectives). Under pipeline parallelism the stage runs the rank's pipeline stage
    (parts/pipeline.py); else the rank's model (build_rank_model)."""
    if scenario.parallelism.pipeline_parallel > 1:
        from zero_real.parts.pipeline import build_pipeline_stage

        return build_pipeline_stage(scenario, comm, stage_cls, **engine_kwargs)
    model, data = build_rank_model(scenario, comm)  # data: the stage's group (the world at t = 1)
    return stage_cls(model, scenario, rank=data.rank, world_size=data.world_size, comm=data,
                     **engine_kwargs), data


def build_rank_model(scenario, comm):
    """(the model as this rank holds it, on the meta device; the data-parallel group's
    Collectives). Tensor parallelism of t: the rank's Megatron slice (parts/tensor_model.py),
    its collectives on the t consecutive ranks of its group, the stage's on the N/t ranks t apart
    (collectives.tensor_groups_of); else the whole model, and the world."""
    from zero_real.parts.collectives import tensor_groups_of
    from zero_real.parts.model import build_model
    from zero_real.parts.tensor_model import build_tensor_parallel_model

    p, flash = scenario.parallelism, scenario.training.flash_attention
    if p.tensor_parallel == 1:
        return build_model(scenario.model, flash=flash), comm
    groups = tensor_groups_of(comm, p.tensor_parallel)
    model = build_tensor_parallel_model(scenario.model, groups.tensor, p.sequence_parallel,
                                        flash=flash)
    return model, groups.data


def global_losses(rank_losses: list[float], world_size: int, device: torch.device,
                  holders: int | None = None) -> list[float]:
    """Each step's loss averaged over the `holders` ranks that hold one (all of them, or a
    pipeline's last stage), from this rank's (the stage's step returns the mean over its
    micro-batches, all of one size: this is the mean over the global batch; a rank without a
    loss returns 0). One collective after the run rather than one in every step; bookkeeping,
    so not recorded."""
    total = torch.tensor(rank_losses, dtype=torch.float64, device=device)
    if world_size > 1:
        dist.all_reduce(total)
    return (total / (holders or world_size)).tolist()


def measurement(cfg: RunConfig, results: list[dict], world_size: int) -> Measurement:
    """The measurement file: run settings, per-rank memory and ledger, events, losses."""
    # An optional figure a rank did not measure (reserved memory, on CPU) is left out.
    ranks = [RankMeasurement(**{k: r[k] for k in RankMeasurement.__annotations__
                                if r.get(k) is not None or k in RankMeasurement.__required_keys__})
             for r in results]
    return Measurement(
        scenario=cfg.scenario_path, overrides=list(cfg.overrides),
        stage=cfg.stage, stage_name=STAGE_NAMES[cfg.stage],
        world_size=world_size, processes=len(results),
        fake_world_size=cfg.fake_world_size, backend=cfg.backend,
        collectives=cfg.collectives, steps=cfg.steps,
        timed_steps=cfg.timed_steps, seed=cfg.seed,
        torch_version=torch.__version__, hardware=results[0]["hardware"],
        losses=results[0]["losses"],
        zerosim_memory=stage_memory(cfg.scenario, cfg.stage).as_dict(), ranks=ranks,
        **({"zerosim_pipeline_memory": [row.as_dict() for row in
                                        pipeline_memory(cfg.scenario, cfg.stage)]}
           if cfg.scenario.parallelism.pipeline_parallel > 1 else {}),
        # CPU memory profiling adds per-op overhead: timings taken under it are slower. With
        # timed_steps, steps from `steps` on ran without it (memory was measured before them).
        timings_under_profiler=any(r.get("under_profiler", False) for r in results),
        # Collectives run synchronously on the training thread: none overlaps compute.
        overlap_comm=False,
        events=[e for r in results for e in r["events"]],
        memory_samples=[s for r in results for s in r["memory_samples"]])


def run(cfg: RunConfig) -> Measurement:
    """Local run: nproc processes, or one process against a fake world of fake_world_size."""
    if cfg.fake_world_size:
        results = spawn(train, 1, cfg, cfg.run_timeout_s)
        return measurement(cfg, results, cfg.fake_world_size)
    results = spawn(train, cfg.nproc, cfg, cfg.run_timeout_s)
    return measurement(cfg, results, cfg.nproc)


def run_under_torchrun(cfg: RunConfig) -> Measurement | None:
    """torchrun set RANK/WORLD_SIZE/MASTER_ADDR: run here; rank 0 returns the measurement."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    init_distributed(rank, world, cfg.backend, "env://", cfg.timeout_s)
    result = train(rank, world, cfg)
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(result, gathered, dst=0)
    dist.destroy_process_group()
    return measurement(cfg, gathered, world) if rank == 0 else None
