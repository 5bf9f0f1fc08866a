"""zero_real against PyTorch's own on the same box, stage by stage: DDP (stage 0),
ZeroRedundancyOptimizer wrapping Adam over a DDP model (stage 1), FSDP2 fully_shard with
reshard_after_forward=False (stage 2) and True (stage 3); same model, data and Adam, gloo on CPU.

    python bench/real_vs_peers.py [SCENARIO] [--nproc 2] [--runs 3] [--steps 3] [--timed-steps 30]

Each implementation runs in fresh processes, `--runs` times over. Peak: the torch profiler's CPU
allocation total over the first `--steps` steps, measured the same way for every implementation
(zero_real.parts.measure.Recorder). Step time: the profiler is stopped, then `--timed-steps` more
run; a step is the time between consecutive step ends in the training loop (making the batch
included, for both sides), and the figure is the median of those periods, the first timed step
(warm-up after the profiler stops) left out. The ratio of each run is zero_real's median over its
peer's, both from that run.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from functools import partial

import torch
import torch.distributed as dist

from zero_real.parts.measure import Recorder
from zero_real.parts.model import build_model, materialize, random_batch
from zero_real.run.launch import spawn
from zero_real.run.runconfig import RunConfig
from zero_real.run.train import share_cores, train
from zerosim.scenario.load import load_scenario
from zerosim.units import MiB

# (peer's label, its kind, the zero_real stage compared with it)
PEERS = [("DDP (torch)", "ddp", 0),
         ("ZeroRedundancyOptimizer (Adam over DDP)", "zero_redundancy", 1),
         ("FSDP2 reshard_after_forward=False", "fsdp2_stage2", 2),
         ("FSDP2 fully_shard", "fsdp2_stage3", 3)]


def wrap(model, kind: str, bucket_MiB: float):
    """The peer's model and its Adam, as torch's documentation builds them."""
    from torch.nn.parallel import DistributedDataParallel

    if kind in ("ddp", "zero_redundancy"):
        wrapped = DistributedDataParallel(model, bucket_cap_mb=bucket_MiB)
        if kind == "ddp":
            return wrapped, torch.optim.Adam(wrapped.parameters(), lr=1e-3)
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return wrapped, ZeroRedundancyOptimizer(wrapped.parameters(),
                                                optimizer_class=torch.optim.Adam, lr=1e-3)
    from torch.distributed.fsdp import fully_shard

    reshard = kind == "fsdp2_stage3"
    for block in model.blocks:
        fully_shard(block, reshard_after_forward=reshard)
    wrapped = fully_shard(model, reshard_after_forward=reshard)
    return wrapped, torch.optim.Adam(wrapped.parameters(), lr=1e-3)


def peer(rank: int, world: int, cfg: RunConfig, kind: str) -> dict:
    """One rank of a torch implementation (`kind`) training the scenario's model: cfg.steps
    steps under the memory profiler, then cfg.timed_steps without it."""
    scenario, t = cfg.scenario, cfg.scenario.training
    # The thread count zero_real's train() gives each rank: the same share of the box's cores.
    share_cores(torch.device("cpu"), cfg.nproc)
    recorder = Recorder(rank, torch.device("cpu"))
    model = materialize(build_model(scenario.model), cfg.seed)
    wrapped, opt = wrap(model, kind, t.reduce_bucket_MiB)
    # DDP keeps its gradients between steps (as zero_real's stages 0 and 1 do); FSDP2 frees them.
    keep_grads = kind in ("ddp", "zero_redundancy")
    dist.barrier()
    ends = []
    for step in range(cfg.steps + cfg.timed_steps):
        if step == cfg.steps:
            recorder.finish()
        rows = range(rank * t.micro_batch, (rank + 1) * t.micro_batch)
        idx, targets = random_batch(scenario.model.vocab, rows, t.seq_len, cfg.seed, step)
        opt.zero_grad(set_to_none=not keep_grads)
        wrapped(idx, targets).backward()
        opt.step()
        ends.append(time.perf_counter())
    return {"peak_bytes": recorder.finish(), "step_s": _median_period(ends[cfg.steps:])}


def ours(rank: int, world: int, cfg: RunConfig) -> dict:
    result = train(rank, world, cfg)
    # The "after_step" memory mark ends each step: the same step ends the peers time.
    ends = sorted(s["t_s"] for s in result["memory_samples"]
                  if s["point"] == "after_step" and s["step"] >= cfg.steps)
    return {"peak_bytes": result["peak_bytes"], "step_s": _median_period(ends)}


def _median_period(ends: list[float]) -> float:
    """Median time between consecutive step ends (the first end only starts the clock)."""
    return statistics.median(b - a for a, b in itertools.pairwise(ends))


def one_run(scenario, args) -> dict[str, float]:
    """Every row once, printed as it finishes; returns each comparison's ratio."""
    def cfg(stage: int, collectives: str = "native") -> RunConfig:
        return RunConfig(scenario=scenario, stage=stage, collectives=collectives,
                         backend="gloo", steps=args.steps, timed_steps=args.timed_steps,
                         timeout_s=120, nproc=args.nproc)

    def row(label: str, fn, run_cfg: RunConfig) -> float:
        result = spawn(fn, args.nproc, run_cfg, timeout_s=600)[0]
        print(f"{label:42} {result['step_s'] * 1e3:9.2f} {result['peak_bytes'] / MiB:18.2f}",
              flush=True)
        return result["step_s"]

    print(f"{'implementation':42} {'step ms':>9} {'peak MiB (rank 0)':>18}")
    ratios = {}
    for label, kind, stage in PEERS:
        theirs = row(label, partial(peer, kind=kind), cfg(stage))
        ratios[f"stage {stage} / {label}"] = row(f"zero_real stage {stage}", ours, cfg(stage)) / theirs
    row("zero_real stage 3 (ring)", ours, cfg(3, "ring"))
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/tiny_gpt_4rank_cpu.toml")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="steps under the memory profiler")
    parser.add_argument("--timed-steps", type=int, default=30, help="steps timed after those")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    scenario = load_scenario(args.scenario, [*args.overrides, f"cluster.gpus_per_node={args.nproc}"])
    print(f"{scenario.model.name}: {args.nproc} gloo ranks, {args.steps} profiled + "
          f"{args.timed_steps} timed steps, {args.runs} runs, torch {torch.__version__}")
    runs = []
    for run in range(args.runs):
        print(f"\nrun {run + 1}")
        runs.append(one_run(scenario, args))
    print("\nzero_real's step time over its peer's, each run:")
    for name in runs[0]:
        print(f"  {name:54} " + "  ".join(f"{r[name]:.3f}x" for r in runs))


if __name__ == "__main__":
    main()
