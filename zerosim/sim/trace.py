"""Chrome / Perfetto trace of simulated steps (the JSON "traceEvents" format, which
chrome://tracing and ui.perfetto.dev open), derived from the step-event schema (zerosim.contract).

Each simulated rank of each stage is a process; its compute stream and each communication queue
(tensor parallelism's collectives among them, on the "tp" lane) are threads; its memory is a counter track stacked by category. Times are microseconds.
"""

from __future__ import annotations

from typing import Any

from zerosim.contract import FAMILY_QUEUES, QUEUES, STAGE_NAMES, MemorySample
from zerosim.sim.groups import TP

_LANES = {queue: tid for tid, queue in enumerate(QUEUES + FAMILY_QUEUES + (TP,))}
"""A lane per stream: QUEUES named in every trace, FAMILY_QUEUES and tensor parallelism's
collectives (groups.TP) where a rank uses them."""
_PID_STRIDE = 1_000_000  # pid = stage * stride + rank: ranks of one stage stay together


def memory_samples(ctx) -> list[MemorySample]:
    """The memory part of the step-event schema."""
    return [MemorySample(rank=ctx.rank, t_s=t_s, bytes_by_category=by_category)
            for t_s, by_category in ctx.state.memory.samples]


def chrome_trace(results, progress=None) -> dict[str, Any]:
    """Trace of StageResults (engine.simulate, run with keep_events=True); `progress(done,
    total)` after each rank (thousands of jittered ranks take seconds)."""
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
    return {"traceEvents": trace, "displayTimeUnit": "ms", "stepEvents": step_events,
            "memorySamples": samples}
