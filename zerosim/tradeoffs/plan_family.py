"""`zerosim plan --allow offload,hybrid,zeropp,tp`: the ZeRO family beyond the four stages, and
tensor parallelism beside each stage, as candidates on the scenario's own GPUs, and what each
costs in time.

Each candidate is the scenario with [training] set to one stage and one scheme, built as any
scenario is (dataclasses.replace runs TrainingConfig's and Scenario's checks, scenario/family.py),
so a combination zerosim refuses is skipped with its reason instead of planned. Its memory is
memory.stage_memory of that configuration, judged as plan judges the stages (against what the
CUDA context and NCCL's buffers leave); one that fits is simulated as the stages are
(sweep.rows_of), and its time cost is its step time minus that of the fastest plain stage on
the same GPUs.

    offload   optimizer_offload = "cpu" at stages 1-3, and with param_offload = "cpu" at stage 3
    hybrid    shard_group = g at stages 1-3, for up to MAX_SHARD_GROUPS of the g >= 2 that
              properly divide the world size and divide gpus_per_node or are a multiple of it
              (gpus_per_node first, then the nearest by ratio, the larger first on a tie)
    zeropp    stage 3 with hpz_partition = gpus_per_node, quantized_weights, quantized_gradients
    tp        tensor_parallel = t at each stage the framework runs, for every t that divides
              gpus_per_node (1, 2, 4, 8 on 8-GPU nodes) but the scenario's own: Megatron-LM's
              layout inside a node (parallel/tensor.py), the stage sharding each rank's slice
              over the N / t data-parallel ranks, with the scenario's global batch split into
              the micro-batch and micro-steps that simulate fastest (batch_splits). Sequence
              parallelism and tp_comm_overlap stay the scenario's keys, not searched: each is
              an implementation's switch (Megatron's --sequence-parallel and
              --tp-comm-overlap are opt-in), and sequence parallelism moves the bytes of the
              all-reduces it replaces (Korthikanti et al. 2022, §4.2.2: a reduce-scatter and
              an all-gather), so set it to plan with it; the t and the batch splits are
              plan_axes.py's
    pp        pipelines beside t and d over the scenario's GPUs: plan_space.py, not a
              candidate here

Candidates start from the scenario's [training] with every key of these schemes at its default
(PLAIN), so each candidate is exactly its scheme, at the scenario's own tensor_parallel t0 with
its micro-batch and micro-steps, as the plain stages run. A scheme zerosim refuses beside
t0 > 1 (hybrid sharding, ZeRO++: scenario/axes.py) runs at t = 1 instead. Every step compares on
the scenario's global batch: a candidate at t != t0 has t / t0 times the sequences per
data-parallel rank, and tries each split of them into micro-batch x micro-steps. How plan
words a size and a misfit (gib, overflow, over_text) lives here too, so that plan.py and this
module say them alike.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

from zerosim.contract import STAGE_NAMES
from zerosim.errors import InputError, brief
from zerosim.analytic.memory import stage_memory
from zerosim.frameworks import framework_of
from zerosim.scenario.config import Scenario
from zerosim.scenario.parallelism_table import PARALLELISM_KEYS
from zerosim.sim.device import overhead_bytes
from zerosim.tradeoffs.plan_axes import (Candidate, batch_splits, split_label, t_label,
                                         tp_candidates, tp_notes)
from zerosim.tradeoffs.plan_axes import tp_degrees  # noqa: F401  (where tests and benches read it)
from zerosim.tradeoffs.sweep import rows_of
from zerosim.units import GiB, KiB, MiB

ALLOWS = ("offload", "hybrid", "zeropp", "tp", "pp")
MAX_SHARD_GROUPS = 4
MAX_RATIO = 1 << 12  # shard groups from a 4096th of a node to 4096 nodes
PLAIN = {"optimizer_offload": "none", "param_offload": "none", "delayed_update": False,
         "shard_group": 0, "hpz_partition": 0, "quantized_weights": False,
         "quantized_gradients": False}
TERMS = (("params", "params_bytes"), ("grads", "grads_bytes"),
         ("optimizer states", "optimizer_bytes"), ("activations", "activations_bytes"),
         ("buffers", "buffers_bytes"))
"""What overflow names, as StageMemory's fields."""
RANKED = ("step_time_s", "gpu_seconds_per_step", "tokens_per_step", "exposed_comm_s",
          "comm_bytes_per_rank_total")


def gib(size_bytes: float) -> str:
    """GiB, or a smaller binary unit for small sizes (a 1-element shard is a few bytes)."""
    unit, size = next(((u, v) for u, v in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB))
                       if size_bytes >= v / 10), ("bytes", 1))
    return f"{size_bytes / size:.4g} {unit}"


def over_text(size_bytes: int, budget_bytes: int) -> str:
    """'31.556 GiB > 31.554 GiB': GiB with as many decimals as show the two apart."""
    for places in range(2, 10):
        size, budget = (f"{b / GiB:.{places}f}" for b in (size_bytes, budget_bytes))
        if size != budget:
            break
    return f"{size} GiB > {budget} GiB"


def overflow(row, budget_bytes: int) -> str:
    """Why a stage's memory does not fit: the terms over budget by themselves, else the largest."""
    terms = sorted(((getattr(row, key), name) for name, key in TERMS), reverse=True)
    listed = ", ".join(f"{name} {gib(size)}" for size, name in terms if size)
    alone = [name for size, name in terms if size > budget_bytes]
    lead = (f"over it by {'itself' if len(alone) == 1 else 'themselves'}: {' and '.join(alone)}"
            if alone else f"largest term: {terms[0][1]}")
    return f"{gib(row.peak_bytes)} > {gib(budget_bytes)}; {lead} ({listed})"


def parse_allow(text: str) -> tuple[str, ...]:
    """'offload,hybrid' -> ('offload', 'hybrid'), in ALLOWS' order, each once."""
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if name not in ALLOWS:
            what = "an empty name" if not name else brief(name)
            raise InputError(f"{what} in {brief(text)} is not one of {', '.join(ALLOWS)} (a "
                             f"comma list, e.g. --allow offload,hybrid)")
    return tuple(a for a in ALLOWS if a in names)


def shard_groups(world: int, per_node: int) -> list[int]:
    """The shard groups --allow hybrid tries on `world` GPUs (module docstring)."""
    below, above = [], []  # the nearest a node by ratio: n / j and k n for the smallest j, k
    for j in range(2, min(per_node // 2, MAX_RATIO) + 1):
        if per_node % j == 0 and len(below) < MAX_SHARD_GROUPS:
            below.append(per_node // j)  # a divisor of the node, so of the world
    for k in range(1, min(-(-world // per_node) - 1, MAX_RATIO) + 1):
        if world % (k * per_node) == 0 and k * per_node >= 2 and len(above) < MAX_SHARD_GROUPS:
            above.append(k * per_node)
    near = sorted(below + above, key=lambda g: (abs(math.log(g / per_node)), -g))
    return sorted(near[:MAX_SHARD_GROUPS])


def candidates(scenario: Scenario, allow: tuple[str, ...]) -> list[Candidate]:
    out = []
    if "offload" in allow:
        for stage in (1, 2, 3):
            out.append(Candidate("offload", stage, (("optimizer_offload", "cpu"),),
                                 f"{STAGE_NAMES[stage]} + optimizer offload (cpu)"))
        out.append(Candidate("offload", 3, (("optimizer_offload", "cpu"), ("param_offload", "cpu")),
                             f"{STAGE_NAMES[3]} + optimizer and parameter offload (cpu)"))
    if "hybrid" in allow:
        for g in shard_groups(scenario.world_size, scenario.cluster.gpus_per_node):
            out.extend(Candidate("hybrid", stage, (("shard_group", g),),
                                 f"{STAGE_NAMES[stage]} hybrid (shard group {g})")
                       for stage in (1, 2, 3))
    if "zeropp" in allow:
        h = scenario.cluster.gpus_per_node
        parts = ([f"hpZ {h}"] if h > 1 else []) + ["qwZ", "qgZ"]
        out.append(Candidate("zeropp", 3, (("hpz_partition", h), ("quantized_weights", True),
                                           ("quantized_gradients", True)),
                             f"{STAGE_NAMES[3]} ZeRO++ ({', '.join(parts)})"))
    if "tp" in allow:
        out.extend(tp_candidates(scenario))
    return out


def table_of(key: str) -> str:
    """The table a key of PLAIN belongs to."""
    return "parallelism" if key in PARALLELISM_KEYS else "training"


def build(scenario: Scenario, candidate: Candidate) -> Scenario:
    """The candidate's scenario; InputError where zerosim's rules refuse the combination."""
    settings = {**PLAIN, **dict(candidate.settings)}
    by_table = {name: {k: v for k, v in settings.items() if table_of(k) == name}
                for name in ("training", "parallelism")}
    training = replace(scenario.training, zero_stage=candidate.stage, **by_table["training"])
    return replace(scenario, training=training,
                   parallelism=replace(scenario.parallelism, **by_table["parallelism"]))


def _entry(scenario: Scenario, candidate: Candidate, room: int) -> dict[str, Any]:
    row = stage_memory(scenario, candidate.stage)
    per_node = min(scenario.cluster.gpus_per_node, scenario.world_size)
    fits = row.peak_bytes <= room
    return {"allow": candidate.allow, "label": candidate.label, "stage": candidate.stage,
            "stage_name": STAGE_NAMES[candidate.stage], "world_size": scenario.world_size,
            "settings": dict(candidate.settings), "fits": fits,
            "why_not": None if fits else f"needs {overflow(row, room)}",
            "peak_bytes": row.peak_bytes, "host_bytes": row.host_bytes,
            "host_bytes_per_node": row.host_bytes * per_node,
            **{key: None for key in RANKED}, "cost_s": None, "cost_pct": None, "cost_vs": None}


def consider(scenario: Scenario, allow: tuple[str, ...], room: int,
             gpu_bytes: int | None = None) -> tuple[list[dict], list[list], list[str]]:
    """Every candidate's entry (memory judged against `room`), the (entry, scenario) versions
    of those that fit (a list each, in the entries' order: one, or each batch split that fits,
    the largest micro-batch first), and notes on what was skipped and why. A candidate at
    another t than the scenario's is judged against what its own communicators leave of
    `gpu_bytes` (the TP group's NCCL buffers come beside the data-parallel group's:
    sim/device.overhead_bytes)."""
    entries, fitting, skipped, refused = [], [], {}, {}
    if not allow:
        return entries, fitting, []
    for candidate in candidates(scenario, allow):
        try:
            versions = _versions(scenario, candidate, refused, room, gpu_bytes)
        except InputError as exc:
            labels = skipped.setdefault((candidate.allow, " ".join(str(exc).split())), [])
            if (candidate.group or candidate.label) not in labels:
                labels.append(candidate.group or candidate.label)
            continue
        fit = [v for v in versions if v[0]["fits"]]
        entries.append(dict(fit[-1][0] if fit else versions[0][0]))
        if fit:
            fitting.append(fit[::-1])
    notes = [f"--allow {kind}: skipped {', '.join(labels)}: {why}"
             for (kind, why), labels in skipped.items()]
    notes += [f"--allow {kind}: zerosim refuses it beside tensor parallelism ({why}), so it is "
              f"tried at t = 1 on the scenario's global batch" for kind, why in refused.items()]
    if "tp" in allow:
        notes += tp_notes(scenario)
    if "hybrid" in allow and not shard_groups(scenario.world_size, scenario.cluster.gpus_per_node):
        notes.append(f"--allow hybrid: no shard group on {scenario.world_size} GPUs (one >= 2 "
                     f"that properly divides the world size and divides gpus_per_node = "
                     f"{scenario.cluster.gpus_per_node} or is a multiple of it)")
    given = {k: getattr(getattr(scenario, table_of(k)), k) for k in PLAIN}
    own = [f"{k} = {given[k]!r}" for k, v in PLAIN.items() if given[k] != v]
    if own:
        notes.append(f"the scenario sets {', '.join(own)}: the plain stages keep it, the "
                     f"--allow candidates set their own scheme alone")
    return entries, fitting, notes


def _versions(scenario: Scenario, candidate: Candidate, refused: dict[str, str], room: int,
              gpu_bytes: int | None) -> list[tuple[dict[str, Any], Scenario]]:
    """The candidate's (entry, scenario), or one per batch split from the smallest micro-batch
    up to the first that does not fit (activations grow with the micro-batch: no larger one
    fits); InputError where zerosim refuses it. A scheme refused beside the scenario's t0 > 1
    runs at t = 1, its reason kept in `refused` by kind."""
    own = scenario.parallelism.tensor_parallel
    if not candidate.splits:
        try:
            built = build(scenario, candidate)
        except InputError as exc:
            if own == 1:
                raise
            why = " ".join(str(exc).split())
        else:
            if own > 1:  # the scenario's t, as its plain stages
                candidate = replace(candidate, label=candidate.label + t_label(scenario, own))
            return [(_entry(built, candidate, room), built)]
        candidate = replace(candidate, settings=(*candidate.settings, ("tensor_parallel", 1)),
                            label=f"{candidate.label}, t = 1", splits=batch_splits(scenario, 1))
        refused.setdefault(candidate.allow, why)
        if not candidate.splits:
            t = scenario.training
            raise InputError(f"at t = 1 the scenario's global batch is {t.micro_batch} x "
                             f"{t.gradient_accumulation} / {own} sequences per GPU, not a "
                             f"whole number")
    versions = []
    for micro_batch, steps in candidate.splits:
        version = replace(candidate, label=split_label(candidate.label, micro_batch, steps),
                          settings=(*candidate.settings, ("micro_batch", micro_batch),
                                    ("gradient_accumulation", steps)))
        built = build(scenario, version)
        own_room = room if gpu_bytes is None else gpu_bytes - overhead_bytes(built, version.stage)
        versions.append((_entry(built, version, own_room), built))
        if not versions[-1][0]["fits"]:
            break
    return versions


def rank(entries: list[dict], fitting: list[list], mode: str,
         done: Callable[[], None], budget_bytes: int | None = None) -> list[str]:
    """Simulate each fitting candidate as plan simulates the stages; `done()` after each. One
    whose simulated device memory passes `budget_bytes` does not fit, as simulate says. Of a
    candidate's batch splits (consider's versions, the largest micro-batch first) the entry
    becomes the fastest that fits: each is simulated down to the first no faster than the one
    before it, as fewer micro-steps of more sequences only amortise more of each micro-step's
    fixed work (ZeRO-3's gathers, the data-parallel reduction's exposed tail)."""
    notes = []
    for entry, versions in zip([e for e in entries if e["fits"]], fitting):
        best = over = None
        for version, built in versions:
            try:
                row = rows_of(built, [version["stage"]], {}, mode)[0]
            except InputError as exc:
                notes.append(f"{version['label']} not ranked: {exc}")
                continue
            if budget_bytes is not None and row["device_bytes"] > budget_bytes:
                over = (version, row)
            elif best is None or row["step_time_s"] < best[1]["step_time_s"]:
                best = (version, row)
            else:
                break
        if best is not None:
            entry.update(best[0], **{key: best[1][key] for key in RANKED})
        elif over is not None:
            entry.update(over[0], fits=False, why_not=(
                f"needs {over_text(over[1]['device_bytes'], budget_bytes)} of device memory "
                f"as simulated (the memory model's peak fits; the caching allocator rounds "
                f"the buffers up to its blocks and segments)"))
        done()
    return notes


def cost(entries: list[dict], configs: list[dict], world: int) -> dict[str, Any] | None:
    """Each ranked entry's time cost against the fastest plain stage on `world` GPUs (that
    configuration, or None where no plain stage fits there)."""
    plain = [c for c in configs if c["world_size"] == world]
    base = min(plain, key=lambda c: (c["step_time_s"], c["stage"]), default=None)
    if base is None:
        return None
    for entry in entries:
        if entry["step_time_s"] is not None:
            entry["cost_s"] = entry["step_time_s"] - base["step_time_s"]
            entry["cost_pct"] = 100 * entry["cost_s"] / base["step_time_s"]
            entry["cost_vs"] = base["stage_name"]
    return base


def picks(configs: list[dict], entries: list[dict]) -> dict[str, dict[str, Any] | None]:
    """The fastest per step and the cheapest in GPU-seconds per step of the plain
    configurations and the ranked candidates together, as plan picks among the plain ones."""
    every = [{"label": c["stage_name"], **c} for c in configs]
    every += [e for e in entries if e["step_time_s"] is not None]
    return {f"{name}_allowed": min(every, key=lambda r: (r[key], r["world_size"], r["stage"]),
                                   default=None)
            for name, key in (("fastest", "step_time_s"), ("cheapest", "gpu_seconds_per_step"))}


def format_candidates(p: dict[str, Any]) -> list[str]:
    """The lines of the --allow candidates: each one's memory, and for each that fits its step
    and its time cost against the fastest plain stage on the same GPUs."""
    entries, base, n = p["candidates"], p["baseline"], p["world_size"]
    against = (f"against the fastest plain stage there, {base['stage_name']} at "
               f"{base['step_time_s']:.4g} s/step" if base else
               "no plain stage fits there, so no time cost" if p["seq_len"] else
               "no step times: a bare-Ψ model needs training.seq_len")
    lines = ["", f"Also considered on {gpus_text(n)} (--allow {','.join(p['allow'])}), {against}:"]
    if not entries:
        return lines + ["  none (see the notes)"]
    width = max(len(e["label"]) for e in entries) + 2
    vs = f"vs {base['stage_name']}" if base else "time cost"
    lines.append(f"  {'configuration':<{width}}{'peak/GPU':>11}{'step':>11}  {vs:<22}"
                 f"{'host/node':>11}")
    for e in entries:
        if not e["fits"]:
            lines.append(f"  {e['label']:<{width}}does not fit: it {e['why_not']}")
            continue
        step = f"{e['step_time_s']:>10.4g}s" if e["step_time_s"] is not None else f"{'-':>11}"
        cost = (f"{e['cost_s']:+.3g} s/step ({e['cost_pct']:+.0f}%)" if e["cost_s"] is not None
                else "-")
        host = gib(e["host_bytes_per_node"]) if e["host_bytes"] else "-"
        lines.append(f"  {e['label']:<{width}}{gib(e['peak_bytes']):>11}{step}  {cost:<22}"
                     f"{host:>11}")
    fast, cheap = p["fastest_allowed"], p["cheapest_allowed"]
    if fast is not None:
        lines += ["", f"With --allow {','.join(p['allow'])}: fastest per step {fast['label']} on "
                      f"{gpus_text(fast['world_size'])}, {fast['step_time_s']:.4g} s; cheapest "
                      f"per step {cheap['label']} on {gpus_text(cheap['world_size'])}, "
                      f"{cheap['gpu_seconds_per_step']:.4g} GPU-s"]
    return lines


def gpus_text(n: int) -> str:
    return f"{n:,} GPU" + ("" if n == 1 else "s")
