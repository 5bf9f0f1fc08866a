"""GPT-3 175B on 1024 A100s (scenarios/gpt3_175b_1024gpu.toml) with tensor parallelism beside
ZeRO, as zerosim predicts it: ZeRO-3 alone (t = 1) against t = 2, 4, 8 with ZeRO-1 and ZeRO-3.
A measuring script: it asserts nothing and fits nothing.

    python bench/tp_gpt3_175b.py

Every row trains the same global batch, the scenario's 1024 sequences of 2048 tokens: at t the
N / t data-parallel ranks take t micro-steps of the scenario's micro-batch each (Megatron's
num_microbatches = global_batch / (micro_batch x data_parallel),
megatron/core/num_microbatches_calculator.py), as `zerosim plan --allow tp` compares them.
Per row: the step time, tokens/s (global batch tokens / step), MFU (the whole model's FLOPs per
token, forward and backward without recomputation, x tokens/s / (N x peak): PaLM's appendix B),
the memory model's peak per GPU, the simulated device memory (allocator segments + CUDA context
+ NCCL buffers) and whether it fits the 80 GiB. tokens/s and MFU are counted here from the
global batch, not taken from the step's result, whose per-GPU figures count every rank's
micro-batch as its own (true only at t = 1).
About 10 s on 2 cores (one representative rank per configuration).
"""

from __future__ import annotations

import time
from pathlib import Path

from zerosim.analytic.model import model_flops_per_token
from zerosim.errors import InputError
from zerosim.scenario.load import load_scenario
from zerosim.tradeoffs.sweep import rows_of

ROOT = Path(__file__).resolve().parents[1]
GPT3 = ROOT / "scenarios/gpt3_175b_1024gpu.toml"
CONFIGS = ((1, 3), *((t, stage) for t in (2, 4, 8) for stage in (1, 3)))
GiB = 2**30


def row(tp: int, stage: int) -> str:
    """One configuration's line, or its one-line refusal."""
    sets = [f"parallelism.tensor_parallel={tp}", f"training.zero_stage={stage}",
            f"training.gradient_accumulation={tp}"]
    try:
        scenario = load_scenario(GPT3, sets)
        r = rows_of(scenario, [stage], {})[0]
    except InputError as exc:
        return f"  t = {tp}, ZeRO-{stage}: {exc}"
    tokens_per_s = r["tokens_per_step"] / r["step_time_s"]
    peak_flops = scenario.cluster.peak_tflops * 1e12
    mfu = (model_flops_per_token(scenario.model, scenario.training) * tokens_per_s
           / (scenario.world_size * peak_flops))
    return (f"  {tp:>3} {r['stage_name']:>7} {r['world_size'] // tp:>5} {tp:>6} "
            f"{r['step_time_s']:>9.3f} {r['compute_s']:>9.3f} {r['exposed_comm_s']:>8.3f} "
            f"{tokens_per_s:>10,.0f} {mfu:>6.1%} {r['peak_bytes'] / GiB:>9.2f} "
            f"{r['device_bytes'] / GiB:>9.2f}  {'yes' if r['fits_gpu_memory'] else 'NO'}")


def main() -> None:
    scenario = load_scenario(GPT3, [])
    t = scenario.training
    print(f"GPT-3 175B on {scenario.world_size} {scenario.cluster.gpu}: global batch "
          f"{scenario.world_size * t.micro_batch} x {t.seq_len} tokens, micro-batch "
          f"{t.micro_batch}, {t.precision}, activation checkpointing {t.activation_checkpointing}, "
          f"sequence parallelism off")
    print(f"  {'t':>3} {'stage':>7} {'N_d':>5} {'steps':>6} {'step s':>9} {'compute':>9} "
          f"{'exposed':>8} {'tokens/s':>10} {'MFU':>6} {'peak GiB':>9} {'device':>9}  fits")
    start = time.perf_counter()
    for tp, stage in CONFIGS:
        print(row(tp, stage), flush=True)
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
