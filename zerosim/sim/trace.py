"""Chrome / Perfetto trace of simulated steps (the JSON "traceEvents" format, which
chrome://tracing and ui.perfetto.dev open), derived from the step-event schema (zerosim.contract).

Each simulated rank of each stage is a process; its compute stream and each communication queue
(tensor parallelism's collectives among them, on the "tp" lane) are threads; its memory is a counter track stacked by category. Times are microseconds.

Under a pipeline (sim/pipeline/), each pipeline stage's representative rank is a process: its
compute lane (each micro-batch's forward and backward, "F3" and "B3", "F3.c1" for chunk 1 of an
interleaved schedule; micro-batches and chunks counted from 0 as the schedule's Op does), its comm
lane (parameter gathers, gradient reductions, the all-gather after the optimizer), its p2p send
lane ("send F3": the activation of F3 going forward, "send B3": its gradient going back), and its
memory (model states + activations held) as a counter. The same events, in seconds, are under
"pipelineEvents" and "pipelineMemory" for zerosim plot, and the layout under "pipeline".
Given the scenario, "scenario" names the model and the cluster for a figure's title (subject).
"""

from __future__ import annotations

from typing import Any

from zerosim.analytic.model import total_params
from zerosim.contract import COMM, COMPUTE, FAMILY_QUEUES, P2P_OPS, PASSES, QUEUES, STAGE_NAMES, \
    MemorySample
from zerosim.sim.groups import TP
from zerosim.sim.network import HOOKS

_LANES = {queue: tid for tid, queue in enumerate(QUEUES + FAMILY_QUEUES + (TP, HOOKS))}
"""A lane per stream: QUEUES named in every trace, FAMILY_QUEUES, tensor parallelism's
collectives (groups.TP) and module hooks' host time (stages/fetch.py) where a rank uses them."""
_PID_STRIDE = 1_000_000  # pid = stage * stride + rank: ranks of one stage stay together
_PIPELINE_LANES = {COMPUTE: 0, COMM: 1, P2P_OPS[0]: 2}
"""A pipeline stage's lanes, as events.StageRun names them (its sends on P2P_OPS[0])."""
_PASS_LETTERS = {PASSES[0]: "F", PASSES[1]: "B"}  # Narayanan et al. 2021's figures' F and B


def memory_samples(ctx) -> list[MemorySample]:
    """The memory part of the step-event schema."""
    return [MemorySample(rank=ctx.rank, t_s=t_s, bytes_by_category=by_category)
            for t_s, by_category in ctx.state.memory.samples]


def chrome_trace(results, progress=None, scenario=None) -> dict[str, Any]:
    """Trace of StageResults (engine.simulate, run with keep_events=True); `progress(done,
    total)` after each rank (thousands of jittered ranks take seconds). `scenario` names the model
    and the cluster under "scenario" (subject), and under a pipeline the layout in the trace's
    "pipeline" (for a figure's title)."""
    trace: list[dict[str, Any]] = []
    step_events: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []  # the schema's memory part, so readers need not parse counters
    total, done = sum(len(result.ranks) for result in results), 0
    for result in results:
        for ctx in result.ranks:
            done += 1
            if progress is not None:
                progress(done, total)
            pid = result.stage * _PID_STRIDE + ctx.rank
            trace.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                          "args": {"name": f"{STAGE_NAMES[result.stage]} rank {ctx.rank}"}})
            used = {event["queue"] for event in ctx.state.events}
            for lane, tid in _LANES.items():
                if lane in QUEUES or lane in used:
                    trace.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                  "args": {"name": lane}})
            for event in ctx.state.events:
                step_events.append({"stage": result.stage, **event})
                trace.append({
                    "ph": "X", "pid": pid, "tid": _LANES[event["queue"]],
                    "name": event["op"] or event["name"], "cat": event["stream"],
                    "ts": event["start_s"] * 1e6, "dur": (event["end_s"] - event["start_s"]) * 1e6,
                    "args": {k: event[k] for k in ("name", "phase", "layer", "op", "bytes")}})
            for sample in memory_samples(ctx):
                samples.append({"stage": result.stage, **sample})
                trace.append({"ph": "C", "pid": pid, "name": "memory bytes",
                              "ts": sample["t_s"] * 1e6, "args": sample["bytes_by_category"]})
    out = {"traceEvents": trace, "displayTimeUnit": "ms", "stepEvents": step_events,
           "memorySamples": samples}
    if scenario is not None:
        out["scenario"] = subject(scenario)
    if any(result.pipeline_runs for result in results):  # without a pipeline, the trace as it was
        out.update(pipeline_trace(results, trace, scenario))
    return out


def subject(scenario) -> dict[str, Any]:
    """What a figure's title names: the model (its name, else Ψ) and the cluster (nodes x GPUs a
    node of which GPU, and the memory each has)."""
    c = scenario.cluster
    return {"model": scenario.model.name, "params": total_params(scenario.model),
            "gpu": c.gpu, "gpu_memory_bytes": round(c.hardware.memory_bytes),
            "nodes": c.nodes, "gpus_per_node": c.gpus_per_node}


def event_name(kind: str, micro: int, chunk: int, chunks: int) -> str:
    """"F3" / "B3" for a micro-batch's forward / backward ("F3.c1": chunk 1 when interleaved);
    any other event by its kind."""
    if kind not in _PASS_LETTERS:
        return kind
    return f"{_PASS_LETTERS[kind]}{micro}" + (f".c{chunk}" if chunks > 1 else "")


def pipeline_trace(results, trace: list[dict[str, Any]], scenario=None) -> dict[str, Any]:
    """A process per pipeline stage of each ZeRO stage, appended to `trace`; returns the same
    events and memory in seconds and the layout, for readers (zerosim plot)."""
    events: list[dict[str, Any]] = []
    memory: list[dict[str, Any]] = []
    for result in results:
        runs = result.pipeline_runs
        chunks = 1 + max((e[5] for run in runs for e in run.events), default=0)
        for i, run in enumerate(runs):
            pid = result.stage * _PID_STRIDE + i
            trace.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                          "args": {"name": f"{STAGE_NAMES[result.stage]} pipeline stage {i}"}})
            trace += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                       "args": {"name": "p2p send" if lane == P2P_OPS[0] else lane}}
                      for lane, tid in _PIPELINE_LANES.items()]
            for event in _named(run.events, chunks):
                events.append({"stage": result.stage, "pipeline_stage": i, **event})
                trace.append({"ph": "X", "pid": pid, "tid": _PIPELINE_LANES[event["lane"]],
                              "name": event["name"], "cat": event["kind"],
                              "ts": event["start_s"] * 1e6,
                              "dur": (event["end_s"] - event["start_s"]) * 1e6,
                              "args": {"micro": event["micro"], "chunk": event["chunk"]}})
            for t_s, size in run.memory:
                memory.append({"stage": result.stage, "pipeline_stage": i, "t_s": t_s,
                               "bytes": size})
                trace.append({"ph": "C", "pid": pid, "name": "memory bytes", "ts": t_s * 1e6,
                              "args": {"held": size}})
    return {"pipeline": _layout(results, scenario), "pipelineEvents": events,
            "pipelineMemory": memory}


def _named(run_events, chunks: int) -> list[dict[str, Any]]:
    """A stage's events as records, each named. A send is named after the compute op it carries
    the output of: the last one before it in the stage's list, as events.py appends a send
    right after its op (a cut backward's reductions come before it, never a compute op)."""
    records, carried = [], ""
    for lane, kind, start_s, end_s, micro, chunk in run_events:
        name = event_name(kind, micro, chunk, chunks)
        if lane == COMPUTE:
            carried = name
        elif lane == P2P_OPS[0]:
            name = f"{P2P_OPS[0]} {carried}"
        records.append({"lane": lane, "kind": kind, "name": name, "start_s": start_s,
                        "end_s": end_s, "micro": micro, "chunk": chunk})
    return records


def _layout(results, scenario) -> dict[str, Any]:
    """The pipeline's stages; the model and the layout's other axes where the scenario is
    given."""
    out: dict[str, Any] = {"pipeline_parallel": len(results[0].pipeline_runs)}
    if scenario is not None:
        p, t = scenario.parallelism, scenario.training
        out.update(model=scenario.model.name, tensor_parallel=p.tensor_parallel,
                   data_parallel=scenario.world_size // (p.tensor_parallel
                                                         * p.pipeline_parallel),
                   schedule=p.pipeline_schedule, micro_batches=t.gradient_accumulation,
                   virtual_stages=p.virtual_stages)
    return out
