"""Sliding-window attention: the pairs a window keeps counted by hand and against Hugging Face's
mask written out; which layers each family's config makes local (its modeling code, cited in
zerosim/scenario/hf.py); the FLOPs and the flash kernel's time a window saves, and only where
the kernel skips what it masks; the memory, standard attention and zero_real untouched."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import pytest

from zerosim.analytic.model import activations, model_flops_per_token, unit_flops
from zerosim.analytic.window import window_pairs, window_share
from zerosim.errors import InputError
from zerosim.scenario.hf import read_hf_config
from zerosim.scenario.load import build_scenario
from zerosim.scenario.model_table import ModelConfig
from zerosim.sim.op_costs import attention_core, op_costs, unit_seconds
from zerosim.tradeoffs.plan import largest_model

from tests.conftest import ROOT

HF = ROOT / "tests/fixtures/hf"


def hf_mask_pairs(s: int, w: int) -> int:
    """Pairs Hugging Face's sliding causal mask lets through, cell by cell: causal
    (kv_idx <= q_idx) and the overlay (kv_idx > q_idx - sliding_window), masking_utils.py."""
    return sum(1 for q in range(s) for kv in range(s) if kv <= q and kv > q - w)


def test_the_pairs_a_window_keeps_by_hand():
    # s = 8, w = 3: queries 0..7 see 1, 2, 3, 3, 3, 3, 3, 3 keys
    assert window_pairs(8, 3) == 1 + 2 + 3 * 6 == 21
    assert window_share(8, 3) == 21 / 36  # over causal full attention's 8·9/2
    assert window_pairs(8, 8) == window_pairs(8, 100) == window_pairs(8, None) == 36
    assert window_pairs(8, 1) == 8  # each token itself only
    for s, w in [(16, 4), (33, 7), (64, 63), (10, 11)]:
        assert window_pairs(s, w) == hf_mask_pairs(s, w)
    # Mistral-7B at its 32768 positions: 4096·32768 - 4096·4095/2 of 32768·32769/2
    assert window_pairs(32768, 4096) == 4096 * 32768 - 4096 * 4095 // 2 == 125_831_168


LAYERS = {  # fixture: (window, local layers or None for all, layers)
    "mistral__Mistral-7B-v0.1": (4096, None, 32),
    "phi3__Phi-3-mini-4k-instruct": (2047, None, 32),
    "gemma2__gemma-2-9b-it": (4096, list(range(0, 42, 2)), 42),  # layer_idx % 2 == 0
    "gemma3__gemma-3-1b-it": (512, [i for i in range(26) if i not in (5, 11, 17, 23)], 26),
    "qwen2__Qwen2-7B": (None, None, 28),  # use_sliding_window false
    "qwen2.5__Qwen2.5-7B-Instruct": (None, None, 28),
    "qwen3__Qwen3-8B": (None, None, 36),
    "llama3__Meta-Llama-3-8B": (None, None, 32),
}


@pytest.mark.parametrize("name", LAYERS)
def test_each_family_reads_its_window_on_the_layers_its_code_makes_local(name):
    window, local, layers = LAYERS[name]
    keys = read_hf_config(HF / f"{name}.json")
    assert keys.get("sliding_window") == window
    assert keys.get("sliding_window_layers") == local
    model = ModelConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in keys.items()})
    assert model.layers == layers
    expected = [window if local is None or i in local else None for i in range(layers)]
    assert list(model.layer_windows) == expected


def qwen_with_window(tmp_path, **changes):
    data = json.loads((HF / "qwen2__Qwen2-7B.json").read_text())
    data.update(changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return read_hf_config(path)


def test_qwen2_windows_the_layers_from_max_window_layers_on(tmp_path):
    keys = qwen_with_window(tmp_path, use_sliding_window=True, sliding_window=4096,
                            max_window_layers=20)
    assert keys["sliding_window"] == 4096 and keys["sliding_window_layers"] == list(
        range(20, 28))
    # a config's layer_types wins over the family's rule
    types = ["full_attention"] * 27 + ["sliding_attention"]
    keys = qwen_with_window(tmp_path, use_sliding_window=True, layer_types=types)
    assert keys["sliding_window_layers"] == [27]
    with pytest.raises(InputError, match="layer_types"):
        qwen_with_window(tmp_path, use_sliding_window=True, layer_types=["chunked"] * 28)


TINY = dict(name="tiny", layers=4, hidden=64, heads=4, ffn=256, vocab=1000, mlp="swiglu",
            norm="rmsnorm", bias=False, position="rope", dropout=False, max_seq_len=64)


def scenario(model=None, **training):
    tables = {"model": {**TINY, **(model or {})},
              "cluster": {"gpu": "H100-80GB", "nodes": 1, "gpus_per_node": 8},
              "training": {"seq_len": 64, "micro_batch": 2, **training}}
    return build_scenario(tables, base_dir=ROOT)


WINDOWED = {"sliding_window": 16, "sliding_window_layers": [0, 2]}


def test_fa2_scores_and_av_shrink_by_the_windows_share_of_the_pairs():
    full = scenario(flash_attention=True)
    local = scenario(WINDOWED, flash_attention=True)
    b, s, h = 2, 64, 64
    square = 4 * b * s * s * h  # QK^T and AV over the whole s x s, the code's convention
    share = Fraction(16 * 64 - 16 * 15 // 2, 64 * 65 // 2)  # 904 / 2080, by hand
    saved = square * (1 - share)
    before, after = unit_flops(full.model, full.training), unit_flops(local.model,
                                                                      local.training)
    for layer in (1, 3):  # layers 0 and 2: units 1 and 3 (the embedding is unit 0)
        assert before[layer].forward - after[layer].forward == pytest.approx(float(saved))
        assert before[layer].backward - after[layer].backward == pytest.approx(2 * float(saved))
    assert after[2] == before[2] and after[4] == before[4]  # full layers 1 and 3
    assert after[0] == before[0] and after[-1] == before[-1]


@pytest.mark.parametrize("training", [dict(flash_attention=False),
                                      dict(flash_attention=True, flash_kernel="fa1"),
                                      dict(flash_attention=True, flash_kernel="triton")])
def test_a_kernel_that_masks_the_window_computes_the_whole_square(training):
    """Standard attention (Hugging Face's eager path adds the window to the s x s scores as a
    mask), FlashAttention-1 and Triton's kernel take no window: nothing shrinks but the
    model's own FLOPs."""
    full, local = scenario(**training), scenario(WINDOWED, **training)
    assert unit_flops(full.model, full.training) == unit_flops(local.model, local.training)
    assert activations(full.model, full.training) == activations(local.model, local.training)
    costs = op_costs(full.cluster)
    for backward in (False, True):
        assert attention_core(costs, local.model, local.training, backward, 16) == \
            attention_core(costs, full.model, full.training, backward)
    assert model_flops_per_token(local.model, local.training) < model_flops_per_token(
        full.model, full.training)


def test_model_flops_count_the_window_whatever_the_kernel():
    """MFU's numerator: 6N per token plus attention's 3 x 4·s·h per layer and token (PaLM's
    12·L·H·Q·T, the whole square), a windowed layer's times its share."""
    plain, flash = scenario(WINDOWED), scenario(WINDOWED, flash_attention=True)
    assert model_flops_per_token(plain.model, plain.training) == model_flops_per_token(
        flash.model, flash.training)
    full = scenario()
    share = 904 / 2080
    per_layer = 3 * 4 * 64 * 64  # forward and backward, per token: 3 x 4 s h
    expected = model_flops_per_token(full.model, full.training) - 2 * per_layer * (1 - share)
    assert model_flops_per_token(plain.model, plain.training) == pytest.approx(expected)


def test_the_flash_kernels_time_shrinks_with_the_pairs_it_computes():
    full = scenario(flash_attention=True)
    local = scenario(WINDOWED, flash_attention=True)
    costs = op_costs(full.cluster)
    for backward in (False, True):
        whole = attention_core(costs, full.model, full.training, backward)
        windowed = attention_core(costs, local.model, local.training, backward, 16)
        launch = costs.launch
        assert windowed.seconds - launch == pytest.approx((whole.seconds - launch) * 904 / 2080)
    forward, backward = unit_seconds(costs, local.model, local.training)
    plain_forward, plain_backward = unit_seconds(costs, full.model, full.training)
    assert forward[1] < plain_forward[1] and forward[2] == plain_forward[2]
    assert backward[3] < plain_backward[3] and backward[4] == plain_backward[4]


def test_the_window_keys_are_checked():
    with pytest.raises(InputError, match="sliding_window .its tokens. is not set"):
        ModelConfig(**TINY, sliding_window_layers=(0,))
    with pytest.raises(InputError, match="layer 4 is not one of the model's layers 0 to 3"):
        ModelConfig(**TINY, sliding_window=8, sliding_window_layers=(1, 4))
    with pytest.raises(InputError, match="names layer 1 twice"):
        ModelConfig(**TINY, sliding_window=8, sliding_window_layers=(1, 1))
    with pytest.raises(InputError, match="model.sliding_window"):
        ModelConfig(**TINY, sliding_window=0)
    with pytest.raises(InputError, match="excludes the shape keys.*model.sliding_window"):
        ModelConfig(params=10**9, sliding_window=8)
    with pytest.raises(InputError, match="array of layers"):
        scenario({"sliding_window": 8, "sliding_window_layers": 3})
    # [] prices every layer over its whole prefix
    none = ModelConfig(**TINY, sliding_window=8, sliding_window_layers=())
    assert none.layer_windows == (None,) * 4 and none.windowed_layers == 0
    assert ModelConfig(**TINY, sliding_window=8).windowed_layers == 4


def test_a_config_with_more_layers_than_are_listed_is_one_line(tmp_path):
    data = json.loads((HF / "gemma2__gemma-2-9b-it.json").read_text())
    data["num_hidden_layers"] = 2**40  # listing every other one would take hours
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="num_hidden_layers = 1099511627776 with a sliding"):
        read_hf_config(path)


def test_a_resized_model_repeats_its_layout():
    gemma2 = ModelConfig(**{**TINY, "layers": 6}, sliding_window=8,
                         sliding_window_layers=(0, 2, 4))
    assert gemma2.resized(9).sliding_window_layers == (0, 2, 4, 6, 8)
    assert gemma2.resized(3).sliding_window_layers == (0, 2)
    mistral = ModelConfig(**TINY, sliding_window=8)
    assert mistral.resized(10).layer_windows == (8,) * 10
    assert replace(mistral, layers=2).layer_windows == (8, 8)


def test_the_sequence_note_says_the_window_caps_the_attention():
    tables = {"model": {"hf_config": str(HF / "mistral__Mistral-7B-v0.1.json")},
              "cluster": {"gpu": "H100-80GB", "nodes": 1, "gpus_per_node": 8}}
    notes = build_scenario(tables, base_dir=ROOT).default_notes
    note = next(n for n in notes if n.startswith("training.seq_len = 32768"))
    assert "sliding window of 4096 tokens caps the attention of 32 of 32 layers" in note


def test_the_planner_grows_a_windowed_model_with_wide_heads():
    """Gemma-2 (head_dim 256 beside a width of 3584, every other layer windowed): its bare-Ψ
    variant drops the shape's keys, head_size and the window's with them; its deeper variants
    repeat the layout."""
    tables = {"model": {"hf_config": str(HF / "gemma2__gemma-2-9b-it.json")},
              "cluster": {"gpu": "H100-80GB", "nodes": 1, "gpus_per_node": 8},
              "training": {"seq_len": 1024, "zero_stage": 3, "flash_attention": True}}
    found = largest_model(build_scenario(tables, base_dir=ROOT), 3, 80 * 2**30)
    assert found["max_layers"] > 42 and found["max_params_model_states"] > found[
        "max_params_whole"]
