"""DeepSpeed ZeRO-3's fetch plan: which parameters each module visit all-gathers, prefetches and
releases, and where the gradient buckets are reduce-scattered, in a steady-state micro-batch.

Read off DeepSpeed's source at commit edaa722 (0.19.6; the same algorithm and defaults in 0.6-0.7,
2022); docs/research/deepspeed_zero3_fetch.md cites each step to its lines
(partitioned_param_coordinator.py: fetch_sub_module, __params_to_release; parameter_offload.py:
the hooks and the persistence test; stage3.py: the reduce buckets and _post_step):
- every module visit (forward, a checkpointed block's recomputation, backward) fetches the
  module's own parameters (recurse=False) that are not gathered, in one all-gather (coalesced into
  one flat buffer when there are several), waits for them, then prefetches along the recorded
  trace up to min(max_live - live, prefetch bucket) elements in one more all-gather;
- after the visit, each of its parameters is released unless the trace reuses it within
  max_reuse_distance elements or a prefetch already claimed it for a later visit;
- parameters of at most param_persistence_threshold elements persist: kept whole on every rank,
  never gathered in the step, and re-gathered after each optimizer step, one blocking all-gather
  each;
- each gradient, once final, is copied into a bucket of reduce_bucket_size elements, flushed by
  one reduce-scatter before it would overflow and at the end of backward.

This module is arithmetic on parameter sizes: the analytic model says which modules a model has
(analytic/model.unit_modules) and the simulator runs the plan (sim/stages/deepspeed.py).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

# DeepSpeed's defaults (deepspeed/runtime/zero/config.py at edaa722, lines 79-140; v0.6.0's
# constants.py lines 99-112): elements, not bytes.
PREFETCH_BUCKET = 50_000_000          # stage3_prefetch_bucket_size
MAX_LIVE = 1_000_000_000              # stage3_max_live_parameters
MAX_REUSE_DISTANCE = 1_000_000_000    # stage3_max_reuse_distance
PERSISTENCE_THRESHOLD = 100_000       # stage3_param_persistence_threshold (<=: inclusive)
REDUCE_BUCKET = 500_000_000           # reduce_bucket_size


@dataclass(frozen=True)
class Visit:
    """One module visit of the trace: its gather unit, its pass ("forward", or "backward" for a
    block's recomputation and its backward), its own parameters (ids into the sizes list) and
    its share of the unit's compute in that pass."""

    unit: int
    phase: str
    params: tuple[int, ...]
    share: float = 0.0
    recompute: bool = False


@dataclass(frozen=True)
class Gather:
    """One all-gather: issued at visit `visit` (before its compute), of `params`."""

    visit: int
    params: tuple[int, ...]
    elements: int
    """The gathered parameters' elements (the output, per rank)."""
    prefetch: bool


@dataclass(frozen=True)
class FetchPlan:
    """What one steady-state micro-batch gathers, releases and reduces (DeepSpeed ZeRO-3)."""

    persistent: frozenset[int]
    gathers: tuple[Gather, ...]
    releases: tuple[tuple[int, ...], ...]
    """Per visit, the parameters released once it is done (the last visit: every one left)."""
    peak_live_elements: int
    """The most non-persistent elements gathered at once."""
    reduce_scatters: tuple[tuple[int, int], ...]
    """(visit during which it is flushed, elements), in order."""
    post_step_gathers: tuple[int, ...]
    """The persistent parameters' sizes: one blocking all-gather each after the step."""


def persistent_params(sizes: list[int], threshold: int) -> frozenset[int]:
    """Parameters of at most `threshold` elements (parameter_offload.py: ds_numel <= threshold;
    model_persistence_threshold's default, sys.maxsize, caps nothing)."""
    return frozenset(p for p, n in enumerate(sizes) if n <= threshold)


def fetch_plan(visits: list[Visit], sizes: list[int], *, prefetch_bucket: int = PREFETCH_BUCKET,
               max_live: int = MAX_LIVE, max_reuse: int = MAX_REUSE_DISTANCE,
               threshold: int = PERSISTENCE_THRESHOLD,
               reduce_bucket: int = REDUCE_BUCKET) -> FetchPlan:
    """The steady-state plan of one micro-batch over `visits` (the trace DeepSpeed recorded)."""
    persistent = persistent_params(sizes, threshold)
    queue = [(p, s) for s, visit in enumerate(visits) for p in sorted(visit.params)]
    cursor = 0  # the trace queue's head
    claimed: dict[int, int] = {}  # last[p]: the furthest visit a pop covered
    live: set[int] = set()
    n_live = peak = 0
    gathers: list[Gather] = []
    releases: list[tuple[int, ...]] = []
    reused = _Reuse(visits, sizes, max_reuse)

    def gather(s: int, params: list[int], prefetch: bool) -> None:
        nonlocal n_live, peak
        elements = sum(sizes[p] for p in params)
        gathers.append(Gather(s, tuple(params), elements, prefetch))
        live.update(params)
        n_live += elements
        peak = max(peak, n_live)

    for s, visit in enumerate(visits):
        need = [p for p in sorted(visit.params) if p not in persistent and p not in live]
        if need:
            gather(s, need, False)
        while cursor < len(queue) and queue[cursor][1] <= s:  # this visit's own entries
            p, at = queue[cursor]
            claimed[p] = max(claimed.get(p, -1), at)
            cursor += 1
        budget, batch, acc = min(max_live - n_live, prefetch_bucket), [], 0
        while cursor < len(queue) and acc < budget:
            p, at = queue[cursor]
            cursor += 1
            claimed[p] = max(claimed.get(p, -1), at)
            if p not in persistent and p not in live and p not in batch:
                batch.append(p)
                acc += sizes[p]
        if batch:
            gather(s, batch, True)
        released = tuple(p for p in sorted(visit.params) if p in live
                         and claimed.get(p, -1) <= s and not reused(p, s + 1))
        if s == len(visits) - 1:
            released = tuple(sorted(live))  # the epilogue frees what is left (the embedding)
        for p in released:
            live.discard(p)
            n_live -= sizes[p]
        releases.append(released)
    return FetchPlan(persistent=persistent, gathers=tuple(gathers), releases=tuple(releases),
                     peak_live_elements=peak,
                     reduce_scatters=_reduce_buckets(visits, sizes, reduce_bucket),
                     post_step_gathers=tuple(sizes[p] for p in sorted(persistent)))


class _Reuse:
    """Whether a parameter is in a visit from `start` on, scanned while the scanned visits'
    elements (every parameter of each, counted before it) stay under the distance: the next
    visit using it, found by bisection, against a running sum of the trace's elements."""

    def __init__(self, visits: list[Visit], sizes: list[int], distance: int) -> None:
        self.distance = distance
        self.before = [0]  # elements of the visits before each
        self.uses: dict[int, list[int]] = {}
        for s, visit in enumerate(visits):
            self.before.append(self.before[-1] + sum(sizes[q] for q in visit.params))
            for q in visit.params:
                self.uses.setdefault(q, []).append(s)

    def __call__(self, p: int, start: int) -> bool:
        uses = self.uses.get(p, [])
        i = bisect_left(uses, start)
        return i < len(uses) and self.before[uses[i]] - self.before[start] < self.distance


def _reduce_buckets(visits: list[Visit], sizes: list[int],
                    bucket: int) -> tuple[tuple[int, int], ...]:
    """Each gradient is final after the last backward visit that uses its parameter (a tied
    matrix after both); a bucket is flushed before a gradient would overflow it, and at the end."""
    final: dict[int, int] = {}
    for s, visit in enumerate(visits):
        if visit.phase == "backward" and not visit.recompute:
            for p in visit.params:
                final[p] = s
    flushes, filled = [], 0
    for p, s in sorted(final.items(), key=lambda item: (item[1], item[0])):
        if filled and filled + sizes[p] > bucket:
            flushes.append((s, filled))  # as the gradient that would overflow it is made
            filled = 0
        filled += sizes[p]
    if filled:
        flushes.append((len(visits) - 1, filled))
    return tuple(flushes)
