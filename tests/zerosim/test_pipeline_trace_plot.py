"""A pipelined step's trace (sim/trace.py) and its timeline figure (tradeoffs/plots.py,
pipeline_figure), counted by hand: at p = 4, m = 8 each pipeline stage runs m forwards and m
backwards under 1F1B (m v of each under the interleaved schedule, v = 2); the first stage sends
no gradient back and the last no activation forward (Narayanan et al. 2021, §2.2: activations go
to stage i + 1, gradients to stage i - 1), so under 1F1B stages 0 and 3 send 8 and the middle
ones 16; interleaved, only stage 0's chunk 0 has no one to send gradients to and stage 3's chunk
1 no one to send activations to (the other chunks' neighbours wrap around the ring: Megatron's
virtual stage c p + i), so stages 0 and 3 send 32 - 8 = 24 and the middle ones 32.
"""

import json
import re

import pytest

from tests.conftest import run_zerosim
from tests.zerosim.test_pipeline_report import BASE, INTERLEAVED
from zerosim.errors import InputError
from zerosim.scenario.load import load_scenario
from zerosim.sim.engine import simulate
from zerosim.sim.trace import chrome_trace
from zerosim.tradeoffs import plot_inputs, plots

P, M = 4, 8
NAMES_1F1B = sorted([f"F{j}" for j in range(M)] + [f"B{j}" for j in range(M)])
NAMES_INTERLEAVED = sorted(f"{kind}{j}.c{c}" for kind in "FB" for j in range(M) for c in (0, 1))


def traced(write, *extra: str, stage: int = 1):
    scenario = load_scenario(write("pp.toml", BASE), list(extra))
    result = simulate(scenario, stage, keep_events=True)
    return result, json.loads(json.dumps(chrome_trace([result], scenario=scenario)))


def processes(trace) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "process_name"}


def lanes(trace, pid) -> dict[int, str]:
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}


def on_lane(trace, pid, lane) -> list[str]:
    tid = next(t for t, name in lanes(trace, pid).items() if name == lane)
    return [e["name"] for e in trace["traceEvents"]
            if e["ph"] == "X" and e["pid"] == pid and e["tid"] == tid]


@pytest.mark.parametrize("extra, names, sends", [
    ((), NAMES_1F1B, [8, 16, 16, 8]), (INTERLEAVED, NAMES_INTERLEAVED, [24, 32, 32, 24])])
def test_a_process_per_pipeline_stage_with_its_passes_sends_and_memory(write, extra, names,
                                                                       sends):
    _, trace = traced(write, *extra)
    procs = processes(trace)
    assert sorted(procs.values()) == [f"ZeRO-1 pipeline stage {i}" for i in range(P)]
    for i, pid in enumerate(sorted(procs)):
        assert sorted(lanes(trace, pid).values()) == ["comm", "compute", "p2p send"]
        passes = [n for n in on_lane(trace, pid, "compute") if n != "optimizer"]
        assert sorted(passes) == names  # each micro-batch (and chunk) once forward, once back
        sent = on_lane(trace, pid, "p2p send")
        assert len(sent) == sends[i]
        assert all(n.startswith("send F") or n.startswith("send B") for n in sent)
        counters = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["pid"] == pid]
        assert counters and counters[0]["ts"] == 0.0
        assert all(set(c["args"]) == {"held"} for c in counters)
    assert not trace["stepEvents"]  # no rank contexts: the pipeline's records are its own


def test_1f1b_sends_activations_forward_and_gradients_back(write):
    _, trace = traced(write)
    pids = sorted(processes(trace))
    first, last = on_lane(trace, pids[0], "p2p send"), on_lane(trace, pids[-1], "p2p send")
    assert sorted(first) == sorted(f"send F{j}" for j in range(M))
    assert sorted(last) == sorted(f"send B{j}" for j in range(M))
    assert trace["pipeline"] == {"pipeline_parallel": 4, "model": "GPT 8L", "tensor_parallel": 1,
                                 "data_parallel": 4, "schedule": "1f1b", "micro_batches": 8,
                                 "virtual_stages": 1}  # d = 16 / (1 x 4)


def test_a_trace_without_a_pipeline_keeps_its_keys(write):
    path = write("pp.toml", BASE.replace("pipeline_parallel = 4", "pipeline_parallel = 1")
                 .replace('pipeline_schedule = "1f1b"', ""))
    scenario = load_scenario(path)
    trace = chrome_trace([simulate(scenario, 1, keep_events=True)], scenario=scenario)
    assert set(trace) == {"traceEvents", "displayTimeUnit", "stepEvents", "memorySamples",
                          "scenario"}
    # GPT 8L by hand: embeddings v h + s h = 32768 x 1024 + 2048 x 1024, 8 blocks of 12 h^2 + 13 h
    # (Narayanan et al. 2021's count, biases and two layer norms), the final norm's 2 h
    params = 32768 * 1024 + 2048 * 1024 + 8 * (12 * 1024**2 + 13 * 1024) + 2 * 1024
    assert trace["scenario"] == {"model": "GPT 8L", "params": params, "gpu": "A100-80GB",
                                 "gpu_memory_bytes": 80 * 2**30, "nodes": 2,
                                 "gpus_per_node": 8}  # the A100's 80 GB are 80 GiB


@pytest.mark.parametrize("extra, per_row, title", [
    ((), M, "GPT 8L, 2 x 8 A100-80GB, ZeRO-1: t=1, p=4, d=4, 1f1b, m=8; one step "),
    (INTERLEAVED, 2 * M,
     "GPT 8L, 2 x 8 A100-80GB, ZeRO-1: t=1, p=4, d=4, interleaved_1f1b, v=2, m=8; one step ")])
def test_the_timeline_is_the_pipeline_diagram(write, extra, per_row, title):
    result, trace = traced(write, *extra)
    fig = plots.timeline_figure(plot_inputs_checked(write, trace))
    bars = {d.name: d for d in fig.data if d.type == "bar"}
    for kind in ("forward", "backward"):
        rows = list(bars[kind].y)
        assert sorted(set(rows)) == [f"stage {i}" for i in range(P)]
        assert all(rows.count(f"stage {i}") == per_row for i in range(P))  # 2m bars a row in all
        assert sorted(map(int, bars[kind].text)) == sorted(list(range(M)) * (per_row // M) * P)
    assert bars["forward"].marker.color != bars["backward"].marker.color
    assert bars["p2p"].width < bars["forward"].width  # sends: thin bars beside the passes
    memory = [d for d in fig.data if d.type == "scatter"]
    assert [d.name for d in memory] == [f"stage {i}" for i in range(P)]
    assert all(d.xaxis == "x2" for d in memory)  # under the diagram, on the shared time axis
    assert fig.layout.title.text == f"{title}{result.step_time_s * 1e3:.4g} ms"


def plot_inputs_checked(write, trace):
    """The trace as `zerosim plot` reads it (read_trace's checks)."""
    return plot_inputs.read_trace(write("t.json", json.dumps(trace)))


def test_plot_command_draws_a_pipelined_trace(write, tmp_path):
    path = write("pp.toml", BASE)
    trace, out = tmp_path / "t.json", tmp_path / "t.html"
    assert run_zerosim("simulate", path, "--stage", "1", "--trace", trace).code == 0
    result = run_zerosim("plot", trace, "--kind", "timeline", "-o", out)
    assert result.code == 0, result.stderr
    assert '"name":"forward"' in out.read_text()
    bad = run_zerosim("plot", trace, "--kind", "timeline", "--stage", "3", "-o", out)
    assert bad.code == 2 and "stage 3 is not in the trace (it holds stage 1)" in bad.stderr


def test_a_trace_from_before_its_scenario_still_draws(write):
    _, trace = traced(write)
    del trace["scenario"]  # as zerosim wrote traces before: the layout still names the model
    title = plots.timeline_figure(plot_inputs_checked(write, trace)).layout.title.text
    assert title.startswith("GPT 8L, ZeRO-1: t=1, p=4")


@pytest.mark.parametrize("key, value, says", [
    ("model", 7, "scenario.model is 7, not text"),
    ("gpu_memory_bytes", -1, "scenario.gpu_memory_bytes is -1, not a whole number >= 0"),
    ("nodes", None, "scenario.nodes is null, not a whole number >= 0")])
def test_a_broken_scenario_in_a_trace_is_one_line(write, key, value, says):
    _, trace = traced(write)
    trace["scenario"][key] = value
    with pytest.raises(InputError, match=re.escape(says)):
        plot_inputs_checked(write, trace)


def test_a_broken_pipelined_trace_is_one_line(write):
    _, trace = traced(write)
    trace["pipelineEvents"][5]["end_s"] = -1.0
    with pytest.raises(InputError, match=r"pipelineEvents\[5\] needs a stage 0-3, a "
                                         r"pipeline_stage >= 0 and numbers start_s <= end_s"):
        plot_inputs_checked(write, trace)
    _, trace = traced(write)
    trace["pipelineMemory"][0]["bytes"] = "many"
    with pytest.raises(InputError, match=r"pipelineMemory\[0\] needs .* numbers t_s and bytes"):
        plot_inputs_checked(write, trace)
