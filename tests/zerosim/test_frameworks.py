"""training.framework, reduce_dtype and gradient_as_bucket_view: what DeepSpeed, FSDP2 and DDP
hold beyond the ZeRO paper's accounting ("zero", the default, which zero_real implements).
Expected bytes are counted by hand."""

import pytest

from zerosim.memory import stage_memory
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate

from tests.conftest import SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

PSI, N = 7_500_000_000, 64
MEGATRON = SCENARIOS / "megatron_7b5_64gpu.toml"  # fp16, 7,467,786,240 parameters, s 2048
MEGATRON_PSI, TOKENS, VOCAB = 7_467_786_240, 2048, 51200


def test_deepspeed_holds_an_fp32_gradient_partition_for_the_step():
    """ZeRO-1, fp16: 16Ψ/N + 4Ψ(1 - 1/N) = 31.40625 GB of states, and during the step the fp32
    copy of the rank's gradient partition, 4Ψ/N = 0.46875 GB: 31.875 GB (the paper's Table 1
    counts states only; a bare Ψ has no activations or loss)."""
    zero = stage_memory(load_scenario(ZERO_PAPER), 1)
    ds = load_scenario(ZERO_PAPER, ["training.framework='deepspeed'", "training.zero_stage=1"])
    assert zero.peak_bytes == 31_406_250_000
    assert stage_memory(ds, 1).peak_bytes == 31_406_250_000 + 4 * PSI // N
    assert simulate(ds, 1, keep_events=False).peak_bytes == 31_406_250_000 + 4 * PSI // N
    assert stage_memory(ds, 0).peak_bytes == 16 * PSI  # DDP's step has no partition to convert


@pytest.mark.parametrize("view, copies", [(False, 2 * MEGATRON_PSI), (True, 0)])
def test_ddp_buckets_copy_the_gradients_unless_they_are_views(view, copies):
    s = load_scenario(MEGATRON, ["training.framework='ddp'", "training.zero_stage=0",
                                 f"training.gradient_as_bucket_view={str(view).lower()}"])
    loss = (2 + 4) * TOKENS * VOCAB  # fp16 logits with their fp32 copy, or the two gradients
    plain = stage_memory(load_scenario(MEGATRON), 0)
    row = stage_memory(s, 0)
    assert row.buffers_bytes == plain.buffers_bytes + copies + loss
    result = simulate(s, 0)
    assert result.memory_at["after_step"] == plain.model_states_bytes + copies
    assert result.peak_bytes <= row.peak_bytes


def test_fsdp2_reducing_in_fp32_doubles_the_gradient_bytes():
    """ZeRO-3 on 64 ranks, fp16: the gradient shard and what is reduce-scattered become fp32."""
    base = ["training.framework='fsdp2'", "training.zero_stage=3"]
    half = load_scenario(MEGATRON, base)
    full = load_scenario(MEGATRON, [*base, "training.reduce_dtype='fp32'"])
    shard = -(-MEGATRON_PSI // 64)
    assert stage_memory(half, 3).grads_bytes == 2 * shard
    assert stage_memory(full, 3).grads_bytes == 4 * shard
    sent = {r: simulate(s, 3, keep_events=False).comm_bytes_per_rank["reduce_scatter"]
            for r, s in (("half", half), ("full", full))}
    assert sent["full"] == pytest.approx(2 * sent["half"], rel=1e-9)


def test_the_loss_in_fp32_only_outside_the_papers_accounting():
    zero = stage_memory(load_scenario(MEGATRON), 3)
    fsdp = stage_memory(load_scenario(MEGATRON, ["training.framework='fsdp2'"]), 3)
    assert fsdp.buffers_bytes - zero.buffers_bytes == (2 + 4) * TOKENS * VOCAB


@pytest.mark.parametrize("sets, fragment", [
    (["training.framework='ddp'"], "runs ZeRO stage(s) 0, not training.zero_stage = 3"),
    (["training.framework='fsdp2'", "training.zero_stage=1"], "runs ZeRO stage(s) 2, 3"),
    (["training.reduce_dtype='bf16'"], "training.reduce_dtype = 'bf16' is not one of"),
    (["training.framework='megatron'"], "training.framework = 'megatron' is not one of"),
])
def test_bad_framework_settings_are_one_line(sets, fragment):
    argv = ["memory", str(MEGATRON)]
    for text in sets:
        argv += ["--set", text]
    assert_one_line_error(run_zerosim(*argv), fragment)
