"""simpy's Environment with what the engine's shortcuts need, each leaving the order in which
things happen exactly as an event-by-event run has it.

`quiet(t)`: nothing is due until t and the running process is the only callback of the event
being processed, so an event scheduled for t now would be the next processed and would only
resume that process. Then skipping it changes nothing: `advance` moves the clock to t instead
(a compute that nothing interrupts, a collective that ends before anything else happens: a run of
collectives queued back to back costs no event), `succeed_soon` processes an event at once.

A collective alone on its links ends at the time its closed form gives (collectives.ring's
idle_plan: the same float additions the clock would make, event by event). When the clock cannot
just move there, `arrive` waits for one event at that time exactly (`at`: not now + (end - now),
which can round) and, when other events are due at that same instant, comes after them: the last
event of an event-by-event run is scheduled at that instant, after everything queued for it.
`forget` takes a timer no one waits for off the queue, so that it hides no quiet instant.

This is the one module that touches simpy's private fields (tests/test_house_rules.py): what
the others need of them is a method here (`settle`, `scheduled`, `due_before`).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Iterator

import simpy
from simpy.events import NORMAL, Event


FORGET_WITHIN = 64
"""Environment.forget searches a queue of at most this many events (one pass)."""


class Environment(simpy.Environment):
    """The engine's clock. `env.now` is seconds. With shortcuts=False no event is ever skipped
    or forgotten: the reference the shortcuts are tested against."""

    def __init__(self, shortcuts: bool = True) -> None:
        super().__init__()
        if not shortcuts:
            self.quiet = lambda time_s: False
            self.forget = lambda event: None
        for name in ("process", "timeout", "event", "all_of", "any_of"):  # as simpy binds them
            setattr(self, name, getattr(self, name))  # for its own class (BoundClass.bind_early)
        self._callbacks: list = []
        """The callbacks of the event being processed."""

    def at(self, time_s: float) -> Event:
        """An event processed at time_s exactly (time_s >= now)."""
        event = Event(self)
        event._ok, event._value = True, None
        heappush(self._queue, (time_s, NORMAL, next(self._eid), event))
        return event

    def quiet(self, time_s: float) -> bool:
        """Nothing is due until time_s (inclusive), and the running process is the only callback
        of the event being processed: an event for time_s scheduled now would be processed next,
        and resume it."""
        queue = self._queue
        return (not queue or queue[0][0] > time_s) and len(self._callbacks) == 1

    def settle(self, event: Event, value=None) -> None:
        """Mark an event no one waits for (no callbacks) processed, with `value`, without
        scheduling it: all that processing it would do."""
        event._ok, event._value, event.callbacks = True, value, None

    def scheduled(self) -> bool:
        """Whether any event is scheduled (the run loop goes on while one is)."""
        return bool(self._queue)

    def due_before(self, time_s) -> bool:
        """Whether an event is scheduled before time_s."""
        queue = self._queue
        return bool(queue) and queue[0][0] < time_s

    def succeed_soon(self, event: Event, value=None) -> None:
        """event.succeed(value), processed at once when it would be the next event processed
        anyway (its callbacks run now, as the run loop would run them)."""
        if not self.quiet(self._now):
            event.succeed(value)
            return
        event._ok, event._value = True, value
        callbacks, event.callbacks = event.callbacks, None
        outer, self._callbacks = self._callbacks, callbacks
        for callback in callbacks:
            callback(event)
        self._callbacks = outer

    def advance(self, time_s: float) -> bool:
        """Move the clock to time_s (>= now) if an event for it would be the next processed
        (quiet), in place of waiting for one (`yield env.timeout(time_s - now)`, or `arrive`).
        Whether it moved."""
        if time_s >= self._now and self.quiet(time_s):
            self._now = time_s
            return True
        return False

    def arrive(self, time_s: float) -> Iterator:
        """Process body: wait until time_s, then after whatever else is due at that instant
        (module docstring). The order differs from an event-by-event run only where another
        process's event, queued while the collective ran, falls due at the very instant it ends
        and starts more at that instant: an exact float tie that no scenario here produces."""
        if self.quiet(time_s):
            self._now = time_s
            return
        yield self.at(time_s)
        queue = self._queue
        if queue and queue[0][0] == time_s:
            yield self.timeout(0)

    def forget(self, event: Event) -> None:
        """Take a scheduled event that no one waits for any more (no callbacks: processing it
        would do nothing) off the queue, so that it does not hide a quiet instant. Only from a
        short queue (the symmetric modes'); elsewhere it stays, and does nothing."""
        queue = self._queue
        if event.callbacks or len(queue) > FORGET_WITHIN:
            return
        for i, entry in enumerate(queue):
            if entry[3] is event:
                queue[i] = queue[-1]
                queue.pop()
                heapify(queue)
                return

    def step(self) -> None:
        """simpy's step, remembering the callbacks of the event it processes (quiet)."""
        self._callbacks = self._queue[0][3].callbacks if self._queue else []
        super().step()

    def run(self, until=None):
        """simpy's run loop without the `until` bookkeeping when there is none (the engine runs
        every step to its end); events are processed in the same order."""
        if until is not None:
            return super().run(until)
        queue = self._queue
        while queue:
            self._now, _, _, event = heappop(queue)
            callbacks, event.callbacks = event.callbacks, None
            self._callbacks = callbacks
            for callback in callbacks:
                callback(event)
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc
        return None
