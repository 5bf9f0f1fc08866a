"""Memory mechanisms (zerosim/calibration/fit_memory.py, zerosim/analytic/mechanisms.py,
zero_real/calibration/memory_bench.py): each microbenchmark's bytes against a hand count of the
tensors PyTorch allocates, the fit recovering known constants exactly, no negative term from any
measurement, and each priced term against a hand count on the tiny scenario."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim.analytic.mechanisms import MEMORY_MECHANISMS, mechanism_terms
from zerosim.calibration.fit_memory import DERIVED, MEASURED, fit_memory, nonnegative_fit
from zerosim.scenario.load import load_scenario
from zerosim.scenario.profile import Profile

TINY = Path(__file__).resolve().parents[2] / "scenarios" / "tiny_gpt_4rank_cpu.toml"
# The tiny scenario as zero_real runs it (its model has no dropout): 2 layers, hidden 64, 4 heads,
# ffn 256, vocab 256, micro-batch 2 x sequence 32 = 64 tokens, learned positions, LayerNorm.
TOKENS, HIDDEN, VOCAB, LAYERS, HEADS, SEQ, BATCH = 64, 64, 256, 2, 4, 32, 2


NONE = {"activations": 0, "residue": 0, "workspace": 0, "optimizer_per_element": 0.0,
        "bucket_pool": 0, "last_unit_kept": 0, "tied_grad_kept": 0}


def _rows(mechanism: str, points, **extra) -> list[dict]:
    return [{"processes": 2, "threads": 1, "dtype": "float32", "device": "cpu",
             "mechanism": mechanism, "counts": counts, "bytes": size, **extra}
            for counts, size in points]


def _profile(memory) -> Profile:
    return Profile("(test)", {"fit": {"memory": {"2": memory}}})


def _tiny(*sets: str, memory=None):
    scenario = load_scenario(TINY, ["model.dropout=false", "cluster.gpus_per_node=2", *sets])
    return dataclasses.replace(scenario, profile=_profile(memory) if memory is not None else None)


# ---- the fit -----------------------------------------------------------------------------------

def test_fit_recovers_known_constants_exactly():
    """Synthetic rows from 4 fixed bytes + 8 per logit (the loss's two fp32 gradients), 8 per
    element (Adam's two temporaries), and a LayerNorm's 8 per token with 0 per token x hidden."""
    loss = _rows("loss_backward", [({"logit": x}, 4 + 8 * x) for x in (100, 1000, 10_000)])
    adam = _rows("optimizer_step", [({"element": e}, 8 * e) for e in (10, 1000)])
    norm = _rows("norm_saved", [({"token": t, "token_hidden": t * h}, 8 * t)
                                for t, h in ((64, 32), (64, 128), (512, 64))], norm="layernorm")
    memory = fit_memory(loss + adam + norm)["2"]
    assert memory["loss_backward"]["fixed_bytes"] == 4.0
    assert memory["loss_backward"]["per"] == {"logit": 8.0}
    assert memory["optimizer_step"]["per"] == {"element": 8.0}
    assert memory["norm_saved"]["per"] == {"token": 8.0, "token_hidden": 0.0}
    assert memory["norm_saved"]["norm"] == "layernorm"
    assert all(r == 0.0 for r in memory["loss_backward"]["residuals_pct"])
    assert {k: memory[k]["how"] for k in memory} == {
        **{k: "measured" for k in ("loss_backward", "optimizer_step", "norm_saved")},
        **{k: "derived" for k in DERIVED}}


def test_a_term_that_would_fit_negative_is_dropped_and_the_rest_refitted():
    """Bytes falling with the size (y = 1000 - x) would fit a negative slope: the slope is
    dropped and the fixed bytes refitted to the mean, 850."""
    coef = nonnegative_fit(np.array([[1.0, 100.0], [1.0, 200.0]]), np.array([900.0, 800.0]))
    assert coef.tolist() == [pytest.approx(850.0), 0.0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6),
                          st.integers(-10**9, 10**9)), min_size=1, max_size=8))
def test_no_measurement_makes_a_negative_term(points):
    """Any rows at all (noise, bytes falling with the size, negative bytes from a broken
    reading): every fitted coefficient and every priced term is >= 0."""
    rows = _rows("norm_saved", [({"token": t, "token_hidden": th}, b) for t, th, b in points],
                 norm="layernorm")
    rows += _rows("loss_backward", [({"logit": t}, b) for t, _, b in points])
    rows += _rows("attention_saved", [({"qkv_element": t, "score": th, "row": t}, b)
                                      for t, th, b in points], kernel="math")
    memory = fit_memory(rows)["2"]
    for name in MEASURED:
        if name in memory:
            assert memory[name]["fixed_bytes"] >= 0
            assert all(c >= 0 for c in memory[name]["per"].values())
    for stage in range(4):
        assert all(v >= 0 for v in mechanism_terms(_tiny(memory=memory), stage).values())


def test_every_mechanism_has_a_term():
    assert set(DERIVED) | set(MEASURED) == set(MEMORY_MECHANISMS)


# ---- pricing, against hand counts on the tiny scenario -----------------------------------------

def _measured(**per) -> dict:
    return {"fixed_bytes": 0.0, "per": per, "how": "measured", "source": "test"}


def test_derived_terms_priced_by_hand():
    """fp32, micro-batch 2: head_kept = the head's input and its gradient (2 x 64 tokens x 64 x 4
    bytes) + ids and targets (16 x 64) + the loss and its sum (8) = 33,800, what zero_real's
    stage 0 held after backward beyond its states; saved_ids = 16 x 64 + 8 x 32 positions + 16 =
    1,296; no batch-1 attention term at micro-batch 2."""
    terms = mechanism_terms(_tiny(memory={k: {**v, "how": "derived"} for k, v in DERIVED.items()}),
                            1)
    assert terms == {**NONE, "activations": 1296, "residue": 33_800}


def test_batch_one_math_attention_keeps_the_fused_qkv_output():
    """Micro-batch 1 (32 tokens): 2 layers x 32 tokens x (64 + 64) Q and K widths x 4 bytes."""
    memory = {"math_attention_batch1": {**DERIVED["math_attention_batch1"], "how": "derived"}}
    batch1 = _tiny("training.micro_batch=1", memory=memory)
    assert mechanism_terms(batch1, 1)["activations"] == 32_768
    flash = _tiny("training.micro_batch=1", "training.flash_attention=true", memory=memory)
    assert mechanism_terms(flash, 1)["activations"] == 0


def test_measured_terms_priced_by_hand():
    """loss 8 per logit: 8 x 64 x 256 = 131,072 (what zero_real's stage 1 peak held above its
    after-forward); LayerNorm 8 per token over 5 norms: 2,560; Adam 8 per element."""
    memory = {"loss_backward": _measured(logit=8.0),
              "norm_saved": {**_measured(token=8.0, token_hidden=0.0), "norm": "layernorm"},
              "optimizer_step": _measured(element=8.0)}
    assert mechanism_terms(_tiny(memory=memory), 1) == {
        **NONE, "activations": 2560, "workspace": 131_072, "optimizer_per_element": 8.0}
    assert mechanism_terms(_tiny("model.norm=rmsnorm", memory=memory), 1)["activations"] == 0


def test_a_mechanism_of_another_precision_or_held_by_the_framework_adds_nothing():
    """Review R1: bytes measured in fp32 say nothing of a bf16 run's (attention's 4 bytes per
    score against bf16's counted 2 gave 85,776 bytes where 3,856 were held); and a framework
    that holds the loss's two fp32 gradients itself (DeepSpeed's loss_blocks: 2 x 64 x 256 x 4)
    must not get the measured ones on top."""
    memory = {"loss_backward": {**_measured(logit=8.0), "dtype": "float32"},
              "norm_saved": {**_measured(token=8.0), "norm": "layernorm", "dtype": "float32"}}
    fp32 = mechanism_terms(_tiny(memory=memory), 1)
    assert (fp32["workspace"], fp32["activations"]) == (131_072, 2560)
    bf16 = mechanism_terms(_tiny("training.precision='bf16'", memory=memory), 1)
    assert (bf16["workspace"], bf16["activations"]) == (0, 0)
    deepspeed = mechanism_terms(_tiny("training.framework='deepspeed'", memory=memory), 1)
    assert (deepspeed["workspace"], deepspeed["activations"]) == (0, 2560)


def test_stage_three_steps_one_unit_at_a_time():
    """zero_real's ZeRO-3 has an optimizer per gather unit (stages/zero3.py), stepped in turn,
    after every unit's fp32 gradient is made: the gradient copy over the whole shard (4 x 59,264
    at bf16), the temporaries over the largest unit's shard only. Units of the tiny model:
    embedding 256 x 64 + 32 x 64 = 18,432, each block 49,984 (norms 256, qkv 12,480, proj
    4,160, up 16,640, down 16,448), the head's norm 128: the largest shard ceil(49,984 / 2) =
    24,992 of ceil(118,528 / 2) = 59,264, so 8 x 24,992 bytes of temporaries."""
    memory = {"optimizer_grad": _measured(element=4.0), "optimizer_step": _measured(element=8.0)}
    per_element = mechanism_terms(_tiny(memory=memory), 3)["optimizer_per_element"]
    assert round(per_element * 59_264) == 4 * 59_264 + 8 * 24_992
    assert mechanism_terms(_tiny(memory=memory), 2)["optimizer_per_element"] == 12.0


def test_attention_adds_only_its_excess_over_the_analytic_count():
    """Math SDPA keeps its copies and scores at 4 bytes (CPU computes 16-bit in fp32): at fp32
    that is what Korthikanti counts (no excess); at bf16 2 bytes more per element, 2 layers x
    2 x (64 tokens x 192 qkv + 2 x 4 x 32 x 32 scores) = 81,920."""
    memory = {"attention_saved": {**_measured(qkv_element=4.0, score=4.0, row=0.0),
                                  "kernel": "math"}}
    assert mechanism_terms(_tiny(memory=memory), 1)["activations"] == 0
    bf16 = _tiny("training.precision=bf16", memory=memory)
    assert mechanism_terms(bf16, 1)["activations"] == 81_920
    flash = _tiny("training.flash_attention=true", "training.precision=bf16", memory=memory)
    assert mechanism_terms(flash, 1)["activations"] == 0  # measured on the other kernel


def test_no_profile_adds_nothing():
    assert mechanism_terms(_tiny(), 1) == NONE


def _derived(*names: str) -> dict:
    return {name: {**DERIVED[name], "how": "derived"} for name in names}


ZERO_REAL_OWN = ("bucket_pool", "last_unit_kept", "tied_grad_kept")


@pytest.mark.parametrize("stage, pool, last, tied", [
    (0, 0, 0, 0), (1, 0, 0, 0),
    # ZeRO-2: two 64 KiB buckets of the 474,112 gradient bytes
    (2, 131_072, 0, 0),
    # ZeRO-3: the head's gather unit (norm 128 + the tied 256 x 64 matrix again) x 4 bytes,
    # and the tied matrix's gradient, 4 x 16,384
    (3, 0, 66_048, 65_536),
])
def test_zero_reals_own_holdings_by_hand(stage, pool, last, tied):
    terms = mechanism_terms(_tiny(memory=_derived(*ZERO_REAL_OWN)), stage)
    assert (terms["bucket_pool"], terms["last_unit_kept"], terms["tied_grad_kept"]) == (
        pool, last, tied)


def test_zero_reals_own_holdings_follow_the_model_and_the_framework():
    memory = _derived(*ZERO_REAL_OWN)
    untied = mechanism_terms(_tiny("model.tied_embeddings=false", memory=memory), 3)
    # an untied head: its norm 128 and its own 256 x 64 matrix; no gradient waits
    assert (untied["last_unit_kept"], untied["tied_grad_kept"]) == (66_048, 0)
    # the tied gradient in the gradient's dtype: bf16 2 bytes, 4 where it is reduced in fp32
    for reduce, size in (("param", 2), ("fp32", 4)):
        terms = mechanism_terms(_tiny("training.precision='bf16'",
                                      f"training.reduce_dtype='{reduce}'", memory=memory), 3)
        assert terms["tied_grad_kept"] == size * VOCAB * HIDDEN
    big = mechanism_terms(_tiny("training.reduce_bucket_MiB=1", memory=memory), 2)
    assert big["bucket_pool"] == 1_048_576  # one bucket holds it all: one whole 1 MiB buffer
    for name in ("deepspeed", "fsdp2"):  # not zero_real's stages: none of them
        stage = 2 if name == "deepspeed" else 3
        terms = mechanism_terms(_tiny(f"training.framework='{name}'",
                                      f"training.zero_stage={stage}", memory=memory), stage)
        assert terms["bucket_pool"] == terms["last_unit_kept"] == terms["tied_grad_kept"] == 0


def test_the_scale_check_counts_zero_reals_own_holdings(monkeypatch):
    """memory.check_scale caps each stage's peak with what its profile adds: the pool (stage 2)
    and the kept unit and tied gradient (stage 3) too."""
    from zerosim.analytic import memory as analytic

    checked = {}
    monkeypatch.setattr(analytic, "within_cap", lambda what, value, how="": checked.update(
        {what: value}))
    scenario = _tiny(memory=_derived(*ZERO_REAL_OWN))
    analytic.check_scale(scenario)
    bare = dataclasses.replace(scenario, profile=None)
    for stage, added in ((2, 131_072), (3, 66_048 + 65_536)):
        peak = analytic.stage_memory(bare, stage).peak_bytes
        assert checked[f"stage {stage} peak_bytes"] == peak + added


def test_a_kept_pool_is_held_from_the_steps_start():
    """ZeRO-2 at one process: after_init (before any step) holds the states; after_forward the
    states, the activations and the pool of two 64 KiB buckets; nothing else moves."""
    from zerosim.sim.engine import simulate

    plain = simulate(_tiny("training.zero_stage=2", memory={}), 2)
    pooled = simulate(_tiny("training.zero_stage=2", memory=_derived("bucket_pool")), 2)
    assert pooled.memory_at["after_init"] == plain.memory_at["after_init"]
    assert pooled.memory_at["after_forward"] - plain.memory_at["after_forward"] == 131_072
    assert pooled.memory_at["after_step"] - plain.memory_at["after_step"] == 131_072


def test_zero3_keeps_its_last_unit_and_the_tied_gradient():
    """ZeRO-3: after forward the head's unit is still gathered (66,048 bytes); the gradients and
    the step end as before; two all-gathers fewer (the head's two buffers, its norm and the tied
    matrix, in backward)."""
    from zerosim.sim.engine import simulate

    plain = simulate(_tiny("training.zero_stage=3", memory={}), 3)
    kept = simulate(_tiny("training.zero_stage=3", memory=_derived(*ZERO_REAL_OWN)), 3)
    assert kept.memory_at["after_forward"] - plain.memory_at["after_forward"] == 66_048
    assert kept.memory_at["after_step"] == plain.memory_at["after_step"]
    assert kept.peak_bytes >= plain.peak_bytes
    gathers = [sum(1 for e in r.ranks[0].state.events
                   if e["stream"] != "compute" and e["op"] == "all_gather")
               for r in (plain, kept)]
    assert gathers[1] == gathers[0] - 2


def test_stage_zero_peak_with_the_mechanisms_is_the_hand_count():
    """zero_real's stage 0 on 2 ranks peaks in Adam's step: states 16 x 118,528 = 1,896,448,
    what backward left (head_kept, 33,800) and Adam's two temporaries, 8 x 118,528 = 948,224:
    2,878,472 bytes (zero_real measured 2,878,484: 12 bytes of scalars beside)."""
    from zerosim.sim.engine import simulate

    memory = {"head_kept": {**DERIVED["head_kept"], "how": "derived"},
              "optimizer_step": _measured(element=8.0)}
    result = simulate(_tiny("training.zero_stage=0", memory=memory), 0)
    assert result.peak_bytes == 1_896_448 + 33_800 + 948_224


# ---- the microbenchmarks, against hand counts of what PyTorch allocates ------------------------

def test_loss_backward_holds_two_fp32_gradients_of_the_logits():
    """nll_loss's gradient and log_softmax's, 4 bytes per logit each, and the scalar loss's
    gradient (4 bytes): 8 x 64 x 256 + 4."""
    torch = pytest.importorskip("torch")
    from zero_real.calibration.memory_bench import loss_backward_bytes

    assert loss_backward_bytes(64, 256, torch.float32, torch.device("cpu")) == 8 * 64 * 256 + 4


def test_layernorm_saves_its_mean_and_rstd():
    """aten native_layer_norm returns (out, mean, rstd), the statistics fp32 per token."""
    torch = pytest.importorskip("torch")
    from zero_real.calibration.memory_bench import norm_saved_bytes

    assert norm_saved_bytes("layernorm", 64, 128, torch.float32, torch.device("cpu")) == 8 * 64


def test_math_attention_saves_copies_and_scores():
    """(2, 4 heads, 16, 16): Q, K^T and V copied for bmm, 3 x 2 x 16 x 64 x 4 bytes, and the
    softmax output 2 x 4 x 16 x 16 x 4: 24,576 + 8,192."""
    torch = pytest.importorskip("torch")
    from zero_real.calibration.memory_bench import attention_saved_bytes

    assert attention_saved_bytes(2, 4, 16, 16, torch.float32, torch.device("cpu"),
                                 flash=False) == 32_768


def test_the_fp32_gradient_copy_only_under_mixed_precision():
    """unscaled_grad: grad.float() makes 4 bytes per element of a bf16 gradient; an fp32 one
    is divided in place (per element: the difference between two sizes, scalars cancel)."""
    torch = pytest.importorskip("torch")
    from zero_real.calibration.memory_bench import optimizer_grad_bytes

    def per_element(dtype):
        cpu = torch.device("cpu")
        return (optimizer_grad_bytes(1 << 16, dtype, cpu)
                - optimizer_grad_bytes(1 << 15, dtype, cpu)) / (1 << 15)
    assert per_element(torch.bfloat16) == 4
    assert per_element(torch.float32) == 0


def test_adam_step_holds_two_temporaries_per_element():
    """ShardAdam.step: v.sqrt() and its division by the bias correction are alive together,
    4 bytes each per element (zero_real/parts/optim.py), beside a few scalars."""
    torch = pytest.importorskip("torch")
    from zero_real.calibration.memory_bench import optimizer_step_bytes

    held = optimizer_step_bytes(1 << 15, torch.float32, torch.device("cpu"))
    assert 8 * (1 << 15) <= held <= 8 * (1 << 15) + 64
