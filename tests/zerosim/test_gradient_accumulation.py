"""Gradient accumulation (training.gradient_accumulation = k micro-steps per optimizer step):
compute grows k-fold and the optimizer step does not; DDP and ZeRO-1 reduce once (DDP's
no_sync), ZeRO-2 reduce-scatters and ZeRO-3 gathers and reduce-scatters in every micro-step;
tokens per second and MFU count every micro-step. Expected values are written out by hand."""

import pytest

from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate

from tests.conftest import ZERO_PAPER, run_zerosim

PSI, N = 7_500_000_000, 64             # the ZeRO paper's scenario: bare Ψ on 8 x 8 V100s
PEAK, EFFICIENCY = 125e12, 0.5         # V100 dense fp16 peak, the scenario's efficiency
TOKENS = 1 * 1024                      # micro_batch x seq_len
FP16 = 2
# forward 2Ψ and backward 4Ψ FLOPs per token (Kaplan et al. 2020): 6Ψ per token per micro-step
MICRO_STEP_S = 6 * PSI * TOKENS / (PEAK * EFFICIENCY)


def scenario(stage, k, *extra):
    return load_scenario(ZERO_PAPER, [f"training.zero_stage={stage}",
                                      f"training.gradient_accumulation={k}", *extra])


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_compute_grows_with_the_micro_steps_and_the_optimizer_step_does_not(stage):
    one = simulate(scenario(stage, 1), stage, keep_events=False)
    optimizer_s = one.compute_s - MICRO_STEP_S  # what one step spends beyond forward + backward
    assert optimizer_s > 0
    for k in (2, 5):
        result = simulate(scenario(stage, k), stage, keep_events=False)
        assert result.compute_s == pytest.approx(optimizer_s + k * MICRO_STEP_S, rel=1e-9)
        assert result.peak_bytes == one.peak_bytes  # the same buffers, k times over


@pytest.mark.parametrize("stage, per_op", [
    # per optimizer step and rank, a ring's (n-1)/n of the fp16 buffer per walk
    (0, lambda k: {"all_reduce": 2 * 63 / 64 * FP16 * PSI}),                 # once (no_sync)
    (1, lambda k: {"reduce_scatter": 63 / 64 * FP16 * PSI,                   # once
                   "all_gather": 63 / 64 * FP16 * PSI}),
    (2, lambda k: {"reduce_scatter": k * 63 / 64 * FP16 * PSI,               # every micro-step
                   "all_gather": 63 / 64 * FP16 * PSI}),                     # after the step
    (3, lambda k: {"reduce_scatter": k * 63 / 64 * FP16 * PSI,               # every micro-step,
                   "all_gather": k * 2 * 63 / 64 * FP16 * PSI}),             # forward + backward
])
def test_communication_per_framework(stage, per_op):
    for k in (1, 3):
        sent = simulate(scenario(stage, k), stage, keep_events=False).comm_bytes_per_rank
        expected = per_op(k)
        assert {op: b for op, b in sent.items() if b} == pytest.approx(expected, rel=1e-9), k


@pytest.mark.parametrize("stage, collectives", [(0, 1), (2, 3)])
def test_no_sync_micro_steps_launch_no_collective(stage, collectives):
    """One bucket holds every gradient (a 1e6 MiB bucket), no overlap: DDP's 3 micro-steps
    launch one all-reduce in all; ZeRO-2 reduce-scatters that bucket in each of the 3 (plus its
    parameter all-gather after the step, in one 1e6 MiB chunk)."""
    s = scenario(stage, 3, "training.reduce_bucket_MiB=1e6", "training.allgather_bucket_MiB=1e6",
                 "training.overlap_comm=false")
    result = simulate(s, stage)
    events = [e for e in result.ranks[0].state.events
              if e.get("op") in ("all_reduce", "reduce_scatter")]
    assert len(events) == collectives


def test_tokens_per_second_and_mfu_count_every_micro_step():
    k = 4
    result = simulate(scenario(3, k), 3, keep_events=False)
    tokens_per_s = k * TOKENS / result.step_time_s
    assert result.tokens_per_s_per_gpu == pytest.approx(tokens_per_s, rel=1e-12)
    assert result.mfu == pytest.approx(6 * PSI * tokens_per_s / PEAK, rel=1e-12)
    assert result.mfu < EFFICIENCY  # communication and the optimizer only ever take away


def test_the_table_names_the_micro_steps_and_bad_values_are_one_line():
    shown = run_zerosim("simulate", str(ZERO_PAPER), "--stage", "3", "--set",
                        "training.gradient_accumulation=4")
    assert shown.code == 0 and "x 4 micro-steps (gradient accumulation)" in shown.stdout
    bad = run_zerosim("simulate", str(ZERO_PAPER), "--set", "training.gradient_accumulation=0")
    assert bad.code == 2 and bad.stderr.count("\n") == 1
    assert "training.gradient_accumulation = 0 must be > 0" in bad.stderr
