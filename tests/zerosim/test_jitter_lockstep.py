"""Per-rank mode in lockstep (the lockstep executor: sim/lockstep/strands.py, replay.py) gives what
simulating every rank event by event gives (the reference executor, granularity "phase": every
rank's own processes, every rank's links, every phase and wait an event), to the last bit:
results, every rank's times and memory, event logs and traces, with jitter, stragglers, degraded
links, SMs shared with NCCL, ties at one instant (integer times), and ranks whose memory
operations fall in different orders."""

import json

import numpy as np
import pytest

from tests.conftest import SCENARIOS, ZERO_PAPER
from zerosim.contract import COMPUTE
from zerosim.scenario.load import load_scenario
from zerosim.sim.lockstep import replay as per_rank
from zerosim.sim.engine import Engine, simulate
from zerosim.sim.executor import Executor
from zerosim.sim.lockstep.strands import MemoryLog, Strand
from zerosim.sim.lockstep.replay import memory_groups
from zerosim.sim.trace import chrome_trace

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
ONE_PER_SECOND = ["cluster.intra_node_latency_us=1e6", "cluster.intra_node_bandwidth_GBps=1e-9",
                  "cluster.peak_tflops=1e-12", "cluster.compute_efficiency=1",
                  "cluster.hbm_bandwidth_GBps=1e-9"]  # integer times: many events at one instant
J5 = ["variation.jitter_pct=5"]
FLAT = ["cluster.compute_model='flat'"]

CASES = {
    "paper, 16 ranks": (ZERO_PAPER, [*J5, "cluster.nodes=2"], "auto"),
    "paper, stragglers and a degraded link": (ZERO_PAPER, [
        "variation.jitter_pct=10", "variation.seed=3", "cluster.nodes=2",
        "variation.slow_ranks=[2, 11]", "variation.degraded_links=[9]"], "auto"),
    "llama, SMs shared with NCCL (op)": (LLAMA, [*J5, "cluster.nodes=2",
                                                  "training.reduce_bucket_MiB=100"], "auto"),
    "llama, FSDP2 keeps gathered parameters": (
        LLAMA, [*J5, *FLAT, "cluster.nodes=1", "training.framework='fsdp2'"], "auto"),
    "llama, memory in many orders": (LLAMA, ["variation.jitter_pct=20", *FLAT, "cluster.nodes=2",
                                              "training.reduce_bucket_MiB=50"], "auto"),
    "tiny, integer times, every rank": (TINY, ONE_PER_SECOND, "per_rank"),
    "tiny, integer times, jitter, no overlap": (
        TINY, [*ONE_PER_SECOND, "variation.jitter_pct=10", "training.overlap_comm=false"], "auto"),
    "tiny, collectives of two streams ending at one instant": (
        TINY, [*J5, "cluster.nodes=2", "training.prefetch_layers=0"], "auto"),
    "tiny, gradient accumulation and deep prefetch": (
        TINY, [*J5, "cluster.nodes=2", "training.gradient_accumulation=2",
               "training.prefetch_layers=3"], "auto"),
    "tiny, stage 2 waits for buckets": (
        TINY, ["variation.jitter_pct=20", "training.reduce_bucket_MiB=0.01",
               "cluster.intra_node_bandwidth_GBps=1e-3"], "auto"),
    "tiny, gloo's flat ring over 2 nodes, a degraded link": (
        TINY, ["variation.jitter_pct=20", "cluster.nodes=2", "cluster.gpus_per_node=2",
               "cluster.collective_algorithm='ring'", "cluster.inter_node_latency_us=50",
               "variation.degraded_links=[1]"], "auto"),
    "tiny, TP 2 x DP 4, a straggler": (
        TINY, [*J5, "cluster.nodes=2", "parallelism.tensor_parallel=2",
               "variation.slow_ranks=[3]"], "auto"),
    "llama, TP 2 with sequence parallelism, SMs shared with NCCL (op)": (
        LLAMA, [*J5, "cluster.nodes=1", "parallelism.tensor_parallel=2",
                "parallelism.sequence_parallel=true", "training.reduce_bucket_MiB=100"], "auto"),
}


def _everything(results) -> str:
    """Every number of the steps, every rank's, and the trace, as text (floats to the last bit)."""
    ranks = [[ctx.rank, ctx.state.events, ctx.state.memory.samples, ctx.state.memory.marks,
              ctx.state.memory.peak_bytes, ctx.state.memory.allocator.peak_allocated_bytes,
              ctx.state.memory.allocator.peak_reserved_bytes, ctx.state.comm_s,
              ctx.state.compute_s, ctx.state.end_s, dict(ctx.state.comm_bytes)]
             for result in results for ctx in result.ranks]
    return json.dumps([[r.as_dict() for r in results], ranks, chrome_trace(results)])


@pytest.mark.parametrize("keep_events", [True, False], ids=["event log", "no event log"])
@pytest.mark.parametrize("case", CASES)
def test_lockstep_gives_what_every_rank_event_by_event_gives(case, keep_events):
    path, overrides, mode = CASES[case]
    s = load_scenario(path, overrides)
    assert all(Engine(s, stage, mode).executor is Executor.LOCKSTEP for stage in range(4))
    fast, reference = ([simulate(s, stage, mode=mode, keep_events=keep_events,
                                 granularity=granularity) for stage in range(4)]
                       for granularity in ("collective", "phase"))
    assert [r.mode for r in fast] == ["per_rank"] * 4
    assert _everything(fast) == _everything(reference)


def _replayed(monkeypatch, s, stages) -> list[list[int]]:
    """The ranks replayed event by event in each stage's step."""
    replayed, rank = [], per_rank.Replay.rank
    monkeypatch.setattr(per_rank.Replay, "rank",
                        lambda self, r, shape: replayed[-1].append(r) or rank(self, r, shape))
    for stage in stages:
        replayed.append([])
        assert simulate(s, stage, keep_events=False).ranks_simulated == s.world_size
    return replayed


def test_ranks_with_one_memory_history_are_replayed_once(monkeypatch):
    """The ZeRO paper's bare Ψ at 64 ranks: whatever the jitter, every rank's allocations and
    frees fall in one order at stages 0, 1 and 3, so one rank per stage is replayed event by
    event. Stage 2's buckets grow piece by piece while the bucket before is reduced, so the
    reduction's free falls between other pieces on other ranks: replayed apart (as many as
    there are orders, fewer than the ranks)."""
    replayed = _replayed(monkeypatch, load_scenario(ZERO_PAPER, J5), range(4))
    assert [replayed[stage] for stage in (0, 1, 3)] == [[0]] * 3
    assert replayed[2][0] == 0 and 1 < len(replayed[2]) < 64


def test_ranks_whose_memory_operations_fall_in_other_orders_are_replayed_apart(monkeypatch):
    """20% jitter on llama's layers: stage 0 and 1 allocate on the compute stream alone (one
    order); in stage 2 and 3 the streams' frees fall between the compute's operations at other
    places on every rank (what simulating every rank event by event gives them, above)."""
    s = load_scenario(LLAMA, CASES["llama, memory in many orders"][1])
    assert _replayed(monkeypatch, s, range(4)) == [[0], [0], list(range(16)), list(range(16))]


def _log(times: list[list[float]], strands: list[int], anchors: list[list[int]],
         firers: list[int], logged: list[int]) -> MemoryLog:
    log = MemoryLog()
    for t, strand, anchor in zip(times, strands, anchors):
        log.add(Strand(iter(()), np.array(t), np.array(anchor), strand))
    log.firers, log.logged = firers, logged
    return log


def test_memory_orders_group_ranks_and_only_unexplained_ties_split_them():
    """Three ranks, two strands (0 frees a buffer and then fires signal 0, which wakes 1 to
    allocate). Ranks 0 and 1 free, then allocate: rank 1 at the same instant, woken by the
    signal (causality orders them), so the two share one order; rank 2 allocates first."""
    times = [[1.0, 1.0, 2.0], [1.5, 1.0, 1.0]]  # operation 0 by strand 0, operation 1 by strand 1
    anchors = [[-1, -1, -1], [-1, 0, -1]]
    log = _log(times, [0, 1], anchors, firers=[0], logged=[1])
    assert memory_groups(log, 3).tolist() == [0, 0, 2]
    # the same tie with no signal behind it: the event-by-event run decides, apart
    log = _log(times, [0, 1], [[-1, -1, -1], [-1, -1, -1]], firers=[0], logged=[1])
    assert memory_groups(log, 3).tolist() == [0, 1, 2]
    # a signal fired before the operation it would order explains nothing
    log = _log(times, [0, 1], anchors, firers=[0], logged=[0])
    assert memory_groups(log, 3).tolist() == [0, 1, 2]


# Review I8 (a draw of tests/zerosim/test_cross_commands.py): a rank that reached a collective
# before the others waited for them; that wait counted as exposed communication, not as the
# collective's time, so exposed_comm_s exceeded comm_time_s (seed 1, stage 0: 14.5 us > 9.4 us).
I8 = """[model]
layers = 4
hidden = 32
heads = 4
ffn = 128
vocab = 64
max_seq_len = 64
norm = "rmsnorm"
position = "rope"
[cluster]
gpu = "H100-80GB"
gpus_per_node = 2
[training]
precision = "fp32"
seq_len = 64
activation_checkpointing = "full"
prefetch_layers = 0
[variation]
jitter_pct = 5.0
"""


@pytest.mark.parametrize("seed", range(4))
def test_a_rank_waiting_for_the_others_is_communicating(tmp_path, seed):
    """On a rank a collective lasts from its own launch (as NCCL's kernel holds its SMs, and as
    zero_real times it), so what the compute stream waited for is within its collectives' and
    host operations' time, rank by rank; the events say the same."""
    path = tmp_path / "i8.toml"
    path.write_text(I8, encoding="utf-8")
    s = load_scenario(path, [f"variation.seed={seed}"])
    for stage in range(4):
        result = simulate(s, stage)
        assert result.exposed_comm_s <= (result.comm_time_s + result.host_time_s) * (1 + 1e-12)
        for ctx in result.ranks:
            state = ctx.state
            assert state.end_s - state.compute_s <= (state.comm_s + state.host_s) * (1 + 1e-12)
            comm = [e for e in state.events if e["stream"] != COMPUTE]
            assert sum(e["end_s"] - e["start_s"] for e in comm) == pytest.approx(
                state.comm_s + state.host_s, rel=1e-12)


def test_a_compute_sharing_its_sms_learns_of_a_kernels_end_before_the_links_move_past_it(
        tmp_path):
    """Review T1: 25 layers, a prefetch of 2, 64 ranks, jitter 5%, seeds 3 and 5. A compute
    whose SMs NCCL shares waited for the links up to the end it had computed while a kernel's
    end was unknown; that kernel's end, once known, made it end sooner, after the links had
    moved past it, and the collective it then launched started in the past: "a collective
    starts at 0.006079768831191569 s, before 0.006099426033082052 s"."""
    path = tmp_path / "t1.toml"
    path.write_text("[model]\nlayers = 25\nheads = 16\nhidden = 512\nvocab = 256\n"
                    "max_seq_len = 128\n[cluster]\nnodes = 8\n[training]\nprefetch_layers = 2\n",
                    encoding="utf-8")
    for seed in (3, 5):
        s = load_scenario(path, ["variation.jitter_pct=5", f"variation.seed={seed}"])
        assert Engine(s, 3).executor is Executor.LOCKSTEP and Engine(s, 3).sm_share > 0
        fast, reference = (simulate(s, 3, keep_events=False, granularity=granularity)
                           for granularity in ("collective", "phase"))
        assert _everything([fast]) == _everything([reference])


def test_the_trace_of_every_rank_reports_its_progress_rank_by_rank():
    """Building a jittered trace of thousands of ranks takes seconds after the simulation
    (review U2's 1024 ranks: 3.6 s), so chrome_trace counts each rank it has traced."""
    from zerosim.sim.trace import chrome_trace

    s = load_scenario(SCENARIOS / "tiny_gpt_4rank_cpu.toml", ["variation.jitter_pct=5"])
    results = [simulate(s, stage, keep_events=True) for stage in (1, 3)]
    calls = []
    trace = chrome_trace(results, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(done, 8) for done in range(1, 9)]  # 4 ranks in each of 2 stages
    assert len({event["pid"] for event in trace["traceEvents"]}) == 8
