"""A box's own record (zerosim/hardware/measured.py) priced by the op model (sim/op_costs.py):
the op model with a calibrated record equals the op model with the same constants given by hand,
and each kernel's time is the law written out here by hand with integer-friendly numbers."""

from __future__ import annotations

import dataclasses

import pytest

from zerosim.hardware import DEVICES, Gpu, OpModel, OpRate
from zerosim.hardware.measured import record_gpu
from zerosim.scenario.load import load_scenario
from zerosim.sim import op_costs as ops

CPU = DEVICES["CPU"]
RECORD = {
    "name": "test box", "device": "cpu", "dtype": "float32", "threads": 1,
    "gemm": {"tflops": 0.1, "tile": [32, 32], "units": 4, "launch_s": 5e-6,
             "residuals_pct": [0.0]},
    "linear_overhead_s": [2e-6, 7e-6],
    "launch_s": 3e-6, "autograd_node_s": 4e-6, "bandwidth_GBps": 10.0,
    "attention": {"kernel": "math", "overhead_s": [20e-6, 50e-6], "score_s": [1e-9, 2e-9],
                  "by_seq": [[16, 0.002, 0.001], [64, 0.008, 0.004]], "residuals_pct": []},
    "memory_ops": {op: {"forward": {"overhead_s": 3e-6, "bytes_per_s": 1e9, "residuals_pct": []},
                        "backward": {"overhead_s": 6e-6, "bytes_per_s": 5e8,
                                     "residuals_pct": []}}
                   for op in ("norm", "residual", "gelu", "embedding", "cross_entropy")},
}


def _by_hand() -> Gpu:
    """The same constants written out, not read from the record."""
    fwd, bwd = OpRate(3e-6, 1e9), OpRate(6e-6, 5e8)
    model = OpModel(
        gemm_achievable_fraction=1.0, training_shapes_over_best=1.0, flash_fwd_tflops=None,
        flash_bwd_tflops=None, hbm_achievable_fraction=1.0, kernel_launch_us=5.0,
        gemm_tile=(32, 32),
        memory_ops=tuple((op, fwd, bwd) for op in ("cross_entropy", "embedding", "gelu", "norm",
                                                   "residual")),
        measured_attention=(("math", (20e-6, 50e-6), (1e-9, 2e-9),
                             ((16, 0.002, 0.001), (64, 0.008, 0.004))),),
        linear_overhead_s=(2e-6, 7e-6), gemm_launch_us=5.0)
    return Gpu(name="CPU", generation=None, node=CPU.node, hbm_GiB=CPU.hbm_GiB, hbm_GBps=10.0,
               peak_dense_16bit_tflops=0.1, sm_count=4, collective_library="gloo",
               cuda_context_MiB=0.0, op_model=model)


def _record(**changes):
    record = {**RECORD, **changes}
    record["gemm"] = {**RECORD["gemm"], "launch_s": record["launch_s"]}
    return record


@pytest.fixture(scope="module")
def tiny():
    return load_scenario("scenarios/tiny_gpt_4rank_cpu.toml", [])


def test_a_record_is_the_op_model_with_the_same_constants_by_hand(tiny):
    measured = ops.OpCosts(record_gpu(_record(launch_s=5e-6), CPU), 10.0)
    by_hand = ops.OpCosts(_by_hand(), 10.0)
    assert ops.unit_seconds(measured, tiny.model, tiny.training) == \
        ops.unit_seconds(by_hand, tiny.model, tiny.training)


def test_a_gemm_under_a_record_is_the_wave_law_by_hand():
    costs = ops.OpCosts(record_gpu(_record(launch_s=5e-6), CPU), 10.0)
    # 64 x 64 output in 32 x 32 tiles: 4 tiles, one wave of 4 units, each tile 2*32*32*128
    # FLOPs at 0.1 TFLOP/s / 4 units; memory 2 bytes (the op model's 16-bit convention, in which
    # the record's bandwidth is counted too) x (64*128 + 128*64 + 64*64) at 10 GB/s
    compute = 2 * 32 * 32 * 128 * 4 / 0.1e12
    memory = 2 * (64 * 128 + 128 * 64 + 64 * 64) / 10e9
    assert compute > memory
    assert costs.gemm(64, 64, 128).seconds == pytest.approx(5e-6 + compute, rel=1e-12)
    # 5 tiles on 4 units: two waves
    assert costs.gemm(160, 32, 128).seconds == pytest.approx(5e-6 + 2 * compute, rel=1e-12)
    # a linear adds the record's overhead beyond its GEMMs: 2 us forward, 7 us backward
    assert costs.linear(64, 128, 64, False).seconds == pytest.approx(
        costs.gemm(64, 64, 128).seconds + 2e-6, rel=1e-12)
    assert costs.linear(64, 128, 64, True).seconds == pytest.approx(
        costs.gemm(64, 128, 64).seconds + costs.gemm(128, 64, 64).seconds + 7e-6, rel=1e-12)


def test_memory_ops_and_attention_at_measured_rates_by_hand(tiny):
    costs = ops.OpCosts(record_gpu(RECORD, CPU), 10.0)
    t = tiny.training
    # a norm over 64 tokens x 64: x in, y out (2 x 2 bytes per element) forward; + dy backward
    assert ops.memory_op(costs, t, "norm", False, 64, 64).seconds == pytest.approx(
        3e-6 + 2 * 2 * 64 * 64 / 1e9, rel=1e-12)
    assert ops.memory_op(costs, t, "norm", True, 64, 64).seconds == pytest.approx(
        6e-6 + 3 * 2 * 64 * 64 / 5e8, rel=1e-12)
    # an op the record did not measure (rotary) falls back to the catalogue's eager factor at the
    # record's bandwidth (the copy rate), plus its launch
    rotary = 2 * (2 * 64 * 96 + 4 * 64 * 16)
    assert ops.memory_op(costs, t, "rotary", False, 64, 96, 16).seconds == pytest.approx(
        3e-6 + rotary * ops.EAGER_FACTORS["rotary"][0] / 10e9, rel=1e-12)
    # attention, b = 2, s = 32, 4 heads of 16: causal FLOPs 4 b s^2 (64) / 2, rate interpolated
    # in log2 s between 16 (0.002) and 64 (0.008): halfway, 0.005 TFLOP/s forward, 0.0025
    # backward; 2 x 4 x 32^2 scores at 1 ns forward, 2 ns backward
    flops, scores = 4 * 2 * 32 * 32 * 64 / 2, 2 * 4 * 32 * 32
    m, tt = tiny.model, dataclasses.replace(t, micro_batch=2, seq_len=32, flash_attention=False)
    assert ops.attention_core(costs, m, tt, False).seconds == pytest.approx(
        20e-6 + 1e-9 * scores + flops / 0.005e12, rel=1e-12)
    assert ops.attention_core(costs, m, tt, True).seconds == pytest.approx(
        50e-6 + 2e-9 * scores + 2.5 * flops / 0.0025e12, rel=1e-12)


def test_a_layer_under_a_record_is_the_sum_of_its_ops_by_hand(tiny):
    """The tiny GPT's layer (GELU MLP, layer norms, learned positions, dropout counted when the
    model has it): 4 linears, the attention core and each memory-bound op, nothing else."""
    costs = ops.OpCosts(record_gpu(RECORD, CPU), 10.0)
    m, t = tiny.model, tiny.training
    tokens, h, f = t.micro_batch * t.seq_len, m.hidden, m.ffn_width
    for backward in (False, True):
        expected = (costs.linear(tokens, h, 3 * h, backward).seconds
                    + ops.attention_core(costs, m, t, backward).seconds
                    + costs.linear(tokens, h, h, backward).seconds
                    + costs.linear(tokens, h, f, backward).seconds
                    + costs.linear(tokens, f, h, backward).seconds
                    + 2 * ops.memory_op(costs, t, "norm", backward, tokens, h).seconds
                    + 2 * ops.memory_op(costs, t, "residual", backward, tokens, h).seconds
                    + ops.memory_op(costs, t, "gelu", backward, tokens, f).seconds)
        if m.dropout:
            expected += 2 * ops.memory_op(costs, t, "dropout", backward, tokens, h).seconds
        assert ops.layer(costs, m, t, backward).seconds == pytest.approx(expected, rel=1e-12)
