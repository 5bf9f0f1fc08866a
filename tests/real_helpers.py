"""Helpers for the zero_real tests: the single-process reference and workers run in spawned ranks.

The reference is plain PyTorch: the whole model in one process, autograd over the whole global
batch, torch.optim.Adam. Nothing of zero_real's stages, buffers or optimizer is used.
"""

from __future__ import annotations

import torch

from zero_real.model import build_model, materialize, random_batch

LR = 1e-3
SEED = 1234


def reference_train(scenario, world_size: int, steps: int, seed: int = SEED, lr: float = LR):
    """Final parameters and losses of one process training on all ranks' data at once."""
    t = scenario.training
    model = materialize(build_model(scenario.model), seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        idx, targets = random_batch(scenario.model.vocab, range(world_size * t.micro_batch),
                                    t.seq_len, seed, step)
        opt.zero_grad()
        loss = model(idx, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {n: p.detach().clone() for n, p in model.named_parameters()}, losses


def reference_grads(scenario, world_size: int, seed: int = SEED) -> dict[str, torch.Tensor]:
    """Gradients of the first step's loss over all ranks' data, by parameter name."""
    t = scenario.training
    model = materialize(build_model(scenario.model), seed)
    idx, targets = random_batch(scenario.model.vocab, range(world_size * t.micro_batch),
                                t.seq_len, seed, 0)
    model(idx, targets).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def reference_shard(grads: dict[str, torch.Tensor], layout, lo: int, hi: int) -> torch.Tensor:
    """Elements [lo, hi) of the reference gradient laid out like `layout`: flattened, padded."""
    flat = torch.zeros(layout.padded)
    for slot in layout.slots:
        flat[slot.offset:slot.offset + slot.numel] = grads[slot.name].flatten()
    return flat[lo:hi]


def gradient_shards(rank: int, world_size: int, cfg: dict, stage: int, scenario) -> list:
    """One step of `stage` (native collectives); for each flat buffer, its layout, the range the
    optimizer steps (the owned shard; DDP: everything) and the averaged gradient it stepped with
    (divided by N in place before Adam)."""
    from zero_real.collectives import Collectives
    from zero_real.measure import Recorder
    from zero_real.stages import STAGES

    cpu, t = torch.device("cpu"), scenario.training
    recorder = Recorder(rank, cpu, profile_memory=False)
    comm = Collectives("native", rank, world_size, recorder, cfg["backend"])
    engine = STAGES[stage](build_model(scenario.model), scenario, rank=rank, world_size=world_size,
                           comm=comm, recorder=recorder, device=cpu, seed=cfg["seed"], lr=cfg["lr"])
    rows = range(rank * t.micro_batch, (rank + 1) * t.micro_batch)
    engine.step(*random_batch(scenario.model.vocab, rows, t.seq_len, cfg["seed"], 0), 0)
    flats = engine.groups if stage == 3 else [engine.flat]
    return [(flat.layout, flat.layout.owned(rank) if stage else (0, flat.layout.padded),
             opt.grad.float().clone()) for flat, opt in zip(flats, engine.optimizers)]


def parity_worker(rank: int, world_size: int, cfg: dict) -> dict:
    """Every (stage, collectives, precision) combination in cfg["runs"], in one process group:
    one spawn per world size instead of one per combination."""
    from zero_real.launch import train

    out = {}
    for stage, collectives, scenario in cfg["runs"]:
        run_cfg = dict(cfg, stage=stage, collectives=collectives, scenario=scenario,
                       return_params=True)
        result = train(rank, world_size, run_cfg)
        out[(stage, collectives, scenario.training.precision, scenario.model.name)] = {
            "params": result["params"], "losses": result["losses"], "ledger": result["ledger"],
            "phases": result["phases"], "ledger_phases": result["ledger_phases"],
            "peak_bytes": result["peak_bytes"], "events": result["events"]}
    for stage, scenario in cfg.get("grad_runs", ()):
        out[("grads", stage, scenario.model.name)] = gradient_shards(rank, world_size, cfg, stage,
                                                                     scenario)
    return out


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b||, the size of a difference relative to the tensor."""
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()
