"""Helpers for the zero_real tests: the single-process reference and workers run in spawned ranks.

The reference is plain PyTorch: the whole model in one process, autograd over the whole global
batch, torch.optim.Adam. Nothing of zero_real's stages, buffers or optimizer is used.
"""

from __future__ import annotations

import dataclasses
import os
import time

import torch

from zero_real.parts.model import build_model, materialize, micro_batches, random_batch
from zero_real.run.runconfig import RankSetup, RunConfig
from zerosim.contract import COLLECTIVE_OPS

LR = 1e-3
SEED = 1234


def global_rows(scenario, world_size: int) -> range:
    """Every row of one optimizer step's global batch: all ranks' micro-batches of all their
    micro-steps (A x N x b); the mean loss over them is the mean over the equal micro-batches."""
    t = scenario.training
    return range(t.gradient_accumulation * world_size * t.micro_batch)


def reference_train(scenario, world_size: int, steps: int, seed: int = SEED, lr: float = LR):
    """Final parameters and losses of one process training on all ranks' data at once (under
    gradient accumulation, all micro-steps' data too: one step on the mean loss over them)."""
    t = scenario.training
    model = materialize(build_model(scenario.model, flash=scenario.training.flash_attention), seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        idx, targets = random_batch(scenario.model.vocab, global_rows(scenario, world_size),
                                    t.seq_len, seed, step)
        opt.zero_grad()
        loss = model(idx, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {n: p.detach().clone() for n, p in model.named_parameters()}, losses


def reference_grads(scenario, world_size: int, seed: int = SEED) -> dict[str, torch.Tensor]:
    """Gradients of the first step's loss over all ranks' (and micro-steps') data, by name."""
    t = scenario.training
    model = materialize(build_model(scenario.model, flash=scenario.training.flash_attention), seed)
    idx, targets = random_batch(scenario.model.vocab, global_rows(scenario, world_size),
                                t.seq_len, seed, 0)
    model(idx, targets).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def reference_shard(grads: dict[str, torch.Tensor], layout, lo: int, hi: int) -> torch.Tensor:
    """Elements [lo, hi) of the reference gradient laid out like `layout`: flattened, padded."""
    flat = torch.zeros(layout.padded)
    for slot in layout.slots:
        flat[slot.offset:slot.offset + slot.numel] = grads[slot.name].flatten()
    return flat[lo:hi]


def gradient_shards(rank: int, world_size: int, setup: RankSetup, stage: int, scenario,
                    seed: int = SEED, lr: float = LR) -> list:
    """One step of `stage` (native collectives); for each flat buffer, its layout, the range the
    optimizer steps (the owned shard; DDP: everything) and the averaged gradient it stepped with
    (divided by N in place before Adam; under offload, the host copy)."""
    from zero_real.parts.collectives import Collectives
    from zero_real.parts.measure import Recorder
    from zero_real.stages import STAGES

    cpu, t = torch.device("cpu"), scenario.training
    recorder = Recorder(rank, cpu, profile_memory=False)
    comm = Collectives("native", rank, world_size, recorder, setup.backend,
                       timeout_s=setup.timeout_s)
    model = build_model(scenario.model, flash=scenario.training.flash_attention)
    engine = STAGES[stage](model, scenario, rank=rank, world_size=world_size,
                           comm=comm, recorder=recorder, device=cpu, seed=seed, lr=lr)
    engine.step(micro_batches(scenario.model.vocab, t, rank, world_size, seed, 0), 0)
    flats = engine.groups if stage == 3 else [engine.flat]
    shard_rank = engine.shard_comm.rank  # the rank's place in its shard group (hybrid sharding)
    return [(flat.layout, flat.layout.owned(shard_rank) if stage else (0, flat.layout.padded),
             opt.grad.float().clone()) for flat, opt in zip(flats, engine.optimizers)]


def run_config(setup: RankSetup, **run) -> RunConfig:
    """A RunConfig that starts its ranks as `setup` does."""
    return RunConfig(**{f.name: getattr(setup, f.name) for f in dataclasses.fields(RankSetup)},
                     **run)


def parity_worker(rank: int, world_size: int, setup: RankSetup, *, runs=(), grad_runs=(),
                  steps: int, profile_memory: bool = True) -> dict:
    """Every (stage, collectives, scenario) combination of `runs`, in one process group: one
    spawn per world size instead of one per combination. Spawn it as
    functools.partial(parity_worker, runs=..., steps=...)."""
    from zero_real.run.train import train

    out = {}
    for stage, collectives, scenario in runs:
        cfg = run_config(setup, scenario=scenario, stage=stage, collectives=collectives,
                         steps=steps, seed=SEED, lr=LR, profile_memory=profile_memory,
                         return_params=True)
        result = train(rank, world_size, cfg)
        out[(stage, collectives, scenario.training.precision, scenario.model.name)] = {
            "params": result["params"], "losses": result["losses"], "ledger": result["ledger"],
            "phases": result["phases"], "ledger_phases": result["ledger_phases"],
            "peak_bytes": result["peak_bytes"], "events": result["events"]}
    for stage, scenario in grad_runs:
        out[("grads", stage, scenario.model.name)] = gradient_shards(rank, world_size, setup, stage,
                                                                     scenario)
    return out


def train_worker(rank: int, world_size: int, setup: RankSetup, *, runs=(), grad_runs=(),
                 steps: int) -> dict:
    """train's whole result for each (key, stage, collectives, scenario[, RunConfig fields]) of
    `runs`, without the memory profiler, and gradient_shards for each (key, stage, scenario) of
    `grad_runs`, by key, in one process group. Spawn it as
    functools.partial(train_worker, runs=..., steps=...)."""
    from zero_real.run.train import train

    out = {}
    for key, stage, collectives, scenario, *more in runs:
        fields = {"steps": steps, "profile_memory": False, "return_params": True, **dict(*more)}
        out[key] = train(rank, world_size, run_config(
            setup, scenario=scenario, stage=stage, collectives=collectives, seed=SEED, lr=LR,
            **fields))
    for key, stage, scenario in grad_runs:
        out[key] = gradient_shards(rank, world_size, setup, stage, scenario)
    return out


def freed_worker(rank: int, world_size: int, setup: RankSetup, *, scenario, steps: int) -> dict:
    """For each stage, a run by train() and then whether its stage object survived it (after a
    garbage collection): by stage, True where the stage still lives."""
    import gc
    import weakref

    from zero_real.run import train as train_module
    from zero_real.stages import STAGES

    alive = {}
    for stage in sorted(STAGES):
        built = []

        def tracked(*args, cls=STAGES[stage], **kwargs):
            engine = cls(*args, **kwargs)
            built.append(weakref.ref(engine))
            return engine

        saved, STAGES[stage] = STAGES[stage], tracked
        try:
            train_module.train(rank, world_size, run_config(
                setup, scenario=scenario, stage=stage, collectives="native", seed=SEED, lr=LR,
                steps=steps, profile_memory=False))
        finally:
            STAGES[stage] = saved
        gc.collect()
        alive[stage] = built[0]() is not None
    return alive


# ---- faults, injected from here: zero_real's code paths know nothing of them ------------------

def train_dying(rank: int, world_size: int, cfg: RunConfig, *, die_rank: int,
                die_step: int) -> dict:
    """train, but rank `die_rank` vanishes (os._exit, no error message) as step `die_step`
    starts: a rank killed mid-run. The patch lives in that rank's own process only."""
    from zero_real.run.train import train
    from zero_real.stages import STAGES

    if rank == die_rank:
        stage = STAGES[cfg.stage]
        step = stage.step

        def dying_step(self, batches, number):
            if number == die_step:
                os._exit(17)
            return step(self, batches, number)

        stage.step = dying_step
    return train(rank, world_size, cfg)


def train_hanging(rank: int, world_size: int, cfg: RunConfig, *, hang_rank: int, hang_step: int,
                  hang_collective: int = 1) -> dict:
    """train, but rank `hang_rank` stops, alive, before collective number `hang_collective`
    (from 0) of step `hang_step`: its peers wait in that collective, then time out."""
    from zero_real.parts.collectives import Collectives
    from zero_real.run.train import train

    if rank == hang_rank:
        calls: dict[int, int] = {}

        def hanging(method):
            def call(self, *args, **kwargs):
                step = self.recorder.step
                calls[step] = calls.get(step, 0) + 1
                if step == hang_step and calls[step] > hang_collective:
                    while True:
                        time.sleep(3600)
                return method(self, *args, **kwargs)
            return call

        for op in COLLECTIVE_OPS:
            setattr(Collectives, op, hanging(getattr(Collectives, op)))
    return train(rank, world_size, cfg)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b||, the size of a difference relative to the tensor."""
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


# ---- tensor parallelism: a rank's slices put back together, by hand ---------------------------

VOCAB_PARALLEL = ("tok", "lm_head")
COLUMN_PARALLEL = ("qkv", "gate", "up")
ROW_PARALLEL = ("proj", "down")


def assemble_tensor_parallel(name: str, parts: list[torch.Tensor], m) -> torch.Tensor:
    """The single-process parameter `name` from its t tensor-parallel slices (rank order), in
    Megatron's layout as written out here, independently of zero_real.parts.tensor_model: the
    vocabulary's rows concatenated and the padding cut; column-parallel outputs concatenated
    (the QKV's in Megatron's order, per key/value group its query heads, key and value, put back
    as [all Q | all K | all V]); row-parallel weights' input columns concatenated; everything
    else replicated, so every rank's copy must be equal."""
    module, leaf = name.split(".")[-2:]
    if module in VOCAB_PARALLEL:
        return torch.cat(parts)[:m.vocab]
    if module in ROW_PARALLEL and leaf == "weight":
        return torch.cat(parts, dim=1)
    if module not in COLUMN_PARALLEL:
        for p in parts[1:]:
            assert torch.equal(p, parts[0]), f"{name}: replicas differ"
        return parts[0]
    whole = torch.cat(parts)
    if module != "qkv":
        return whole
    d = m.head_dim
    per_group = m.heads // m.n_kv_heads * d  # query rows of one key/value group
    qs, ks, vs = [], [], []
    for g in range(m.n_kv_heads):
        rows = whole[g * (per_group + 2 * d):(g + 1) * (per_group + 2 * d)]
        qs.append(rows[:per_group])
        ks.append(rows[per_group:per_group + d])
        vs.append(rows[per_group + d:])
    return torch.cat(qs + ks + vs)
