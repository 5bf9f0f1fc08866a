"""The engine's shortcuts change no number. At granularity "collective" (the default: the batched
executor, sim/executor.py) a collective alone on its links takes its closed form's time, and no
event is made where one would only resume the process waiting for it, so a run of queued
collectives costs none (sim/clock.py); at "phase" (the reference executor) every phase and every
wait is its own event. Both give the same step, bytes, memory, event log and trace, to the last
bit, for every stage, mode and compute model below."""

import json

import pytest

from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import Engine, simulate
from zerosim.sim.executor import Executor
from zerosim.sim.trace import chrome_trace

from tests.conftest import SCENARIOS, ZERO_PAPER

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
ONE_PER_SECOND = ["cluster.intra_node_latency_us=1e6", "cluster.intra_node_bandwidth_GBps=1e-9",
                  "cluster.peak_tflops=1e-12", "cluster.compute_efficiency=1",
                  "cluster.hbm_bandwidth_GBps=1e-9"]  # integer times: many events at one instant
L16 = ["cluster.nodes=2", "training.reduce_bucket_MiB=200"]

CASES = {
    "paper, NCCL tree and ring": (ZERO_PAPER, [], "auto"),
    "paper, gradient accumulation": (ZERO_PAPER, ["training.gradient_accumulation=2"], "auto"),
    "llama, SMs shared with NCCL (op)": (LLAMA, ["cluster.compute_model='op'", *L16], "auto"),
    "llama, no overlap": (LLAMA, ["training.overlap_comm=false", *L16], "auto"),
    "llama, straggler and degraded link": (
        LLAMA, [*L16, "variation.slow_ranks=[5]", "variation.degraded_links=[9]"], "auto"),
    "tiny, every rank": (TINY, [], "per_rank"),
    "tiny, jitter": (TINY, ["variation.jitter_pct=20"], "auto"),
    "tiny, integer times": (TINY, ONE_PER_SECOND, "auto"),
    "tiny, integer times, no overlap": (TINY, [*ONE_PER_SECOND, "training.overlap_comm=false"],
                                        "auto"),
    "tiny, stage 2 waits for buckets": (
        TINY, ["training.reduce_bucket_MiB=0.01", "cluster.intra_node_bandwidth_GBps=1e-3"],
        "auto"),
    "tiny, gloo's flat ring over 2 nodes": (
        TINY, ["cluster.nodes=2", "cluster.gpus_per_node=2", "cluster.collective_algorithm='ring'",
               "cluster.inter_node_latency_us=50"], "auto"),
    "tiny, TP 2 x DP 2, sequence parallel": (
        TINY, ["parallelism.tensor_parallel=2", "parallelism.sequence_parallel=true"], "auto"),
    "tiny, TP 4 across nodes of 2, gloo's flat ring": (
        TINY, ["parallelism.tensor_parallel=4", "cluster.nodes=4", "cluster.gpus_per_node=2",
               "cluster.collective_algorithm='ring'", "cluster.inter_node_latency_us=50"], "auto"),
    "llama, TP 4 overlapped, gradient accumulation": (
        LLAMA, ["parallelism.tensor_parallel=4", "parallelism.sequence_parallel=true",
                "parallelism.tp_comm_overlap=true", "training.gradient_accumulation=2", *L16],
        "auto"),
}


def _everything(results) -> dict:
    """Every number a step yields, and its trace, as text (floats to the last bit)."""
    ranks = [[ctx.state.events, ctx.state.memory.samples, ctx.state.memory.marks,
              ctx.state.memory.allocator.peak_reserved_bytes, ctx.state.comm_s,
              ctx.state.compute_s, ctx.state.end_s, dict(ctx.state.comm_bytes)]
             for result in results for ctx in result.ranks]
    return {"results": json.dumps([r.as_dict() for r in results]),
            "ranks": json.dumps(ranks), "trace": json.dumps(chrome_trace(results))}


@pytest.mark.parametrize("case", CASES)
def test_collective_granularity_gives_what_every_event_gives(case):
    path, overrides, mode = CASES[case]
    s = load_scenario(path, overrides)
    fast, reference = ([simulate(s, stage, mode=mode, granularity=granularity) for stage in range(4)]
                       for granularity in ("collective", "phase"))
    assert [r.step_time_s for r in fast] == [r.step_time_s for r in reference]
    assert _everything(fast) == _everything(reference)


def test_closed_forms_serve_the_single_stream_stages():
    """Stages 0-2 queue every collective on one stream, so each has the links to itself; ZeRO-3
    gathers and reduce-scatters at once on shared links, event by event."""
    s = load_scenario(ZERO_PAPER)
    assert [Engine(s, stage).executor for stage in range(4)] == [Executor.BATCHED] * 4
    assert [Engine(s, stage).closed_form for stage in range(4)] == [True, True, True, False]
    assert Engine(s, 0, granularity="phase").executor is Executor.PHASE
    assert not Engine(s, 0, granularity="phase").closed_form
    with pytest.raises(ValueError, match="granularity"):
        Engine(s, 0, granularity="chunk")


def test_a_run_of_queued_collectives_needs_no_events():
    """ZeRO-1's parameter all-gathers queue after the optimizer step and run back to back while
    nothing else happens: the clock moves from one's end to the next's without an event, so
    cutting them 25 times finer adds ~13,700 collectives and not one event. Event by event, each
    costs several."""
    def engine(allgather_mib: int, granularity: str = "collective") -> Engine:
        s = load_scenario(ZERO_PAPER, [f"training.allgather_bucket_MiB={allgather_mib}"])
        return Engine(s, 1, keep_events=False, granularity=granularity)

    coarse, fine = engine(25), engine(1)
    coarse_events, fine_events = _count_events(coarse), _count_events(fine)
    assert fine.moved - coarse.moved > 13_000
    assert fine_events == coarse_events
    coarse, fine = engine(25, "phase"), engine(1, "phase")
    assert _count_events(fine) - _count_events(coarse) > 3 * (fine.moved - coarse.moved)


def _count_events(engine: Engine) -> int:
    """Run the engine's step, counting the events its clock processes."""
    env, count = engine.env, [0]
    step = env.step

    def counted_step() -> None:
        count[0] += 1
        step()

    env.step = counted_step
    env.run = lambda: _run_by_steps(env)
    engine.run()
    return count[0]


def _run_by_steps(env) -> None:
    while env.peek() < float("inf"):
        env.step()
