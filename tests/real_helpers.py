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
    return out


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b||, the size of a difference relative to the tensor."""
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()
