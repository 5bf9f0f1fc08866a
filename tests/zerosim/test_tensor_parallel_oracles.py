"""Independent oracles for tensor parallelism's memory (issue 29): a rank's parameters in
Megatron-LM's layout counted tensor by tensor for t = 1, 2, 4, 8; activations against
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198), Table 2 and §4.3, for every combination of sequence parallelism and
recomputation; and the ZeRO paper's Table 1 (Rajbhandari et al. 2020, §5.1) with N_d = N / t
through `zerosim memory --json`. Every expected value is a literal or a paper's closed form,
written out here: never zerosim's own formulas.

Megatron-LM's layout (megatron/core/transformer/attention.py SelfAttention, mlp.py MLP,
tensor_parallel/layers.py): linear_qkv and linear_fc1 are ColumnParallelLinear (weight and bias
split t ways); linear_proj and linear_fc2 are RowParallelLinear (weight split, bias whole on
every rank, added after the reduction); the word embedding is VocabParallelEmbedding and an
untied output_layer a ColumnParallelLinear without bias (v/t rows each); layer norms and the
learned position embedding (a plain torch.nn.Embedding) are whole on every rank.
"""

from fractions import Fraction

import pytest

from tests.conftest import SCENARIOS, run_zerosim
from zerosim.analytic.model import activations, param_counts
from zerosim.parallel.tensor import tp_slice
from zerosim.scenario.config import ModelConfig, TrainingConfig

TP = (1, 2, 4, 8)

# GPT-2 medium (Radford et al. 2019: 24 layers, h 1024, 16 heads, learned positions of 1024,
# layer norms and biases, tied head), its vocabulary padded to 50304 as Megatron pads 50257
# (make-vocab-size-divisible-by 128): 354,823,168 parameters with 50257 rows.
GPT2_MEDIUM = ModelConfig(name="GPT-2 medium", layers=24, hidden=1024, heads=16, vocab=50304,
                          max_seq_len=1024)
GPT2_MEDIUM_PER_RANK = {  # t: (embedding, per layer, final norm, head, total)
    # per layer: 2 layer norms (w + b) 2 x 2 x 1024 = 4096, replicated
    #   + QKV 1024 x 3072/t + 3072/t  + proj 1024/t x 1024 + 1024 (row-parallel: whole bias)
    #   + fc1 1024 x 4096/t + 4096/t  + fc2 4096/t x 1024 + 1024
    # embedding: 50304/t x 1024 + positions 1024 x 1024 = 1048576 (replicated)
    # t = 1: 4096 + 3148800 + 1049600 + 4198400 + 4195328 = 12596224
    1: (52559872, 12596224, 2048, 0, 354871296),  # 51511296 + 1048576; 52559872 + 24 x 12596224 + 2048
    # t = 2: 4096 + (1572864 + 1536) + (524288 + 1024) + (2097152 + 2048) + (2097152 + 1024)
    2: (26804224, 6301184, 2048, 0, 178034688),  # 25755648 + 1048576
    # t = 4: 4096 + (786432 + 768) + (262144 + 1024) + (1048576 + 1024) + (1048576 + 1024)
    4: (13926400, 3153664, 2048, 0, 89616384),  # 12877824 + 1048576
    # t = 8: 4096 + (393216 + 384) + (131072 + 1024) + (524288 + 512) + (524288 + 1024)
    8: (7487488, 1579904, 2048, 0, 45407232),  # 6438912 + 1048576
}

# Llama-3-8B (Meta's config.json: 32 layers, h 4096, 32 heads, 8 kv heads of 128, SwiGLU
# 14336, vocab 128256, RMSNorm, no bias, untied): 8,030,261,248 parameters.
LLAMA3_8B = ModelConfig(name="Llama-3-8B", layers=32, hidden=4096, heads=32, kv_heads=8,
                        ffn=14336, vocab=128256, mlp="swiglu", norm="rmsnorm", bias=False,
                        tied_embeddings=False, position="rope", dropout=False)
LLAMA3_8B_PER_RANK = {  # t: (embedding, per layer, final norm, head, total)
    # per layer: 2 RMSNorm weights 8192 + wq 4096 x 4096/t + wk, wv 4096 x 1024/t each
    #   + wo 4096/t x 4096 + w1, w3 4096 x 14336/t each + w2 14336/t x 4096
    # embedding and head: 128256/t x 4096 each
    # t = 1: 8192 + 16777216 + 2 x 4194304 + 16777216 + 3 x 58720256 = 218112000
    1: (525336576, 218112000, 4096, 525336576, 8030261248),
    # t = 2: 8192 + 8388608 + 2 x 2097152 + 8388608 + 3 x 29360128
    2: (262668288, 109060096, 4096, 262668288, 4015263744),
    # t = 4: 8192 + 4194304 + 2 x 1048576 + 4194304 + 3 x 14680064
    4: (131334144, 54534144, 4096, 131334144, 2007764992),
    # t = 8: 8192 + 2097152 + 2 x 524288 + 2097152 + 3 x 7340032 (one kv head each)
    8: (65667072, 27271168, 4096, 65667072, 1004015616),
}

# TinyLlama-1.1B's shape (22 layers, h 2048, 32 heads of 64, SwiGLU 5632, vocab 32000) with
# only 2 kv heads, so that t = 4 and 8 exceed them. Megatron-LM (attention.py, since f7dfb99
# "Support TP greater than num_kv_heads") still splits the fused QKV weight evenly:
# linear_qkv is ColumnParallelLinear(h, (32 + 2 x 2) x 64) whatever t, so a rank holds
# 2 x 64 / t columns of K and of V (a part of one head, never a replicated whole head); it
# all-gathers the QKV output and attends with one kv head.
GQA_KV2 = ModelConfig(name="TinyLlama kv 2", layers=22, hidden=2048, heads=32, kv_heads=2,
                      ffn=5632, vocab=32000, mlp="swiglu", norm="rmsnorm", bias=False,
                      tied_embeddings=False, position="rope", dropout=False)
GQA_KV2_PER_RANK = {  # t: (embedding, per layer, final norm, head, total)
    # per layer: 2 RMSNorm weights 4096 + wq 2048 x 2048/t + wk, wv 2048 x 128/t each
    #   + wo 2048/t x 2048 + w1, w3, w2 2048 x 5632/t each
    # t = 1: 4096 + 4194304 + 2 x 262144 + 4194304 + 3 x 11534336 = 43520000
    1: (65536000, 43520000, 2048, 65536000, 1088514048),
    # t = 2: 4096 + 2097152 + 2 x 131072 (one whole kv head) + 2097152 + 3 x 5767168
    2: (32768000, 21762048, 2048, 32768000, 544303104),
    # t = 4: 4096 + 1048576 + 2 x 65536 (32 columns: half a head) + 1048576 + 3 x 2883584
    4: (16384000, 10883072, 2048, 16384000, 272197632),
    # t = 8: 4096 + 524288 + 2 x 32768 (16 columns: a quarter head) + 524288 + 3 x 1441792
    8: (8192000, 5443584, 2048, 8192000, 136144896),
}

SHAPES = {"gpt2_medium": (GPT2_MEDIUM, GPT2_MEDIUM_PER_RANK),
          "llama3_8b": (LLAMA3_8B, LLAMA3_8B_PER_RANK),
          "gqa_kv2": (GQA_KV2, GQA_KV2_PER_RANK)}


@pytest.mark.parametrize("t", TP)
@pytest.mark.parametrize("shape", SHAPES)
def test_per_rank_parameters_are_megatrons_layout_counted_by_hand(shape, t):
    model, table = SHAPES[shape]
    c = param_counts(tp_slice(model, t))
    assert (c.embedding, c.per_layer, c.final_norm, c.lm_head, c.total) == table[t]


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_sequence_parallelism_moves_no_parameter(sequence_parallel):
    """SP splits activations, never weights: the norms stay whole on every rank."""
    c = param_counts(tp_slice(LLAMA3_8B, 8, sequence_parallel))
    assert c.total == LLAMA3_8B_PER_RANK[8][4]


def test_the_kv_heads_a_rank_attends_with_are_whole_when_kv_is_below_t():
    """With 2 kv heads over t = 8 a rank holds a quarter of a head's weights (16 columns of K)
    but attends with one whole kv head of 64 (the gathered QKV output's own group)."""
    s = tp_slice(GQA_KV2, 8)
    assert (s.n_kv_heads, s.kv_width, s.heads, s.ffn_width) == (1, 16, 4, 704)
    train = TrainingConfig(seq_len=2048, micro_batch=1, precision="bf16", flash_attention=True)
    sb = 2048 * 1
    expected = (2 * sb * (2048 + 256 + 64 + 64 + 256)  # layer input, Q, K, V, proj input (4 x 64 = 256)
                + 4 * 4 * sb                             # fp32 log-sum-exp of 4 query heads
                + 2 * sb * (2048 + 4 * 704)              # MLP input, gate, silu, up, w2 input
                + 2 * 2 * sb * 2048)                     # the two norms' inputs
    assert activations(s, train).per_layer_bytes == expected == 2048 * 23312


def test_a_vocabulary_t_does_not_divide_gives_each_rank_the_largest_share():
    """GPT-2's 50257 rows over t = 8: ceil(50257 / 8) = 6283 on a rank (Megatron would pad
    to 51200, a multiple of 128 x 8: give the padded size to match it)."""
    plain = ModelConfig(layers=24, hidden=1024, heads=16, vocab=50257, max_seq_len=1024)
    assert param_counts(tp_slice(plain, 8)).embedding == 6283 * 1024 + 1024 * 1024


# ---- activations: Korthikanti et al. 2022, Table 2 and §4.3 ----------------------------------

# Their setting: 16-bit activations, GeLU with f = 4h, dropout, standard attention.
S, B, H, A, V, LAYERS = 2048, 2, 1024, 16, 51200, 4
KORTHIKANTI = ModelConfig(layers=LAYERS, hidden=H, heads=A, vocab=V, max_seq_len=S)
SBH = S * B * H


def table2(t: int, sp: bool, recompute: str) -> Fraction:
    """Korthikanti Table 2, bytes one layer keeps from forward to backward on a rank."""
    scores = Fraction(5 * A * S, H * t)
    if recompute == "full":
        # Table 2's 2sbh is the layer input. Megatron checkpoints each layer's hidden_states
        # (core/recompute.py, tensor_parallel.checkpoint): [s/t, b, h] under SP, since the
        # embedding is scattered to the sequence-parallel region
        # (language_model_embedding.py); [s, b, h] without it (distribute_saved_activations,
        # which would split it, is off by default and refused beside SP).
        return SBH * Fraction(2, t if sp else 1)
    kept = Fraction(34, t) if sp else 10 + Fraction(24, t)
    return SBH * (kept + (scores if recompute == "none" else 0))


def outside_layers(t: int, sp: bool) -> Fraction:
    """§4.3 with p = 1: the embedding's dropout mask sbh/t, and 4sbh/t (1 + v/h) for the final
    norm's input, the output layer's input and the fp32 logits. Without SP the first three are
    whole on every rank (sbh + 4sbh), the logits still vocab-parallel (4sbv/t)."""
    split = t if sp else 1
    return Fraction(SBH, split) + Fraction(4 * SBH, split) + Fraction(4 * S * B * V, t)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("t", TP)
def test_activations_are_korthikantis_table_2(t, sp, recompute):
    train = TrainingConfig(seq_len=S, micro_batch=B, precision="bf16",
                           activation_checkpointing=recompute)
    acts = activations(tp_slice(KORTHIKANTI, t, sp), train)
    assert acts.stored_per_layer_bytes == table2(t, sp, recompute)
    assert acts.per_layer_bytes == table2(t, sp, "none")  # what one layer makes
    assert acts.outside_layers_bytes == outside_layers(t, sp)
    assert acts.embedding_bytes == Fraction(SBH, t if sp else 1)  # the embedding's dropout mask


def test_at_t_1_sequence_parallelism_changes_nothing():
    """Megatron disables SP at t = 1 (arguments.py: "Disabling sequence parallelism because
    tensor model parallelism is disabled"); the slice of t = 1 is the whole model."""
    train = TrainingConfig(seq_len=S, micro_batch=B, precision="bf16")
    assert activations(tp_slice(KORTHIKANTI, 1, True), train) == activations(KORTHIKANTI, train)
    assert activations(KORTHIKANTI, train).per_layer_bytes == SBH * (34 + 5 * A * S // H)


# ---- the ZeRO paper's Table 1 with N_d = N / t, through `zerosim memory --json` ----------------

def scenario(write, model: str, nodes: int) -> str:
    return write("tp.toml", f"""
[model]
{model}
[cluster]
nodes = {nodes}
gpus_per_node = 8
gpu = "A100-80GB"
[training]
precision = "bf16"
optimizer = "adam"
micro_batch = 1
seq_len = 1024
""")


GPT2_MEDIUM_TOML = ('layers = 24\nhidden = 1024\nheads = 16\nvocab = 50304\n'
                    'max_seq_len = 1024\n')
LLAMA3_8B_TOML = ('layers = 32\nhidden = 4096\nheads = 32\nkv_heads = 8\nffn = 14336\n'
                  'vocab = 128256\nmlp = "swiglu"\nnorm = "rmsnorm"\nbias = false\n'
                  'tied_embeddings = false\nposition = "rope"\ndropout = false\n')


@pytest.mark.parametrize("t", TP)
@pytest.mark.parametrize("shape, text", [("gpt2_medium", GPT2_MEDIUM_TOML),
                                         ("llama3_8b", LLAMA3_8B_TOML)])
def test_zero_table_1_holds_per_slice_with_n_d_of_n_over_t(write, shape, text, t):
    """16 GPUs (2 nodes x 8), bf16 and Adam: K = 12. Every Ψ_t here divides by N_d = 16 / t,
    so each shard is exactly Ψ_t / N_d."""
    psi = SHAPES[shape][1][t][4]
    nd = 16 // t
    assert psi % nd == 0
    result = run_zerosim("memory", scenario(write, text, 2), "--json",
                         "--set", f"parallelism.tensor_parallel={t}")
    assert result.code == 0, result.stderr
    rows = result.json["stages"]
    assert [r["params_bytes"] for r in rows] == [2 * psi, 2 * psi, 2 * psi, 2 * psi // nd]
    assert [r["model_states_bytes"] for r in rows] == [
        (2 + 2 + 12) * psi,                       # baseline
        (2 + 2) * psi + 12 * psi // nd,           # P_os
        2 * psi + (2 + 12) * psi // nd,           # P_os+g
        (2 + 2 + 12) * psi // nd,                 # P_os+g+p
    ]


def test_gpt3_175b_with_t_8_on_1024_gpus(write):
    """The issue's 175B (scenarios/gpt3_175b_1024gpu.toml) at t = 8: N_d = 128. A rank's slice
    by hand (h 12288, f 49152, 96 layers, 50257 rows -> ceil(50257 / 8) = 6283, positions of
    2048, tied): per layer 2 x 2 x 12288 + (12288 x 36864/8 + 36864/8) + (12288/8 x 12288 +
    12288) + (12288 x 49152/8 + 49152/8) + (49152/8 x 12288 + 12288) = 49152 + 56627712 +
    18886656 + 75503616 + 75509760 = 226576896; embedding 6283 x 12288 + 2048 x 12288 =
    102371328; final norm 24576. Ψ_8 = 102371328 + 96 x 226576896 + 24576 = 21853777920."""
    psi = 21853777920
    shard = -(-psi // 128)  # 170732640: ceil, a flat buffer padded to a multiple of 128
    result = run_zerosim("memory", SCENARIOS / "gpt3_175b_1024gpu.toml", "--json",
                         "--set", "parallelism.tensor_parallel=8")
    assert result.code == 0, result.stderr
    rows = result.json["stages"]
    assert [r["model_states_bytes"] for r in rows] == [
        16 * psi, 4 * psi + 12 * shard, 2 * psi + 14 * shard, 16 * shard]
