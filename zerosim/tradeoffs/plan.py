"""`zerosim plan`: which stage, how many GPUs, and how large a model, for a given GPU memory.

Every search here is over the analytic memory model (memory.py: the ZeRO paper's formulas), so
its answers are exactly consistent with `zerosim memory`; the simulator ranks the configurations
that fit, and judges them as `zerosim simulate` does: one whose simulated device memory (the
caching allocator rounds buffers up) passes the GPU's is not called fitting, nor is a fewest GPU
count (review I5b). Per-rank memory depends on the world size alone and never grows with it, and
model memory never shrinks as the model grows, so each search is a bisection. What
`--allow` adds, offload, hybrid sharding, ZeRO++ and tensor parallelism on the scenario's GPUs
with the time each costs, is plan_family.py; pipelines over t x p x d (`--allow pp`) are
plan_space.py. A scenario with its own tensor_parallel = t and pipeline_parallel = p is planned
on the world sizes t p divides, at the stages its framework runs beside a pipeline, its largest
model grown by p v layers at a time (an even split of the stages' chunks).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

from zerosim.contract import STAGE_NAMES
from zerosim.errors import InputError
from zerosim.analytic.memory import stage_memory
from zerosim.analytic.model import param_counts, total_params
from zerosim.frameworks import framework_of
from zerosim.scenario.checks import MAX_VALUE
from zerosim.parallel.mesh import mesh_of
from zerosim.sim.device import overhead_bytes
from zerosim.scenario.config import SHAPE_KEYS, Scenario
from zerosim.scenario.model_table import WINDOW_KEYS
from zerosim.tradeoffs import plan_family, plan_space
from zerosim.tradeoffs.plan_axes import (largest, model_ways, most, plan_stages, with_world,
                                         without_pipeline)
from zerosim.tradeoffs.plan_family import gib, gpus_text, over_text, overflow
from zerosim.tradeoffs.sweep import rows_of

MAX_GPUS = 1 << 20  # a million GPUs: past any real cluster, so "never fits" means never
CONFIRM_STEPS = 8  # GPU counts simulated past the memory model's fewest before giving up


def gpu_count(scenario: Scenario, index: int) -> int:
    """The index-th candidate world size: 1, 2, ..., one node, then whole nodes."""
    per_node = scenario.cluster.gpus_per_node
    return index + 1 if index < per_node else (index - per_node + 2) * per_node


def gpu_index(scenario: Scenario, gpus: int) -> int:
    """Which candidate `gpus` is (gpu_count's inverse)."""
    per_node = scenario.cluster.gpus_per_node
    return gpus - 1 if gpus <= per_node else gpus // per_node + per_node - 2


def _bare(scenario: Scenario, psi: int) -> Scenario:
    """The scenario's model as a bare Ψ of its own layer count (ZeRO-3's gather units)."""
    cleared = (*SHAPE_KEYS, "head_size", *WINDOW_KEYS)  # what a bare Ψ may not carry
    return replace(scenario, model=replace(scenario.model, params=psi,
                                           **{k: None for k in cleared}))


def largest_model(scenario: Scenario, stage: int, budget_bytes: int) -> dict[str, Any]:
    """(a) The largest Ψ whose model states fit, and the largest model that fits whole (states,
    activations at the scenario's micro-batch, buffers). Model states depend on Ψ alone; a shaped
    model grows by whole layers of its own width (embeddings and head stay), a bare Ψ as it is.
    Under tensor parallelism a rank's states depend on the shape (its Megatron slice), so the
    model states' largest model grows by layers too."""
    m = scenario.model
    if model_ways(scenario) > 1:
        return _largest_layers(scenario, stage, budget_bytes)
    states = largest(lambda psi: stage_memory(_bare(scenario, psi), stage).model_states_bytes
                     <= budget_bytes, MAX_VALUE)
    if m.is_bare:
        whole = largest(lambda psi: stage_memory(_bare(scenario, psi), stage).peak_bytes
                        <= budget_bytes, MAX_VALUE)
        return {"max_params_model_states": states, "max_params_whole": whole, "max_layers": None}
    counts = param_counts(m)

    def deep(layers: int) -> Scenario:
        return replace(scenario, model=m.resized(layers))

    layers = largest(lambda n: stage_memory(deep(n), stage).peak_bytes <= budget_bytes,
                     max(1, (MAX_VALUE - counts.total) // counts.per_layer))
    whole = total_params(deep(layers).model) if layers else 0
    return {"max_params_model_states": states, "max_params_whole": whole, "max_layers": layers}


def _largest_layers(scenario: Scenario, stage: int, budget_bytes: int) -> dict[str, Any]:
    """largest_model of a tensor- or pipeline-parallel scenario: whole layers of its own shape
    (p v at a time beside a pipeline, split evenly), for the model states alone and for the
    whole."""
    m, par = scenario.model, scenario.parallelism
    counts = param_counts(m)
    chunks = par.pipeline_parallel * par.virtual_stages if par.pipeline_parallel > 1 else 1
    even = replace(par, pipeline_layers=())

    def deep(n: int) -> Scenario:
        return replace(scenario, model=m.resized(n * chunks), parallelism=even)

    top = max(1, (MAX_VALUE - counts.total) // (counts.per_layer * chunks))
    # Beside a pipeline the memory model walks each stage's layers: search up from 1 (most)
    search = most if chunks > 1 else largest
    states, layers = (search(lambda n: getattr(stage_memory(deep(n), stage), term)
                             <= budget_bytes, top)
                      for term in ("model_states_bytes", "peak_bytes"))
    return {"max_params_model_states": total_params(deep(states).model) if states else 0,
            "max_params_whole": total_params(deep(layers).model) if layers else 0,
            "max_layers": layers * chunks}


def valid_world(scenario: Scenario, index: int) -> tuple[int, Scenario]:
    """The first world size from the index-th on that the scenario's own keys allow: its index,
    the scenario on it (or the refusal of a key no world size satisfies). Solved, not tried:
    trying each size built a scenario for up to shard_group + gpus_per_node sizes at every step of
    the bisection (a shard group of 2**19 took 92 s; review U1)."""
    i = allowed_index(scenario, index)
    return i, with_world(scenario, gpu_count(scenario, i))


def allowed_index(scenario: Scenario, index: int) -> int:
    """The first candidate from the index-th on whose size the shard group g and the tensor-
    parallel degree t divide and, below a node, the hpZ partition h divides too
    (scenario/family.check_scenario: hpZ's partition divides the GPUs of a node, which is the
    world below one node; scenario/axes.py: t divides the world). Below a node the sizes are
    1, 2, ..., n: the next multiple of lcm(g, h, t). From a node on they are k n: k n is a
    multiple of g every g / gcd(g, n) nodes, of t every t / gcd(t, n)."""
    per_node = scenario.cluster.gpus_per_node
    group = scenario.parallelism.shard_group or 1
    tp = model_ways(scenario)
    if index < per_node - 1:
        step = math.lcm(group, max(1, scenario.parallelism.hpz_partition), tp)
        size = -(-(index + 1) // step) * step
        if size < per_node:
            return size - 1
        index = per_node - 1
    nodes_step = math.lcm(group // math.gcd(group, per_node), tp // math.gcd(tp, per_node))
    nodes = -(-(index - per_node + 2) // nodes_step) * nodes_step
    return nodes + per_node - 2


def fewest_gpus(scenario: Scenario, stage: int, gpu_bytes: int) -> dict[str, Any]:
    """(b) The fewest GPUs on which the scenario's model fits whole, or why none do; each world
    size judged on what its GPUs leave beside the CUDA context and NCCL's buffers."""
    def at(index: int):
        """The stage's memory on the index-th world size the scenario allows, and what its GPUs
        leave for it."""
        found, world = valid_world(scenario, index)
        return found, stage_memory(world, stage), gpu_bytes - overhead_bytes(world)

    def fits_at(index: int) -> bool:
        _, row, budget = at(index)
        return row.peak_bytes <= budget

    per_node = scenario.cluster.gpus_per_node
    lo, hi = 0, MAX_GPUS // per_node + per_node - 2  # indices of the first and last candidates
    if not fits_at(hi):
        found, row, budget = at(hi)
        ways = f"{mesh_of(with_world(scenario, gpu_count(scenario, found)), stage).dp_shard:,}"
        how = ("DDP shards nothing, so it always needs" if stage == 0 else
               f"even sharded {ways} ways it needs")
        return {"gpus": None, "peak_bytes": None,
                "why": f"no GPU count fits: {how} {overflow(row, budget)}"}
    while lo < hi:  # per-rank memory never grows with the world size: bisect
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits_at(mid) else (mid + 1, hi)
    found, row, _ = at(lo)
    return {"gpus": gpu_count(scenario, found), "peak_bytes": row.peak_bytes, "why": None}


def candidate_gpus(scenario: Scenario, fewest: list[int | None]) -> list[int]:
    """World sizes worth ranking: whole-node doublings up to the scenario's size, the scenario's
    own, and each stage's fewest; those the tensor-parallel degree divides (scenario/axes.py)."""
    per_node, nodes = scenario.cluster.gpus_per_node, scenario.cluster.nodes
    sizes = {scenario.world_size, *(n for n in fewest if n is not None)}
    doubling = 1
    while doubling <= nodes:
        sizes.add(doubling * per_node)
        doubling *= 2
    return sorted(n for n in sizes if n % model_ways(scenario) == 0)


def _stage_rows(scenario: Scenario, budget_bytes: int, budget: int) -> list[dict[str, Any]]:
    """Per stage the framework runs: the largest model, the fewest GPUs, and whether it fits the
    scenario's GPUs."""
    stages = []
    for stage in plan_stages(scenario):
        row = stage_memory(scenario, stage)
        stages.append({"stage": stage, "name": STAGE_NAMES[stage],
                       **largest_model(scenario, stage, budget),
                       "fewest": fewest_gpus(scenario, stage, budget_bytes),
                       "peak_bytes": row.peak_bytes, "host_bytes": row.host_bytes,
                       "fits": row.peak_bytes <= budget,
                       "why_not": None if row.peak_bytes <= budget
                       else f"needs {overflow(row, budget)}"})
    return stages


def _simulated(scenario: Scenario, gpus: int, stage: int, mode: str,
               cache: dict[tuple[int, int], dict]) -> dict[str, Any]:
    """The stage's sweep row on `gpus` GPUs (sweep.rows_of: memory and the simulated step), each
    simulated once however many questions plan asks of it."""
    if (gpus, stage) not in cache:
        cache[gpus, stage] = rows_of(with_world(scenario, gpus), [stage], {}, mode)[0]
    return cache[gpus, stage]


def _rank(scenario: Scenario, sizes: list[int], budget_bytes: int, mode: str,
          done: Callable[[], None], cache: dict) -> tuple[list[dict], list[str]]:
    """Each world size's fitting stages, simulated; a world zerosim refuses is a note. A stage
    fits as simulate judges it: the memory model's peak in what the CUDA context and NCCL's
    buffers leave, and the simulated device memory (the caching allocator's segments, which
    round the buffers up, with the context and buffers) in the GPU's memory; one that passes
    the first and not the second is a note, not a configuration (review I5b)."""
    configs, notes, over = [], [], []
    for gpus in sizes:
        try:
            world = with_world(scenario, gpus)
            room = budget_bytes - overhead_bytes(world)
            rows = [_simulated(scenario, gpus, stage, mode, cache)
                    for stage in plan_stages(scenario)
                    if stage_memory(world, stage).peak_bytes <= room]
            configs.extend(r for r in rows if r["device_bytes"] <= budget_bytes)
            over.extend(r for r in rows if r["device_bytes"] > budget_bytes)
        except InputError as exc:  # e.g. too many ranks to simulate one by one
            notes.append(f"{gpus} GPUs not ranked: {exc}")
        done()
    if over:
        notes.append(f"not ranked, as simulate says they do not fit: "
                     + ", ".join(f"{r['stage_name']} on {gpus_text(r['world_size'])} (the memory "
                                 f"model's peak fits, but the device takes "
                                 f"{over_text(r['device_bytes'], budget_bytes)})" for r in over)
                     + "; the caching allocator rounds each buffer up to its blocks and segments")
    return configs, notes


def _confirm_fewest(scenario: Scenario, stages: list[dict], budget_bytes: int, mode: str,
                    cache: dict, progress: Callable | None = None) -> list[str]:
    """Each stage's fewest GPU count (the memory model's) as simulate judges it: where the
    simulated device memory passes the GPU's, the next counts up, at most CONFIRM_STEPS of them
    (the allocator's rounding is a few blocks, so the next count or two fit)."""
    notes = []
    for done, entry in enumerate(stages):
        if progress is not None:  # under jitter each simulation takes seconds
            progress(done, len(stages), "stages' fewest GPU counts simulated")
        fewest = entry["fewest"]
        if fewest["gpus"] is None:
            continue
        index, first = gpu_index(scenario, fewest["gpus"]), fewest["gpus"]
        tried = 0
        try:
            for tried in range(CONFIRM_STEPS):
                gpus = gpu_count(scenario, index)
                row = _simulated(scenario, gpus, entry["stage"], mode, cache)
                if row["device_bytes"] <= budget_bytes:
                    break
                index = allowed_index(scenario, index + 1)
            else:
                fewest.update(gpus=None, peak_bytes=None, why=(
                    f"the memory model fits it on {first:,} GPUs, but simulate says no there "
                    f"nor on the next {CONFIRM_STEPS - 1} counts (device memory over "
                    f"{gib(budget_bytes)})"))
                continue
        except InputError as exc:
            if tried:  # simulate said no on `tried` counts and cannot run the next one
                fewest.update(gpus=None, peak_bytes=None, why=(
                    f"the memory model fits it on {first:,} GPUs, but simulate says no on the "
                    f"{tried} count(s) it could run (device memory over {gib(budget_bytes)}) and "
                    f"cannot run the next: {exc}"))
            continue  # the first count cannot be simulated: the model's answer stands
        if gpus != first:
            fewest.update(gpus=gpus, peak_bytes=row["peak_bytes"])
            notes.append(f"{entry['name']}: the memory model fits it on {gpus_text(first)}, but "
                         f"simulate says no there (the caching allocator rounds the buffers up "
                         f"to its blocks and segments): {gpus_text(gpus)} is the fewest that "
                         f"simulate says fit")
    return notes


def _simulated_misfits(scenario: Scenario, stages: list[dict], budget_bytes: int,
                       cache: dict) -> None:
    """The stages that fit the scenario's GPUs by the memory model, but not as simulated."""
    for entry in stages:
        row = cache.get((scenario.world_size, entry["stage"]))
        if entry["fits"] and row is not None and row["device_bytes"] > budget_bytes:
            entry["fits"] = False
            entry["why_not"] = (f"needs {over_text(row['device_bytes'], budget_bytes)} of "
                                f"device memory as simulated (the memory model's peak "
                                f"{gib(row['peak_bytes'])} fits; the caching allocator rounds "
                                f"the buffers up to its blocks and segments)")


def _notes(scenario: Scenario, stages: list[dict], configs: list[dict]) -> list[str]:
    notes = []
    named = (*scenario.variation.slow_ranks, *scenario.variation.degraded_links)
    if named and any(c["world_size"] <= max(named) for c in configs):
        notes.append("ranks that [variation] names beyond a smaller world's last rank are left "
                     "out of its simulation")
    if any(s["host_bytes"] for s in stages):
        notes.append(f"optimizer_offload = {scenario.training.optimizer_offload}: host memory "
                     f"per GPU (" + ", ".join(f"{s['name']} {gib(s['host_bytes'])}" for s in
                                              stages if s["host_bytes"]) +
                     ") is not in the GPU memory budget")
    if any(s["max_params_model_states"] == MAX_VALUE or s["max_params_whole"] == MAX_VALUE
           for s in stages):
        notes.append(f"a largest model of {params_text(MAX_VALUE)} is zerosim's limit on Ψ "
                     f"(2**53), not the memory's")
    return notes


def plan(scenario: Scenario, budget_bytes: int, mode: str = "auto",
         progress: Callable[..., None] | None = None,
         allow: tuple[str, ...] = ()) -> dict[str, Any]:
    """What `zerosim plan --json` prints for a GPU of `budget_bytes` (its whole memory: the CUDA
    context and NCCL's buffers are taken first). `progress(done, total, unit)` before each
    stage's fewest GPU count is simulated, then after each GPU count simulated (jitter makes
    each take seconds) and after each --allow candidate simulated (plan_family); `allow` names
    those schemes."""
    overhead = overhead_bytes(scenario)
    budget = budget_bytes - overhead  # what the buffers may take on the scenario's GPUs
    stages = _stage_rows(scenario, budget_bytes, budget)
    flat = without_pipeline(scenario) if "pp" in allow else scenario
    entries, fitting, family_notes = plan_family.consider(flat, allow, budget, budget_bytes)
    timed = scenario.training.seq_len is not None  # a bare Ψ without a sequence has no step time
    cache: dict[tuple[int, int], dict] = {}
    confirmed = (_confirm_fewest(scenario, stages, budget_bytes, mode, cache, progress)
                 if timed else [])
    sizes = candidate_gpus(scenario, [s["fewest"]["gpus"] for s in stages]) if timed else []
    fitting = fitting if timed else []
    count = iter(range(1, len(sizes) + len(fitting) + 1))
    unit = "GPU counts" + (" and candidates" if allow else "")

    def done() -> None:
        step = next(count)
        if progress is not None:
            progress(step, len(sizes) + len(fitting), unit)
    configs, notes = _rank(scenario, sizes, budget_bytes, mode, done, cache)
    _simulated_misfits(scenario, stages, budget_bytes, cache)
    family_notes += plan_family.rank(entries, fitting, mode, done, budget_bytes)
    notes += confirmed + _notes(scenario, stages, configs)
    pick = {
        "fastest": min(configs, key=lambda r: (r["step_time_s"], r["world_size"], r["stage"]),
                       default=None),
        "cheapest": min(configs, key=lambda r: (r["gpu_seconds_per_step"], r["world_size"],
                                                r["stage"]), default=None)}
    family = {}
    if allow:
        space = (plan_space.search(scenario, allow, budget_bytes, mode, progress)
                 if "pp" in allow else None)
        base = plan_family.cost(entries, configs, scenario.world_size)
        family = {"allow": list(allow), "candidates": entries,
                  "baseline": _config(base) if base else None,
                  **plan_family.picks([_config(r) for r in configs],
                                      entries + (space["layouts"] if space else []))}
        if space is not None:
            family["pipeline"] = space
            family_notes += space["notes"]
    return {"scenario": scenario.source, "model": scenario.model.name,
            "params": total_params(scenario.model), "world_size": scenario.world_size,
            "gpus_per_node": scenario.cluster.gpus_per_node,
            "gpu_memory_bytes": budget_bytes, "overhead_bytes": overhead,
            "micro_batch": scenario.training.micro_batch,
            "seq_len": scenario.training.seq_len, "stages": stages,
            **({"tensor_parallel": tp} if (tp := scenario.parallelism.tensor_parallel) > 1
               else {}),
            **({"pipeline_parallel": pp, "pipeline_schedule":
                scenario.parallelism.pipeline_schedule}
               if (pp := scenario.parallelism.pipeline_parallel) > 1 else {}),
            "configurations": [_config(r) for r in configs], "notes": notes + family_notes,
            **{k: _config(r) if r else None for k, r in pick.items()}, **family}


def _config(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("stage", "stage_name", "world_size", "peak_bytes", "step_time_s",
                                "gpu_seconds_per_step", "tokens_per_step", "exposed_comm_s",
                                "comm_bytes_per_rank_total")}


def params_text(psi: int) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if psi >= size:
            return f"{psi / size:.3g}{unit}"
    return f"{psi:,}"


def format_plan(p: dict[str, Any]) -> str:
    """`plan`'s result as `zerosim plan` prints it."""
    budget, n = p["gpu_memory_bytes"], p["world_size"]
    seq = f" x {p['seq_len']} tokens" if p["seq_len"] else ""
    tp = p.get("tensor_parallel", 1)
    seq += f", tensor parallel t = {tp}" if tp > 1 else ""
    pp = p.get("pipeline_parallel", 1)
    seq += f", pipeline p = {pp} ({p['pipeline_schedule']})" if pp > 1 else ""
    lines = [f"zerosim plan: {p['model'] or p['scenario']} (Ψ = {params_text(p['params'])}) on "
             f"{n} GPUs, {gib(budget)} per GPU, micro-batch {p['micro_batch']}{seq}",
             f"({gib(p['overhead_bytes'])} of each GPU is the CUDA context and NCCL's buffers: "
             f"{gib(budget - p['overhead_bytes'])} left for the model)", "",
             f"Largest model that fits on {n} GPUs:",
             f"  {'stage':<8}{'model states only':>20}{'whole (+ activations, buffers)':>34}"]
    for s in p["stages"]:
        layers = f" ({s['max_layers']} layers)" if s["max_layers"] is not None else ""
        whole = params_text(s["max_params_whole"]) + layers if s["max_params_whole"] else "none"
        lines.append(f"  {s['name']:<8}{params_text(s['max_params_model_states']):>20}{whole:>34}")
    lines += ["", f"Fewest GPUs for this model ({params_text(p['params'])}):"]
    for s in p["stages"]:
        f = s["fewest"]
        lines.append(f"  {s['name']:<8}" + (f"{f['gpus']:>6} GPUs, peak {gib(f['peak_bytes'])} "
                                            f"per GPU" if f["gpus"] else f"  {f['why']}"))
    misfits = [s for s in p["stages"] if not s["fits"]]
    lines += ["", f"On {n} GPUs: " + (", ".join(s["name"] for s in p["stages"] if s["fits"])
                                       or "no stage") + " fit" + ("s" if sum(s["fits"] for s in
                                                                             p["stages"]) == 1 else "")]
    lines += [f"  {s['name']} does not fit: it {s['why_not']}" for s in misfits]
    configs = p["configurations"]
    if p["seq_len"] is None:
        lines += ["", "No step times: a bare-Ψ model needs training.seq_len to be simulated."]
    elif not configs:
        lines += ["", "No configuration fits, so none is ranked."]
    else:
        lines += ["", f"Configurations that fit ({len(configs)}, micro-batch "
                      f"{p['micro_batch']} per GPU):",
                  f"  {'stage':<8}{'GPUs':>6}{'peak/GPU':>14}{'step':>11}{'GPU-s/step':>12}"
                  f"{'tokens/s':>12}"]
        for c in configs:
            lines.append(f"  {c['stage_name']:<8}{c['world_size']:>6}{gib(c['peak_bytes']):>14}"
                         f"{c['step_time_s']:>10.4g}s{c['gpu_seconds_per_step']:>12.4g}"
                         f"{c['tokens_per_step'] / c['step_time_s']:>12.4g}")
        fast, cheap = p["fastest"], p["cheapest"]
        lines += ["", f"Fastest per step: {fast['stage_name']} on {gpus_text(fast['world_size'])}, "
                      f"{fast['step_time_s']:.4g} s (also the fewest GPU-seconds per token: "
                      f"every GPU takes the same tokens per step)",
                  f"Cheapest per step: {cheap['stage_name']} on {gpus_text(cheap['world_size'])}, "
                  f"{cheap['gpu_seconds_per_step']:.4g} GPU-s"]
    if "allow" in p:
        lines += plan_family.format_candidates(p)
    if "pipeline" in p:
        lines += plan_space.format_space(p["pipeline"], n)
    lines += [f"note: {note}" for note in p["notes"]]
    return "\n".join(lines)
