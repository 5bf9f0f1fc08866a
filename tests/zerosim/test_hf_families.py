"""Real Hugging Face config.json files (tests/fixtures/hf, provenance in its README) read into
exact parameter counts: each against a hand count of its layout and against the model card's
published figure at the card's precision; mixtures of experts and the dense layouts zerosim
cannot say yet refused in one line that names what is missing."""

from __future__ import annotations

import pytest

from zerosim.analytic.model import total_params
from zerosim.scenario.hf import read_hf_config
from zerosim.scenario.model_table import ModelConfig

from tests.conftest import ROOT, SCENARIOS, assert_one_line_error, run_zerosim

HF = ROOT / "tests/fixtures/hf"


def hand_count(v, d, layers, heads, kv, hd, ffn, *, tied, gated=True, bias=False,
               qkv_bias=None, norm_w=1, norms=2, qk_norm=False, positions=0):
    """Counted by hand from the layout: the token table (and learned positions); per layer Q
    (d x heads·hd), K and V (d x kv·hd each), the output (heads·hd x d), their biases where the
    family has them, a gated MLP's three matrices or a plain one's two (with biases where it
    has them), `norms` norms of d (norm_w = 2 for a LayerNorm with its bias), per-head Q/K norms
    of hd; the final norm; an untied head."""
    qkv_bias = bias if qkv_bias is None else qkv_bias
    attention = d * heads * hd + 2 * d * kv * hd + heads * hd * d
    attention += (heads * hd + 2 * kv * hd if qkv_bias else 0) + (d if bias else 0)
    attention += 2 * hd * norm_w if qk_norm else 0
    mlp = 3 * d * ffn + (2 * ffn + d if bias else 0) if gated else (
        2 * d * ffn + (ffn + d if bias else 0))
    layer = attention + mlp + norms * d * norm_w
    return v * d + positions * d + layers * layer + d * norm_w + (0 if tied else v * d)


GPT = dict(gated=False, bias=True, norm_w=2)
FAMILIES = {  # file: (hand count, the card's figure, its precision)
    "llama3__Meta-Llama-3-8B": (hand_count(128256, 4096, 32, 32, 8, 128, 14336, tied=False),
                                8.03e9, 1e7),
    "mistral__Mistral-7B-v0.1": (hand_count(32000, 4096, 32, 32, 8, 128, 14336, tied=False),
                                 7.24e9, 1e7),
    "phi3__Phi-3-mini-4k-instruct": (hand_count(32064, 3072, 32, 32, 32, 96, 8192, tied=False),
                                     3_821_079_552, 1),
    "gemma__gemma-2b-it": (hand_count(256000, 2048, 18, 8, 1, 256, 16384, tied=True), 2.51e9,
                           1e7),
    "gemma__gemma-7b.RECONSTRUCTED": (hand_count(256000, 3072, 28, 16, 16, 256, 24576,
                                                 tied=True), 8.54e9, 1e7),
    "gemma2__gemma-2-9b-it": (hand_count(256000, 3584, 42, 16, 8, 256, 14336, tied=True,
                                         norms=4), 9.24e9, 1e7),
    "gemma3__gemma-3-1b-it": (hand_count(262144, 1152, 26, 4, 1, 256, 6912, tied=True, norms=4,
                                         qk_norm=True), 1.0e9, 1e8),
    "qwen2__Qwen2-7B": (hand_count(152064, 3584, 28, 28, 4, 128, 18944, tied=False,
                                   qkv_bias=True), 7.62e9, 1e7),
    "qwen2.5__Qwen2.5-0.5B": (hand_count(151936, 896, 24, 14, 2, 64, 4864, tied=True,
                                         qkv_bias=True), 0.49e9, 1e7),
    "qwen3__Qwen3-8B": (hand_count(151936, 4096, 36, 32, 8, 128, 12288, tied=False,
                                   qk_norm=True), 8.2e9, 1e8),
    "qwen3__Qwen3-0.6B": (hand_count(151936, 1024, 28, 16, 8, 128, 3072, tied=True,
                                     qk_norm=True), 0.6e9, 1e8),
    "falcon__falcon-7b-instruct.NEAR-VERBATIM": (hand_count(
        65024, 4544, 32, 71, 1, 64, 4 * 4544, tied=True, gated=False, norm_w=2, norms=1),
        6.92e9, 1e7),
    "gpt2__gpt2": (hand_count(50257, 768, 12, 12, 12, 64, 3072, tied=True, positions=1024,
                              **GPT), 124e6, 1e6),
    "gpt_neox__pythia-1b": (hand_count(50304, 2048, 16, 8, 8, 256, 8192, tied=False, **GPT),
                            1_011_781_632, 1),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_reads_to_its_exact_count(name):
    hand, published, precision = FAMILIES[name]
    keys = read_hf_config(HF / f"{name}.json")
    keys.pop("name")
    counted = total_params(ModelConfig(**keys))
    assert counted == hand
    assert round(counted / precision) == round(published / precision)


def test_eleven_families_read_and_the_collected_files_are_all_compared():
    families = {name.split("__")[0].split(".")[0] for name in FAMILIES}
    assert len(families) == 11
    dense = {path.stem for path in HF.glob("*.json")} - {"mixtral__Mixtral-8x7B-v0.1",
                                                        "qwen2_moe__Qwen1.5-MoE-A2.7B-Chat"}
    assert dense - set(FAMILIES) == {"qwen2.5__Qwen2.5-7B-Instruct"}  # Qwen2-7B's count


@pytest.mark.parametrize("name, fragments", [
    ("mixtral__Mixtral-8x7B-v0.1", ("mixture of experts", "num_local_experts = 8")),
    ("qwen2_moe__Qwen1.5-MoE-A2.7B-Chat", ("mixture of experts", "num_experts = 60")),
])
def test_a_mixture_of_experts_is_one_line(name, fragments):
    shown = run_zerosim("memory", SCENARIOS / "llama2_7b_64gpu.toml",
                        "--set", f"model.hf_config='{HF / name}.json'")
    assert_one_line_error(shown, *fragments)


def test_a_family_not_modeled_yet_is_one_line_naming_what_is_missing(tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "olmo", "hidden_size": 4096}')
    shown = run_zerosim("memory", SCENARIOS / "llama2_7b_64gpu.toml",
                        "--set", f"model.hf_config='{config}'")
    assert_one_line_error(shown, "'olmo' is not modeled yet", "LayerNorm without parameters")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_view_of_a_familys_parameters_agrees(name):
    """FSDP2's tensors, DeepSpeed's modules and the gather units count what param_counts does,
    for every layout read (four norms, Q/K norms, Q/K/V-only biases, one norm, head sizes)."""
    from zerosim.analytic.model import gather_units, module_parts, unit_tensor_shapes

    keys = read_hf_config(HF / f"{name}.json")
    keys.pop("name")
    m = ModelConfig(**keys)
    total, tied = total_params(m), m.vocab * m.hidden if m.tied_embeddings else 0
    assert sum(r * c for unit in unit_tensor_shapes(m) for r, c in unit) == total
    embedding, block, head = module_parts(m)
    assert sum(map(sum, embedding)) + m.layers * sum(map(sum, block)) + sum(
        map(sum, head)) - tied == total
    assert sum(gather_units(m)) - tied == total


def test_the_new_layout_keys_are_checked():
    from zerosim.errors import InputError

    shape = dict(layers=2, hidden=96, heads=4, vocab=100, max_seq_len=16)
    with pytest.raises(InputError, match="model.layer_norms = 3 is not one of 1, 2, 4$"):
        ModelConfig(**shape, layer_norms=3)
    with pytest.raises(InputError, match="model.head_size = 0 must be > 0"):
        ModelConfig(**shape, head_size=0)
    with pytest.raises(InputError, match="excludes the shape keys"):
        ModelConfig(params=10, head_size=8)
    # a head size frees heads from dividing the width: 5 heads of 32 beside a width of 96
    wide = ModelConfig(**{**shape, "heads": 5}, head_size=32)
    assert (wide.q_width, wide.kv_width) == (160, 160)


def test_sequence_parallel_sums_every_norm_of_a_layer():
    """The replicated gradients sequence parallelism leaves partial: each layer's norms (four in
    Gemma-2, two and the per-head Q/K norms in Qwen3), RMSNorm weights only, no biases; and the
    final norm (tensor_comm.replicated_gradient_elements, by hand)."""
    from zerosim.analytic.tensor_comm import replicated_gradient_elements

    def model(name):
        keys = read_hf_config(HF / f"{name}.json")
        keys.pop("name")
        return ModelConfig(**keys)

    gemma2, qwen3 = model("gemma2__gemma-2-9b-it"), model("qwen3__Qwen3-8B")
    assert replicated_gradient_elements(gemma2) == 42 * 4 * 3584 + 3584
    assert replicated_gradient_elements(qwen3) == 36 * (2 * 4096 + 2 * 128) + 4096


def test_falcons_new_layout_reads_its_norms_per_layer(tmp_path):
    """Falcon's new decoder (40B, 180B) runs attention and MLP in parallel off two LayerNorms,
    or one where num_ln_in_parallel_attn says 1 (Falcon2-11B): one h-wide norm with its bias
    fewer a layer."""
    import json

    base = {"model_type": "falcon", "new_decoder_architecture": True, "hidden_size": 256,
            "num_attention_heads": 8, "num_kv_heads": 2, "num_hidden_layers": 3,
            "vocab_size": 1000, "bias": False, "parallel_attn": True}
    counts = []
    for extra in ({}, {"num_ln_in_parallel_attn": 1}):
        path = tmp_path / f"falcon{len(counts)}.json"
        path.write_text(json.dumps({**base, **extra}))
        keys = read_hf_config(path)
        keys.pop("name")
        counts.append(total_params(ModelConfig(**keys)))
    assert counts[0] - counts[1] == 3 * 2 * 256
