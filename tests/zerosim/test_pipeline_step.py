"""Independent oracles for a pipelined step (issue 30, sim/pipeline/step.py's simulate_pipeline,
read through `zerosim simulate --json`):

- point-to-point: a transfer is one boundary activation, [s, b, h] in bf16; 1F1B's stage 0
  sends one per micro-batch forward, the last stage one gradient per micro-batch backward, the
  others both; each takes latency + bytes / bandwidth on its link (nccl-tests' sendrecv: busbw
  = algbw, the bytes cross one link once), NCCL's Simple ring latency where none is given
  (src/graph/tuning.cc: baseLat 8.4 us, hwLat NVLink 3.4 us, NET 14 us);
- data parallelism: a stage's d = N / (t p) ranks run a ring over its own Ψ_i (hand-counted):
  DDP's all-reduce sends 2 (d - 1)/d of the gradients, ZeRO-1's reduce-scatter and all-gather
  (d - 1)/d each (nccl-tests' PERFORMANCE.md; Thakur et al. 2005), in α-β time
  2 (d - 1)(α + S / (d β)) under gloo's ring;
- time: under the flat compute model a layer's forward is 24 b s h^2 + 4 b s^2 h FLOPs and
  Narayanan et al. 2021's iteration 72 B s l h^2 (1 + s/6h + V/(12 h l)) without recomputation
  (§3.3.2, Eq. 3's derivation); balanced stages bound the step below by (m + p - 1) micro-batch
  slots (GPipe/1F1B's closed form) and above by that plus every transfer and collective;
  tokens per second per GPU are m b s / (t p step);
- pipeline_parallel = 1 is the step without a pipeline, byte for byte.
"""

from fractions import Fraction

import pytest

from tests.conftest import run_zerosim
from zerosim.scenario.load import load_scenario
from zerosim.sim.pipeline.step import simulate_pipeline
from tests.zerosim.pipeline_scenarios import flat_gpt

# 7 layers, h = 1024, 16 heads, s = 2048, b = 1; V = 12h + 2s = 16384 makes the head's forward
# (2 b s h V FLOPs) exactly one layer's (24 b s h^2 + 4 b s^2 h), so the split [2, 2, 2, 1]
# gives 4 stages of two layers' compute each (the embedding's lookup is no FLOPs).
# Links and rates typed in: NVLink 100 GB/s + 5 us, each GPU's share of the NICs 25 GB/s + 10
# us, 312 TFLOP/s at 50%, HBM 2000 GB/s.
BASE = flat_gpt(7, 8, 4, "pipeline_layers = [2, 2, 2, 1]\n")

H, V, S, B, L, M, P = 1024, 16384, 2048, 1, 7, 8, 4
RATE = 312e12 * 0.5
HBM = 2000e9
P2P = 2 * S * B * H  # 4,194,304 bytes
LAYER = 12 * H * H + 13 * H  # QKV, projection, two MLP matrices, their biases, two layer norms
EMBEDDING = V * H + S * H  # word + learned positions
HEAD = 2 * H + V * H  # final norm + the last stage's copy of the tied word embedding
PSI = (EMBEDDING + 2 * LAYER, 2 * LAYER, 2 * LAYER, LAYER + HEAD)
assert PSI == (44_066_816, 25_192_448, 25_192_448, 29_375_488)
D = 16 // P  # data-parallel ranks of a stage
# Adam's bytes over HBM per element it updates: read the bf16 gradient (2), read and write the
# fp32 master (8) and both fp32 moments (16), write the bf16 working copy (2).
ADAM_HBM_BYTES = 28


def narayanan_flops(batch: int, layers: int) -> Fraction:
    """Narayanan et al. 2021's FLOPs of one iteration without recomputation:
    72 B s l h^2 (1 + s / 6h + V / (12 h l))."""
    return 72 * batch * S * layers * H * H * (1 + Fraction(S, 6 * H) + Fraction(V, 12 * H * layers))


SLOT = float(narayanan_flops(B, L) / P / Fraction(RATE))
"""One stage's forward and backward of one micro-batch: a quarter of the model's."""


def optimizer_s(elements: float) -> float:
    return elements * ADAM_HBM_BYTES / HBM


def simulate(write, *sets: str, stage: int | None = None, text: str = BASE) -> list[dict]:
    argv = ["simulate", str(write("pp.toml", text)), "--json"]
    for assignment in sets:
        argv += ["--set", assignment]
    if stage is not None:
        argv += ["--stage", str(stage)]
    result = run_zerosim(*argv)
    assert result.code == 0, result.stderr
    return result.json


def test_the_slot_is_two_layers_forward_and_backward():
    """Narayanan's total over 4 equal stages is 3 (forward + 2 x forward) x 2 layers' forward."""
    layer_forward = 24 * B * S * H * H + 4 * B * S * S * H
    assert narayanan_flops(B, L) == 3 * (L + 1) * layer_forward
    assert SLOT == pytest.approx(6 * layer_forward / RATE, rel=1e-15)


@pytest.mark.parametrize("m", [1, 4, 8])
def test_1f1b_sends_one_activation_per_forward_and_one_gradient_per_backward(write, m):
    (row,) = simulate(write, f"training.gradient_accumulation={m}", stage=1)
    sent = [stage["comm_bytes_per_rank"]["send (p2p)"] for stage in row["pipeline"]]
    assert sent == [m * P2P, 2 * m * P2P, 2 * m * P2P, m * P2P]
    assert row["comm_bytes_per_group"]["p2p"]["send"] == m * P2P  # stage 0 finishes last


def test_interleaving_sends_from_every_virtual_stage_but_the_ends(write):
    """p = 2, v = 2, m = 4: virtual stages 0, 2 on stage 0 and 1, 3 on stage 1. Each forward
    but virtual stage 3's sends, each backward but virtual stage 0's: stage 0 sends 4 + 4 + 4,
    stage 1 4 + 4 + 4 (layers 8 split [2, 2, 2, 2])."""
    (row,) = simulate(write, "parallelism.pipeline_parallel=2", "model.layers=8",
                      "parallelism.pipeline_schedule=interleaved_1f1b",
                      "parallelism.virtual_stages=2", "training.gradient_accumulation=4",
                      "parallelism.pipeline_layers=[2, 2, 2, 2]", stage=1)
    assert [s["comm_bytes_per_rank"]["send (p2p)"] for s in row["pipeline"]] == [12 * P2P] * 2


def transfer_seconds(result, stage: int) -> list[float]:
    """Each distinct duration of a stage's sends, to 1e-12 s (their clocks are sums of floats)."""
    durations = sorted(e[3] - e[2] for e in result.pipeline_runs[stage].events if e[0] == "send")
    distinct: list[float] = []
    for seconds in durations:
        if not distinct or seconds - distinct[-1] > 1e-12:
            distinct.append(seconds)
    return distinct


def test_a_transfer_takes_latency_plus_bytes_over_its_links_bandwidth(write):
    """Stages 0, 1 share node 0 (NVLink), stage 2 is on node 1: stage 1 sends forward over the
    NICs, backward over NVLink; stage 3 sends backward to stage 2 over NVLink."""
    result = simulate_pipeline(load_scenario(write("pp.toml", BASE)), 1)
    nvlink, nic = 5e-6 + P2P / 100e9, 10e-6 + P2P / 25e9
    assert transfer_seconds(result, 0) == pytest.approx([nvlink], rel=1e-9)
    assert transfer_seconds(result, 1) == pytest.approx([nvlink, nic], rel=1e-9)
    assert transfer_seconds(result, 2) == pytest.approx([nvlink, nic], rel=1e-9)
    assert transfer_seconds(result, 3) == pytest.approx([nvlink], rel=1e-9)


def test_without_a_latency_a_transfer_pays_nccls_simple_ring_latency(write):
    text = BASE.replace("intra_node_latency_us = 5\n", "").replace(
        "inter_node_latency_us = 10\n", "")
    result = simulate_pipeline(load_scenario(write("pp.toml", text)), 1)
    nvlink, nic = (8.4 + 3.4) * 1e-6 + P2P / 100e9, (8.4 + 14.0) * 1e-6 + P2P / 25e9
    assert transfer_seconds(result, 1) == pytest.approx([nvlink, nic], rel=1e-9)


@pytest.mark.parametrize("tp, psi", [
    (1, PSI),
    # t = 2: a rank's layer 6h^2 + 9.5h (Megatron's split; norms and row biases whole), its
    # embedding V/2 x h + the positions, its head's copy V/2 x h
    (2, (V // 2 * H + S * H + 2 * (6 * H * H + 19 * H // 2), 2 * (6 * H * H + 19 * H // 2),
         2 * (6 * H * H + 19 * H // 2), 6 * H * H + 19 * H // 2 + 2 * H + V // 2 * H)),
])
def test_each_stage_reduces_its_own_gradients_over_its_d_ranks_as_a_ring(write, tp, psi):
    d = 16 // (tp * P)
    ddp, zero1 = simulate(write, f"parallelism.tensor_parallel={tp}",
                          "cluster.collective_algorithm=ring")[:2]
    for i, elements in enumerate(psi):
        grads = 2 * elements  # bf16
        assert ddp["pipeline"][i]["comm_bytes_per_rank"]["all_reduce"] == 2 * (d - 1) * grads // d
        sent = zero1["pipeline"][i]["comm_bytes_per_rank"]
        assert sent["reduce_scatter"] == sent["all_gather"] == (d - 1) * grads // d
        assert "all_reduce" not in sent


def test_the_ring_takes_alpha_beta_time_under_gloo(write):
    """One bucket, d = 4 ranks on NVLink: 2 (d - 1) steps of α + (S / d) / β, S = 2 Ψ_i."""
    ddp, zero1 = simulate(write, "cluster.collective_library=gloo", "training.overlap_comm=false",
                          "training.reduce_bucket_MiB=1024", "training.allgather_bucket_MiB=1024")
    for i, elements in enumerate(PSI):
        step = 5e-6 + 2 * elements / D / 100e9
        assert ddp["pipeline"][i]["comm_time_s"] == pytest.approx(2 * (D - 1) * step, rel=1e-12)
        assert zero1["pipeline"][i]["comm_time_s"] == pytest.approx(2 * (D - 1) * step,
                                                                   rel=1e-12)


def test_zero_1_differs_from_ddp_by_the_optimizers_shard_alone(write):
    """With the reduction after the last backward and one bucket, the ring's all-reduce is its
    reduce-scatter then its all-gather: ZeRO-1 moves the all-gather after the optimizer, which
    steps Ψ_i / d elements instead of Ψ_i. Compute is the same micro-batches plus that
    optimizer."""
    ddp, zero1 = simulate(write, "cluster.collective_library=gloo", "training.overlap_comm=false",
                          "training.reduce_bucket_MiB=1024", "training.allgather_bucket_MiB=1024")
    for i, elements in enumerate(PSI):
        saved = optimizer_s(elements) - optimizer_s(elements / D)
        assert ddp["pipeline"][i]["step_time_s"] - zero1["pipeline"][i]["step_time_s"] == \
            pytest.approx(saved, rel=1e-9)
        assert ddp["pipeline"][i]["compute_s"] - zero1["pipeline"][i]["compute_s"] == \
            pytest.approx(saved, rel=1e-9)


@pytest.mark.parametrize("stage", [0, 1])
def test_a_stage_computes_m_slots_and_its_optimizer(write, stage):
    (row,) = simulate(write, stage=stage)
    for i, elements in enumerate(PSI):
        optimizer = optimizer_s(elements if stage == 0 else elements / D)
        assert row["pipeline"][i]["compute_s"] == pytest.approx(M * SLOT + optimizer, rel=1e-9)


@pytest.mark.parametrize("sets", [[], ["training.gradient_accumulation=2"],
                                  ["training.gradient_accumulation=16"],
                                  ["parallelism.pipeline_schedule=gpipe", "training.zero_stage=0"],
                                  ["cluster.collective_library=gloo"]])
def test_the_step_lies_between_m_plus_p_minus_1_slots_and_that_plus_all_communication(write,
                                                                                       sets):
    """Below: stage 0's last backward ends no earlier than (m + p - 1) slots, then its optimizer
    runs. Above: any path through the step holds at most (m + p - 1) slots of compute, each of
    the 2 m (p - 1) transfers at most once, and one stage's collectives and optimizer."""
    micro = next((int(s.split("=")[1]) for s in sets if "accumulation" in s), M)
    longest_link = 10e-6 + P2P / 25e9  # the NICs'; NVLink's is shorter
    for row in simulate(write, *sets):
        stage0 = optimizer_s(PSI[0] if row["stage"] == 0 else PSI[0] / D)
        low = (micro + P - 1) * SLOT + stage0
        tail = max(s["comm_time_s"] + optimizer_s(psi) for s, psi in zip(row["pipeline"], PSI))
        high = (micro + P - 1) * SLOT + 2 * micro * (P - 1) * longest_link + tail
        assert low <= row["step_time_s"] <= high, (low, row["step_time_s"], high)


@pytest.mark.parametrize("sets, t", [([], 1), (["parallelism.tensor_parallel=2"], 2),
                                     (["training.gradient_accumulation=4",
                                       "training.micro_batch=2"], 1)])
def test_tokens_per_gpu_are_m_b_s_over_t_p_and_the_step(write, sets, t):
    m = next((int(s.split("=")[1]) for s in sets if "accumulation" in s), M)
    b = next((int(s.split("=")[1]) for s in sets if "micro_batch" in s), B)
    for row in simulate(write, *sets):
        assert row["tokens_per_s_per_gpu"] == pytest.approx(m * b * S / (t * P)
                                                            / row["step_time_s"], rel=1e-12)


WITHOUT = BASE[:BASE.index("[parallelism]")]


@pytest.mark.parametrize("keys", [
    'pipeline_parallel = 1\n',
    'pipeline_parallel = 1\npipeline_schedule = "gpipe"\nvirtual_stages = 1\n',
])
@pytest.mark.parametrize("command", ["simulate", "memory"])
def test_one_stage_is_the_step_without_a_pipeline_byte_for_byte(write, keys, command):
    path = str(write("pp.toml", WITHOUT))
    plain = run_zerosim(command, path, "--json")
    path = str(write("pp.toml", WITHOUT + "[parallelism]\n" + keys))
    one = run_zerosim(command, path, "--json")
    assert plain.code == one.code == 0, (plain.stderr, one.stderr)
    assert one.stdout == plain.stdout
    assert "pipeline" not in plain.stdout
