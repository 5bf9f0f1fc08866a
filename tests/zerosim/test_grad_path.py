"""The gradient path's host work (issue 31): zero_real's per-parameter gradient hooks and per-
bucket reductions, measured by calibrate (zero_real/calibration/grad_path.py), fitted per hook and
per bucket (calibration/fit.py: fit_grad_path), counted per unit by the framework
(Framework.gradient_hooks) and priced by the simulator: each unit's backward gains its hooks'
seconds, each bucket its host seconds before its collective. Expected figures are hand counts of
zero_real's modules and the synthetic constants the rows were made from."""

import copy
import json
import math

import pytest

from tests.zerosim.calibration_data import synthetic_raw, with_profile
from zerosim.calibration.fit import build_profile, fit_grad_path
from zerosim.errors import InputError
from zerosim.frameworks import REGISTRY
from zerosim.scenario.load import load_scenario
from zerosim.scenario.profile import check_fit
from zerosim.sim.costs import compute_seconds, gradient_path
from zerosim.analytic.model import buffer_elements, unit_flops
from zerosim.sim.engine import simulate
from tests.conftest import SCENARIOS

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
HOOK_S, BUCKET_S = 2.0 ** -17, 2.0 ** -15  # dyadic: the fit's division is exact
# The tiny GPT (LayerNorm with bias, GELU, learned positions, tied): the token and position
# matrices; per block two norms (weight, bias) and four linears (weight, bias): 12; the final
# norm's two and the tied matrix's first use in the head: 3. 29 hooks in all.
TINY_HOOKS = [2, 12, 12, 3]
# 118,528 fp32 gradients = 474,112 bytes in buckets of 64 KiB: 7 full and one of 15,360 bytes.
TINY_BUCKETS = math.ceil(118_528 * 4 / 65_536)
# ZeRO-3's visits: flat buffers per gather unit (token and position; each block; the head and
# the tied token matrix again) and each unit's fp32 bytes, by hand: embedding 256 x 64 + 32 x 64;
# a block 2 x 128 (LayerNorms) + 64 x 192 + 192 (QKV) + 64 x 64 + 64 + 64 x 256 + 256 +
# 256 x 64 + 64 = 49,984; the head 128 + the 256 x 64 matrix.
TINY_BUFFERS = [2, 1, 1, 2]
TINY_UNIT_BYTES = [4 * 18_432, 4 * 49_984, 4 * 49_984, 4 * 16_512]
VISIT = {"forward": (2.0 ** -16, 2.0 ** -30), "backward": (2.0 ** -14, 2.0 ** -29)}


IDLE_S = 2.0 ** -19  # a hook on a micro-step that does not reduce (stages 0-1)


def _rows(n: int, hooks: int = 29, buckets: int = TINY_BUCKETS, idle: bool = False) -> list[dict]:
    """Stages 0-2's rows, made from HOOK_S and BUCKET_S (x the stage + 1) exactly; with `idle`,
    stages 0-1 also time the hooks of a micro-step that does not reduce (IDLE_S each), and
    stage 2, which reduces on every one, has None there, as calibrate writes it."""
    return [{"processes": n, "stage": s, "hooks": hooks, "buckets": buckets,
             "with_s": 1e-3, "without_s": 5e-4, "hooks_s": hooks * HOOK_S * (s + 1),
             "reduce_s": 3e-4, "buckets_s": buckets * BUCKET_S * (s + 1), "iterations": 9,
             **({"idle_s": 6e-4 if s < 2 else None,
                 "idle_hooks_s": hooks * IDLE_S if s < 2 else None} if idle else {})}
            for s in (0, 1, 2)]


def _visit_rows(n: int) -> list[dict]:
    """Stage 3's pass rows at three widths, made from VISIT's constants exactly."""
    rows = []
    for scale, size in ((1, 539_648), (2, 1_865_728), (4, 6_877_184)):
        for phase, (buffer_s, per_byte) in VISIT.items():
            rows.append({"processes": n, "stage": 3, "pass": phase, "scale": scale,
                         "counts": {"groups": 6, "bytes": size},
                         "time_s": 6 * buffer_s + size * per_byte, "iterations": 9})
    return rows


def test_the_fit_is_the_totals_over_the_counts_exactly():
    fit = fit_grad_path(_rows(1) + _rows(2))
    assert sorted(fit) == ["1", "2"] and sorted(fit["2"]) == ["0", "1", "2"]
    for n in ("1", "2"):
        for s in (0, 1, 2):
            assert fit[n][str(s)] == {"hook_s": HOOK_S * (s + 1), "bucket_s": BUCKET_S * (s + 1)}


def test_the_idle_hooks_fit_where_measured_and_nowhere_else():
    fit = fit_grad_path(_rows(2, idle=True))["2"]
    assert fit["0"]["idle_hook_s"] == fit["1"]["idle_hook_s"] == IDLE_S
    assert "idle_hook_s" not in fit["2"]  # ZeRO-2 reduces on every micro-step: not measured
    check_fit({"grad_path": {"2": fit}}, "(test)")
    bad = copy.deepcopy(fit)
    bad["0"]["idle_hook_s"] = -1.0
    with pytest.raises(InputError, match=r"fit.grad_path.2.0.idle_hook_s: -1.0 must be >= 0"):
        check_fit({"grad_path": {"2": bad}}, "(test)")


def test_a_noisy_negative_difference_is_no_work_not_negative_work():
    rows = _rows(2)
    rows[0]["hooks_s"], rows[1]["buckets_s"] = -1e-5, -2e-6
    fit = fit_grad_path(rows)
    assert fit["2"]["0"]["hook_s"] == 0.0 and fit["2"]["1"]["bucket_s"] == 0.0
    assert fit["2"]["0"]["bucket_s"] == BUCKET_S  # the other figure of the row is kept


@pytest.mark.parametrize("overrides, hooks", [
    ([], TINY_HOOKS),
    # Llama-like: RMSNorm (weight only), no biases, SwiGLU (gate, up, down), rotary, untied:
    # token matrix; 2 norms + QKV, output, gate, up, down = 7; final norm + head matrix = 2.
    (["model.norm='rmsnorm'", "model.bias=false", "model.mlp='swiglu'",
      "model.position='rope'", "model.tied_embeddings=false", "model.layers=3"],
     [1, 7, 7, 7, 2]),
    # GPT with biases but untied: the head's own matrix instead of the tied one's first use.
    (["model.tied_embeddings=false"], [2, 12, 12, 3]),
])
def test_zero_counts_zero_reals_parameter_tensors_by_hand(overrides, hooks):
    s = load_scenario(TINY, overrides)
    zero = REGISTRY["zero"]
    for stage in (0, 1, 2):
        assert zero.gradient_hooks(s.model, s.training, stage) == hooks
    assert zero.gradient_hooks(s.model, s.training, 3) is None  # ZeRO-3 reduces per unit
    for name in ("ddp", "deepspeed", "fsdp2"):  # hooks not measured for them
        assert REGISTRY[name].gradient_hooks(s.model, s.training, 2) is None


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """The synthetic calibration of the tiny GPT on worlds of 2 and 4, fitted, without and with
    its gradient path."""
    folder = tmp_path_factory.mktemp("grad_path")
    scenario = load_scenario(TINY)
    raw = synthetic_raw(scenario)
    without = build_profile(scenario, raw)
    raw = copy.deepcopy(raw)
    raw["measurements"]["grad_path"] = _rows(2) + _rows(4) + _visit_rows(2) + _visit_rows(4)
    with_ = build_profile(scenario, raw)
    raw["measurements"]["grad_path"] = _rows(2, idle=True) + _rows(4, idle=True)
    idle = build_profile(scenario, raw)
    paths = {}
    for name, data in (("without", without), ("with", with_), ("idle", idle)):
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    return paths


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_each_units_backward_gains_its_hooks_seconds(profiles, stage):
    per_stage = HOOK_S * (stage + 1)
    a = with_profile(profiles["without"], "cluster.gpus_per_node=2")
    b = with_profile(profiles["with"], "cluster.gpus_per_node=2")
    flops = unit_flops(a.model, a.training)
    fa, ba = compute_seconds(a, flops, stage)
    fb, bb = compute_seconds(b, flops, stage)
    assert fa == fb
    assert [y - x for x, y in zip(ba, bb)] == pytest.approx(
        [h * per_stage for h in TINY_HOOKS], rel=1e-9, abs=1e-15)
    assert gradient_path(b, stage)[2] == BUCKET_S * (stage + 1)


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_a_step_gains_every_hook_and_every_bucket(profiles, stage):
    """Without overlap (zero_real's runs), the simulated compute is longer by 29 hooks and 8
    buckets at the stage's figures, and by nothing else."""
    k = stage + 1
    a = with_profile(profiles["without"], "cluster.gpus_per_node=2")
    b = with_profile(profiles["with"], "cluster.gpus_per_node=2")
    extra = sum(TINY_HOOKS) * HOOK_S * k + TINY_BUCKETS * BUCKET_S * k
    ra, rb = simulate(a, stage), simulate(b, stage)
    assert rb.compute_s - ra.compute_s == pytest.approx(extra, rel=1e-9)


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_a_micro_step_that_does_not_reduce_pays_only_its_idle_hooks(profiles, stage):
    """Gradient accumulation over 3 micro-steps: at stages 0-1 the first two do not reduce, and
    each unit's backward there costs its hooks at IDLE_S, not at hook_s: the step's compute is
    shorter by 2 x 29 hooks x (hook_s - IDLE_S) than with a profile that measured no such
    micro-step; ZeRO-2 reduces on every one and pays the same."""
    sets = ("cluster.gpus_per_node=2", "training.gradient_accumulation=3")
    a = with_profile(profiles["with"], *sets)
    b = with_profile(profiles["idle"], *sets)
    saved = 0 if stage == 2 else 2 * sum(TINY_HOOKS) * (HOOK_S * (stage + 1) - IDLE_S)
    assert simulate(a, stage).compute_s - simulate(b, stage).compute_s == pytest.approx(
        saved, rel=1e-9, abs=1e-15)
    one = ("cluster.gpus_per_node=2",)  # without accumulation every micro-step reduces
    assert simulate(with_profile(profiles["idle"], *one), stage).compute_s == pytest.approx(
        simulate(with_profile(profiles["with"], *one), stage).compute_s, rel=1e-12)


def test_the_visit_fit_recovers_its_constants():
    fit = fit_grad_path(_visit_rows(2))
    for phase, (buffer_s, per_byte) in VISIT.items():
        got = fit["2"]["3"][phase]
        assert got["buffer_s"] == pytest.approx(buffer_s, rel=1e-9)
        assert got["s_per_byte"] == pytest.approx(per_byte, rel=1e-9)
        assert max(map(abs, got["residuals_pct"])) < 1e-6


@pytest.mark.parametrize("overrides, buffers", [
    # token 256 x 64, positions 32 x 64; blocks 49,984; the head's norm 128, the tied matrix
    ([], [[16_384, 2_048], [49_984], [49_984], [128, 16_384]]),
    # rotary: no position matrix; untied: the head's norm and its own matrix in one buffer
    (["model.position='rope'", "model.tied_embeddings=false", "model.layers=3"],
     [[16_384], [49_984], [49_984], [49_984], [128 + 16_384]]),
])
def test_zero_counts_zero_reals_zero3_buffers_by_hand(overrides, buffers):
    s = load_scenario(TINY, overrides)
    zero = REGISTRY["zero"]
    assert buffer_elements(s.model, zero.gather_buffers(s.model, s.training, 3)) == buffers
    assert all(zero.gather_buffers(s.model, s.training, k) is None for k in (0, 1, 2))
    assert REGISTRY["fsdp2"].gather_buffers(s.model, s.training, 3) is None


def test_a_zero3_step_gains_each_units_visits(profiles):
    """Each unit's forward gains forward buffer_s per flat buffer and s_per_byte per byte of
    it, its backward the backward line's: per unit, and the step's compute by their sum."""
    a = with_profile(profiles["without"], "cluster.gpus_per_node=2")
    b = with_profile(profiles["with"], "cluster.gpus_per_node=2")
    flops = unit_flops(a.model, a.training)
    (fa, ba), (fb, bb) = compute_seconds(a, flops, 3), compute_seconds(b, flops, 3)
    for phase, before, after in (("forward", fa, fb), ("backward", ba, bb)):
        buffer_s, per_byte = VISIT[phase]
        assert [y - x for x, y in zip(before, after)] == pytest.approx(
            [g * buffer_s + size * per_byte for g, size in zip(TINY_BUFFERS, TINY_UNIT_BYTES)],
            rel=1e-9)
    extra = sum(g * sum(v[0] for v in VISIT.values()) + size * sum(v[1] for v in VISIT.values())
                for g, size in zip(TINY_BUFFERS, TINY_UNIT_BYTES))
    assert simulate(b, 3).compute_s - simulate(a, 3).compute_s == pytest.approx(extra, rel=1e-9)


def _collectives(result, op: str) -> list[float]:
    return [e["bytes"] for e in result.ranks[0].state.events
            if e["stream"] != "compute" and e["op"] == op]


@pytest.mark.parametrize("kept, gathers", [(False, 12), (True, 10)])
def test_zero3_collectives_per_flat_buffer_as_zero_real_runs_them(profiles, kept, gathers):
    """zero_real's ZeRO-3 gathers and reduce-scatters each flat buffer on its own (its runs of
    the tiny GPT at sequence 64: 10 all-gathers and 5 reduce-scatters a step): forward the
    token and position matrices, two blocks, the head's norm and the tied matrix again (6);
    backward the head's two again unless kept from forward, two blocks, the embedding's two;
    reduce-scatters: the head's norm, two blocks, the token matrix (with the head's part) and
    the positions. Bytes per buffer at fp32, whatever the profile."""
    s = (with_profile(profiles["with"], "cluster.gpus_per_node=2") if kept else
         load_scenario(TINY, ["cluster.gpus_per_node=2"]))
    r = simulate(s, 3)
    tok, pos, block, norm = 4 * 16_384, 4 * 2_048, 4 * 49_984, 4 * 128
    assert sorted(_collectives(r, "all_gather")) == sorted(
        [tok, pos, block, block, norm, tok] + ([] if kept else [norm, tok])
        + [block, block, tok, pos])
    assert len(_collectives(r, "all_gather")) == gathers
    assert sorted(_collectives(r, "reduce_scatter")) == sorted([norm, block, block, tok, pos])


def test_other_frameworks_are_unchanged(profiles):
    a = with_profile(profiles["without"], "cluster.gpus_per_node=2", "training.framework='ddp'",
                    "training.zero_stage=0")
    b = with_profile(profiles["with"], "cluster.gpus_per_node=2", "training.framework='ddp'",
                    "training.zero_stage=0")
    assert simulate(a, 0).step_time_s == simulate(b, 0).step_time_s


def test_the_world_nearest_the_box_prices_it(profiles):
    b = with_profile(profiles["with"], "cluster.gpus_per_node=3")  # 2 and 4 measured: 4 (ties up)
    assert b.profile.grad_path(3, 1) == {"hook_s": 2 * HOOK_S, "bucket_s": 2 * BUCKET_S}
    assert b.profile.grad_path(1, 1) == b.profile.grad_path(2, 1)


@pytest.mark.parametrize("change, where", [
    (lambda f: f["2"]["0"].update(hook_s=-1e-6), "fit.grad_path.2.0.hook_s"),
    (lambda f: f["2"].update({"3": {"hook_s": 0.0, "bucket_s": 0.0}}), "fit.grad_path.2"),
    (lambda f: f["2"]["1"].pop("bucket_s"), "fit.grad_path.2.1"),
    (lambda f: f["2"]["1"].update(hook_s="fast"), "fit.grad_path.2.1.hook_s"),
    (lambda f: f.update({"two": {}}), "fit.grad_path"),
    (lambda f: f["2"].update({"4": {}}), "fit.grad_path.2"),
    (lambda f: f["2"]["3"].pop("backward"), "fit.grad_path.2.3"),
    (lambda f: f["2"]["3"]["forward"].update(s_per_byte=-1e-9),
     "fit.grad_path.2.3.forward.s_per_byte"),
    (lambda f: f["2"]["3"].update(step={}), "fit.grad_path.2.3"),
])
def test_a_bad_grad_path_is_refused_naming_the_field(change, where):
    fit = {"grad_path": fit_grad_path(_rows(2) + _visit_rows(2))}
    check_fit(fit, "p.json")  # as fitted: accepted
    change(fit["grad_path"])
    with pytest.raises(InputError) as e:
        check_fit(fit, "p.json")
    assert where in str(e.value) and "\n" not in str(e.value)


def test_an_idle_saving_never_exceeds_what_is_left_of_a_backward(profiles, monkeypatch):
    """Tensor parallelism's windows come out of backward_s after the hooks went in: the saving
    a micro-step that does not reduce takes off is capped at what is left, never negative."""
    from zerosim.sim.stages import step_shape as module

    monkeypatch.setattr(module, "idle_hook_savings", lambda scenario, stage: [1.0] * 4)
    shape = module.step_shape(with_profile(profiles["idle"], "cluster.gpus_per_node=2"), 0)
    assert shape.idle_hook_savings_s == shape.backward_s
    assert all(b > 0 for b in shape.backward_s)
