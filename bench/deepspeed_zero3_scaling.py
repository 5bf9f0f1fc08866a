"""GPT-3 175B under DeepSpeed ZeRO-3 with its default ds_config on 256, 512, 1024 and 2048 A100s
at a fixed global batch of 2048 sequences of 2048 tokens: how throughput per GPU falls as the
GPU count doubles, and why. A measuring script: it asserts nothing and fits nothing.

    python bench/deepspeed_zero3_scaling.py

The model and cluster are scenarios/gpt3_175b_1024gpu.toml's (96 layers, 12288 wide, A100 80GB
in DGX A100 nodes: NVLink inside, one 200 Gb/s NIC per GPU), in fp16, full activation
checkpointing, with DeepSpeed's defaults: stage3_prefetch_bucket_size 5e7, max_live 1e9,
param_persistence_threshold 1e5, reduce_bucket_size 5e8 elements (zerosim/frameworks/
deepspeed_fetch.py). At N GPUs each rank trains 2048 / N sequences: one micro-batch of them, or
micro-batches of 1 with gradient accumulation (ZeRO-3 gathers again in every micro-step); the
faster split that fits is marked `*`.

Per row: the step, tokens/s per GPU, the all-gathers and reduce-scatters one rank launches per
step (StageResult.comm_calls_per_rank), the communication compute did not hide (the hooks' host
time it did not hide included), the hooks' host time per step hidden or not (DeepSpeed's
per-visit figure: docs/research/deepspeed_zero3_fetch.md sec. 8), the peak memory model and
whether it fits. Each N is shown twice: as DeepSpeed fetches (module by module, small
parameters persistent and re-gathered after the step one blocking all-gather each) and as
framework "zero" gathers (whole layers, one prefetched): the difference is the cause.
About a minute on 2 cores.
"""

from __future__ import annotations

import time
from pathlib import Path

from zerosim.analytic.memory import stage_memory
from zerosim.errors import InputError
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate

ROOT = Path(__file__).resolve().parents[1]
GPT3 = ROOT / "scenarios/gpt3_175b_1024gpu.toml"
GLOBAL_BATCH = 2048
GPU_COUNTS = (256, 512, 1024, 2048)
DS_REDUCE_BUCKET_MiB = 500_000_000 * 2 / 2**20  # DeepSpeed's 5e8 elements of fp16
GiB = 2**30


def row(gpus: int, framework: str, micro: int, steps: int) -> tuple[float, str] | None:
    sets = [f"cluster.nodes={gpus // 8}", "training.precision=fp16",
            f"training.framework={framework}", "training.zero_stage=3",
            f"training.micro_batch={micro}", f"training.gradient_accumulation={steps}",
            f"training.reduce_bucket_MiB={DS_REDUCE_BUCKET_MiB}"]
    try:
        scenario = load_scenario(GPT3, sets)
    except InputError as exc:
        print(f"  {gpus} GPUs, {framework}, {micro} x {steps}: {exc}")
        return None
    memory = stage_memory(scenario, 3)
    fits = memory.peak_bytes <= scenario.cluster.hbm_GiB * GiB
    r = simulate(scenario, 3, keep_events=False)
    calls = r.comm_calls_per_rank
    line = (f"{gpus:>5} {framework:>9} {micro:>3} x {steps:<3} {r.step_time_s:>8.2f} "
            f"{r.tokens_per_s_per_gpu:>8.1f} {calls.get('all_gather', 0):>7} "
            f"{calls.get('reduce_scatter', 0):>7} {r.exposed_comm_s:>9.2f} {r.host_time_s:>7.2f} "
            f"{memory.peak_bytes / GiB:>8.1f}  {'yes' if fits else 'NO'}")
    return (r.tokens_per_s_per_gpu if fits else 0.0), line


def main() -> None:
    start = time.perf_counter()
    print(f"GPT-3 175B, ZeRO-3, global batch {GLOBAL_BATCH} x 2048 tokens, A100 80GB (DGX A100)")
    print(f"{'GPUs':>5} {'framework':>9} {'mb x acc':>9} {'step s':>8} {'tok/s/GPU':>9} "
          f"{'gathers':>7} {'reduces':>7} {'exposed s':>9} {'hooks s':>7} {'peak GiB':>8}  fits")
    for gpus in GPU_COUNTS:
        per_gpu = GLOBAL_BATCH // gpus
        for framework in ("deepspeed", "zero"):
            splits = {(per_gpu, 1), (1, per_gpu)}
            results = [(row(gpus, framework, micro, steps)) for micro, steps in sorted(splits)]
            best = max((r[0] for r in results if r), default=0.0)
            for r in results:
                if r:
                    print(r[1] + ("  *" if r[0] == best and best > 0 else ""))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
