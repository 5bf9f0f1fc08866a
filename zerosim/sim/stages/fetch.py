"""ZeRO-3 gathered module by module, as DeepSpeed runs it: a ZeRO-3 program that follows a fetch
plan (frameworks/deepspeed_fetch.py, priced by analytic/fetch.py) instead of gathering whole
units. Each module visit issues its own all-gather when its parameters are not there, waits for
them, issues the plan's prefetch, computes its share of its unit's compute, and releases what
the plan releases; the gradient buckets are reduce-scattered where the plan flushes them; after
the optimizer step the persistent parameters are gathered again, one blocking all-gather each.
Without overlap_comm DeepSpeed gathers on the compute stream: each prefetch then completes
before the visit computes. The hooks run on the host, a stream of its own ("hooks", a host
operation whose size is its seconds: the plan's per visit): a visit computes only once the host
has run its hooks, and the host runs ahead of the GPU until it blocks on a fetch event
(analytic/fetch.FetchSteps: DeepSpeed's coordinator blocks on the oldest of its outstanding
fetch events beyond two, partitioned_param_coordinator.py at edaa722, fetch_sub_module,
__max_ongoing_fetch_events; docs/research/deepspeed_zero3_fetch.md sec. 2): so the hooks hide
behind GPU work longer than theirs and pace a step whose modules compute for less."""

from __future__ import annotations

from collections.abc import Iterator

from zerosim.sim.network import HOOKS
from zerosim.sim.offload import HOST
from zerosim.sim.stages.zero3 import ZeRO3


class ModuleFetch(ZeRO3):
    """The plan of StepShape.fetch, the same in every micro-step."""

    def __init__(self, ctx, shape) -> None:
        super().__init__(ctx, shape)
        self.plan = shape.fetch
        self.events: dict[int, object] = {}  # gather index -> its collective's event
        self.owner: dict[int, int] = {}  # parameter -> the gather that last brought it
        self.hooks: dict[int, object] = {}  # visit -> its hooks' event, this micro-step
        self.micro = 0

    def start_gathers(self, phase: str, units) -> None:
        """Nothing up front: each visit fetches (unit_compute)."""

    def gathered(self, unit: int, phase: str) -> Iterator:
        return iter(())

    def release(self, unit: int, phase: str) -> None:
        """Released visit by visit (unit_compute)."""

    def unit_compute(self, unit: int, phase: str, seconds: float) -> Iterator:
        plan, visits = self.plan.plan, self.plan.visits
        for s in self.plan.visits_of(unit, phase):
            visit = visits[s]
            self.run_hooks(max(s, self.plan.hooks_free))  # up to this visit, if behind
            for g in self.plan.gathers_at(s):  # the GPU is here once the host has run the
                if not plan.gathers[g].prefetch:  # visit before's hooks: this one's issue it
                    self.issue(g, phase, unit)
            waits = [self.events[self.owner[p]] for p in visit.params if p in self.owner]
            yield self.env.all_of(waits + ([self.hooks[s]] if self.hooks[s] is not None else []))
            self.run_hooks(self.plan.hooks_after[s])  # the GPU reached visit s
            for g in self.plan.gathers_at(s):
                if plan.gathers[g].prefetch:
                    self.issue(g, phase, unit)
                    if not self.shape.overlap_comm:  # on the compute stream: it waits
                        yield self.events[g]
            if visit.share:
                yield from self.ctx.compute(seconds * visit.share, phase, phase, unit)
            for g in plan.freed[s]:  # the plan's count: a gather goes with its last parameter
                self.ctx.free(("gathered", self.micro, g))
            for elements in self.plan.flushes_at(s):
                self.flush(elements, unit)

    def run_hooks(self, last: int) -> None:
        """Queue the host's hooks of every visit up to `last` not queued yet this micro-step."""
        visits = self.plan.visits
        for s in range(len(self.hooks), min(last + 1, len(visits))):
            seconds = self.plan.host_s[s]  # none queued for none: nothing to wait for
            self.hooks[s] = None if not seconds else self.ctx.comm(
                HOOKS, HOOKS, seconds, "module hooks", visits[s].phase, visits[s].unit,
                group=HOST)

    def issue(self, g: int, phase: str, unit: int) -> None:
        gather = self.plan.plan.gathers[g]
        size = self.shape.param_bytes_per_element * gather.elements
        key = ("gathered", self.micro, g)

        def allocate() -> Iterator:
            self.ctx.alloc(key, "gathered", size, stream="gather")
            return iter(())

        self.owner.update((p, g) for p in gather.params)
        self.events[g] = self.ctx.comm("gather", "all_gather", self.wire(size),
                                       "parameter all-gather", phase, unit, before=allocate,
                                       group=self.gather_group(phase))

    def flush(self, elements: int, unit: int) -> None:
        """One bucket's reduce-scatter, through the interleaved copy its flush makes."""
        size = self.shape.grad_bytes_per_element * elements
        key = ("bucket copy", self.micro, unit, len(self.pending))

        def copy() -> Iterator:
            self.ctx.alloc(key, "buckets", size, stream=self.reduce_stream)
            return iter(())

        self.pending.append(self.ctx.comm(self.reduce_stream, "reduce_scatter", size,
                                          "gradient reduce-scatter", "backward", unit,
                                          before=copy, after=lambda: self.ctx.free(key),
                                          group=self.group))
        self.reduced(self.reduce_stream, size, "backward", unit, self.group)

    def produce_gradients(self, unit: int) -> Iterator:
        yield from self.unit_compute(unit, "backward", self.shape.backward_s[unit])
        if unit == 0:
            self.micro += 1  # the micro-step's last visit has released every gather
            self.hooks = {}
        yield from self.synchronous()

    def optimizer_step(self) -> Iterator:
        yield from super().optimizer_step()
        for elements in self.plan.plan.post_step_gathers:  # blocking, one at a time
            yield self.ctx.comm("gather", "all_gather",
                                self.shape.param_bytes_per_element * elements,
                                "persistent parameter all-gather", "step", None,
                                group=self.gather_group("step"))
