"""GPT-3 175B on 1024 A100s (scenarios/gpt3_175b_1024gpu.toml) with tensor parallelism beside
ZeRO, as zerosim predicts it: ZeRO-3 alone (t = 1) against t = 2, 4, 8 with ZeRO-1 and ZeRO-3.
A measuring script: it asserts nothing and fits nothing.

    python bench/tp_gpt3_175b.py

Every row trains the same global batch, the scenario's 1024 sequences of 2048 tokens: at t the
N / t data-parallel ranks take t sequences each (Megatron's num_microbatches = global_batch /
(micro_batch x data_parallel), megatron/core/num_microbatches_calculator.py), split into
micro-batch x micro-steps every way plan's batch_splits names; `*` marks the fastest split that
fits of each (t, stage), the one `zerosim plan --allow tp` shows.
Per row: the step time, tokens/s (global batch tokens / step), MFU (the whole model's FLOPs per
token, forward and backward without recomputation, x tokens/s / (N x peak): PaLM's appendix B),
the memory model's peak per GPU, the simulated device memory (allocator segments + CUDA context
+ NCCL buffers) and whether it fits the 80 GiB. tokens/s and MFU are counted here from the
global batch (the step's result says the same per GPU: a TP group's t ranks share their
micro-batch's tokens).
About 15 s on 2 cores (one representative rank per configuration).
"""

from __future__ import annotations

import time
from pathlib import Path

from zerosim.analytic.model import model_flops_per_token
from zerosim.errors import InputError
from zerosim.scenario.load import load_scenario
from zerosim.tradeoffs.plan_family import batch_splits
from zerosim.tradeoffs.sweep import rows_of

ROOT = Path(__file__).resolve().parents[1]
GPT3 = ROOT / "scenarios/gpt3_175b_1024gpu.toml"
CONFIGS = ((1, 3), *((t, stage) for t in (2, 4, 8) for stage in (1, 3)))
GiB = 2**30


def simulated(tp: int, stage: int, micro_batch: int, steps: int) -> tuple[dict | None, str]:
    """One split's sweep row and its line, or None and its one-line refusal."""
    sets = [f"parallelism.tensor_parallel={tp}", f"training.zero_stage={stage}",
            f"training.micro_batch={micro_batch}", f"training.gradient_accumulation={steps}"]
    try:
        scenario = load_scenario(GPT3, sets)
        r = rows_of(scenario, [stage], {})[0]
    except InputError as exc:
        return None, f"  t = {tp}, ZeRO-{stage}, micro-batch {micro_batch}: {exc}"
    tokens_per_s = r["tokens_per_step"] / r["step_time_s"]
    peak_flops = scenario.cluster.peak_tflops * 1e12
    mfu = (model_flops_per_token(scenario.model, scenario.training) * tokens_per_s
           / (scenario.world_size * peak_flops))
    return r, (f"{tp:>3} {r['stage_name']:>7} {r['world_size'] // tp:>5} {micro_batch:>4} "
               f"{steps:>6} {r['step_time_s']:>9.3f} {r['compute_s']:>9.3f} "
               f"{r['exposed_comm_s']:>8.3f} {tokens_per_s:>10,.0f} {mfu:>6.1%} "
               f"{r['peak_bytes'] / GiB:>9.2f} {r['device_bytes'] / GiB:>9.2f}  "
               f"{'yes' if r['fits_gpu_memory'] else 'NO'}")


def rows(tp: int, stage: int) -> list[str]:
    """Each split's line, the fastest that fits marked `*`."""
    base = load_scenario(GPT3, [])
    done = [simulated(tp, stage, mb, steps) for mb, steps in batch_splits(base, tp)]
    fit = [r for r, _ in done if r is not None and r["fits_gpu_memory"]]
    best = min(fit, key=lambda r: r["step_time_s"], default=None)
    return [f"{'*' if r is best and r is not None else ' '} {line}" for r, line in done]


def main() -> None:
    scenario = load_scenario(GPT3, [])
    t = scenario.training
    print(f"GPT-3 175B on {scenario.world_size} {scenario.cluster.gpu}: global batch "
          f"{scenario.world_size * t.micro_batch} x {t.seq_len} tokens, micro-batch "
          f"{t.micro_batch}, {t.precision}, activation checkpointing {t.activation_checkpointing}, "
          f"sequence parallelism off")
    print(f"  {'t':>3} {'stage':>7} {'N_d':>5} {'mb':>4} {'steps':>6} {'step s':>9} "
          f"{'compute':>9} {'exposed':>8} {'tokens/s':>10} {'MFU':>6} {'peak GiB':>9} "
          f"{'device':>9}  fits")
    start = time.perf_counter()
    for tp, stage in CONFIGS:
        print("\n".join(rows(tp, stage)), flush=True)
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
