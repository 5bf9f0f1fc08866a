"""The simulated training step: bytes on the wire from the ZeRO paper (§7: DDP and ZeRO-1/2 move
2Ψ per step, ZeRO-3 3Ψ), memory that passes through the analytic model's steady points, the two
simulation modes agreeing, and variation slowing the step."""

import json

import pytest

from zerosim.sim.engine import simulate
from zerosim.scenario.load import load_scenario
from zerosim.memory import stage_memory, steady_points
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


def test_jitter_simulates_every_rank():
    s = load_scenario(TINY, ["variation.jitter_pct=5"])
    assert simulate(s, 0).mode == "per_rank" and simulate(s, 0).ranks_simulated == 4


def test_a_straggler_slows_every_stage():
    uniform = load_scenario(LLAMA, ["cluster.nodes=2", "training.reduce_bucket_MiB=200"])
    slow = load_scenario(LLAMA, ["cluster.nodes=2", "training.reduce_bucket_MiB=200",
                                 "variation.slow_ranks=[5]", "variation.slowdown=1.2"])
    for stage in range(4):
        base, straggling = simulate(uniform, stage, keep_events=False), simulate(slow, stage, keep_events=False)
        assert straggling.mode == "classes" and straggling.ranks_simulated == 2
        assert straggling.step_time_s > base.step_time_s
        assert straggling.slowest_rank == 5


def test_a_degraded_link_exposes_more_communication():
    uniform = load_scenario(LLAMA, ["cluster.nodes=2"])
    degraded = load_scenario(LLAMA, ["cluster.nodes=2", "variation.degraded_links=[9]",
                                     "variation.link_bandwidth_factor=0.05"])
    for stage in range(4):
        assert (simulate(degraded, stage, keep_events=False).exposed_comm_s
                > simulate(uniform, stage, keep_events=False).exposed_comm_s)


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
    (["--set", "cluster.nodes=128", "--set", "variation.jitter_pct=1"], "limited to"),
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


def test_post_step_all_gather_is_fully_exposed_in_zero_1():
    """Nothing computes after the optimizer step, so ZeRO-1's parameter all-gather chunks, back
    to back, are exposed: at least their closed-form time (collective, uncontended)."""
    from zerosim.sim.collective_bench import simulate_collective

    s = load_scenario(TINY, ["training.allgather_bucket_MiB=0.1"])
    result = simulate(s, 1)
    chunks = [e["bytes"] for e in result.ranks[0].state.events if e["phase"] == "step" and e["op"]]
    assert sum(chunks) == 4 * 118_528  # fp32 parameters
    alone_s = sum(simulate_collective(s, "all_gather", size)["time_s"] for size in chunks)
    assert result.exposed_comm_s >= alone_s


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
