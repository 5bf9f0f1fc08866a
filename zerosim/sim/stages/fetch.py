"""ZeRO-3 gathered module by module, as DeepSpeed runs it: a ZeRO-3 program that follows a fetch
plan (frameworks/deepspeed_fetch.py, priced by analytic/fetch.py) instead of gathering whole
units. Each module visit issues its own all-gather when its parameters are not there, waits for
them, issues the plan's prefetch, computes its share of its unit's compute, and releases what
the plan releases; the gradient buckets are reduce-scattered where the plan flushes them; after
the optimizer step the persistent parameters are gathered again, one blocking all-gather each.
Without overlap_comm DeepSpeed gathers on the compute stream: each prefetch then completes
before the visit computes. The hooks run on the host (HookHost): each visit's take the plan's
host seconds, ahead of the GPU until too many fetch events are outstanding; a visit computes only
once the host has run its hooks, so a model of many small modules waits on its host."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from zerosim.sim.stages.zero3 import ZeRO3


class HookHost:
    """The host thread that runs the module hooks (DeepSpeed's fetch, prefetch and release) ahead
    of the compute stream it launches kernels onto, each visit's for its own seconds. Each
    parameter a visit waits for records an event on the compute stream once it has arrived; with
    more than `ahead` events outstanding the host first drops those the GPU has passed, then
    blocks on the oldest (partitioned_param_coordinator.py at edaa722, fetch_sub_module:
    __max_ongoing_fetch_events = 2, docs/research/deepspeed_zero3_fetch.md sec. 2). So the host
    runs at most a few visits ahead, and a visit whose hooks take longer than the GPU's work
    before it leaves the GPU waiting."""

    def __init__(self, ahead: int) -> None:
        self.ahead = ahead
        self.free_s = 0.0
        """When the host finished the last visit's hooks."""
        self.events: deque = deque()
        """When the GPU reaches each outstanding fetch event, oldest first (None: this visit's,
        not reached yet)."""

    def start(self, waited: int) -> tuple[float, bool]:
        """(when the host starts a visit that waits for `waited` parameters, having blocked on
        the events its waits sync on; whether one of them is this visit's own)."""
        host, own = self.free_s, False
        for _ in range(waited):
            while self.events and self.events[0] is not None and self.events[0] <= host:
                self.events.popleft()  # the GPU is past it: event.query() drops it
            if len(self.events) > self.ahead:
                when = self.events.popleft()  # event.synchronize()
                own = own or when is None
                host = host if when is None else max(host, when)
            self.events.append(None)
        return host, own

    def finish(self, start_s: float, own: bool, ready_s: float, hooks_s: float) -> float:
        """The GPU reached this visit's events at ready_s: when the host is done with its hooks,
        which take hooks_s."""
        self.events = deque(ready_s if when is None else when for when in self.events)
        self.free_s = (max(start_s, ready_s) if own else start_s) + hooks_s
        return self.free_s


class ModuleFetch(ZeRO3):
    """The plan of StepShape.fetch, the same in every micro-step."""

    def __init__(self, ctx, shape) -> None:
        super().__init__(ctx, shape)
        self.plan = shape.fetch
        self.events: dict[int, object] = {}  # gather index -> its collective's event
        self.owner: dict[int, int] = {}  # parameter -> the gather that last brought it
        self.unwaited: set[int] = set()  # gathered parameters no visit has waited for yet
        self.host = HookHost(self.plan.events_ahead)
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
            demand = [g for g in self.plan.gathers_at(s) if not plan.gathers[g].prefetch]
            needed = self.unwaited.union(*(plan.gathers[g].params for g in demand))
            host_s, own = self.host.start(sum(p in needed for p in visit.params))
            if host_s > self.env.now:  # the host has not reached this visit's hooks yet
                yield self.env.timeout(host_s - self.env.now)
            for g in demand:
                self.issue(g, phase, unit)
            self.unwaited.difference_update(visit.params)
            waits = [self.events[self.owner[p]] for p in visit.params if p in self.owner]
            if waits:
                yield self.env.all_of(waits)
            hooked_s = self.host.finish(host_s, own, self.env.now, self.plan.host_s[s])
            self.ctx.state.host_s += self.plan.host_s[s]
            if hooked_s > self.env.now:  # its kernels are launched once its hooks are done
                yield self.env.timeout(hooked_s - self.env.now)
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

    def issue(self, g: int, phase: str, unit: int) -> None:
        gather = self.plan.plan.gathers[g]
        size = self.shape.param_bytes_per_element * gather.elements
        key = ("gathered", self.micro, g)

        def allocate() -> Iterator:
            self.ctx.alloc(key, "gathered", size, stream="gather")
            return iter(())

        self.owner.update((p, g) for p in gather.params)
        self.unwaited.update(gather.params)
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
        yield from self.synchronous()

    def optimizer_step(self) -> Iterator:
        yield from super().optimizer_step()
        for elements in self.plan.plan.post_step_gathers:  # blocking, one at a time
            yield self.ctx.comm("gather", "all_gather",
                                self.shape.param_bytes_per_element * elements,
                                "persistent parameter all-gather", "step", None,
                                group=self.gather_group("step"))
