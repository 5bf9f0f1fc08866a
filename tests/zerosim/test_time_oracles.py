"""Independent oracles for what a simulated step costs: FLOPs against Narayanan et al.'s published
formula, a hand count for SwiGLU and grouped-query attention, and an uncalibrated step time
worked out by hand. Expected values are written out here from the papers' terms, never taken
from zerosim's own formulas, so a slower compute or a heavier backward cannot pass unnoticed."""

from fractions import Fraction

import pytest

from tests.conftest import SCENARIOS
from zerosim.analytic.model import unit_flops
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate

MEGATRON = SCENARIOS / "megatron_7b5_64gpu.toml"  # GPT: GeLU MLP of 4h, no GQA, l 36, h 4096
GPT3 = SCENARIOS / "gpt3_175b_1024gpu.toml"  # GPT: l 96, h 12288, V 50257
LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"  # SwiGLU of 11008, h 4096, 32 heads of 128


def iteration_flops(scenario) -> float:
    """FLOPs of one iteration over the cluster. zerosim prices one rank's micro-batch; under
    data parallelism (every ZeRO stage) each of the world_size ranks runs gradient_accumulation
    micro-batches, so the global batch is B = micro_batch x gradient_accumulation x world_size."""
    t = scenario.training
    per_rank = sum(u.forward + u.backward for u in unit_flops(scenario.model, t))
    return per_rank * t.gradient_accumulation * scenario.world_size


def global_batch(scenario) -> int:
    t = scenario.training
    return t.micro_batch * t.gradient_accumulation * scenario.world_size


# Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", SC'21, §5.1, eq. (3)). Per layer forward: QKV 6Bsh^2, attention scores QK^T
# 2Bs^2h, scores x V 2Bs^2h, output projection 2Bsh^2, MLP (h -> 4h -> h) 16Bsh^2, i.e.
# 24Bsh^2 + 4Bs^2h. Backward is 2x forward, full recomputation adds 1x forward: 4x in all. The
# logit layer costs 2BshV forward and 4BshV backward and is not recomputed: 6BshV. Embedding
# lookups, norms, softmax and biases are ignored. Hence
#   F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
def narayanan_eq3(B: int, s: int, l: int, h: int, V: int) -> Fraction:
    return 96 * B * s * l * h**2 * (1 + Fraction(s, 6 * h) + Fraction(V, 16 * l * h))


def narayanan_no_recompute(B: int, s: int, l: int, h: int, V: int) -> Fraction:
    """The same count without recomputation: 3x forward for the layers, 6BshV for the head."""
    return 72 * B * s * l * h**2 * (1 + Fraction(s, 6 * h)) + 6 * B * s * h * V


@pytest.mark.parametrize("path, overrides", [
    (MEGATRON, []),  # B = 1 x 1 x 64
    (MEGATRON, ["training.micro_batch=2", "training.gradient_accumulation=4"]),  # B = 512
    (GPT3, ["cluster.nodes=64", "training.micro_batch=3"]),  # B = 3 x 512 = 1536
    (GPT3, ["model.position=rope", "training.seq_len=1024"]),  # positions cost no FLOPs
])
def test_flops_per_iteration_equal_narayanan_eq3(path, overrides):
    scenario = load_scenario(path, ["training.activation_checkpointing=full", *overrides])
    m, t = scenario.model, scenario.training
    assert m.mlp == "gelu" and m.ffn_width == 4 * m.hidden and m.n_kv_heads == m.heads
    expected = narayanan_eq3(global_batch(scenario), t.seq_len, m.layers, m.hidden, m.vocab)
    assert iteration_flops(scenario) == pytest.approx(float(expected), rel=1e-12)


@pytest.mark.parametrize("path", [MEGATRON, GPT3])
def test_flops_without_recompute_are_three_quarters_of_the_layers(path):
    scenario = load_scenario(path, ["training.activation_checkpointing=none",
                                    "training.micro_batch=2"])
    m, t = scenario.model, scenario.training
    B = global_batch(scenario)
    expected = narayanan_no_recompute(B, t.seq_len, m.layers, m.hidden, m.vocab)
    assert iteration_flops(scenario) == pytest.approx(float(expected), rel=1e-12)
    # What full recomputation adds is exactly one more forward of every layer, never the head's.
    full = load_scenario(path, ["training.activation_checkpointing=full", "training.micro_batch=2"])
    layer_forward = B * t.seq_len * m.layers * (24 * m.hidden**2 + 4 * t.seq_len * m.hidden)
    assert iteration_flops(full) - iteration_flops(scenario) == pytest.approx(layer_forward,
                                                                             rel=1e-12)


# A hand count for Llama-style layers: SwiGLU (gate, up, down: three h x f matrices) and
# grouped-query attention (K and V project h -> kv_heads x head_dim). A matrix multiply of an
# (n x k) by a (k x m) costs 2nkm FLOPs (one multiply and one add per term; Kaplan et al. 2020,
# §2.1); backward computes the gradients of both inputs: 2x forward.
@pytest.mark.parametrize("kv_heads", [32, 8, 1])
@pytest.mark.parametrize("checkpointing", ["none", "selective", "full"])
def test_swiglu_gqa_layer_by_hand(kv_heads, checkpointing):
    b, s, h, f, V, heads = 2, 4096, 4096, 11008, 32000, 32
    d = h // heads  # 128
    scenario = load_scenario(LLAMA, [f"model.kv_heads={kv_heads}", f"training.micro_batch={b}",
                                     f"training.activation_checkpointing={checkpointing}"])
    tokens = b * s
    q = 2 * tokens * h * h
    k = v = 2 * tokens * h * (kv_heads * d)  # fewer KV heads: narrower K and V projections
    out = 2 * tokens * h * h
    gate = up = down = 2 * tokens * h * f
    # Every one of the 32 query heads scores s x s pairs of d-vectors, shared KV heads or not:
    # QK^T is heads x s x s x d multiply-adds = s^2 h, and so is the product with V.
    scores = 2 * b * s * s * h
    attend = 2 * b * s * s * h
    forward = q + k + v + out + gate + up + down + scores + attend
    # "full" reruns the whole layer's forward in backward; "selective" (Korthikanti et al.
    # 2022, §4.2) reruns only attention's s^2 part: QK^T and the product with V (the softmax
    # between them is not a matmul and is not counted).
    recompute = {"none": 0, "selective": scores + attend, "full": forward}[checkpointing]
    units = unit_flops(scenario.model, scenario.training)
    assert len(units) == 32 + 2
    assert units[0].forward == units[0].backward == 0  # embedding lookups are gathers, no FLOPs
    for layer in units[1:-1]:
        assert layer.forward == forward
        assert layer.backward == 2 * forward + recompute
    head = 2 * tokens * h * V  # the untied LM head: logits for every token, never recomputed
    assert (units[-1].forward, units[-1].backward) == (head, 2 * head)


# Uncalibrated step time on one GPU: with a single rank every collective moves 0 bytes, so the
# step is compute alone and can be checked to rounding. The GPT shape below is the Megatron
# scenario cut down to l 4, h 1024 (16 heads), keeping s 2048, V 51200, full recomputation.
SMALL = ["cluster.nodes=1", "cluster.gpus_per_node=1", "model.layers=4", "model.hidden=1024",
         "model.heads=16", "cluster.peak_tflops=100", "cluster.hbm_bandwidth_GBps=1000",
         "cluster.compute_efficiency=0.5", "training.gradient_accumulation=2"]


def hand_step_s(efficiency=0.5, backward_factor=2.0) -> float:
    """The step by hand, with knobs to show which mistakes the test catches."""
    b, s, l, h, V, max_seq, micro_steps = 1, 2048, 4, 1024, 51200, 2048, 2
    layer_forward = 24 * b * s * h**2 + 4 * b * s**2 * h  # Narayanan §5.1, as above
    # Forward, backward, and full recomputation's second forward of every layer; the head's
    # logits are not recomputed; the embedding lookup costs nothing.
    per_micro = (l * layer_forward * (1 + backward_factor + 1)
                 + 2 * b * s * h * V * (1 + backward_factor))
    compute_s = micro_steps * per_micro / (100e12 * efficiency)
    # Ψ, GPT-2 style (tied head): token and learned position embeddings, 12h^2 + 13h per layer
    # (Narayanan §5.1), the final LayerNorm's weight and bias.
    psi = V * h + max_seq * h + l * (12 * h**2 + 13 * h) + 2 * h
    # Mixed-precision Adam moves, per parameter, over HBM: read the fp16 gradient (2), read and
    # write the fp32 master weight (4 + 4), read and write m and v (2 x (4 + 4)), write the fp16
    # working weight (2): 28 bytes, once per optimizer step (not per micro-step).
    optimizer_s = psi * 28 / 1000e9
    return compute_s + optimizer_s


@pytest.mark.parametrize("stage", [0, 1, 2, 3])  # one rank: every stage steps all Ψ, sends 0 bytes
def test_uncalibrated_step_time_by_hand(stage):
    scenario = load_scenario(MEGATRON, [*SMALL, f"training.zero_stage={stage}"])
    assert scenario.world_size == 1 and scenario.profile is None
    result = simulate(scenario, stage)
    expected = hand_step_s()  # 0.0726878 s: 0.0697503 s of layers and head, 0.0029376 s of Adam
    assert result.compute_s == pytest.approx(expected, rel=1e-9)
    assert result.step_time_s == pytest.approx(expected, rel=1e-9)
    assert result.exposed_comm_s == pytest.approx(0.0, abs=1e-15)
    # What the tolerance rules out: compute 5% slower (efficiency x 0.95) lengthens the FLOP
    # part by 1/0.95 - 1 = 5.3%, the step by 5.05%; a 2.2x backward makes a recomputed layer
    # 4.2 instead of 4 forwards and the head 3.2 instead of 3: +5.4% on the step. Both are over
    # 10^7 times the 1e-9 tolerance.
    for wrong in (hand_step_s(efficiency=0.5 * 0.95), hand_step_s(backward_factor=2.2)):
        assert abs(wrong / result.step_time_s - 1) > 0.04
