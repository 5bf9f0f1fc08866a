"""The simulated training step: bytes on the wire from the ZeRO paper (§7: DDP and ZeRO-1/2 move
2Ψ per step, ZeRO-3 3Ψ), memory that passes through the analytic model's steady points, the two
simulation modes agreeing, and, on a cluster with integer-friendly costs, the exact step time
without overlap (training.overlap_comm = false), with a straggler and with a degraded link."""

import json

import pytest

from zerosim.sim.engine import simulate
from zerosim.scenario.load import load_scenario
from zerosim.analytic.memory import stage_memory, steady_points
from zerosim.units import mib_to_bytes

from tests.conftest import SCENARIOS, ZERO_PAPER, assert_one_line_error, run_zerosim

PSI = 7_500_000_000
TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"


@pytest.fixture(scope="module")
def paper_bf16():
    s = load_scenario(ZERO_PAPER, ["training.precision=bf16"])
    return {stage: simulate(s, stage, keep_events=False) for stage in range(4)}


def test_bytes_per_rank_follow_the_zero_paper(paper_bf16):
    two_psi = 2 * PSI  # bf16 gradients or parameters, bytes
    total = {stage: sum(r.comm_bytes_per_rank.values()) for stage, r in paper_bf16.items()}
    assert total[0] == 2 * 63 * two_psi // 64
    assert total[1] == total[2] == total[0]
    assert total[3] == 3 * 63 * two_psi // 64  # 1.5x
    assert paper_bf16[0].comm_bytes_per_rank == {"all_reduce": total[0]}
    assert paper_bf16[1].comm_bytes_per_rank == {"reduce_scatter": 63 * two_psi // 64,
                                                 "all_gather": 63 * two_psi // 64}
    assert paper_bf16[3].comm_bytes_per_rank == {"reduce_scatter": 63 * two_psi // 64,
                                                 "all_gather": 2 * 63 * two_psi // 64}


def test_all_reducing_gradients_first_costs_3_psi():
    s = load_scenario(ZERO_PAPER, ["training.gradient_reduction=all_reduce"])
    result = simulate(s, 1, keep_events=False)
    assert sum(result.comm_bytes_per_rank.values()) == 3 * 63 * 2 * PSI // 64


def test_stage_3_peak_far_below_stage_0(paper_bf16):
    assert paper_bf16[3].peak_bytes * 10 < paper_bf16[0].peak_bytes
    peaks = [paper_bf16[stage].peak_bytes for stage in range(4)]
    assert peaks == sorted(peaks, reverse=True)


VARIANTS = [
    (ZERO_PAPER, []),
    (TINY, []),
    (TINY, ["training.activation_checkpointing=full", "training.prefetch_layers=0"]),
    (TINY, ["training.activation_checkpointing=selective", "training.prefetch_layers=3"]),
    (TINY, ["training.precision=bf16", "training.reduce_bucket_MiB=0.01", "model.tied_embeddings=false"]),
    (TINY, ["training.reduce_bucket_MiB=100", "cluster.gpus_per_node=1"]),  # bucket > model, 1 rank
    (LLAMA, ["cluster.nodes=2", "training.optimizer_offload=cpu"]),
    (SCENARIOS / "gpt3_175b_1024gpu.toml", ["cluster.nodes=2", "training.reduce_bucket_MiB=500"]),
]


@pytest.mark.parametrize("path, overrides", VARIANTS)
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_timeline_passes_through_the_analytic_steady_points(path, overrides, stage):
    s = load_scenario(path, overrides)
    result = simulate(s, stage, keep_events=False)
    expected = steady_points(s, stage)
    assert {k: result.memory_at[k] for k in expected} == expected
    analytic = stage_memory(s, stage)
    assert result.memory_at["after_init"] == analytic.model_states_bytes
    assert expected["after_forward"] <= result.peak_bytes <= analytic.peak_bytes


FSDP2 = ["training.framework='fsdp2'"]
FSDP2_VARIANTS = [  # where a review found the engine above the analytic peak before the fix
    (LLAMA, [*FSDP2, "cluster.nodes=1", "training.gradient_accumulation=2"]),
    (LLAMA, [*FSDP2, "training.activation_checkpointing=full", "training.seq_len=512"]),
    (LLAMA, [*FSDP2, "cluster.nodes=1", "training.optimizer=sgd", "training.seq_len=256"]),
    (ZERO_PAPER, [*FSDP2, "training.seq_len=1024", "training.gradient_accumulation=3"]),
    (TINY, [*FSDP2, "training.zero_stage=3", "training.precision=bf16",
            "training.reduce_dtype='fp32'"]),
]


@pytest.mark.parametrize("path, overrides", FSDP2_VARIANTS)
@pytest.mark.parametrize("stage", [2, 3])
def test_fsdp2_timeline_stays_within_the_analytic_peak(path, overrides, stage):
    """FSDP2's gradients made in backward: the timeline passes through the steady points, starts
    without them, and never exceeds the analytic peak (backward trades activations for
    gradients unit by unit; with accumulation the first micro-step's stay)."""
    from zerosim.frameworks import framework_of

    s = load_scenario(path, overrides)
    result = simulate(s, stage, keep_events=False)
    expected = steady_points(s, stage)
    assert {k: result.memory_at[k] for k in expected} == expected
    analytic = stage_memory(s, stage)
    made = analytic.grads_bytes if framework_of(s.training).grads_made_in_backward(s.training, stage) else 0
    assert result.memory_at["after_init"] == analytic.model_states_bytes - made
    assert expected["after_forward"] <= result.peak_bytes <= analytic.peak_bytes


def test_stage_2_holds_at_most_two_buckets():
    s = load_scenario(TINY, ["training.reduce_bucket_MiB=0.01", "cluster.intra_node_bandwidth_GBps=1e-3"])
    result = simulate(s, 2)
    bucket = mib_to_bytes(0.01)
    live = [sample["buckets"] for _, sample in result.ranks[0].state.memory.samples]
    assert max(live) == 2 * bucket  # slow links: backward waits for a free bucket, never a third


def _as_comparable(result):
    d = result.as_dict()
    del d["mode"], d["ranks_simulated"]
    return d


@pytest.mark.parametrize("algorithm", ["auto", "ring"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_symmetric_and_per_rank_modes_agree_on_a_uniform_16_rank_cluster(algorithm, stage):
    s = load_scenario(LLAMA, ["cluster.nodes=2", f"cluster.collective_algorithm='{algorithm}'",
                              "training.reduce_bucket_MiB=200"])
    symmetric = simulate(s, stage, mode="symmetric")
    every_rank = simulate(s, stage, mode="per_rank")
    assert symmetric.ranks_simulated == 1 and every_rank.ranks_simulated == 16
    assert _as_comparable(symmetric) == _as_comparable(every_rank)
    assert symmetric.ranks[0].state.events == every_rank.ranks[0].state.events


CLASS_VARIANTS = [
    ["variation.slow_ranks=[5]", "variation.slowdown=1.2"],
    ["variation.degraded_links=[9]", "variation.link_bandwidth_factor=0.05"],
    ["variation.slow_ranks=[0, 5]", "variation.degraded_links=[3, 9]", "cluster.collective_algorithm='ring'"],
]


@pytest.mark.parametrize("variation", CLASS_VARIANTS, ids=["straggler", "degraded", "both-flat-ring"])
def test_rank_classes_agree_with_every_rank(variation):
    """Stragglers and degraded links: one rank per class gives what simulating all 16 gives."""
    s = load_scenario(LLAMA, ["cluster.nodes=2", "training.reduce_bucket_MiB=200", *variation])
    for stage in range(4):
        classes, every_rank = simulate(s, stage), simulate(s, stage, mode="per_rank")
        assert classes.mode == "classes" and classes.ranks_simulated < 16
        assert _as_comparable(classes) == _as_comparable(every_rank)


@pytest.mark.parametrize("variation", [[], ["variation.degraded_links=[1]"]],
                         ids=["uniform", "degraded"])
def test_a_group_of_one_completes_in_the_same_order_whatever_the_mode(variation):
    """Review I4: with training.shard_group = 1 ZeRO-3's gathers have nothing to move. One
    simulated rank finished them before what was due at that instant, every rank after it, so the
    two orders of allocations gave peaks of 3,188,480 and 3,254,528 bytes."""
    s = load_scenario(TINY, ["training.shard_group=1", *variation])
    one, every_rank = simulate(s, 3), simulate(s, 3, mode="per_rank")
    assert one.ranks_simulated == 1 and every_rank.ranks_simulated == 4
    assert _as_comparable(one) == _as_comparable(every_rank)
    assert one.ranks[0].state.memory.samples == every_rank.ranks[0].state.memory.samples


def test_jitter_simulates_every_rank():
    s = load_scenario(TINY, ["variation.jitter_pct=5"])
    assert simulate(s, 0).mode == "per_rank" and simulate(s, 0).ranks_simulated == 4


def test_prefetch_hides_zero_3_gathers():
    times = [simulate(load_scenario(LLAMA, [f"training.prefetch_layers={p}"]), 3).exposed_comm_s
             for p in (0, 1)]
    assert times[1] < times[0]


def test_same_seed_same_bytes_other_seed_other_result(tmp_path):
    argv = ["simulate", TINY, "--json", "--set", "variation.jitter_pct=20"]
    first, again = run_zerosim(*argv, "--set", "variation.seed=7"), run_zerosim(*argv, "--set", "variation.seed=7")
    other = run_zerosim(*argv, "--set", "variation.seed=8")
    assert first.code == 0, first.stderr
    assert first.stdout == again.stdout
    assert first.json[0]["step_time_s"] != other.json[0]["step_time_s"]


def test_simulate_json_and_trace(tmp_path):
    trace_path = tmp_path / "trace.json"
    result = run_zerosim("simulate", TINY, "--json", "--trace", trace_path)
    assert result.code == 0, result.stderr
    rows = result.json
    assert [row["stage"] for row in rows] == [0, 1, 2, 3]
    for row in rows:
        assert {"stage", "step_time_s", "compute_s", "exposed_comm_s", "comm_bytes_per_rank",
                "peak_bytes"} <= set(row)
    trace = json.loads(trace_path.read_text())
    events = trace["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    zero3_rank0 = 3 * 1_000_000
    assert {(zero3_rank0, lane) for lane in ("compute", "comm", "gather", "reduce")} <= names
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"compute", "comm"}
    assert {e["args"]["op"] for e in spans if e["pid"] == zero3_rank0 and e["cat"] == "comm"} == {
        "all_gather", "reduce_scatter"}
    counters = [e for e in events if e["ph"] == "C" and e["pid"] == zero3_rank0]
    assert max(sum(e["args"].values()) for e in counters) == rows[3]["peak_bytes"]
    assert all(e["dur"] >= 0 for e in spans)


def test_one_stage_table_marks_nothing_else():
    result = run_zerosim("simulate", ZERO_PAPER, "--stage", "3")
    assert result.code == 0, result.stderr
    body = result.stdout.splitlines()
    assert any(line.startswith("3 ZeRO-3*") for line in body)
    assert not any(line.startswith(("0 DDP", "1 ZeRO-1", "2 ZeRO-2")) for line in body)


@pytest.mark.parametrize("argv, fragment", [
    (["--set", "training.seq_len=0"], "training.seq_len"),
    (["--stage", "4"], "--stage"),
    (["--set", "variation.slow_ranks=[64]"], "rank 64"),
    (["--set", "variation.slowdown=0.5"], "variation.slowdown"),
    (["--set", "variation.link_bandwidth_factor=2"], "link_bandwidth_factor"),
    (["--set", "cluster.compute_efficiency=1.5"], "compute_efficiency"),
    (["--trace", "/no/such/dir/t.json"], "/no/such/dir/t.json"),
    (["--mode", "symmetric", "--set", "variation.jitter_pct=1"], "--mode symmetric"),
    (["--set", "training.reduce_bucket_MiB=1e-6"], "gradient buckets"),
    (["--set", "model.layers=100000", "--stage", "3"], "model.layers"),
])
def test_simulate_bad_input(argv, fragment):
    assert_one_line_error(run_zerosim("simulate", ZERO_PAPER, *argv), fragment)


def test_bare_model_without_sequence_length_is_refused(write):
    path = write("bare.toml", "[model]\nparams = 1e9\n")
    assert_one_line_error(run_zerosim("simulate", path), "training.seq_len")


def test_zero_3_gathers_and_reduce_scatters_share_the_links():
    """Backward prefetch all-gathers overlap the previous layer's reduce-scatter; sharing the
    link, each takes longer than it would alone (collective closed form)."""
    from zerosim.sim.collective_bench import simulate_collective

    s = load_scenario(LLAMA, ["cluster.nodes=1", "training.prefetch_layers=2"])
    events = simulate(s, 3).ranks[0].state.events
    comm = [e for e in events if e["stream"] == "comm" and e["phase"] == "backward"]
    gathers = [e for e in comm if e["op"] == "all_gather"]
    scatters = [e for e in comm if e["op"] == "reduce_scatter"]
    shared = [(g, r) for g in gathers for r in scatters
              if g["start_s"] < r["end_s"] and r["start_s"] < g["end_s"]]
    assert shared
    gather, _ = shared[0]
    alone_s = simulate_collective(s, "all_gather", gather["bytes"])["time_s"]
    assert gather["end_s"] - gather["start_s"] > alone_s * 1.01


def test_tied_matrix_is_reduce_scattered_once_in_zero_3():
    s = load_scenario(TINY)  # tied embeddings: the head re-gathers the matrix, but sends it once
    stage1, stage3 = simulate(s, 1), simulate(s, 3)
    assert stage3.comm_bytes_per_rank["reduce_scatter"] == stage1.comm_bytes_per_rank["reduce_scatter"]
    assert stage3.comm_bytes_per_rank["all_gather"] > 2 * stage1.comm_bytes_per_rank["all_gather"]


def test_one_rank_has_no_communication():
    s = load_scenario(TINY, ["cluster.gpus_per_node=1"])
    for stage in range(4):
        result = simulate(s, stage)
        assert result.comm_bytes_per_rank == {} or set(result.comm_bytes_per_rank.values()) == {0}
        assert result.step_time_s == result.compute_s


# ---- training.overlap_comm ----------------------------------------------------------------------
# The tiny model (118,528 fp32 parameters) on 4 ranks with integer-friendly costs: a ring step
# takes 1 s of latency plus its chunk at 1 byte/s, compute 1 s per FLOP, the optimizer 1 s per
# byte of HBM traffic. A reduce-scatter or all-gather of S bytes is then 3 (1 + S/4) s and an
# all-reduce twice that (collectives/ring.py's closed form).
ONE_PER_SECOND = ["cluster.intra_node_latency_us=1e6", "cluster.intra_node_bandwidth_GBps=1e-9",
                  "cluster.peak_tflops=1e-12", "cluster.compute_efficiency=1",
                  "cluster.hbm_bandwidth_GBps=1e-9"]
GRAD_BYTES = 4 * 118_528  # 474,112: 7 buckets of 64 KiB and one of 15,360 bytes
UNIT_BYTES = [4 * 18_432, 4 * 49_984, 4 * 49_984, 4 * 16_512]  # embedding, 2 blocks, LN + tied head
RING_STEPS_AND_BYTES = {  # every collective of a step: ring steps (1 s each), bytes per link
    0: (8 * 6, 1.5 * GRAD_BYTES),  # 8 gradient buckets all-reduced
    1: (8 * 3 + 3, 1.5 * GRAD_BYTES),  # reduce-scattered, then one 25 MiB chunk all-gathers
    2: (8 * 3 + 3, 1.5 * GRAD_BYTES),  # the parameters
    # each unit gathered for forward and again for backward, a collective per flat buffer as
    # zero_real keeps them (Framework.gather_buffers: the token and position matrices apart,
    # the head's LayerNorm and the tied matrix again apart): 6 and 6; each buffer's gradient
    # reduce-scattered once (the tied head sends only its final LayerNorm's 512 bytes): 5
    3: (12 * 3 + 5 * 3, 0.75 * (2 * sum(UNIT_BYTES) + GRAD_BYTES)),
}


def serial_comm_s(stage: int, link_factor: float = 1.0) -> float:
    """Every collective of a step, one after the other, each step paced by a link at
    `link_factor` of 1 byte/s."""
    steps, wire_bytes = RING_STEPS_AND_BYTES[stage]
    return steps * 1.0 + wire_bytes / link_factor


def tiny_one_per_second(stage: int, *overrides: str):
    return simulate(load_scenario(TINY, [*ONE_PER_SECOND, *overrides]), stage)


@pytest.fixture(scope="module")
def overlap():
    """{overlap_comm: {stage: result}} on the integer-friendly tiny cluster."""
    return {on: {stage: tiny_one_per_second(stage, f"training.overlap_comm={str(on).lower()}")
                 for stage in range(4)} for on in (False, True)}


def _ring_s(event):
    walks = 2 if event["op"] == "all_reduce" else 1
    return walks * 3 * (1 + event["bytes"] / 4)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_without_overlap_the_step_is_compute_then_every_collective_in_turn(overlap, stage):
    """overlap_comm = false: every collective completes before compute goes on, so nothing runs
    at once, each collective takes its uncontended closed form, and the exposed communication is
    the sum of them all."""
    result = overlap[False][stage]
    events = sorted(result.ranks[0].state.events, key=lambda e: (e["start_s"], e["end_s"]))
    for before, after in zip(events, events[1:]):
        assert after["start_s"] >= before["end_s"], (before, after)
    comm = [e for e in events if e["stream"] == "comm"]
    for e in comm:
        assert e["end_s"] - e["start_s"] == pytest.approx(_ring_s(e), rel=1e-12)
    assert result.exposed_comm_s == pytest.approx(serial_comm_s(stage), rel=1e-12)
    assert result.step_time_s == pytest.approx(result.compute_s + serial_comm_s(stage), rel=1e-12)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_overlap_hides_communication_behind_compute(overlap, stage):
    off, on = overlap[False][stage], overlap[True][stage]
    assert on.compute_s == off.compute_s and on.comm_bytes_per_rank == off.comm_bytes_per_rank
    assert on.step_time_s < off.step_time_s
    assert on.exposed_comm_s < serial_comm_s(stage)
    events = on.ranks[0].state.events
    compute = [e for e in events if e["stream"] == "compute" and e["end_s"] > e["start_s"]]
    assert any(c["start_s"] < e["end_s"] and e["start_s"] < c["end_s"]
               for e in events if e["stream"] == "comm" for c in compute)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_straggler_gates_every_collective(overlap, stage):
    """Rank 1 computes 1.5x slower; without overlap every collective waits for it, so the step is
    1.5x the compute plus every collective, and rank 1 is the slowest."""
    result = tiny_one_per_second(stage, "training.overlap_comm=false", "variation.slow_ranks=[1]",
                                 "variation.slowdown=1.5")
    assert result.mode == "classes" and result.ranks_simulated == 2 and result.slowest_rank == 1
    base_compute_s = overlap[False][stage].compute_s
    assert result.compute_s == pytest.approx(1.5 * base_compute_s, rel=1e-12)
    assert result.step_time_s == pytest.approx(1.5 * base_compute_s + serial_comm_s(stage),
                                               rel=1e-12)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_degraded_link_paces_every_collective(overlap, stage):
    """Rank 2's link at half bandwidth: each ring step moves its chunk at 0.5 byte/s (latency
    unchanged), so every collective's bytes take twice as long; compute is untouched."""
    result = tiny_one_per_second(stage, "training.overlap_comm=false",
                                 "variation.degraded_links=[2]", "variation.link_bandwidth_factor=0.5")
    assert result.mode == "classes"
    assert result.compute_s == overlap[False][stage].compute_s
    assert result.exposed_comm_s == pytest.approx(serial_comm_s(stage, 0.5), rel=1e-12)


def test_post_step_all_gather_is_fully_exposed_in_zero_1():
    """Nothing computes after the optimizer step, so ZeRO-1's parameter all-gather chunks run
    back to back after it and end the step (overlap on; the integer-friendly cluster above)."""
    result = tiny_one_per_second(1, "training.allgather_bucket_MiB=0.1")
    events = result.ranks[0].state.events
    chunks = [e for e in events if e["phase"] == "step" and e["op"]]
    # 0.1 MiB = 104,857.6 bytes, rounded: 4 chunks of 104,858 and the rest of the fp32 parameters
    assert [e["bytes"] for e in chunks] == [104_858] * 4 + [GRAD_BYTES - 4 * 104_858]
    optimizer_end_s = max(e["end_s"] for e in events if e["name"] == "optimizer")
    assert chunks[0]["start_s"] == optimizer_end_s
    # 5 all-gathers of 3 ring steps: 5 x 3 x 1 s + 3/4 of the bytes at 1 byte/s
    assert result.step_time_s - optimizer_end_s == 5 * 3 + 0.75 * GRAD_BYTES


@pytest.mark.parametrize("scenario, argv", [
    ("family_zero_offload_10b_v100.toml", []),  # offload at stages 1-3: a KeyError before
    ("family_zero_offload_10b_v100.toml", ["--stage", "2", "--set", "training.delayed_update=true"]),
    ("llama2_7b_64gpu.toml", ["--stage", "3", "--set", "parallelism.shard_group=8"]),
])
def test_the_trace_has_a_named_lane_for_every_stream_of_the_family(tmp_path, scenario, argv):
    out = tmp_path / "t.json"
    done = run_zerosim("simulate", str(SCENARIOS / scenario), *argv, "--trace", str(out))
    assert done.code == 0, done.stderr
    trace = json.loads(out.read_text(encoding="utf-8"))
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(trace["stepEvents"])
    assert [lanes[e["pid"], e["tid"]] for e in spans] == [e["queue"] for e in trace["stepEvents"]]
    assert {"replica", "host"} & {e["queue"] for e in trace["stepEvents"]}  # a family stream ran
