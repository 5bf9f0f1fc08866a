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
(analytic/model.unit_modules) and the simulator runs the plan (sim/stages/fetch.py).
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
    freed: tuple[tuple[int, ...], ...]
    """Per visit, the gathers (indices) whose buffers go once it is done: those whose last
    parameter it released."""
    peak_live_elements: int
    """The most non-persistent elements gathered at once, each gather's held until the last of
    its parameters is released (its buffer is one block: DeepSpeed keeps a coalesced gather's
    flat buffer alive while any parameter of the batch waits; sim/stages/fetch.py alike)."""
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
    walk = _Coordinator(visits, sizes, persistent, max_reuse)
    for s, visit in enumerate(visits):
        need = [p for p in sorted(visit.params) if p not in persistent and p not in walk.live]
        if need:
            walk.gather(s, need, False)
        walk.pop_own(s)
        walk.prefetch(s, min(max_live - walk.n_live, prefetch_bucket))
        walk.release(s, visit)
    return FetchPlan(persistent=persistent, gathers=tuple(walk.gathers),
                     releases=tuple(walk.releases), freed=tuple(walk.freed),
                     peak_live_elements=walk.peak,
                     reduce_scatters=_reduce_buckets(visits, sizes, reduce_bucket),
                     post_step_gathers=tuple(sizes[p] for p in sorted(persistent)))


class _Coordinator:
    """partitioned_param_coordinator.py's state along one micro-batch: the trace queue and its
    head, each parameter's furthest claimed visit (last[p]), what is gathered, and each gather's
    parameters not yet released (its buffer held until the last: FetchPlan.peak_live_elements)."""

    def __init__(self, visits: list[Visit], sizes: list[int], persistent: frozenset[int],
                 max_reuse: int) -> None:
        self.visits, self.sizes, self.persistent = visits, sizes, persistent
        self.queue = [(p, s) for s, visit in enumerate(visits) for p in sorted(visit.params)]
        self.cursor = 0
        self.claimed: dict[int, int] = {}
        self.live: set[int] = set()
        self.n_live = self.held = self.peak = 0
        self.gathers: list[Gather] = []
        self.releases: list[tuple[int, ...]] = []
        self.freed: list[tuple[int, ...]] = []
        self.waiting: dict[int, int] = {}  # gather -> its parameters not yet released
        self.owner: dict[int, int] = {}
        self.reused = _Reuse(visits, sizes, max_reuse)

    def gather(self, s: int, params: list[int], prefetch: bool) -> None:
        elements = sum(self.sizes[p] for p in params)
        self.waiting[len(self.gathers)] = len(params)
        self.owner.update((p, len(self.gathers)) for p in params)
        self.gathers.append(Gather(s, tuple(params), elements, prefetch))
        self.live.update(params)
        self.n_live += elements
        self.held += elements
        self.peak = max(self.peak, self.held)

    def pop(self) -> tuple[int, int]:
        p, at = self.queue[self.cursor]
        self.cursor += 1
        self.claimed[p] = max(self.claimed.get(p, -1), at)
        return p, at

    def pop_own(self, s: int) -> None:
        """The queue's entries of visit s and before."""
        while self.cursor < len(self.queue) and self.queue[self.cursor][1] <= s:
            self.pop()

    def prefetch(self, s: int, budget: int) -> None:
        """Pop along the trace until `budget` elements are to be gathered (at least one entry),
        and gather those not gathered yet in one collective."""
        batch, acc = [], 0
        while self.cursor < len(self.queue) and acc < budget:
            p, _ = self.pop()
            if p not in self.persistent and p not in self.live and p not in batch:
                batch.append(p)
                acc += self.sizes[p]
        if batch:
            self.gather(s, batch, True)

    def release(self, s: int, visit: Visit) -> None:
        """After visit s: its parameters no later visit claimed nor the trace reuses within the
        reuse distance; after the last visit, everything left (the embedding's epilogue)."""
        released = tuple(p for p in sorted(visit.params) if p in self.live
                         and self.claimed.get(p, -1) <= s and not self.reused(p, s + 1))
        if s == len(self.visits) - 1:
            released = tuple(sorted(self.live))
        freed = []
        for p in released:
            self.live.discard(p)
            self.n_live -= self.sizes[p]
            g = self.owner.pop(p)
            self.waiting[g] -= 1
            if not self.waiting[g]:
                self.held -= self.gathers[g].elements
                freed.append(g)
        self.releases.append(released)
        self.freed.append(tuple(freed))


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
