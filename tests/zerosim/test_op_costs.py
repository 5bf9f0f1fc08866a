"""The per-operation compute model (cluster.compute_model = "op", sim/op_costs.py): each op's
cost equals its formula, written out here from the A100-80GB's data sheet and microbenchmark
figures (the GPU records of zerosim/hardware/gpus.py); tiny shapes are launch-bound, large ones compute-bound."""

import dataclasses
import json
import math

import pytest

from zerosim.errors import InputError
from zerosim.scenario.load import load_scenario
from zerosim.sim import op_costs as ops
from zerosim.sim.engine import simulate
from zerosim.hardware import GPUS, TRAINING_GEMMS_OVER_BEST

from tests.conftest import ROOT, SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

SM, PEAK, F_GEMM = 108, 312e12, 0.869          # A100: SMs, dense bf16 peak, MAMF 271.2 / 312
F_TRAIN = 0.898                                # training-shape GEMMs over MAMF's best (H100)
HBM, F_HBM, LAUNCH = 2039e9, 0.852, 2.555e-6   # A100-80GB: HBM, streaming fraction, per kernel
TM, TN = 256, 128                              # cuBLAS's large-GEMM tile
FWD, BWD = 230e12, 196.6e12                    # FlashAttention-2's best forward and backward
BEST = 3.5 / (1 / FWD + 2.5 / BWD)             # the two together (backward = 2.5 x the FLOPs)
CAUSAL_4K = 173e12                             # FA2 Fig. 4: causal fwd + bwd at 4k, head dim 128


def gemm_s(m, n, k, batch=1):
    waves = math.ceil(batch * math.ceil(m / TM) * math.ceil(n / TN) / SM)
    compute = waves * 2 * TM * TN * k / (PEAK * F_GEMM * F_TRAIN / SM)
    memory = batch * 2 * (m * k + k * n + m * n) / (HBM * F_HBM)
    return LAUNCH + max(compute, memory)


@pytest.fixture
def a100():
    spec = GPUS["A100-80GB"]
    model = spec.op_model
    assert (spec.sm_count, spec.peak_dense_16bit_tflops, model.gemm_achievable_fraction,
            model.hbm_achievable_fraction, model.kernel_launch_us, model.gemm_tile) == (
        SM, PEAK / 1e12, F_GEMM, F_HBM, LAUNCH * 1e6, (TM, TN))
    assert TRAINING_GEMMS_OVER_BEST == F_TRAIN
    return ops.OpCosts(spec, HBM / 1e9)


@pytest.mark.parametrize("m, n, k", [(4096, 4096, 4096), (8192, 11008, 4096), (300, 129, 64)])
def test_gemm_is_its_roofline_with_waves(a100, m, n, k):
    assert a100.gemm(m, n, k).seconds == pytest.approx(gemm_s(m, n, k), rel=1e-12)


def test_tiny_shapes_are_launch_bound_and_large_ones_compute_bound(a100):
    tiny = a100.gemm(8, 8, 8).seconds
    assert LAUNCH <= tiny < 1.1 * LAUNCH  # one tile of one wave: 0.2 us beside 2.6 of launch
    big = a100.gemm(8192, 8192, 8192).seconds
    compute = math.ceil(32 * 64 / SM) * 2 * TM * TN * 8192 / (PEAK * F_GEMM * F_TRAIN / SM)
    assert big == pytest.approx(LAUNCH + compute, rel=1e-12)
    assert compute > 10 * 2 * 3 * 8192**2 / (HBM * F_HBM)  # 4.1 ms against 0.23 ms of HBM


def test_one_more_tile_can_cost_a_whole_wave(a100):
    """12 x 9 = 108 tiles fill one wave; one more row starts 9 more tiles and a second wave,
    doubling the compute (which bounds it: the operands are 42 MB, 24 us of HBM)."""
    one_wave = a100.gemm(TM * 12, TN * 9, 4096).seconds - LAUNCH
    two_waves = a100.gemm(TM * 12 + 1, TN * 9, 4096).seconds - LAUNCH
    assert two_waves == pytest.approx(2 * one_wave, rel=1e-12)


def test_flash_attention_and_memory_bound_ops(a100):
    b, s, h = 1, 4096, 4096
    causal = 4 * b * s * s * h / 2
    scale = CAUSAL_4K / BEST  # the rates as measured at this length, causal
    assert a100.flash(b, s, h, False).seconds == pytest.approx(LAUNCH + causal / (FWD * scale))
    assert a100.flash(b, s, h, True).seconds == pytest.approx(
        LAUNCH + 2.5 * causal / (BWD * scale))
    assert a100.traffic(1e9, 3).seconds == pytest.approx(3 * LAUNCH + 1e9 / (HBM * F_HBM))
    assert ops.OpCosts(GPUS["V100-32GB"], 900).flash(b, s, h, False) is None


def test_a_llama_layer_is_the_sum_of_its_ops(a100):
    """Llama-2-7B, micro-batch 1 x 4096, flash, no dropout: QKV, flash, output, gate, up, down,
    plus 5 elementwise kernels (2 RMSNorms, 2 residual adds, SwiGLU) and rope's 1, each moving
    its minimum bytes times its measured eager factor; backward: the norms read x and dy and write
    dx, SwiGLU reads a, b, dy and writes da, db, the residual gradients are summed."""
    s = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", ["cluster.compute_model='op'"])
    m, t = s.model, s.training
    T, h, f = 4096, 4096, 11008
    norm, swiglu, single, rope = (1.483, 2.296), (1.652, 1.774), 1.172, (8.637, 8.655)
    d = 128  # rotary reads cos and sin (T x d each) for the queries and again for the keys
    forward_bytes = 2 * (2 * 2 * T * h * norm[0] + 2 * 3 * T * h * single + 3 * T * f * swiglu[0]
                         + (2 * (T * h + T * h) + 4 * T * d) * rope[0])
    backward_bytes = 2 * (2 * 3 * T * h * norm[1] + 2 * 3 * T * h * single
                          + 5 * T * f * swiglu[1] + (2 * (T * h + T * h) + 4 * T * d) * rope[1])
    forward = (gemm_s(T, 3 * h, h) + LAUNCH + 4 * T * T * h / 2 / (FWD * CAUSAL_4K / BEST)
               + gemm_s(T, h, h)
               + 2 * gemm_s(T, f, h) + gemm_s(T, h, f) + 6 * LAUNCH + forward_bytes / (HBM * F_HBM))
    assert ops.layer(a100, m, t, backward=False).seconds == pytest.approx(forward, rel=1e-12)
    fwd, _ = ops.unit_seconds(a100, m, t)
    assert fwd[1:-1] == [pytest.approx(forward, rel=1e-12)] * 32
    backward_gemms = sum(gemm_s(T, k, n) + gemm_s(k, n, T)
                         for k, n in ((h, 3 * h), (h, h), (h, f), (h, f), (f, h)))
    attention = LAUNCH + 2.5 * 4 * T * T * h / 2 / (BWD * CAUSAL_4K / BEST)
    assert ops.layer(a100, m, t, backward=True).seconds == pytest.approx(
        backward_gemms + attention + 6 * LAUNCH + backward_bytes / (HBM * F_HBM), rel=1e-12)


def megatron_on_a100(*extra):
    return load_scenario(SCENARIOS / "megatron_7b5_64gpu.toml",
                         ["cluster.gpu='A100-80GB'", "cluster.compute_model='op'", *extra])


def test_a_gpt_layer_without_flash_is_the_sum_of_its_ops(a100):
    """Megatron's GPT (GeLU MLP of 4h, learned positions, dropout), micro-batch 1 x 2048, no
    flash attention: per head, QK^T and AV as batched GEMMs (twice each backward: dQ/dK and
    dV/dP) and the fp16 s x s scores through a softmax that reads them and writes its output
    (backward: reads output and gradient, writes the input's). Elementwise kernels: 2 norms,
    2 residual adds, GeLU (reads x, writes y; backward reads x and dy, writes dx) and 2 dropouts
    (the same counts), each at its measured eager factor: 7 launches."""
    s = megatron_on_a100()
    m, t = s.model, s.training
    assert (m.mlp, m.dropout, t.flash_attention) == ("gelu", True, False)
    T, h, f, heads, d = 2048, 4096, 16384, 32, 128
    norm, single = (1.483, 2.296), 1.172
    bw = HBM * F_HBM
    scores = lambda reads_writes: LAUNCH + heads * T * T * 2 * reads_writes / bw  # noqa: E731
    core = gemm_s(T, T, d, heads) + gemm_s(T, d, T, heads)
    forward_bytes = 2 * (2 * 2 * T * h * norm[0] + 2 * 3 * T * h * single + 2 * T * f * single
                         + 2 * 2 * T * h * single)
    forward = (gemm_s(T, 3 * h, h) + core + scores(2) + gemm_s(T, h, h) + gemm_s(T, f, h)
               + gemm_s(T, h, f) + 7 * LAUNCH + forward_bytes / bw)
    assert ops.layer(a100, m, t, backward=False).seconds == pytest.approx(forward, rel=1e-12)
    backward_bytes = 2 * (2 * 3 * T * h * norm[1] + 2 * 3 * T * h * single
                          + 3 * T * f * single + 2 * 3 * T * h * single)
    backward = (sum(gemm_s(T, k, n) + gemm_s(k, n, T)
                    for k, n in ((h, 3 * h), (h, h), (h, f), (f, h)))
                + 2 * core + scores(3) + 7 * LAUNCH + backward_bytes / bw)
    assert ops.layer(a100, m, t, backward=True).seconds == pytest.approx(backward, rel=1e-12)


def test_the_head_and_the_embedding_by_hand(a100):
    """The logits GEMM (h -> V = 51200), the final norm and F.cross_entropy over 16-bit logits,
    which our H100 measured at the time a copy of 8.04 bytes per logit takes forward and 10.02
    backward (profiles/h100/microbench_2026-11-24.json)."""
    s = megatron_on_a100()
    T, h, V = 2048, 4096, 51200
    bw = HBM * F_HBM
    forward = (gemm_s(T, V, h) + LAUNCH + 2 * 2 * T * h * 1.483 / bw
               + LAUNCH + T * V * 8.04 / bw)
    backward = (gemm_s(T, h, V) + gemm_s(h, V, T) + LAUNCH + 2 * 3 * T * h * 2.296 / bw
                + LAUNCH + T * V * 10.02 / bw)
    assert ops.head(a100, s.model, s.training, False).seconds == pytest.approx(forward, rel=1e-12)
    assert ops.head(a100, s.model, s.training, True).seconds == pytest.approx(backward,
                                                                              rel=1e-12)
    # the embedding: a gather of T rows of h forward (written once), their gradient scattered
    # and added backward (read and written)
    assert ops.embedding(a100, s.model, s.training, False).seconds == pytest.approx(
        LAUNCH + 2 * T * h / bw, rel=1e-12)
    assert ops.embedding(a100, s.model, s.training, True).seconds == pytest.approx(
        LAUNCH + 2 * 2 * T * h / bw, rel=1e-12)


def test_eager_factors_are_the_committed_h100_measurement():
    """The memory-bound ops' factors, cross-entropy's bytes per logit, the training-shape GEMM
    share and the H100's streaming fraction, recomputed from profiles/h100/microbench_*.json."""
    bench = json.loads((ROOT / "profiles/h100/microbench_2026-11-24.json").read_text())
    rows = {(r["op"], r["pass"]): r for r in bench["memory_bound"]}
    copy = rows["copy", "fwd"]["bytes"] / rows["copy", "fwd"]["median_s"]
    assert GPUS["H100-80GB"].op_model.hbm_achievable_fraction == pytest.approx(copy / 3350e9, abs=5e-4)

    def factors(op):
        fwd, both = rows[op, "fwd"], rows.get((op, "fwd_bwd"))
        forward = fwd["median_s"] * copy / fwd["bytes"]
        if both is None:
            return forward, forward
        return forward, ((both["median_s"] - fwd["median_s"]) * copy
                         / (both["bytes"] - fwd["bytes"]))

    for name, op in (("norm", "rms_norm"), ("swiglu", "swiglu"), ("single", "residual_add"),
                     ("rotary", "rotary")):
        assert ops.EAGER_FACTORS[name] == pytest.approx(factors(op), abs=1e-3)
    logits = 4096 * 128256  # the bench's cross-entropy: T/4 tokens over Llama 3's vocabulary
    forward, backward = factors("cross_entropy")
    assert ops.CROSS_ENTROPY_BYTES == pytest.approx((forward * 2, backward * 4), abs=0.01)
    assert rows["cross_entropy", "fwd"]["bytes"] == 2 * logits
    spec = GPUS["H100-80GB"]
    model = measured = 0.0
    for row in bench["gemm"]:
        if row["model"] != "square":
            ideal = ops.OpCosts(spec, spec.hbm_GBps)
            model += ideal.gemm(row["M"], row["N"], row["K"]).seconds - ideal.launch
            measured += row["median_s"]
    # the model's time is the measured one when the share it applies is the measured share
    assert model / measured * TRAINING_GEMMS_OVER_BEST == pytest.approx(TRAINING_GEMMS_OVER_BEST,
                                                                        abs=1e-3)


@pytest.mark.parametrize("seq, rate", [
    (256, 99e12),                          # below the curve's first point: held at 512's
    (1024, 133e12),                        # FA2 Fig. 4(d) at 1k
    (2**12.5, (173e12 + 182e12) / 2),      # halfway between 4k and 8k in log2 of the length
    (8192, 182e12), (65536, 189e12),       # a point; past the last, held at 16k's
])
def test_flash_rates_follow_the_measured_causal_curve(seq, rate):
    assert ops.flash_scale(GPUS["A100-80GB"].op_model, seq) == pytest.approx(rate / BEST, rel=1e-12)


# FA2 Fig. 4(d) and 7(d), causal, head dim 128, forward + backward TFLOP/s as printed on the bars
@pytest.mark.parametrize("gpu, kernel, seq, rate", [
    ("A100-80GB", "triton", 2048, 68e12), ("A100-80GB", "triton", 512, 50e12),
    ("A100-80GB", "fa1", 2048, 69e12), ("A100-80GB", "fa1", 16384, 83e12),
    ("A100-40GB", "triton", 8192, 78e12),  # proxy: the 80GB part's figure
    ("H100-80GB", "fa2", 2048, 265e12), ("H100-80GB", "fa1", 2048, 108e12),
    ("H100-80GB", "triton", 4096, 126e12),  # no Triton bar on the H100: FlashAttention's (proxy)
])
def test_each_flash_kernel_runs_at_its_own_measured_rate(gpu, kernel, seq, rate):
    """Forward + backward of one causal layer (3.5 x the forward FLOPs) takes the FLOPs over the
    kernel's measured causal rate at that length, whatever the kernel."""
    spec = GPUS[gpu]
    costs = ops.OpCosts(spec, spec.hbm_GBps)
    b, s, h = 2, seq, 4096
    both = sum(costs.flash(b, s, h, backward, kernel).seconds - costs.launch
               for backward in (False, True))
    assert both == pytest.approx(3.5 * 4 * b * s * s * h / 2 / rate, rel=1e-12)


def test_triton_attention_makes_a_layer_slower_by_its_attention_alone():
    """MPT-7B's shape at 2k tokens on an A100: the Triton kernel adds exactly the difference of
    the two kernels' attention times; nothing else in the layer moves."""
    path = SCENARIOS / "llama2_7b_64gpu.toml"
    sets = ["cluster.gpu='A100-80GB'", "training.flash_attention=true", "training.seq_len=2048"]
    fa2 = load_scenario(path, sets)
    triton = load_scenario(path, [*sets, "training.flash_kernel='triton'"])
    costs = ops.op_costs(fa2.cluster)
    layer = {name: ops.layer(costs, sc.model, sc.training, False).seconds
             for name, sc in (("fa2", fa2), ("triton", triton))}
    b, s, h = fa2.training.micro_batch, 2048, fa2.model.hidden
    attention = {k: costs.flash(b, s, h, False, k).seconds for k in ("fa2", "triton")}
    assert layer["triton"] - layer["fa2"] == pytest.approx(
        attention["triton"] - attention["fa2"], rel=1e-9)
    assert (attention["triton"] - costs.launch) / (attention["fa2"] - costs.launch) == (
        pytest.approx(155 / 68, rel=1e-9))  # the two rates at 2k, Fig. 4(d)


def test_a_kernel_without_a_published_rate_is_refused():
    spec = GPUS["A100-80GB"].op_model
    bare = dataclasses.replace(spec, older_flash_causal_by_seq=())
    with pytest.raises(InputError, match="no published rate of that kernel"):
        ops.flash_scale(bare, 2048, "triton")
    assert ops.flash_scale(bare, 2048, "fa2") == ops.flash_scale(spec, 2048)


@pytest.mark.parametrize("sets, fragment", [
    (["training.flash_kernel='fa3'"], "training.flash_kernel = 'fa3' is not one of"),
    (["training.flash_attention=false", "training.flash_kernel='triton'"],
     "training.flash_kernel = 'triton' names a flash kernel, but training.flash_attention = false"),
])
def test_a_bad_flash_kernel_is_one_line(sets, fragment):
    args = [f"--set={item}" for item in sets]
    assert_one_line_error(run_zerosim("simulate", str(SCENARIOS / "llama2_7b_64gpu.toml"), *args),
                          fragment)


@pytest.mark.parametrize("checkpointing", ["none", "selective", "full"])
def test_recomputation_adds_the_forward_it_repeats(a100, checkpointing):
    base = load_scenario(SCENARIOS / "megatron_7b5_64gpu.toml", ["cluster.gpu='A100-80GB'"])
    m = base.model
    t = base.training.__class__(**{**base.training.__dict__, "activation_checkpointing": checkpointing})
    plain = ops.layer(a100, m, t, backward=True).seconds
    again = {"none": 0.0, "selective": ops.attention_core(a100, m, t, False).seconds,
             "full": ops.layer(a100, m, t, backward=False).seconds}[checkpointing]
    assert ops.unit_seconds(a100, m, t)[1][1] == pytest.approx(plain + again, rel=1e-12)


def test_the_engine_times_compute_op_by_op_unless_the_flat_model_is_asked_for():
    """"op" is the default; compute_model = "flat", or a compute_efficiency alone, picks the flat
    model, which the explicit override then times: FLOPs over that fraction of peak."""
    path, one = SCENARIOS / "llama2_7b_64gpu.toml", ["cluster.nodes=1", "cluster.gpus_per_node=1"]
    default = simulate(load_scenario(path, one), 0)
    op_scenario = load_scenario(path, [*one, "cluster.compute_model='op'"])
    assert op_scenario.cluster.gpu == "A100-80GB"
    op = simulate(op_scenario, 0)
    flat = simulate(load_scenario(path, [*one, "cluster.compute_model='flat'"]), 0)
    quarter, eighth = (simulate(load_scenario(path, [*one, f"cluster.compute_efficiency={e}"]), 0)
                       for e in (0.25, 0.125))
    assert default.compute_s == op.compute_s
    # op by op: each unit's kernels (pinned by hand above), then Adam's 28 bytes per parameter
    # of Llama-2-7B (6,738,415,616, counted in test_memory_oracles.py) at the streaming fraction
    fwd, bwd = ops.unit_seconds(ops.OpCosts(GPUS["A100-80GB"], HBM / 1e9), op_scenario.model,
                                op_scenario.training)
    psi = 2 * 32000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096
    assert op.compute_s == pytest.approx(sum(fwd) + sum(bwd) + 28 * psi / (HBM * F_HBM),
                                         rel=1e-12)
    assert op.compute_s != pytest.approx(flat.compute_s, rel=1e-3)
    # FLOPs / (peak x efficiency) plus an optimizer step that does not depend on it: halving
    # the efficiency from 0.25 adds twice what halving it from 0.5 (the default) added
    assert eighth.compute_s - quarter.compute_s == pytest.approx(
        2 * (quarter.compute_s - flat.compute_s), rel=1e-9)
    bare = SCENARIOS / "zero_paper_7b5_64gpu.toml"  # a bare Ψ has no ops: the flat model stays
    assert simulate(load_scenario(bare, ["cluster.compute_model='op'"]), 3).compute_s == \
        simulate(load_scenario(bare), 3).compute_s


@pytest.mark.parametrize("sets, fragment", [
    (["cluster.compute_model=fast"], "cluster.compute_model = 'fast' is not one of"),
    (["cluster.compute_model=op", "cluster.compute_efficiency=0.4"], "is the flat model's"),
])
def test_bad_compute_models_are_one_line(sets, fragment):
    argv = ["simulate", str(SCENARIOS / "llama2_7b_64gpu.toml")]
    for text in sets:
        argv += ["--set", text]
    assert_one_line_error(run_zerosim(*argv), fragment)
    with pytest.raises(InputError):
        load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", sets)


def test_the_optimizer_streams_at_the_measured_bandwidth():
    """Op by op, the optimizer's bytes move at the streaming microbenchmark's share of HBM."""
    from zerosim.sim.costs import optimizer_cost
    op = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", ["cluster.compute_model='op'"])
    flat = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", ["cluster.compute_model='flat'"])
    assert optimizer_cost(op, 28).seconds(10**9) == pytest.approx(28e9 / (HBM * F_HBM))
    assert optimizer_cost(flat, 28).seconds(10**9) == pytest.approx(28e9 / HBM)


def test_fsdp2_copies_around_its_collectives_are_memory_bound_traffic():
    """Under FSDP2's ZeRO-3 each unit's forward adds the copy out of the all-gather buffer
    (read and write 16-bit: 4 bytes per gathered element) and its backward that again plus the
    chunk_cat into the reduce buffer (read 2, write 4 under an fp32 reduce), each a launch plus
    bytes over the streaming bandwidth; at stage 2 (kept parameters) backward copies nothing
    out. The paper's accounting has none of it."""
    from zerosim.analytic.model import gather_units
    from zerosim.sim.costs import compute_seconds

    path, sets = SCENARIOS / "llama2_7b_64gpu.toml", ["cluster.compute_model='op'"]
    zero = load_scenario(path, sets)
    fsdp = load_scenario(path, [*sets, "training.framework='fsdp2'", "training.reduce_dtype='fp32'"])
    fwd0, bwd0 = compute_seconds(zero, [], 3)
    fwd, bwd = compute_seconds(fsdp, [], 3)
    layer = gather_units(fsdp.model)[1]
    copy_out = LAUNCH + 4 * layer / (HBM * F_HBM)
    assert fwd[1] - fwd0[1] == pytest.approx(copy_out)
    assert bwd[1] - bwd0[1] == pytest.approx(copy_out + LAUNCH + 6 * layer / (HBM * F_HBM))
    fwd2, bwd2 = compute_seconds(fsdp, [], 2)  # reshard_after_forward=False: no regather
    assert fwd2[1] - fwd0[1] == pytest.approx(copy_out)
    assert bwd2[1] - bwd0[1] == pytest.approx(LAUNCH + 6 * layer / (HBM * F_HBM))


def test_foreach_adam_moves_80_bytes_per_element():
    """FSDP2's and DDP's torch AdamW, foreach: eight passes over fp32 tensors, 80 bytes per
    element (step_shape.FOREACH_ADAM_BYTES); the fused or DeepSpeed step moves 28."""
    from zerosim.sim.stages.step_shape import step_shape

    path = SCENARIOS / "llama2_7b_64gpu.toml"
    fsdp = step_shape(load_scenario(path, ["training.framework='fsdp2'"]), 3)
    zero = step_shape(load_scenario(path), 3)
    assert fsdp.optimizer.bytes_per_element == 80 and zero.optimizer.bytes_per_element == 28


H100_500W, H100_700W = 557.2, 712.9  # cuBLAS 8192^3 TFLOP/s: Meta's 500 W run, our 700 W one


@pytest.mark.parametrize("watts, scale", [(None, 1.0), (500, H100_500W / H100_700W),
                                          (600, (H100_500W + H100_700W) / 2 / H100_700W),
                                          (700, 1.0)])
def test_a_power_limit_slows_compute_bound_work_only(watts, scale):
    """Under cluster.power_limit_W GEMMs and attention run at the measured GEMM rate at that
    limit over the default's (interpolated between measured limits); HBM traffic does not, and
    the flat model's rate scales alike."""
    sets = ["cluster.gpu='H100-80GB'"] + ([] if watts is None else [f"cluster.power_limit_W={watts}"])
    cluster = load_scenario(SCENARIOS / "llama2_7b_64gpu.toml", sets).cluster
    assert cluster.power_scale == pytest.approx(scale, rel=1e-12)
    capped, full = ops.op_costs(cluster), ops.OpCosts(GPUS["H100-80GB"], 3350)
    launch = full.launch
    assert capped.gemm(8192, 8192, 8192).seconds - launch == pytest.approx(
        (full.gemm(8192, 8192, 8192).seconds - launch) / scale, rel=1e-12)
    assert capped.flash(2, 8192, 4096, True).seconds - launch == pytest.approx(
        (full.flash(2, 8192, 4096, True).seconds - launch) / scale, rel=1e-12)
    assert capped.traffic(1e9).seconds == full.traffic(1e9).seconds
    assert cluster.hardware.compute_flops_per_s == pytest.approx(989.4e12 * 0.5 * scale, rel=1e-12)


@pytest.mark.parametrize("sets, fragment", [
    (["cluster.power_limit_W=500"], "no GEMM throughput under a power limit is known for gpu = "
                                    "'A100-80GB' (known for: H100-80GB)"),
    (["cluster.gpu='H100-80GB'", "cluster.power_limit_W=300"],
     "cluster.power_limit_W = 300 is outside the measured 500-700 W for H100-80GB"),
    (["cluster.gpu='H100-80GB'", "cluster.power_limit_W=-5"], "cluster.power_limit_W"),
    (["cluster.gpu='H100-80GB'", "cluster.profile='profiles/h100_record_2026-11-24.json'",
      "cluster.power_limit_W=500"], "the profile's compute was measured at its GPU's own power"),
])
def test_power_limits_without_a_measurement_are_one_line(sets, fragment, monkeypatch):
    monkeypatch.chdir(SCENARIOS.parent)  # the profile's path as a user in the repository types it
    argv = ["simulate", str(SCENARIOS / "llama2_7b_64gpu.toml")]
    for text in sets:
        argv += ["--set", text]
    assert_one_line_error(run_zerosim(*argv), fragment)


def test_the_report_names_an_older_kernel_and_its_step_is_slower():
    path = str(SCENARIOS / "llama2_7b_64gpu.toml")
    plain = run_zerosim("simulate", path, "--json")
    triton = run_zerosim("simulate", path, "--json", "--set", "training.flash_kernel='triton'")
    assert plain.code == triton.code == 0
    steps = [{row["stage"]: row["step_time_s"] for row in shown.json}
             for shown in (plain, triton)]
    assert all(steps[1][stage] > steps[0][stage] for stage in steps[0])
    text = run_zerosim("simulate", path, "--set", "training.flash_kernel='fa1'").stdout
    assert "| flash attention (fa1 kernel) |" in text
    assert "| flash attention |" in run_zerosim("simulate", path).stdout
    text = run_zerosim("simulate", path, "--set", "training.norm_kernel='composite_fp32'").stdout
    assert "| flash attention | norms: composite_fp32 |" in text


EAGER_TRACE = ROOT / "profiles" / "eager_bytes_2026-11-26.json"


def test_the_composite_rmsnorm_constants_are_the_committed_trace():
    """op_costs.COMPOSITE_RMSNORM is bench/eager_bytes.py's dispatch trace (bytes per element
    and kernels, forward and backward with the weight's gradient), rounded to 0.01 byte."""
    trace = json.loads(EAGER_TRACE.read_text())["composite_rmsnorm"]
    for (per_element, kernels), name in zip(ops.COMPOSITE_RMSNORM, ("forward", "backward")):
        assert per_element == pytest.approx(trace[name]["bytes_per_element"], abs=0.005)
        assert kernels == trace[name]["kernels"]


def test_the_trace_method_against_what_the_h100_measured():
    """The dispatch count (each kernel's tensors once) against the H100's measured time in bytes
    of a copy: SwiGLU within 2% both ways; rotary, whose cos and sin broadcast over the heads, at
    least 1.5x above the count. The count is a lower bound, and a close one without broadcasts."""
    trace = json.loads(EAGER_TRACE.read_text())
    minimum = {"swiglu": (6, 10), "rotate_half": (4, 4)}  # bytes per element: (fwd, bwd)
    for op, factors in (("swiglu", ops.EAGER_FACTORS["swiglu"]),
                        ("rotate_half", ops.EAGER_FACTORS["rotary"])):
        for i, name in enumerate(("forward", "backward")):
            counted = trace[op][name]["bytes_per_element"] / minimum[op][i]
            if op == "swiglu":
                assert counted == pytest.approx(factors[i], rel=0.02)
            else:
                assert factors[i] > 1.5 * counted


def test_a_composite_norm_costs_its_traced_bytes_and_kernels(a100):
    """Llama-2-7B at 4k tokens: the layer with RMSNorm in fp32 eager ops costs the fused layer
    plus, per norm (two), the traced bytes less the fused bytes over HBM, and its extra launches."""
    path = SCENARIOS / "llama2_7b_64gpu.toml"
    fused = load_scenario(path)
    composite = load_scenario(path, ["training.norm_kernel='composite_fp32'"])
    m, elements = fused.model, fused.training.micro_batch * fused.training.seq_len * 4096
    for backward, (per_element, kernels) in zip((False, True), ops.COMPOSITE_RMSNORM):
        plain = ops.layer(a100, m, fused.training, backward)
        slow = ops.layer(a100, m, composite.training, backward)
        fused_bytes = 2 * (3 if backward else 2) * elements * ops.EAGER_FACTORS["norm"][backward]
        extra = 2 * (elements * per_element - fused_bytes) / (HBM * F_HBM)
        assert slow.kernels - plain.kernels == 2 * (kernels - 1)
        assert slow.seconds - plain.seconds == pytest.approx(
            extra + 2 * (kernels - 1) * LAUNCH, rel=1e-9)


@pytest.mark.parametrize("sets, fragment", [
    (["training.norm_kernel='apex'"], "training.norm_kernel = 'apex' is not one of"),
    (["model.norm='layernorm'", "training.norm_kernel='composite_fp32'"],
     "training.norm_kernel = 'composite_fp32' is RMSNorm written in fp32 eager ops, but "
     "model.norm = 'layernorm'"),
])
def test_a_bad_norm_kernel_is_one_line(sets, fragment):
    args = [f"--set={item}" for item in sets]
    assert_one_line_error(run_zerosim("simulate", str(SCENARIOS / "llama2_7b_64gpu.toml"), *args),
                          fragment)


def test_a_bare_model_has_no_norm_kernel():
    assert_one_line_error(run_zerosim("simulate", str(ZERO_PAPER), "--set",
                                      "training.norm_kernel='composite_fp32'"),
                          "a bare-Ψ model has no norms")


def test_the_trace_is_what_bench_eager_bytes_counts_today():
    """Re-run the dispatch trace (torch on the CPU) and find the committed numbers."""
    pytest.importorskip("torch")
    import importlib.util

    spec = importlib.util.spec_from_file_location("eager_bytes", ROOT / "bench/eager_bytes.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    committed = json.loads(EAGER_TRACE.read_text())["composite_rmsnorm"]
    traced = bench.trace(bench.CompositeRMSNorm(bench.HIDDEN), 1)
    for name in ("forward", "backward"):
        assert traced[name]["bytes_per_element"] == pytest.approx(
            committed[name]["bytes_per_element"], rel=1e-12)
        assert [op for op, _, _ in traced[name]["ops"]] == [
            op for op, _, _ in committed[name]["ops"]]
