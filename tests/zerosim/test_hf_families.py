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


def llama_count(v, d, layers, heads, kv, ffn, tied):
    """Embedding, per layer Q/K/V/O (head_dim d / heads), a gated MLP's three matrices and two
    RMSNorms, the final norm, an untied head."""
    hd = d // heads
    layer = d * heads * hd + 2 * d * kv * hd + heads * hd * d + 3 * d * ffn + 2 * d
    return v * d + layers * layer + d + (0 if tied else v * d)


def gpt_count(v, d, layers, ffn, positions, tied):
    """Biases everywhere and LayerNorms with biases: QKV (3d^2 + 3d), out (d^2 + d), the MLP's
    two matrices (2 d ffn + ffn + d), two norms (4d); the final norm; learned positions."""
    layer = 3 * d * d + 3 * d + d * d + d + 2 * d * ffn + ffn + d + 4 * d
    return v * d + positions * d + layers * layer + 2 * d + (0 if tied else v * d)


FAMILIES = {  # file: (hand count, the card's figure, its precision)
    "llama3__Meta-Llama-3-8B": (llama_count(128256, 4096, 32, 32, 8, 14336, False), 8.03e9, 1e7),
    "mistral__Mistral-7B-v0.1": (llama_count(32000, 4096, 32, 32, 8, 14336, False), 7.24e9, 1e7),
    "phi3__Phi-3-mini-4k-instruct": (llama_count(32064, 3072, 32, 32, 32, 8192, False),
                                     3_821_079_552, 1),
    "gemma__gemma-2b-it": (llama_count(256000, 2048, 18, 8, 1, 16384, True), 2.51e9, 1e7),
    "gpt2__gpt2": (gpt_count(50257, 768, 12, 3072, 1024, True), 124e6, 1e6),
    "gpt_neox__pythia-1b": (gpt_count(50304, 2048, 16, 8192, 0, False), 1_011_781_632, 1),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_reads_to_its_exact_count(name):
    hand, published, precision = FAMILIES[name]
    keys = read_hf_config(HF / f"{name}.json")
    keys.pop("name")
    counted = total_params(ModelConfig(**keys))
    assert counted == hand
    assert round(counted / precision) == round(published / precision)


def test_six_families_read_and_the_fixtures_hold_more():
    families = {name.split("__")[0] for name in FAMILIES}
    assert len(families) == 6
    assert len(list(HF.glob("*.json"))) >= 17


@pytest.mark.parametrize("name, fragments", [
    ("mixtral__Mixtral-8x7B-v0.1", ("mixture of experts", "num_local_experts = 8")),
    ("qwen2_moe__Qwen1.5-MoE-A2.7B-Chat", ("mixture of experts", "num_experts = 60")),
    ("qwen2__Qwen2-7B", ("'qwen2' is not modeled yet", "biases on Q, K and V")),
    ("qwen3__Qwen3-8B", ("'qwen3' is not modeled yet", "RMSNorms on Q and K")),
    ("gemma2__gemma-2-9b-it", ("'gemma2' is not modeled yet", "four norms")),
    ("gemma3__gemma-3-1b-it", ("'gemma3_text' is not modeled yet",)),
    ("falcon__falcon-7b-instruct.NEAR-VERBATIM", ("'falcon' is not modeled yet", "parallel")),
    ("gemma__gemma-7b.RECONSTRUCTED", ("head_dim = 256",)),
])
def test_what_it_cannot_say_is_one_line(name, fragments):
    shown = run_zerosim("memory", SCENARIOS / "llama2_7b_64gpu.toml",
                        "--set", f"model.hf_config='{HF / name}.json'")
    assert_one_line_error(shown, *fragments)
