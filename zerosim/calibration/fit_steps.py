"""What the real stages' own steps showed beyond the microbenchmarks (no torch): each calibration
run of a stage is simulated again with the fits so far, and the difference is fitted.

- In-step corrections (fit_step): compute in a step over the microbenchmarked units, each op's
  collectives in a step over their microbenchmark, the time in neither (other_s: bookkeeping such
  as storage resizes and copies).
- Memory (fit_memory): what the real stages held beyond the analytic model, per stage:
  activations (after forward), allocator residue (after the step), optimizer temporaries per
  element, and backward's workspace on top of the simulated peak (the logits' gradient, autograd
  temporaries).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

import numpy as np

from zerosim.contract import COMM
from zerosim.analytic.memory import shard_elements
from zerosim.analytic.model import total_params
from zerosim.scenario.profile import Profile
from zerosim.sim.engine import simulate


def _line_through(tokens, values, per_token_if_one=False) -> dict[str, float]:
    """fixed + per_token·tokens by ordinary least squares (values may be negative or zero).
    With one token count no line can be told: a constant, or with per_token_if_one a
    proportion of the tokens (what backward's transients are: gradients of activations)."""
    tokens, values = np.asarray(tokens, float), np.asarray(values, float)
    if len(set(tokens)) < 2:
        if per_token_if_one and tokens[0] > 0:
            return {"fixed": 0.0, "per_token": float(values.mean() / tokens[0])}
        return {"fixed": float(values.mean()), "per_token": 0.0}
    slope, fixed = np.polyfit(tokens, values, 1)
    return {"fixed": float(fixed), "per_token": float(slope)}


def _row_scenario(scenario, row, profile):
    """The scenario as the calibration run ran: one box of `processes` ranks, its stage,
    micro-batch and collectives, no overlap (zero_real's collectives are synchronous)."""
    cluster = dataclasses.replace(scenario.cluster, nodes=1, gpus_per_node=int(row["processes"]),
                                  collective_impl=row.get("collectives", "native"))
    training = dataclasses.replace(scenario.training, micro_batch=int(row["micro_batch"]),
                                   seq_len=int(row["seq_len"]), zero_stage=row["stage"],
                                   overlap_comm=False)
    return dataclasses.replace(scenario, cluster=cluster, training=training, profile=profile)


def _simulate_row(scenario, row, profile, keep_events=False):
    return simulate(_row_scenario(scenario, row, profile), row["stage"], keep_events=keep_events)


def _optimizer_elements(scenario, row) -> int:
    psi = total_params(scenario.model)
    return psi if row["stage"] == 0 else shard_elements(psi, int(row["processes"]))


ZERO_LINE = {"fixed": 0.0, "per_token": 0.0}
# A measured peak this far above every simulated candidate is set by backward's workspace.
_PEAK_SLACK_BYTES = 1024


def fit_memory(rows: list[dict[str, Any]], scenario, fit: dict[str, Any]) -> dict[str, Any]:
    """Per process count and stage, what the real stage held beyond the analytic model:
    - activations: after forward, minus the analytic activations;
    - residue: after the step, minus the model states (what the allocator keeps);
    - optimizer_per_element: the optimizer step's temporaries per element of its partition,
      where the step sets the peak (the smallest such ratio over the runs);
    - workspace: backward's transient bytes on top of the simulated backward peak, from the runs
      whose peak the optimizer step does not explain.
    Needs the timing fits in `fit` (the engine runs with them)."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        groups[int(r["processes"]), int(r["stage"])].append(r)
    memory: dict[str, Any] = {}
    for (n, stage), group in sorted(groups.items()):
        terms = {"activations": dict(ZERO_LINE), "residue": dict(ZERO_LINE),
                 "workspace": dict(ZERO_LINE), "optimizer_per_element": 0.0}
        memory.setdefault(str(n), {})[str(stage)] = terms
        profile = Profile("(fitting)", {"fit": {**fit, "memory": memory}})
        tokens = [r["micro_batch"] * r["seq_len"] for r in group]
        sims = [_simulate_row(scenario, r, profile) for r in group]
        terms["activations"] = _line_through(tokens, [
            (r["phases"]["after_forward"] - r["phases"]["after_init"])
            - (s.memory_at["after_forward"] - s.memory_at["after_init"])
            for r, s in zip(group, sims)])
        terms["residue"] = _line_through(tokens, [r["phases"]["after_step"]
                                                  - s.memory_at["after_step"]
                                                  for r, s in zip(group, sims)])
        residue, terms["residue"] = terms["residue"], dict(ZERO_LINE)  # a peak in backward
        profile = Profile("(fitting)", {"fit": {**fit, "memory": memory}})
        sims = [_simulate_row(scenario, r, profile) for r in group]
        terms["residue"] = residue
        elements = [_optimizer_elements(scenario, r) for r in group]
        terms["optimizer_per_element"] = max(0.0, min(
            (r["peak_bytes"] - r["phases"]["after_backward"]) / e
            for r, e in zip(group, elements)))
        backward = [(t, r["peak_bytes"] - s.peak_bytes) for t, r, s, e in
                    zip(tokens, group, sims, elements)
                    if r["peak_bytes"] > r["phases"]["after_backward"]
                    + terms["optimizer_per_element"] * e + _PEAK_SLACK_BYTES]
        if backward:
            terms["workspace"] = _line_through(*zip(*backward), per_token_if_one=True)
    return memory


def fit_step(rows: list[dict[str, Any]], scenario, fit: dict[str, Any]) -> dict[str, Any]:
    """What the real stages' timed steps show beyond the microbenchmarks, per process count and
    stage (medians over the calibration runs):
    - compute_scale: in-step compute over the simulated (hooks, bucket bookkeeping, caches);
    - collective_scale per op: in-step time of the op's collectives over the microbenchmarks'
      prediction (ranks arriving apart, caches, launch), which depends on how the stage
      interleaves compute and collectives (zero_real may also run more of them than zerosim:
      ZeRO-3 gathers token and position embeddings apart);
    - other_s: time in neither compute nor a collective (storage resizes, copies, Python)."""
    step: dict[str, Any] = {}
    bare = Profile("(fitting)", {"fit": fit})
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if r.get("timing"):
            groups[int(r["processes"]), str(r["stage"])].append(r)
    for (n, stage), runs in sorted(groups.items()):
        scales, other = [], []
        extra: dict[str, list] = defaultdict(list)
        for r in runs:
            sim = _simulate_row(scenario, r, bare, keep_events=True)
            timing = r["timing"]
            if sim.compute_s > 0:
                scales.append(timing["compute_s"] / sim.compute_s)
            simulated: dict[str, float] = defaultdict(float)
            for e in sim.ranks[0].state.events:
                if e["stream"] == COMM:
                    simulated[e["op"]] += e["end_s"] - e["start_s"]
            comm = 0.0
            for key, calls in timing.items():
                if not key.startswith("calls_") or not calls:
                    continue
                op = key[len("calls_"):]
                if simulated[op] > 0:  # the step's time of this op over the microbenchmarks'
                    comm += timing[f"comm_{op}_s"]
                    extra[op].append(timing[f"comm_{op}_s"] / simulated[op])
            # what the simulator has no collective for (fp16's overflow check) counts as other
            other.append(timing["step_time_s"] - timing["compute_s"] - comm)
        entry = step.setdefault(str(n), {"impl": runs[0].get("collectives", "native"),
                                         "compute_scale": {}, "collective_scale": {},
                                         "other_s": {}})
        entry["compute_scale"][stage] = float(np.median(scales)) if scales else 1.0
        entry["collective_scale"][stage] = {op: float(np.median(v)) for op, v in extra.items()}
        entry["other_s"][stage] = max(0.0, float(np.median(other)))
    return step
