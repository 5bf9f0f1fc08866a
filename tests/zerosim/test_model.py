"""Exact parameter counts of known models, and activations against Korthikanti et al. 2022."""

import pytest

from zerosim.scenario.config import ModelConfig, TrainingConfig
from zerosim.scenario.load import load_scenario
from zerosim.analytic.model import activations, max_gather_window, param_counts, total_params

from tests.conftest import SCENARIOS

GPT2 = dict(layers=12, hidden=768, heads=12, vocab=50257, max_seq_len=1024)
LLAMA = dict(mlp="swiglu", norm="rmsnorm", bias=False, position="rope", tied_embeddings=False)


@pytest.mark.parametrize("shape, expected", [
    # Reference counts of the published checkpoints (sum of numel over named parameters).
    (GPT2, 124_439_808),  # GPT-2 small
    (dict(GPT2, layers=24, hidden=1024, heads=16), 354_823_168),  # GPT-2 medium
    (dict(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000, **LLAMA), 6_738_415_616),
    (dict(layers=40, hidden=5120, heads=40, ffn=13824, vocab=32000, **LLAMA), 13_015_864_320),
    # Llama-2-70B: grouped-query attention, 8 KV heads of 128.
    (dict(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000, **LLAMA),
     68_976_648_192),
    # Pythia-160M (GPT-NeoX): rotary, untied, biases everywhere.
    (dict(layers=12, hidden=768, heads=12, ffn=3072, vocab=50304, position="rope",
          tied_embeddings=False), 162_322_944),
])
def test_parameter_counts_of_published_models(shape, expected):
    assert total_params(ModelConfig(**shape)) == expected


def test_llama2_7b_scenario_counts_exactly():
    scenario = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml")
    assert total_params(scenario.model) == 6_738_415_616


def test_gpt2_layer_is_12h2_plus_13h():
    # Megatron-LM's count per GPT layer (Narayanan et al. 2021, §5.1 derivation): 12h^2 + 13h.
    for h in (64, 768, 4096, 12288):
        counts = param_counts(ModelConfig(**dict(GPT2, hidden=h, heads=h // 64)))
        assert counts.per_layer == 12 * h * h + 13 * h


def test_bare_psi_gather_units_split_evenly():
    model = ModelConfig(params=7_500_000_000, layers=36)  # 208,333,333 r 12
    assert max_gather_window(model, 1) == 208_333_334
    assert max_gather_window(model, 2) == 2 * 208_333_334
    assert max_gather_window(model, 36) == 7_500_000_000
    assert max_gather_window(model, 1000) == 7_500_000_000
    assert max_gather_window(ModelConfig(params=10**15, layers=10**15), 3) == 3  # closed form


def test_gather_window_of_shaped_model_includes_embedding_and_head():
    model = ModelConfig(**GPT2)
    c = param_counts(model)
    assert max_gather_window(model, 1) == max(c.embedding, c.per_layer)
    # Window of everything but the embedding unit: the tied head gathers the embedding matrix.
    assert max_gather_window(model, 13) == max(c.embedding + 12 * c.per_layer,
                                               12 * c.per_layer + c.final_norm + 50257 * 768)
    # All units at once: the tied matrix is one gathered tensor, so exactly the model.
    assert max_gather_window(model, 14) == 124_439_808 == max_gather_window(model, 99)


# Korthikanti et al. 2022, Eq. 1: s*b*h*(34 + 5*a*s/h) bytes per layer (16-bit, GeLU, f = 4h,
# dropout, standard attention); Eq. 2 region: selective recomputation keeps 34*s*b*h; full
# recomputation keeps the 16-bit layer input, 2*s*b*h.
@pytest.mark.parametrize("s, b, h, a", [(2048, 1, 4096, 32), (1024, 4, 1024, 16), (128, 3, 768, 12)])
def test_activations_per_layer_match_korthikanti_eq1(s, b, h, a):
    model = ModelConfig(layers=10, hidden=h, heads=a, vocab=51200, max_seq_len=s)
    train = TrainingConfig(precision="bf16", micro_batch=b, seq_len=s)
    act = activations(model, train)
    assert act.per_layer_bytes * h == s * b * h * (34 * h + 5 * a * s)  # Eq. 1 times h: integers
    assert act.per_layer_bytes == s * b * h * 34 + 5 * a * s * s * b
    assert act.stored_per_layer_bytes == act.per_layer_bytes and act.recompute_bytes == 0
    # §4.3: embedding dropout mask sbh, output layer 4sbh (norm + projection inputs), logits 4sbv.
    assert act.outside_layers_bytes == s * b * h + 4 * s * b * h + 4 * s * b * 51200

    selective = activations(model, TrainingConfig(precision="bf16", micro_batch=b, seq_len=s,
                                                  activation_checkpointing="selective"))
    assert selective.stored_per_layer_bytes == 34 * s * b * h
    assert selective.recompute_bytes == 5 * a * s * s * b

    full = activations(model, TrainingConfig(precision="bf16", micro_batch=b, seq_len=s,
                                             activation_checkpointing="full"))
    assert full.stored_per_layer_bytes == 2 * s * b * h
    # At the peak: every layer's input and either what the head keeps (forward's end) or, once
    # its backward has freed it, one recomputed layer beside the embedding's mask sbh.
    assert full.peak_bytes == 10 * 2 * s * b * h + max(act.outside_layers_bytes,
                                                       s * b * h + act.per_layer_bytes)


def test_activation_variants_remove_what_they_should():
    s, b, h, a, f = 512, 2, 1024, 16, 2816
    base = dict(layers=4, hidden=h, heads=a, vocab=1000, max_seq_len=s)
    train = TrainingConfig(precision="bf16", micro_batch=b, seq_len=s)
    std = activations(ModelConfig(**base), train).per_layer_bytes
    flash = activations(ModelConfig(**base), TrainingConfig(
        precision="bf16", micro_batch=b, seq_len=s, flash_attention=True)).per_layer_bytes
    assert std - flash == 5 * a * s * s * b - 4 * a * s * b  # scores out, fp32 log-sum-exp in
    no_dropout = activations(ModelConfig(**base, dropout=False), train).per_layer_bytes
    assert std - no_dropout == 2 * s * b * h + 3 * a * s * s * b  # two sbh masks, mask + output
    fp32 = activations(ModelConfig(**base), TrainingConfig(
        precision="fp32", micro_batch=b, seq_len=s)).per_layer_bytes
    assert fp32 == 2 * std - (2 * s * b * h + a * s * s * b)  # masks stay 1 byte
    swiglu = activations(ModelConfig(**base, mlp="swiglu", ffn=f), train).per_layer_bytes
    gelu_f = activations(ModelConfig(**base, ffn=f), train).per_layer_bytes
    assert swiglu - gelu_f == 2 * 2 * s * b * f  # two more s*b*f tensors (gate and up outputs)


def test_bare_psi_has_no_activations():
    act = activations(ModelConfig(params=10**9), TrainingConfig(micro_batch=8, seq_len=4096))
    assert act.peak_bytes == 0


def test_parameter_count_is_capped_at_2_53_exactly():
    """Every count derived from Ψ (units, gathers, bytes per element) is at most Ψ's magnitude:
    the largest shape at 2**53 parameters is counted, one layer more is refused, naming the sum."""
    from zerosim.errors import InputError

    shape = dict(GPT2, layers=1)
    one = param_counts(ModelConfig(**shape))
    layers = (2**53 - one.total) // one.per_layer + 1  # the most whole layers within 2**53
    assert param_counts(ModelConfig(**dict(shape, layers=layers))).total <= 2**53
    with pytest.raises(InputError, match=rf"the parameter count Ψ = embedding .* \+ {layers + 1} "
                                         rf"layers x .* is beyond what zerosim models"):
        param_counts(ModelConfig(**dict(shape, layers=layers + 1)))
