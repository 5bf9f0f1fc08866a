"""zero_real against PyTorch's own on the same box: DDP (stage 0) and FSDP2 fully_shard (stage 3,
and stage 2 as reshard_after_forward=False), same model, data, steps, gloo on CPU.

    python bench/real_vs_peers.py [SCENARIO] [--nproc 2] [--steps 6]

Step time: median over the steps after the first (warm-up). Peak: the torch profiler's CPU
allocation total, measured the same way for every implementation (zero_real.measure.Recorder).
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch
import torch.distributed as dist

from zero_real.launch import spawn
from zero_real.measure import Recorder
from zero_real.model import build_model, materialize, random_batch
from zero_real.runconfig import RunConfig
from zero_real.train import share_cores, train
from zerosim.units import MiB
from zerosim.scenario.load import load_scenario


def peer(rank: int, world: int, cfg: RunConfig, kind: str) -> dict:
    """One rank of DDP or FSDP2 (`kind`) training the scenario's model with torch.optim.Adam."""
    scenario, t = cfg.scenario, cfg.scenario.training
    # The thread count zero_real's train() gives each rank: the same share of the box's cores.
    share_cores(torch.device("cpu"), cfg.nproc)
    recorder = Recorder(rank, torch.device("cpu"))
    model = materialize(build_model(scenario.model), cfg.seed)
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        bucket_mb = t.reduce_bucket_MiB
        wrapped = DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    else:
        from torch.distributed.fsdp import fully_shard

        reshard = kind == "fsdp2_stage3"
        for block in model.blocks:
            fully_shard(block, reshard_after_forward=reshard)
        wrapped = fully_shard(model, reshard_after_forward=reshard)
    opt = torch.optim.Adam(wrapped.parameters(), lr=1e-3)
    times = []
    for step in range(cfg.steps):
        rows = range(rank * t.micro_batch, (rank + 1) * t.micro_batch)
        idx, targets = random_batch(scenario.model.vocab, rows, t.seq_len, cfg.seed, step)
        dist.barrier()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=kind != "ddp")
        wrapped(idx, targets).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return {"peak_bytes": recorder.finish(), "step_s": _median_after_warmup(times)}


def ours(rank: int, world: int, cfg: RunConfig) -> dict:
    result = train(rank, world, cfg)
    # The "after_step" memory mark ends each step; the time between consecutive marks is one
    # step (compute segments split around collectives, so events make no step boundary).
    ends = sorted(s["t_s"] for s in result["memory_samples"] if s["point"] == "after_step")
    periods = [b - a for a, b in zip(ends, ends[1:])]
    if not periods:  # one step: from its first event to its end
        periods = [ends[0] - min(e["start_s"] for e in result["events"])]
    return {"peak_bytes": result["peak_bytes"], "step_s": statistics.median(periods)}


def _median_after_warmup(times: list[float]) -> float:
    """Median of the steps after the first (warm-up); with one step, that step."""
    return statistics.median(times[1:] or times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/tiny_gpt_4rank_cpu.toml")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    scenario = load_scenario(args.scenario, [*args.overrides, f"cluster.gpus_per_node={args.nproc}"])
    def cfg(stage: int, collectives: str = "native") -> RunConfig:
        return RunConfig(scenario=scenario, stage=stage, collectives=collectives, backend="gloo",
                         steps=args.steps, timeout_s=120, nproc=args.nproc)

    rows = [("DDP (torch)", partial(peer, kind="ddp"), cfg(0)),
            ("zero_real stage 0", ours, cfg(0)),
            ("FSDP2 reshard_after_forward=False", partial(peer, kind="fsdp2_stage2"), cfg(2)),
            ("zero_real stage 2", ours, cfg(2)),
            ("FSDP2 fully_shard", partial(peer, kind="fsdp2_stage3"), cfg(3)),
            ("zero_real stage 3", ours, cfg(3)),
            ("zero_real stage 3 (ring)", ours, cfg(3, "ring"))]
    print(f"{scenario.model.name}: {args.nproc} gloo ranks, {args.steps} steps, torch {torch.__version__}")
    print(f"{'implementation':36} {'step ms':>9} {'peak MiB (rank 0)':>18}")
    for label, fn, run_cfg in rows:
        result = spawn(fn, args.nproc, run_cfg, timeout_s=600)[0]
        print(f"{label:36} {result['step_s'] * 1e3:9.1f} {result['peak_bytes'] / MiB:18.2f}")


if __name__ == "__main__":
    main()
