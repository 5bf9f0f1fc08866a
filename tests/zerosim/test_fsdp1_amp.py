"""FSDP1, AMP and the V100 records against hand counts (docs/research/fsdp1_amp_v100.md)."""

from __future__ import annotations

import pytest

from zerosim.analytic.memory import stage_memory
from zerosim.analytic.model import activations
from zerosim.errors import InputError
from zerosim.frameworks import REGISTRY
from zerosim.hardware.gpus import GPUS
from zerosim.hardware.op_model import TRAINING_GEMMS_OVER_BEST
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate
from zerosim.sim.op_costs import OpCosts

from tests.conftest import SCENARIOS

LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"  # Llama-2-7B shape, bf16, 64 ranks, untied head
MEGATRON = SCENARIOS / "megatron_7b5_64gpu.toml"  # GPT 7.5B, fp16, full checkpointing
V, H, LAYERS = 32000, 4096, 32


def test_fsdp1_keeps_its_root_gathered_and_gathers_it_once():
    """FSDP1 FULL_SHARD with every block wrapped: the root (token table, final RMSNorm, head:
    2 x 32000 x 4096 + 4096 elements, bf16) stays gathered from forward through backward;
    beside it two blocks gathered (prefetch 1), the head's gradient held until the embedding's
    backward completes the root's flat gradient, and two units of full gradients in flight (the
    largest pair: two blocks, each above the head's 32000 x 4096 + 4096); and the loss's fp32
    transients. It all-gathers the root once where FSDP2 gathers the embedding and the head twice
    each. The model states are FSDP2's: fp32 shards, gradients and Adam's moments, 16 bytes per
    shard element."""
    root, block, head = 2 * V * H + H, 4 * H * H + 3 * H * 11008 + 2 * H, V * H + H
    one = load_scenario(LLAMA, ["training.framework='fsdp1'", "training.zero_stage=3"])
    two = load_scenario(LLAMA, ["training.framework='fsdp2'", "training.zero_stage=3"])
    m1, m2 = stage_memory(one, 3), stage_memory(two, 3)
    loss = REGISTRY["fsdp1"].loss_transient_bytes(one.model, one.training)
    assert m1.buffers_bytes - loss == 2 * (root + 2 * block + head + 2 * block)
    assert m1.model_states_bytes == m2.model_states_bytes
    assert m1.params_bytes + m1.grads_bytes + m1.optimizer_bytes == 16 * m1.params_bytes // 4
    n = one.world_size
    g1 = simulate(one, 3, keep_events=False).comm_bytes_per_rank["all_gather"]
    g2 = simulate(two, 3, keep_events=False).comm_bytes_per_rank["all_gather"]
    assert g2 - g1 == pytest.approx(2 * root * (n - 1) / n, rel=1e-6)
    assert simulate(one, 3, keep_events=False).peak_bytes <= m1.peak_bytes


def test_fsdp1_refuses_a_pipeline_and_zero_1():
    with pytest.raises(InputError, match="runs ZeRO stage"):
        load_scenario(LLAMA, ["training.framework='fsdp1'", "training.zero_stage=1"])


def test_amp_keeps_fp32_states_and_the_casts_of_the_weights():
    """torch.autocast over fp32 parameters (DDP): 4 + 4 + 8 bytes per parameter, no master copy;
    activations in fp16 as before, plus the fp16 casts of every matmul weight (4h^2 attention +
    8h^2 MLP per layer, and the tied head's V x h), held from forward into backward. Megatron
    7.5B has full checkpointing; its parameters are leaves (framework "zero"), so autocast's
    cache holds every layer's casts to the forward's end."""
    mixed = load_scenario(MEGATRON)
    amp = load_scenario(MEGATRON, ["training.precision='fp32'", "training.autocast='fp16'"])
    psi = stage_memory(amp, 0).params_bytes // 4
    row = stage_memory(amp, 0)
    assert (row.params_bytes, row.grads_bytes, row.optimizer_bytes) == (4 * psi, 4 * psi,
                                                                        8 * psi)
    h, vocab, layers = 4096, 51200, 36
    added = activations(amp.model, amp.training).after_forward_bytes - activations(
        mixed.model, mixed.training).after_forward_bytes
    assert added == layers * 2 * 12 * h * h + 2 * vocab * h
    # the cache is emptied as the forward's autocast region ends: a layer's recomputation casts
    # its weights again, held through its backward
    assert activations(amp.model, amp.training).recompute_bytes - activations(
        mixed.model, mixed.training).recompute_bytes == 2 * 12 * h * h
    fsdp1 = load_scenario(MEGATRON, ["training.precision='fp32'", "training.autocast='fp16'",
                                     "training.framework='fsdp1'", "training.zero_stage=3"])
    a = activations(fsdp1.model, fsdp1.training)
    b = activations(mixed.model, mixed.training)
    # FSDP1's parameters are views (not cached): a checkpointed layer's casts are made again in
    # its recomputation and live through its backward, not from the forward
    assert a.after_forward_bytes - b.after_forward_bytes == 2 * vocab * h
    assert a.recompute_bytes - b.recompute_bytes == 2 * 12 * h * h


def test_amp_casts_each_of_swiglus_three_matrices():
    """Llama-2-7B (SwiGLU, 4096 wide, MLP 11008, no checkpointing): per layer the fp16 casts of
    Q, K, V, O (4 h^2) and of the three MLP matrices (3 x 11008 h), and the untied head's."""
    mixed = load_scenario(LLAMA, ["training.precision='fp16'"])
    amp = load_scenario(LLAMA, ["training.precision='fp32'", "training.autocast='fp16'"])
    added = activations(amp.model, amp.training).after_forward_bytes - activations(
        mixed.model, mixed.training).after_forward_bytes
    assert added == LAYERS * 2 * (4 * H * H + 3 * 11008 * H) + 2 * V * H


def test_autocast_needs_fp32_parameters():
    with pytest.raises(InputError, match="training.autocast = 'bf16' casts fp32 parameters"):
        load_scenario(LLAMA, ["training.autocast='bf16'"])


@pytest.mark.parametrize("name", ["V100-16GB", "V100-32GB"])
def test_a_v100_gemm_is_its_records_rate_times_its_flops(name):
    """A GEMM of whole tiles filling whole waves of the 80 SMs (cuBLAS's 256 x 128 tile: 8 x 10
    tiles) is compute-bound at the record's rate: peak 125 TFLOP/s x DeepBench's 0.898 x the
    training-shape factor, plus one launch (clpeak's 7.22 us)."""
    gpu = GPUS[name]
    m, n, k = 8 * 256, 10 * 128, 8192
    costs = OpCosts(gpu, gpu.hbm_GBps)
    rate = 125e12 * 0.898 * TRAINING_GEMMS_OVER_BEST
    assert costs.gemm(m, n, k).seconds == pytest.approx(7.22e-6 + 2 * m * n * k / rate,
                                                        rel=1e-12)


def test_fp32_matmuls_run_on_the_fp32_units_and_autocast_on_the_tensor_cores():
    """precision = "fp32" without autocast: PyTorch leaves TF32 off for matmuls, so a V100 GEMM
    runs at the FP32 peak (15.7 TFLOP/s, the data sheet) x the same achievable fractions; under
    autocast the matmuls are 16-bit again (review: fp32 BERT was timed on the tensor cores)."""
    from zerosim.sim.costs import op_model

    m, n, k = 8 * 256, 10 * 128, 8192
    fp32 = OpCosts(GPUS["V100-16GB"], 900.0, fp32_matmuls=True)
    rate = 15.7e12 * 0.898 * TRAINING_GEMMS_OVER_BEST
    assert fp32.gemm(m, n, k).seconds == pytest.approx(7.22e-6 + 2 * m * n * k / rate,
                                                       rel=1e-12)
    plain = load_scenario(MEGATRON, ["training.precision='fp32'"])
    amp = load_scenario(MEGATRON, ["training.precision='fp32'", "training.autocast='fp16'"])
    assert op_model(plain).flops == pytest.approx(op_model(amp).flops * 15.7 / 125)  # V100


def test_an_eager_fp32_softmax_moves_37_and_41_bytes_a_score_and_saves_its_fp32_output():
    """Megatron's eager softmax fallback over fp16 scores (derived kernel by kernel from
    fused_softmax.py's forward_torch_softmax): 37 bytes a score forward in 5 kernels, 41 backward,
    against the fused kernel's 2 x 2 and 3 x 2 in one; its fp32 output, 4 bytes a score, saved
    for backward beside what the fused path keeps. Megatron 7.5B, 32 heads, s 2048, b 1."""
    from zerosim.sim.op_costs import attention_core

    fused = load_scenario(MEGATRON, ["training.activation_checkpointing='none'"])
    eager = load_scenario(MEGATRON, ["training.activation_checkpointing='none'",
                                     "training.softmax_kernel='eager'"])
    scores = 32 * 2048 * 2048
    costs = OpCosts(GPUS["V100-32GB"], 900.0)
    for backward, (bytes_eager, bytes_fused) in ((False, (37, 4)), (True, (41, 6))):
        extra = (attention_core(costs, eager.model, eager.training, backward).seconds
                 - attention_core(costs, fused.model, fused.training, backward).seconds)
        assert extra == pytest.approx((bytes_eager - bytes_fused) * scores / costs.bandwidth
                                      + 4 * costs.launch, rel=1e-9)
    added = (activations(eager.model, eager.training).stored_per_layer_bytes
             - activations(fused.model, fused.training).stored_per_layer_bytes)
    assert added == 4 * scores
    with pytest.raises(InputError, match="softmax_kernel = 'eager' names how"):
        load_scenario(LLAMA, ["training.softmax_kernel='eager'"])  # flash attention there
