"""`zerosim plan --allow pp` (and tp,pp): the planner over the 3-D space, t x p x d with the ZeRO
stage a framework runs beside a pipeline, on the scenario's GPUs at its global batch.

A cell is (t, p, stage) with d = N / (t p) (plan_axes.py says which t and p exist); its
versions are each (schedule, v) of plan_axes.schedules at each batch split of the global batch
(plan_axes.batch_splits: micro-batch x m micro-batches). The search in four steps:

1. Memory prunes (analytic/memory.stage_memory: the worst pipeline stage, exact and cheap). A
   cell fits when its smallest version does, 1F1B at the smallest micro-batch: 1F1B holds
   p - i micro-batches' activations on stage i, the interleaved schedule the activations of
   w + 1 chunks of 1/v of a stage's layers, w = 2(p - i - 1) + (v - 1) p, more on stage 0
   (parallel/schedule.py), and every term grows with the micro-batch. A cell that does not fit
   is a why-not line with the memory that rules it out.
2. A bound ranks the fitting versions: the ideal step, the model's FLOPs of a GPU's tokens over
   its peak (the same on every layout of N GPUs at one global batch), times 1 + the bubble
   (p - 1) / (v m) (Narayanan et al. 2021, §2.2.1-2.2.2), plus a ring all-reduce of a stage's
   gradients over its d ranks, 2 (d - 1) / d of its bytes over the link that carries them
   (Thakur et al. 2005), none of it hidden.
3. The first PP_SIMULATED versions by the bound are simulated (sim/engine.simulate), one per
   schedule of a cell at its smallest micro-batch that fits; each cell's row is its fastest.
   Then each of the REFINED fastest cells walks its micro-batch up (same schedule) while that
   is faster, as plan_family.rank does: the bound ignores that small GEMMs run slower.
4. The largest model (whole layers of the scenario's width, a multiple of p) and the fewest GPUs
   (t p d for the least d) over every (t, p) at the highest stage the framework runs beside a
   pipeline, in the memory model (plan_limits.py, which also builds and judges each version
   and holds the bound); the fewest simulated once, on the same sequences per rank.

Safe and not: a version past the first PP_SIMULATED by the bound is not simulated, so a layout
whose bubble is larger but whose communication the bound overcounts (a reduction the last
micro-batch's backward hides, the tensor-parallel collectives it leaves out) may be missed; the
unsimulated cells are counted in a note. Simulating is cheap (tens of milliseconds a version at
175B), so the bound only keeps the search's time independent of the number of layouts.
"""

from __future__ import annotations

from typing import Any, Callable

from zerosim.errors import InputError
from zerosim.frameworks import framework_of
from zerosim.scenario.config import Scenario
from zerosim.tradeoffs.plan_axes import (ONE_F_ONE_B, batch_splits, pipeline_degrees, schedules,
                                         space_degrees)
from zerosim.tradeoffs.plan_family import RANKED, gib, gpus_text, over_text
from zerosim.tradeoffs.plan_limits import (bound_s, fewest_gpus, judged, largest_model,
                                           layout_version)
from zerosim.tradeoffs.sweep import rows_of

PP_SIMULATED = 24
"""Versions simulated by the bound's order (module docstring, step 3)."""
REFINED = 3
"""Fastest cells whose larger micro-batches are simulated too."""


def _cells(scenario: Scenario, allow: tuple[str, ...]):
    """(t, p, stage) of every cell on the scenario's GPUs, t and p as plan_axes names them."""
    world, layers = scenario.world_size, scenario.model.n_layers
    stages = framework_of(scenario.training).pipeline_stages
    return [(t, p, stage) for t in space_degrees(scenario, allow) if world % t == 0
            for p in pipeline_degrees(world // t, layers) for stage in stages]


def consider(scenario: Scenario, allow: tuple[str, ...], gpu_bytes: int
             ) -> tuple[list[dict], list[dict], list[str]]:
    """Step 1: each cell's entry (its smallest version, judged), the fitting versions to rank
    (each schedule's smallest micro-batch that fits), and notes on the cells zerosim refuses."""
    entries, fitting, refused = [], [], {}
    for t, p, stage in _cells(scenario, allow):
        splits = batch_splits(scenario, t, p)
        if not splits:
            refused.setdefault(f"t = {t}, p = {p}: the global batch is not a whole number of "
                               f"sequences per data-parallel rank", None)
            continue
        try:
            found = [_first_fit(scenario, t, p, stage, schedule, v, splits, gpu_bytes)
                     for schedule, v in schedules(scenario.model.n_layers, p, splits[0][1])]
        except InputError as exc:
            refused.setdefault(f"t = {t}, p = {p}: {' '.join(str(exc).split())}", None)
            continue
        first = found[0][0]
        entries.append(first)
        fitting += [fit for _, fit in found if fit is not None]
    notes = [f"--allow pp: skipped {why}" for why in refused]
    return entries, fitting, notes


def _first_fit(scenario: Scenario, t: int, p: int, stage: int, schedule: str, v: int,
               splits: tuple[tuple[int, int], ...], gpu_bytes: int):
    """(the schedule's version at the smallest micro-batch, the smallest that fits or None):
    a larger micro-batch only holds more (step 1), so the walk stops at the first misfit."""
    first = None
    for micro_batch, m in splits:
        if schedule != ONE_F_ONE_B and m % p:
            continue
        version = judged(layout_version(scenario, t, p, stage, schedule, v, micro_batch, m),
                         gpu_bytes)
        first = first or version
        if version["fits"]:
            return first, version
        break
    return first, None


def rank(scenario: Scenario, fitting: list[dict], entries: list[dict], gpu_bytes: int,
         mode: str, done: Callable[[], None]) -> tuple[list[dict], list[str]]:
    """Steps 2 and 3: the ranked rows (fastest first) and notes; `done()` after each
    simulation."""
    order = sorted(fitting, key=lambda f: (bound_s(f), f["tensor_parallel"], -f["stage"]))
    best: dict[tuple, dict] = {}
    notes: list[str] = []
    for version in order[:PP_SIMULATED]:
        _keep(best, _simulated(version, gpu_bytes, mode, notes), done)
    for row in sorted((r for r in best.values() if r["fits"]),
                      key=lambda r: r["step_time_s"])[:REFINED]:
        _refine(scenario, row, best, gpu_bytes, mode, notes, done)
    over = {key[1:]: best.pop(key) for key in [k for k in best if k[0] == "over"]}
    ranked = sorted(best.values(), key=lambda r: (r["step_time_s"], r["label"]))
    left = len({_cell(f) for f in order} - set(best) - set(over))
    if left:
        notes.append(f"--allow pp: {left} fitting layout(s) not simulated: past the first "
                     f"{PP_SIMULATED} by the bound (ideal compute x (1 + bubble) + the "
                     f"stage's gradient all-reduce)")
    for entry in entries:
        entry.update(best.get(_cell(entry)) or over.get(_cell(entry)) or {})
    return ranked, notes


def _cell(version: dict[str, Any]) -> tuple[int, int, int]:
    return version["tensor_parallel"], version["pipeline_parallel"], version["stage"]


def _keep(best: dict, row: dict | None, done: Callable[[], None]) -> None:
    done()
    if row is not None and not row["fits"]:
        best.setdefault(("over", *_cell(row)), row)
    elif row is not None and (
            _cell(row) not in best or row["step_time_s"] < best[_cell(row)]["step_time_s"]):
        best[_cell(row)] = row


def _simulated(version: dict[str, Any], gpu_bytes: int, mode: str,
               notes: list[str]) -> dict[str, Any] | None:
    """The version with its simulated step; not fitting where the simulated device memory
    passes the GPU's, as simulate judges it; None where zerosim cannot simulate it."""
    try:
        sim = rows_of(version["built"], [version["stage"]], {}, mode)[0]
    except InputError as exc:
        notes.append(f"{version['label']} not ranked: {exc}")
        return None
    row = {**version, **{key: sim[key] for key in RANKED}}
    if sim["device_bytes"] > gpu_bytes:
        row.update(fits=False, why_not=f"needs {over_text(sim['device_bytes'], gpu_bytes)} of "
                                       f"device memory as simulated")
    return row


def _refine(scenario: Scenario, row: dict, best: dict, gpu_bytes: int, mode: str,
            notes: list[str], done: Callable[[], None]) -> None:
    """Step 3's walk: the cell's larger micro-batches at its schedule, while each fits and is
    faster than the one before."""
    t, p, stage = _cell(row)
    previous = row
    for micro_batch, m in batch_splits(scenario, t, p):
        if micro_batch <= row["micro_batch"] or (row["schedule"] != ONE_F_ONE_B and m % p):
            continue
        version = judged(layout_version(scenario, t, p, stage, row["schedule"],
                                        row["virtual_stages"], micro_batch, m), gpu_bytes)
        if not version["fits"]:
            return
        found = _simulated(version, gpu_bytes, mode, notes)
        _keep(best, found, done)
        if found is None or not found["fits"] or \
                found["step_time_s"] >= previous["step_time_s"]:
            return
        previous = found


def search(scenario: Scenario, allow: tuple[str, ...], gpu_bytes: int, mode: str = "auto",
           progress: Callable[..., None] | None = None) -> dict[str, Any]:
    """The four steps on the scenario (module docstring); `progress(done, total, unit)` after
    each simulation."""
    if scenario.model.is_bare or scenario.training.seq_len is None:
        return {"layouts": [], "misfits": [], "largest": None, "fewest": None, "fastest": None,
                "cheapest": None, "notes": ["--allow pp: a pipeline splits a shaped model's "
                                            "layers and is simulated at a sequence length: "
                                            "give [model]'s shape and training.seq_len"]}
    entries, fitting, notes = consider(scenario, allow, gpu_bytes)
    count = iter(range(1, 1 << 30))
    total = min(len(fitting), PP_SIMULATED) + REFINED + 1

    def done() -> None:
        step = next(count)
        if progress is not None:
            progress(min(step, total), total, "pipeline layouts simulated")
    ranked, more = rank(scenario, fitting, entries, gpu_bytes, mode, done)
    fewest = fewest_gpus(scenario, allow, gpu_bytes)
    if fewest is not None:
        fewest = _simulated(fewest, gpu_bytes, mode, more)
        done()
    priced = ranked + ([fewest] if fewest is not None and fewest["fits"] else [])
    cheapest = min(priced, key=lambda r: (r["gpu_seconds_per_step"] / r["tokens_per_step"],
                                          r["world_size"]), default=None)
    return {"layouts": [public(r) for r in ranked],
            "misfits": [public(e) for e in entries if not e["fits"]],
            "largest": largest_model(scenario, allow, gpu_bytes),
            "fewest": public(fewest) if fewest else None,
            "fastest": public(ranked[0]) if ranked else None,
            "cheapest": public(cheapest) if cheapest else None, "notes": notes + more}


def public(row: dict[str, Any]) -> dict[str, Any]:
    """A row as plan's result shows it: no scenario or memory object (JSON)."""
    return {k: v for k, v in row.items() if k not in ("built", "row", "room")}


def format_space(space: dict[str, Any], world: int) -> list[str]:
    """The lines of the 3-D search: the ranked layouts, the largest model, the fewest GPUs,
    the fastest and the cheapest, and why each cell that does not fit does not."""
    lines = ["", f"Pipeline layouts on {gpus_text(world)} (t x p x d, the scenario's global "
                 f"batch), ranked by simulated step (memory: the worst pipeline stage):"]
    rows = space["layouts"]
    if rows:
        width = max(len(r["label"]) for r in rows) + 2
        lines.append(f"  {'layout':<{width}}{'mb':>4}{'m':>6}{'bubble':>8}{'peak/GPU':>12}"
                     f"{'step':>11}{'GPU-s/step':>12}")
        lines += [f"  {r['label']:<{width}}{r['micro_batch']:>4}{r['micro_batches']:>6}"
                  f"{r['bubble']:>8.1%}{gib(r['peak_bytes']):>12}{r['step_time_s']:>10.4g}s"
                  f"{r['gpu_seconds_per_step']:>12.4g}" for r in rows]
    else:
        lines.append("  none fits")
    lines += [f"  {e['label']} does not fit: it {e['why_not']}" for e in space["misfits"]]
    big, few = space["largest"], space["fewest"]
    if big:
        lines.append(f"Largest model with a pipeline on {gpus_text(world)}: {big['params']:,} "
                     f"parameters ({big['layers']} layers), t = {big['tensor_parallel']}, "
                     f"p = {big['pipeline_parallel']}, 1F1B")
    if few:
        step = (f", {few['step_time_s']:.4g} s/step" if few["step_time_s"] is not None else "")
        lines.append(f"Fewest GPUs with a pipeline: {gpus_text(few['world_size'])}, "
                     f"{few['label']}, peak {gib(few['peak_bytes'])}{step}")
    for name in ("fastest", "cheapest"):
        r = space[name]
        if r:
            lines.append(f"{name.capitalize()} with a pipeline: {r['label']} on "
                         f"{gpus_text(r['world_size'])}, micro-batch {r['micro_batch']} x "
                         f"{r['micro_batches']}, {r['step_time_s']:.4g} s/step, "
                         f"{r['gpu_seconds_per_step'] / r['tokens_per_step'] * 1e3:.4g} "
                         f"GPU-ms/token, peak {gib(r['peak_bytes'])}")
    return lines
