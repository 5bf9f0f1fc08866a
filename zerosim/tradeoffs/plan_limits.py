"""The 3-D planner's layouts one at a time, and its limits: a layout (t, p, d, ZeRO stage,
schedule, micro-batch split) built from the scenario and judged by the memory model against what
its own communicators leave of the GPU, the bound plan_space.py ranks layouts by, and, over every
(t, p), the largest model and the fewest GPUs with a pipeline (plan_space.py's step 4).

Both limits are the memory model's (analytic/memory.stage_memory: the worst pipeline stage) at
the highest stage the framework runs beside a pipeline, 1F1B at the smallest micro-batch (the
least memory of a cell's versions): the largest model in whole layers of the scenario's width, a
multiple of p, searched up from one layer (the memory model walks every layer of a stage); the
fewest GPUs as t p d for the least d that fits on the same sequences per data-parallel rank.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

from zerosim.analytic.memory import stage_memory
from zerosim.analytic.model import model_flops_per_token, param_counts, total_params
from zerosim.contract import STAGE_NAMES
from zerosim.errors import InputError
from zerosim.frameworks import framework_of
from zerosim.parallel.tensor import rank_model
from zerosim.scenario.checks import MAX_VALUE
from zerosim.scenario.config import Scenario
from zerosim.sim.device import overhead_bytes
from zerosim.tradeoffs.plan_axes import (ONE_F_ONE_B, Candidate, batch_splits, layout_label,
                                         layout_settings, most, pipeline_degrees,
                                         sequences_per_rank, space_degrees, with_world,
                                         without_axes)
from zerosim.tradeoffs.plan_family import RANKED, build, overflow
from zerosim.units import BYTES_PER_ELEMENT

MAX_GPUS = 1 << 20  # as plan.py's: past any real cluster


def layout_version(scenario: Scenario, t: int, p: int, stage: int, schedule: str, v: int,
                   micro_batch: int, micro_batches: int) -> dict[str, Any]:
    """One version built and judged by the memory model against what its own communicators
    leave of the GPU; InputError where zerosim refuses it."""
    d = scenario.world_size // (t * p)
    label = layout_label(stage, t, p, d, schedule, v)
    built = build(scenario, Candidate("pp", stage, layout_settings(
        t, p, schedule, v, micro_batch, micro_batches), label))
    row = stage_memory(built, stage)
    return {"allow": "pp", "label": label, "stage": stage, "stage_name": STAGE_NAMES[stage],
            "tensor_parallel": t, "pipeline_parallel": p, "data_parallel": d,
            "schedule": schedule, "virtual_stages": v, "micro_batch": micro_batch,
            "micro_batches": micro_batches, "bubble": (p - 1) / (v * micro_batches),
            "world_size": scenario.world_size, "peak_bytes": row.peak_bytes, "row": row,
            "built": built,
            **{key: None for key in RANKED}}


def judged(version: dict[str, Any], gpu_bytes: int) -> dict[str, Any]:
    """The version with what its GPUs leave for it and whether its memory fits there."""
    room = gpu_bytes - overhead_bytes(version["built"], version["stage"])
    fits = version["peak_bytes"] <= room
    return {**version, "room": room, "fits": fits,
            "why_not": None if fits else f"needs {overflow(version['row'], room)}"}


def bound_s(version: dict[str, Any]) -> float:
    """Step 2's bound, in seconds."""
    built, p = version["built"], version["pipeline_parallel"]
    t, d = version["tensor_parallel"], version["data_parallel"]
    c, training = built.cluster, built.training
    tokens = version["micro_batch"] * version["micro_batches"] * training.seq_len / (t * p)
    ideal = model_flops_per_token(built.model, training) * tokens / (c.peak_tflops * 1e12)
    grads = BYTES_PER_ELEMENT[training.precision] * total_params(rank_model(built)) / p
    inside = t * d <= c.gpus_per_node  # a stage's d ranks, t apart, in one node
    link = (c.intra_node_bandwidth_GBps if inside else c.inter_node_bandwidth_GBps) * 1e9
    return ideal * (1 + version["bubble"]) + 2 * (d - 1) / d * grads / link


def _layers_that_fit(scenario: Scenario, t: int, p: int, stage: int, gpu_bytes: int) -> int:
    """The most layers (a multiple of p) of the scenario's width that fit at t x p on its GPUs,
    1F1B at the smallest micro-batch; 0 if none. The memory model reads m only through the
    micro-batches a stage holds, min(p - i, m) under 1F1B, so it runs at m = min(m, p)."""
    splits = batch_splits(scenario, t, p)
    if not splits:
        return 0
    micro_batch, m = splits[0]
    counts = param_counts(scenario.model)
    top = max(1, (MAX_VALUE - counts.total) // counts.per_layer // p)

    flat = without_axes(scenario)

    def fits(k: int) -> bool:
        deep = replace(flat, model=scenario.model.resized(k * p))
        try:
            version = layout_version(deep, t, p, stage, ONE_F_ONE_B, 1, micro_batch, min(m, p))
        except InputError:
            return False
        return judged(version, gpu_bytes)["fits"]
    return most(fits, top) * p


def largest_model(scenario: Scenario, allow: tuple[str, ...], gpu_bytes: int
                  ) -> dict[str, Any] | None:
    """Step 4's largest model on the scenario's GPUs: the (t, p) whose layers are most, at the
    framework's highest stage beside a pipeline (it shards the most)."""
    stage, best = max(framework_of(scenario.training).pipeline_stages), None
    world = scenario.world_size
    for t in space_degrees(scenario, allow):
        for p in (p for p in range(2, min(world // t, scenario.model.n_layers) + 1)
                  if world % (t * p) == 0):  # no deeper than the scenario's own layers
            layers = _layers_that_fit(scenario, t, p, stage, gpu_bytes)
            if layers and (best is None or layers > best["layers"]):
                best = {"layers": layers, "tensor_parallel": t, "pipeline_parallel": p,
                        "stage": stage, "params": total_params(
                            scenario.model.resized(layers))}
    return best


def fewest_gpus(scenario: Scenario, allow: tuple[str, ...], gpu_bytes: int
                ) -> dict[str, Any] | None:
    """Step 4's fewest GPUs for the scenario's model: per (t, p), p dividing the layers, the
    least d whose memory fits on the same sequences per data-parallel rank (per-rank memory
    never grows with d: a bisection over the d that make a valid world, _valid_d); the fewest
    GPUs of them, the smaller bound on a tie."""
    stage, found = max(framework_of(scenario.training).pipeline_stages), None
    layers, flat = scenario.model.n_layers, without_axes(scenario)  # its own t p need not divide
    for t in space_degrees(scenario, allow):
        for p in pipeline_degrees(layers, layers):
            seqs = sequences_per_rank(scenario, t, p)
            micro_batch = min(scenario.training.micro_batch, seqs or 1)
            if seqs is None or seqs % micro_batch:
                continue
            m = seqs // micro_batch

            def at(j: int, m: int = m, t: int = t, p: int = p) -> dict | None:
                d = _valid_d(t * p, scenario.cluster.gpus_per_node, j)
                try:  # the memory model holds min(p - i, m) under 1F1B: m = p reads the same
                    return judged(layout_version(with_world(flat, t * p * d), t, p, stage,
                                                 ONE_F_ONE_B, 1, micro_batch, min(m, p)),
                                  gpu_bytes)
                except InputError:
                    return None
            j = _least(lambda j: (v := at(j)) is not None and v["fits"],
                       _valid_index(t * p, scenario.cluster.gpus_per_node))
            if j is None:
                continue
            gpus = t * p * _valid_d(t * p, scenario.cluster.gpus_per_node, j)
            row = judged(layout_version(with_world(flat, gpus), t, p, stage, ONE_F_ONE_B, 1,
                                        micro_batch, m), gpu_bytes)
            if found is None or (gpus, bound_s(row)) < (found["world_size"], bound_s(found)):
                found = row
    return found


def _valid_d(ways: int, per_node: int, index: int) -> int:
    """The index-th d (from 0) whose world ways x d plan_axes.with_world can make: any within
    one node, past it whole nodes (multiples of per_node / gcd(per_node, ways))."""
    below = per_node // ways
    if index < below:
        return index + 1
    step = per_node // math.gcd(per_node, ways)
    return (below // step + 1) * step + (index - below) * step


def _valid_index(ways: int, per_node: int) -> int:
    """The last index _valid_d takes below MAX_GPUS GPUs."""
    below, step = per_node // ways, per_node // math.gcd(per_node, ways)
    return below + max(0, (MAX_GPUS // ways - (below // step + 1) * step) // step)


def _least(fits: Callable[[int], bool], hi: int) -> int | None:
    """Least x in 0..hi with fits(x), for fits false up to some x and true after; None if
    none."""
    if not fits(hi):
        return None
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo
