"""The model-parallel axes plan searches: tensor parallelism's t, pipeline parallelism's p with
its schedule and chunks, and how the scenario's global batch splits over them.

A candidate is the scenario with some keys set (`Candidate`); this module says which exist and
how they are named, plan_family.py judges and ranks the tensor-parallel ones beside the ZeRO
family, plan_space.py the layouts over t x p x d.

    t     every divisor of gpus_per_node: Megatron-LM's layout inside a node (parallel/tensor.py)
    p     every divisor of N / t that divides the layers (an even split, parallel/pipeline.py)
    sched 1F1B, and the interleaved 1F1B at v = 2 and 4 where p v divides the layers and p the
          micro-batches (scenario/axes.py). GPipe is left out: its bubble is 1F1B's, (p - 1) m
          slots of (t_f + t_b) in (m + p - 1)(t_f + t_b) (Huang et al. 2019; Narayanan et al.
          2021, §2.2.1), and it holds m micro-batches' activations where 1F1B holds p - i
          (parallel/schedule.py), so it is never faster nor smaller

Every candidate trains the scenario's global batch: its d = N / (t p) data-parallel ranks take
the scenario's sequences per rank times (t p) / (t0 p0), split into micro-batch x micro-batches
(Megatron's num_microbatches = global_batch_size / (micro_batch_size x data_parallel_size):
megatron/core/num_microbatches_calculator.py), the micro-batches being a pipeline's m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from zerosim.contract import PIPELINE_SCHEDULES, STAGE_NAMES
from zerosim.analytic.memory import table_stages
from zerosim.frameworks import framework_of
from zerosim.scenario.config import Scenario

_GPIPE, ONE_F_ONE_B, INTERLEAVED = PIPELINE_SCHEDULES
VIRTUAL_STAGES = (2, 4)
"""The interleaved schedule's chunks per stage that plan tries: Narayanan et al. 2021 (§2.2.2)
divide the bubble by v at v times the point-to-point transfers; 2 and 4 are the v their
Figure 12 and Megatron-LM's examples use (--num-layers-per-virtual-pipeline-stage)."""


def largest(fits: Callable[[int], bool], hi: int) -> int:
    """Largest x in 1..hi with fits(x), for fits true up to some x and false after; 0 if none."""
    if not fits(1):
        return 0
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def with_world(scenario: Scenario, gpus: int) -> Scenario:
    """The scenario on `gpus` GPUs: part of one node below a node's worth, else whole nodes.
    Stragglers and degraded links the scenario names beyond the last rank are left out."""
    per_node = scenario.cluster.gpus_per_node
    if gpus <= per_node:
        cluster = replace(scenario.cluster, nodes=1, gpus_per_node=gpus)
    else:
        cluster = replace(scenario.cluster, nodes=gpus // per_node)
    v = scenario.variation
    variation = replace(v, slow_ranks=tuple(r for r in v.slow_ranks if r < gpus),
                        degraded_links=tuple(r for r in v.degraded_links if r < gpus))
    return replace(scenario, cluster=cluster, variation=variation)


@dataclass(frozen=True)
class Candidate:
    allow: str
    stage: int
    settings: tuple[tuple[str, Any], ...]
    """The keys it sets beyond PLAIN, in order ([training]'s, or [parallelism]'s: table_of)."""
    label: str
    group: str = ""
    """What a refusal names in plan's notes, when it refuses more than this candidate (a t
    that the model or the world refuses refuses every stage): "t = 16"; "" names the label."""
    splits: tuple[tuple[int, int], ...] = field(default=(), compare=False)
    """(micro-batch, micro-steps) pairs to try, the smallest micro-batch first; () keeps the
    scenario's."""


def tp_degrees(scenario: Scenario) -> list[int]:
    """The t --allow tp tries: every divisor of gpus_per_node; the scenario's own t too when its
    sequences per rank split more than one way (the plain stages run its own split, so every
    row searches the same micro-batches). Ranks of one tensor-parallel group stay inside a node,
    where NVLink carries their per-layer collectives (Narayanan et al. 2021, §3.3, Takeaway #1:
    tensor model parallelism up to degree g on g-GPU servers)."""
    n, own = scenario.cluster.gpus_per_node, scenario.parallelism.tensor_parallel
    return [t for t in range(1, n + 1)
            if n % t == 0 and (t != own or len(batch_splits(scenario, own)) > 1)]


def tp_candidates(scenario: Scenario) -> list[Candidate]:
    """tensor_parallel = t at each of the framework's stages, with the scenario's global batch
    in each of batch_splits' micro-batches; a t whose sequences per rank are not whole is left
    out (tp_notes)."""
    out = []
    for t in tp_degrees(scenario):
        splits = batch_splits(scenario, t)
        out.extend(Candidate("tp", stage, (("tensor_parallel", t),),
                             f"{STAGE_NAMES[stage]}{t_label(scenario, t)}", f"t = {t}", splits)
                   for stage in framework_of(scenario.training).stages if splits)
    return out


def t_label(scenario: Scenario, t: int) -> str:
    """A candidate label's tensor parallelism: ", t = 8", with ", SP" where the scenario's
    sequence parallelism applies (t > 1)."""
    sp = t > 1 and scenario.parallelism.sequence_parallel
    return f", t = {t}" + (", SP" if sp else "")


def sequences_per_rank(scenario: Scenario, t: int, p: int | None = None) -> int | None:
    """Sequences a data-parallel rank trains per step at t x p (p: the scenario's own when
    None) on the scenario's global batch; None where they are not whole."""
    par, training = scenario.parallelism, scenario.training
    p = par.pipeline_parallel if p is None else p
    own = par.tensor_parallel * par.pipeline_parallel
    sequences, odd = divmod(training.micro_batch * training.gradient_accumulation * t * p, own)
    return None if odd else sequences


def batch_splits(scenario: Scenario, t: int, p: int | None = None) -> tuple[tuple[int, int], ...]:
    """(micro-batch, micro-steps) pairs that train the scenario's global batch at t (and p, the
    scenario's own when None), the smallest micro-batch first; () where it is not whole. At t0
    the N / t0 data-parallel ranks take micro_batch x gradient_accumulation sequences each; at
    t the N / t ranks take t / t0 times those (Megatron's num_microbatches), as any divisor of
    them from the scenario's micro-batch up (or the whole, where they are fewer) times the
    rest in micro-steps. Keeping the micro-batch would give ZeRO-3 t / t0 times the
    micro-steps, each regathering every parameter (Rajbhandari et al. 2020, §7.2.2: a
    parameter all-gather per micro-step's forward and backward)."""
    sequences = sequences_per_rank(scenario, t, p)
    if sequences is None:
        return ()
    least = min(scenario.training.micro_batch, sequences)
    small = [d for d in range(1, math.isqrt(sequences) + 1) if sequences % d == 0]
    every = sorted({*small, *(sequences // d for d in small)})
    return tuple((d, sequences // d) for d in every if d >= least)


def split_label(label: str, micro_batch: int, steps: int) -> str:
    return f"{label}, micro-batch {micro_batch}, {steps} micro-step{'s' * (steps > 1)}"


def tp_notes(scenario: Scenario) -> list[str]:
    """What --allow tp says beside its candidates: the t it left out, and how it compares."""
    own, training = scenario.parallelism.tensor_parallel, scenario.training
    per_rank = f"{training.micro_batch} x {training.gradient_accumulation}"
    notes = [f"--allow tp: skipped t = {t}: the scenario's global batch at t = {own} (micro-"
             f"batch x micro-steps = {per_rank} sequences per data-parallel rank) is {per_rank} "
             f"x {t} / {own} "
             f"sequences per rank at t = {t}, not a whole number"
             for t in tp_degrees(scenario) if not batch_splits(scenario, t)]
    times = "t" if own == 1 else f"t / {own}"
    if not any(batch_splits(scenario, t) for t in tp_degrees(scenario)):
        return notes
    return notes + [f"--allow tp: each tensor-parallel candidate trains the scenario's global "
                    f"batch: its N / t data-parallel ranks take {times} times the sequences, "
                    f"in the micro-batch and micro-steps its label names (the fastest of those "
                    f"that fit), so its step time compares with the plain stages' on "
                    f"{scenario.world_size:,} GPUs"]


def space_degrees(scenario: Scenario, allow: tuple[str, ...]) -> list[int]:
    """The t of the 3-D search: tp_degrees' divisors of a node under --allow tp, else the
    scenario's own."""
    if "tp" not in allow:
        return [scenario.parallelism.tensor_parallel]
    n = scenario.cluster.gpus_per_node
    return [t for t in range(1, n + 1) if n % t == 0]


def pipeline_degrees(ranks: int, layers: int) -> list[int]:
    """The p >= 2 that divide `ranks` (N / t) and the layers: an even split of whole layers
    over whole blocks of ranks (parallel/pipeline.py)."""
    return [p for p in range(2, min(ranks, layers) + 1) if ranks % p == 0 and layers % p == 0]


def schedules(layers: int, p: int, micro_batches: int) -> list[tuple[str, int]]:
    """(schedule, v) pairs a pipeline of p stages and m micro-batches can run (module
    docstring): 1F1B, then the interleaved schedule at each v of VIRTUAL_STAGES whose p v
    chunks split the layers, where p divides m (Megatron's schedules.py asserts it)."""
    out = [(ONE_F_ONE_B, 1)]
    if micro_batches % p == 0:
        out += [(INTERLEAVED, v) for v in VIRTUAL_STAGES if layers % (p * v) == 0]
    return out


def layout_settings(t: int, p: int, schedule: str, v: int, micro_batch: int,
                    micro_batches: int) -> tuple[tuple[str, Any], ...]:
    """A 3-D layout's keys, as Candidate.settings (an even layer split: no pipeline_layers)."""
    return (("tensor_parallel", t), ("pipeline_parallel", p), ("pipeline_schedule", schedule),
            ("virtual_stages", v), ("pipeline_layers", ()), ("micro_batch", micro_batch),
            ("gradient_accumulation", micro_batches))


def layout_label(stage: int, t: int, p: int, d: int, schedule: str, v: int) -> str:
    """'ZeRO-1, t = 8, p = 8, d = 16, interleaved 1F1B (v = 4)'."""
    sched = "1F1B" if schedule == ONE_F_ONE_B else f"interleaved 1F1B (v = {v})"
    return f"{STAGE_NAMES[stage]}, t = {t}, p = {p}, d = {d}, {sched}"


def model_ways(scenario: Scenario) -> int:
    """t x p: the ranks one copy of the model is split over, which divide every world size."""
    return scenario.parallelism.tensor_parallel * scenario.parallelism.pipeline_parallel


def without_pipeline(scenario: Scenario) -> Scenario:
    """The scenario's model and global batch without its own pipeline, on its t alone: what
    --allow's 2-D candidates (ZeRO, TP, the family) are weighed on when --allow pp searches the
    pipelines (plan_space.py). The scenario itself where it has no pipeline, or where its batch
    does not split into its micro-batches over the N / t data-parallel ranks."""
    par, t = scenario.parallelism, scenario.training
    if par.pipeline_parallel == 1:
        return scenario
    sequences = t.micro_batch * t.gradient_accumulation * (scenario.world_size // model_ways(
        scenario))
    per_micro_step = t.micro_batch * scenario.world_size // par.tensor_parallel
    if sequences % per_micro_step:
        return scenario
    return replace(scenario,
                   training=replace(t, gradient_accumulation=sequences // per_micro_step),
                   parallelism=replace(par, pipeline_parallel=1, virtual_stages=1,
                                       pipeline_layers=()))


def plan_stages(scenario: Scenario) -> tuple[int, ...]:
    """The stages planned: the framework's, beside a pipeline those it runs there."""
    return tuple(s for s in framework_of(scenario.training).stages
                 if s in table_stages(scenario))


def most(fits: Callable[[int], bool], hi: int) -> int:
    """largest, doubling from 1 first: the memory model walks every layer of a stage,
    so a bisection from 2**53 / (a layer's parameters) would price models of millions of
    layers before it narrows."""
    if not fits(1):
        return 0
    low = 1
    while low * 2 <= hi and fits(low * 2):
        low *= 2
    return low - 1 + largest(lambda k: fits(low - 1 + k), min(low, hi - low + 1))


def without_axes(scenario: Scenario) -> Scenario:
    """The scenario without its own tensor and pipeline parallelism: what a search over other
    t, p and world sizes builds its versions from (its own t p need not divide them)."""
    return replace(scenario, parallelism=replace(
        scenario.parallelism, tensor_parallel=1, pipeline_parallel=1, virtual_stages=1,
        pipeline_layers=()))

