"""Independent oracles for memory per pipeline stage (issue 30, analytic/memory.py's
pipeline_memory): a stage's parameters counted by hand from Megatron-LM's layout (the embedding
on the first stage, the final norm and the head on the last, which keeps its own copy of a tied
word embedding: megatron/core/models/common/language_module/language_module.py,
setup_embeddings_and_output_layer), the ZeRO paper's Table 1 (Rajbhandari et al. 2020, §5.1)
over that stage's Ψ_i with N_d = N / (t p); the activations a schedule holds at once from
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198): sbh(34 + 5as/h) a layer (Eq. 1), 2sbh a layer plus one layer's working set
under full recomputation (§5), the embedding's dropout mask sbh, the head's 4sbh + 4sbv (§4.3),
and §4.2.3's observation that 1F1B's first stage holds p micro-batches of L / p layers, L layers'
worth; GPipe holds all m (Huang et al. 2019). Every expected value is a literal or one of those
closed forms written out here, never zerosim's own formulas.
"""

import pytest

from tests.conftest import run_zerosim
from zerosim.analytic.memory import p2p_bytes, pipeline_memory, stage_memory
from zerosim.scenario.load import load_scenario
from tests.zerosim.pipeline_scenarios import GPT_8L

# A GPT (learned positions, layer norms and biases, tied head) of 8 layers, h = 1024, a = 16,
# v = 32768, positions 2048; 2 nodes x 8 GPUs; b = 2, s = 2048, bf16, Adam; m = 8, p = 4.
BASE = GPT_8L

H, V, S, B, A, L = 1024, 32768, 2048, 2, 16, 8
LAYER = 12 * H * H + 13 * H  # QKV 3h^2 + 3h, proj h^2 + h, fc1 4h^2 + 4h, fc2 4h^2 + h, 2 LN 4h
assert LAYER == 12_596_224
EMBEDDING = V * H + S * H  # word + learned positions: 33,554,432 + 2,097,152
FINAL_NORM = 2 * H
HEAD = V * H  # the last stage's copy of the tied word embedding
# Ψ_i of 4 stages of 2 layers: the embedding on stage 0, the final norm and the head on stage 3.
PSI = (EMBEDDING + 2 * LAYER, 2 * LAYER, 2 * LAYER, 2 * LAYER + FINAL_NORM + HEAD)
assert PSI == (60_844_032, 25_192_448, 25_192_448, 58_748_928)

SBH = S * B * H  # 4,194,304
LAYER_ACTS = SBH * (34 + 5 * A * S // H)  # Korthikanti Eq. 1: 194 sbh
MASK = SBH  # the embedding's dropout mask, one byte an element
HEAD_ACTS = 4 * SBH + 4 * S * B * V  # final-norm input 2sbh, head input 2sbh, fp32 logits 4sbv
P2P = 2 * SBH  # one activation at a stage boundary, [s, b, h] in bf16


def scenario(write, *sets: str):
    return load_scenario(write("pp.toml", BASE), list(sets))


def rows(write, stage: int, *sets: str):
    return pipeline_memory(scenario(write, *sets), stage)


def test_the_stages_parameters_add_up_to_the_model_plus_the_heads_copy():
    """Without a pipeline the tied head holds nothing of its own: Ψ = embedding + 8 layers +
    final norm (136,423,424, what `zerosim memory` prints as params)."""
    assert sum(PSI) - HEAD == EMBEDDING + L * LAYER + FINAL_NORM == 136_423_424


@pytest.mark.parametrize("stage", [0, 1])
def test_model_states_are_table_1_over_each_stages_parameters(write, stage):
    """N_d = 16 / (1 x 4) = 4 ranks share stage i's states: DDP keeps (2 + 2 + 12) Ψ_i, ZeRO-1
    2 Ψ_i + 2 Ψ_i + 12 Ψ_i / 4 (every Ψ_i here is a multiple of 4)."""
    got = rows(write, stage)
    assert len(got) == 4
    for psi, row in zip(PSI, got):
        optimizer = 12 * psi if stage == 0 else 12 * psi // 4
        assert (row.params_bytes, row.grads_bytes, row.optimizer_bytes) == (2 * psi, 2 * psi,
                                                                            optimizer)
        assert row.model_states_bytes == 4 * psi + optimizer


def test_tensor_and_pipeline_parallel_ranks_hold_a_slice_of_a_stage(write):
    """t = 2, p = 4: N_d = 16 / 8 = 2. A rank's layer (Megatron's column/row-parallel split):
    norms 4h whole, QKV 1.5h^2 + 1.5h, proj h^2/2 + h (its bias whole), fc1 2h^2 + 2h, fc2 2h^2
    + h = 6h^2 + 9.5h; its embedding v/2 x h + the positions whole; its head v/2 x h."""
    layer = 6 * H * H + 19 * H // 2
    assert layer == 6_301_184  # GPT-2 medium's at t = 2 (test_tensor_parallel_oracles.py)
    psi = (V // 2 * H + S * H + 2 * layer, 2 * layer, 2 * layer,
           2 * layer + FINAL_NORM + V // 2 * H)
    got = rows(write, 1, "parallelism.tensor_parallel=2")
    for expected, row in zip(psi, got):
        assert (row.params_bytes, row.grads_bytes, row.optimizer_bytes) == (
            2 * expected, 2 * expected, 12 * expected // 2)


def test_fsdp2_keeps_fp32_shards_of_16_bytes_an_element(write):
    """FSDP2 (zero_stage 2 beside a pipeline: reshard_after_forward=False) keeps each parameter
    shard in fp32 with its fp32 gradient and Adam's two moments: 4 + 4 + 8 bytes per element of
    Ψ_i / 4 (torch/distributed/fsdp/_fully_shard/_fsdp_param.py)."""
    got = rows(write, 2, "training.framework=fsdp2", "training.zero_stage=2")
    for psi, row in zip(PSI, got):
        shard = psi // 4
        assert (row.params_bytes, row.grads_bytes, row.optimizer_bytes) == (4 * shard, 4 * shard,
                                                                            8 * shard)
        assert row.buffers_bytes >= 2 * psi  # every unit gathered in bf16, kept all step


# 1F1B: stage i holds min(p - i, m) micro-batches; each its layers' and, on stage 0, the mask,
# on stage 3, the head's.
STAGE_ACTS = (MASK + 2 * LAYER_ACTS, 2 * LAYER_ACTS, 2 * LAYER_ACTS, 2 * LAYER_ACTS + HEAD_ACTS)


@pytest.mark.parametrize("m, held", [(8, (4, 3, 2, 1)), (4, (4, 3, 2, 1)), (2, (2, 2, 2, 1)),
                                     (1, (1, 1, 1, 1))])
def test_1f1b_stage_i_holds_p_minus_i_micro_batches(write, m, held):
    got = rows(write, 1, f"training.gradient_accumulation={m}")
    assert [row.activations_bytes for row in got] == [n * a for n, a in zip(held, STAGE_ACTS)]


@pytest.mark.parametrize("m", [1, 3, 8])
def test_gpipe_holds_every_micro_batch_on_every_stage(write, m):
    got = rows(write, 0, "parallelism.pipeline_schedule=gpipe", "training.zero_stage=0",
               f"training.gradient_accumulation={m}")
    assert [row.activations_bytes for row in got] == [m * a for a in STAGE_ACTS]


def test_the_first_stage_holds_l_layers_worth_korthikanti_4_2_3(write):
    """p micro-batches of L / p layers: as many layer activations as the whole model keeps
    without a pipeline (L x 194 sbh), whatever p; only the embedding's masks differ."""
    for p in (2, 4, 8):
        first = rows(write, 1, f"parallelism.pipeline_parallel={p}")[0]
        assert first.activations_bytes == L * LAYER_ACTS + p * MASK
    whole = stage_memory(scenario(write, "parallelism.pipeline_parallel=1"), 1)
    assert whole.activations_bytes == L * LAYER_ACTS + MASK + HEAD_ACTS


def test_full_recomputation_keeps_2sbh_a_layer_and_one_layers_working_set(write):
    """Korthikanti §5: a checkpointed layer keeps its input (2sbh); backward regenerates one
    layer's 194 sbh at a time, on top of what the schedule holds."""
    got = rows(write, 1, "training.activation_checkpointing=full")
    stored = (MASK + 2 * 2 * SBH, 2 * 2 * SBH, 2 * 2 * SBH)
    assert [row.activations_bytes for row in got[:3]] == [
        n * a + LAYER_ACTS for n, a in zip((4, 3, 2), stored)]


def test_the_last_stage_frees_its_logits_before_it_recomputes_a_layer(write):
    """1F1B's last stage holds one micro-batch: its head's backward runs first and frees the
    fp32 logits and the head's inputs, and only then is a layer recomputed (as memory.py's
    Activations.peak_bytes reasons without a pipeline: "the fp32 logits never meet a recomputed
    layer"): 2 x 2sbh + max(4sbh + 4sbv, 194 sbh) = 198 sbh, not 2 x 2sbh + 4sbh + 4sbv +
    194 sbh = 330 sbh."""
    last = rows(write, 1, "training.activation_checkpointing=full")[3]
    assert last.activations_bytes == 2 * 2 * SBH + max(HEAD_ACTS, LAYER_ACTS) == 198 * SBH


def test_the_worst_stage_is_what_memory_prints(write):
    """Stage 0 holds the most (4 micro-batches of 2 layers and the mask: 1556 sbh); its p2p
    buffers: one received and one sent towards its one neighbour (Megatron-LM's
    p2p_communication.py, _communicate: the receive buffer beside the tensor it sends)."""
    s = scenario(write)
    worst = stage_memory(s, 1)
    psi = PSI[0]
    states = 2 * psi + 2 * psi + 12 * psi // 4
    acts = 4 * (MASK + 2 * LAYER_ACTS)
    assert acts == 1556 * SBH
    assert (worst.model_states_bytes, worst.activations_bytes, worst.buffers_bytes) == (
        states, acts, 2 * P2P)
    assert worst.peak_bytes == states + acts + 2 * P2P
    printed = run_zerosim("memory", str(write("pp.toml", BASE)), "--json")
    assert printed.code == 0, printed.stderr
    by_stage = {row["stage"]: row for row in printed.json["stages"]}
    assert sorted(by_stage) == [0, 1]  # the stages Megatron's distributed optimizer runs
    assert by_stage[1]["peak_bytes"] == states + acts + 2 * P2P
    assert by_stage[0]["optimizer_bytes"] == 12 * psi
    assert by_stage[0]["peak_bytes"] == 16 * psi + acts + 2 * P2P


def test_a_middle_stage_buffers_a_transfer_each_way_to_each_neighbour(write):
    got = rows(write, 1)
    assert [row.buffers_bytes for row in got] == [2 * P2P, 4 * P2P, 4 * P2P, 2 * P2P]


def test_the_worst_stage_is_the_last_when_the_head_outweighs_the_layers(write):
    """A vocabulary of 262144 (4sbv = 1024 sbh of fp32 logits) and m = 1: every stage holds
    one micro-batch; the last also the head's 4sbh + 4sbv, 4.3 GB more than stage 0, whose
    embedding is only s h = 2 M elements larger than the head's copy of v h."""
    big = 262144
    got = rows(write, 1, f"model.vocab={big}", "training.gradient_accumulation=1")
    last = 2 * LAYER_ACTS + 4 * SBH + 4 * S * B * big
    assert got[3].activations_bytes == last
    psi = 2 * LAYER + FINAL_NORM + big * H
    assert got[3].peak_bytes == 4 * psi + 12 * psi // 4 + last + 2 * P2P
    worst = stage_memory(scenario(write, f"model.vocab={big}", "training.gradient_accumulation=1"),
                         1)
    assert worst == got[3]


@pytest.mark.parametrize("sets, expected", [
    ([], 2 * S * B * H),  # [s, b, h] in bf16: 8 MiB
    (["training.precision=fp32"], 4 * S * B * H),
    (["parallelism.tensor_parallel=2"], 2 * S * B * H),  # without SP every TP rank sends it whole
    # Megatron-LM's schedules.py, get_tensor_shapes: seq_length // tp under sequence parallelism
    (["parallelism.tensor_parallel=2", "parallelism.sequence_parallel=true"], 2 * S * B * H // 2),
    (["parallelism.tensor_parallel=4", "parallelism.sequence_parallel=true"], 2 * S * B * H // 4),
    (["training.micro_batch=1", "training.seq_len=1024"], 2 * 1024 * 1 * H),
])
def test_a_transfer_is_one_boundary_activation(write, sets, expected):
    assert p2p_bytes(scenario(write, *sets)) == expected
