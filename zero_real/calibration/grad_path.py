"""The gradient path's host work: what a stage's per-parameter gradient hooks and per-bucket
reductions cost on the host beyond the kernels and collectives the op model and the collective
fits price, measured on the stage's own code (zero_real/stages/replicated.py), so that zerosim
prices it per hook and per bucket on any shape (issue 31: the stages' steps are never fitted;
this is one of their mechanisms, measured by a microbenchmark of its own).

Stages 0-2 run a Python hook on every parameter's gradient (register_post_accumulate_grad_hook):
the stage's bookkeeping (gradient_ready), ZeRO-2's copy into a pooled bucket, and, when a bucket
fills, its reduction (reduce_bucket: the collective, the Recorder splitting the unit's compute
around it, ZeRO-1/2 adding the rank's part into its shard). On a 2-core box that is about a fifth
of a tiny model's step (one process, profiles/cpu_gloo_tiny.json: 5.4 us a hook and 27 us a
bucket at stage 0, 34 and 53 us at stage 2), none of which the unit microbenchmarks
(bench.compute) run.

Per stage, on the calibration scenario's model, built as `zero-real run` builds it: a backward
through a graph that ends in every parameter of the stage's flat buffer (a tied matrix's first
use in a backward call of its own, so that its hook fires twice, as in the model), inside a
Recorder compute segment as DDP.backward runs it, timed with the stage's hooks on and off,
alternately. A row:

    hooks, buckets     hook calls and reduce_bucket calls per backward (counted)
    with_s, without_s  medians of the backward with and without the hooks
    hooks_s            median over iterations of with - without - reduce: the hooks' own work
    reduce_s           median of reduce_bucket's inclusive time per backward
    buckets_s          median over iterations of reduce - its collectives' time (the Recorder's
                       comm events): the buckets' host work beyond their collectives
    idle_s             stages 0-1: median of the backward with the hooks on, not reducing (a
                       micro-step before the last under gradient accumulation); None at 2
    idle_hooks_s       median over iterations of idle - without: the hooks' work there

zerosim/calibration/fit.py (fit_grad_path) divides hooks_s, buckets_s and idle_hooks_s by their
counts.

ZeRO-3 has no such hooks: its host work is each unit's visit (zero3.py: before_forward and
after_forward, before_backward and after_backward): gathering the unit's flat buffers (their
storage re-allocated, the shard copied in), freeing them, allocating, zeroing and binding the
unit's whole gradient, reduce-scattering it and adding the rank's part into the shard. Replayed
without the units' compute, as a step calls them, on the model cut to VISIT_LAYERS blocks at
two or three widths (visit_scenarios: the bytes change, the buffers do not), each visit timed
less its collectives; a row per pass with its counts (the flat buffers of every unit and their
bytes), which fit.fit_grad_path fits per pass with a non-negative line: seconds per flat buffer
and per byte.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import torch

from zero_real.calibration.ops import _scaled
from zero_real.calibration.timing import barrier, sync, until
from zero_real.parts.collectives import Collectives
from zero_real.parts.measure import Recorder
from zero_real.run import watch
from zero_real.run.progress import Progress
from zero_real.run.train import build_stage
from zero_real.stages import STAGES
from zerosim.contract import COMM, PASSES
from zerosim.errors import InputError
from zerosim.units import MiB

HOOKED_STAGES = (0, 1, 2)
"""The stages with a hook per parameter; ZeRO-3 reduces per unit (zero3.py), in after_backward."""
VISIT_SCALES = (4, 2, 1, 0.5, 0.25)
"""Widths of the model whose ZeRO-3 visits may be replayed, the widest first: the held-out runs
change hidden x0.5 and x2, and bytes must outweigh the noise of a visit's fixed work at one of
them; visit_scenarios keeps the VISIT_WIDTHS widest that fit."""
VISIT_WIDTHS = 3
VISIT_LAYERS = 2
"""Blocks of the replayed model: every unit kind (embedding, block, head) visits, and a visit's
work is per unit, so more blocks add rows of the same line, and memory (a 1.3B GPT of 24 layers
replayed whole at x4 width would hold about 316 GB)."""
VISIT_FLOOR_BYTES = 256 * MiB
"""A replay this small fits any device a run would use (a tiny model's x4 is tens of MB)."""


def visit_scenarios(scenario, bound_bytes: float) -> dict[float, object]:
    """The replayed scenarios by width scale: the model cut to VISIT_LAYERS blocks, at the
    VISIT_WIDTHS widest VISIT_SCALES whose ZeRO-3 peak per rank (zerosim's analytic memory) is at
    most max(bound_bytes, VISIT_FLOOR_BYTES); bound_bytes is a run the calibration trains anyway
    (the largest stage-0 memory run), so the replay never needs more memory than it. Fewer than
    two widths cannot part a buffer's cost from a byte's: refused."""
    from zerosim.analytic.memory import stage_memory
    from zerosim.analytic.model import gathered_elements

    bound = max(bound_bytes, VISIT_FLOOR_BYTES)
    m = scenario.model
    fits, sizes = {}, set()
    for scale in VISIT_SCALES:
        model = dataclasses.replace(_scaled(m, scale, scenario.training.seq_len),
                                    layers=min(m.layers, VISIT_LAYERS))
        candidate = dataclasses.replace(scenario, model=model)
        # A small head size rounds several scales to one model (and its bytes): each once.
        elements = gathered_elements(model)
        if elements not in sizes and stage_memory(candidate, 3).peak_bytes <= bound:
            fits[scale] = candidate
            sizes.add(elements)
        if len(fits) == VISIT_WIDTHS:
            break
    if len(fits) < 2:
        raise InputError(f"ZeRO-3's visit replay (the model cut to {VISIT_LAYERS} blocks) fits "
                         f"in {bound / MiB:,.0f} MiB per rank at {len(fits)} width(s) of x"
                         f"{', x'.join(f'{s:g}' for s in VISIT_SCALES)}, where its fit needs "
                         f"two; calibrate a smaller scenario")
    return dict(sorted(fits.items()))


class _Timed:
    """Wraps the engine's reduce_bucket (an instance attribute shadows the class's: the hooks
    and ZeRO-2's pool call self.reduce_bucket) and adds up its inclusive time and calls."""

    def __init__(self, engine):
        self.inner, self.seconds, self.calls = engine.reduce_bucket, 0.0, 0
        engine.reduce_bucket = self

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


def _backward(engine, recorder: Recorder, params: list, device, reducing: bool = True) -> float:
    """One backward into every flat parameter, as a micro-step of DDP.step starts it: the
    gradients zeroed (ZeRO-2: set to None), every bucket empty; its seconds. Not `reducing`: a
    micro-step before the last under gradient accumulation (its hooks only count)."""
    engine.zero_grads()
    engine.last_micro = engine.reducing = reducing
    engine.fired, engine.filled = [0] * len(engine.uses), [0] * len(engine.buckets)
    engine.kept = set()
    # A tied matrix's first use (the head's) reaches its gradient in a backward call of its own,
    # as DDP.backward runs unit by unit: within one graph autograd would sum both uses first.
    graphs = [sum(p.sum() * 1.0 for k, p in enumerate(params) if engine.uses[k] > use)
              for use in reversed(range(max(engine.uses)))]
    sync(device)
    start = time.perf_counter()
    with recorder.compute("backward", 0):
        for graph in graphs:
            graph.backward()
    sync(device)
    return time.perf_counter() - start


def _hooks(engine, on: bool) -> None:
    for handle in engine.hooks:
        handle.remove()
    engine.hooks = ([p.register_post_accumulate_grad_hook(engine._make_hook(k))
                     for k, p in enumerate(engine.flat.params)] if on else [])


def stage_row(stage: int, rank: int, n: int, cfg, device) -> dict:
    """One stage's row: its engine built on the calibration scenario, its backward timed with
    the hooks on and off (each iteration both, in turn), rank 0's medians. A stage that reduces
    only on the last micro-step of gradient accumulation (0 and 1) is timed a third way, hooks
    on and not reducing, as its earlier micro-steps run (`idle_s`, `idle_hooks_s`: the hooks'
    work there); ZeRO-2 reduces on every micro-step (None)."""
    engine, recorder = _engine(cfg.memory_scenarios[(stage, cfg.micro_batches[0])], stage,
                               rank, n, cfg, device)
    reduce = _Timed(engine)
    params = engine.flat.params
    idles = not engine.reduces_every_micro_step
    try:
        def once() -> tuple[float, ...]:
            _hooks(engine, False)
            without = _backward(engine, recorder, params, device)
            _hooks(engine, True)
            idle = _backward(engine, recorder, params, device, reducing=False) if idles else 0.0
            seconds, calls, first = reduce.seconds, reduce.calls, len(recorder.events)
            with_s = _backward(engine, recorder, params, device)
            collective = _collectives_s(recorder, first)
            recorder.events.clear()
            reduced = reduce.seconds - seconds
            hooks = sum(engine.fired)
            return (with_s, without, with_s - without - reduced, reduced,
                    reduced - collective, idle, idle - without, hooks, reduce.calls - calls)

        barrier(device)
        samples = list(zip(*until(once, lambda s: s[0] + s[1] + s[5], device)))
    finally:
        _hooks(engine, False)
    names = ("with_s", "without_s", "hooks_s", "reduce_s", "buckets_s", "idle_s", "idle_hooks_s")
    row = {"processes": n, "stage": stage, "hooks": samples[7][0], "buckets": samples[8][0],
           **{name: statistics.median(v) for name, v in zip(names, samples)},
           "iterations": len(samples[0])}
    if not idles:
        row["idle_s"] = row["idle_hooks_s"] = None
    return row


def _engine(scenario, stage: int, rank: int, n: int, cfg, device):
    recorder = Recorder(rank, device, profile_memory=False)
    watch.instrument(recorder, watch.Heartbeat(cfg.progress_file))  # as train() runs it
    comm = Collectives(cfg.collective_modes[0], rank, n, recorder, cfg.backend,
                       timeout_s=cfg.timeout_s)
    engine, _ = build_stage(scenario, comm, STAGES[stage], recorder=recorder, device=device,
                            seed=0, lr=cfg.lr)
    return engine, recorder


def _collectives_s(recorder: Recorder, first: int) -> float:
    """Seconds of the collectives recorded from event `first` on (the Recorder's comm events)."""
    return sum(e["end_s"] - e["start_s"] for e in recorder.events[first:] if e["stream"] == COMM)


def _visit(recorder, calls) -> float:
    """Seconds of the calls, less the collectives they ran."""
    first = len(recorder.events)
    start = time.perf_counter()
    for call in calls:
        call()
    return time.perf_counter() - start - _collectives_s(recorder, first)


def visit_rows(scale: float, rank: int, n: int, cfg, device) -> list[dict]:
    """ZeRO-3's visits of the replayed model at `scale` x its width (cfg.visit_scenarios), a
    row per pass: the sum over its units' visits (a visit gathers the units prefetch_layers
    ahead too, so a unit's own visit is not its cost; the pass's sum is every unit's), with the
    flat buffers and parameter bytes the pass gathers, one each per unit."""
    scenario = cfg.visit_scenarios[scale]
    engine, recorder = _engine(scenario, 3, rank, n, cfg, device)
    units = range(len(engine.segments))

    def once() -> tuple[float, float]:  # in PASSES' order
        engine.zero_grads()
        engine.last_micro = engine.reducing = True
        forward = sum(_visit(recorder, (lambda s=s: engine.before_forward(s),
                                        lambda s=s: engine.after_forward(s))) for s in units)
        backward = sum(_visit(recorder, (lambda s=s: engine.before_backward(s),
                                         lambda s=s: engine.after_backward(s)))
                       for s in reversed(units))
        recorder.events.clear()
        return forward, backward

    barrier(device)
    samples = list(zip(*until(once, sum, device)))
    groups = [engine.groups[g] for s in units for g in engine.segments[s]]
    counts = {"groups": len(groups), "bytes": sum(g.full_bytes for g in groups)}
    return [{"processes": n, "stage": 3, "pass": phase, "scale": scale, "counts": counts,
             "time_s": statistics.median(times), "iterations": len(times)}
            for phase, times in zip(PASSES, samples)]


def measure_grad_path(rank: int, n: int, cfg, device, progress: Progress) -> list[dict]:
    """A row per hooked stage, and ZeRO-3's visit rows, in this world (bench.measure_world)."""
    if not cfg.visit_scenarios:  # calibrate.prepare plans them; without, stage 3 would go unpriced
        raise ValueError("CalibrationWorld.visit_scenarios is empty (grad_path.visit_scenarios)")
    progress.begin("gradients", len(HOOKED_STAGES) + len(cfg.visit_scenarios))
    rows = []
    for stage in HOOKED_STAGES:
        rows.append(stage_row(stage, rank, n, cfg, device))
        progress.tick(f"stage {stage}")
    for scale in cfg.visit_scenarios:
        rows += visit_rows(scale, rank, n, cfg, device)
        progress.tick(f"stage 3 visits, width x{scale:g}")
    return rows
