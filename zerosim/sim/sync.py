"""What the simulated processes wait on: a communication stream's queue of collectives, a count
of free buffers, the first of two events. Each behaves event for event as simpy's own (Store,
Container, AnyOf) does here, less the events that change nothing: an event no one waits for, or
one that would be the next processed and only resume the process that asked for it (the clock
then goes on without it: clock.Environment.quiet).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterator

import simpy


def first_of(env, *events: simpy.Event) -> Iterator:
    """Process body: wait until the first of `events` is processed, as `yield a | b` does (simpy's
    AnyOf resumes its process one event after the first is processed, then takes its callback
    off the others), without building the condition's value."""
    wake = env.event()

    def fire(_event: simpy.Event) -> None:
        if not wake.triggered:
            env.succeed_soon(wake)

    for event in events:
        event.callbacks.append(fire)
    yield wake
    for event in events:
        if event.callbacks is not None:
            event.callbacks.remove(fire)


class _OneTaker:
    """What a Store or Container does for the one process that takes from it: a put's event
    matters only while that process waits (processing it hands over what was put)."""

    def __init__(self, env) -> None:
        self.env = env
        self._waiting: simpy.Event | None = None
        self._handing = False

    def _wake(self) -> None:
        """After a put: the waiting taker gets what was put once the put's event is processed."""
        if self._waiting is not None and not self._handing:
            self._handing = True
            put = self.env.event()
            put.callbacks.append(self._hand_over)
            put.succeed()

    def _hand_over(self, _put: simpy.Event) -> None:
        self._handing = False
        if self._waiting is not None and self._available():
            waiting, self._waiting = self._waiting, None
            self.env.succeed_soon(waiting, self._pop())

    def take(self, quiet: bool | None = None) -> Iterator:
        """Process body: `yield resource.get()`; returns what it got. `quiet`: whether the get's
        event would resume the taker next (None: Environment.quiet now)."""
        if self._waiting is not None:
            raise RuntimeError("a second process waits on a one-taker queue")
        if self._available():
            value = self._pop()
            if quiet is None:
                quiet = self.env.quiet(self.env.now)
            if not quiet:  # else the get's event would resume the taker next
                event = self.env.event()
                event.succeed(value)
                yield event
            return value
        self._waiting = event = self.env.event()
        return (yield event)

    def _available(self) -> bool:
        raise NotImplementedError

    def _pop(self) -> Any:
        raise NotImplementedError


class CommQueue(_OneTaker):
    """A communication stream's FIFO of collectives (simpy.Store), served by the stream."""

    def __init__(self, env) -> None:
        super().__init__(env)
        self.items: deque = deque()

    def put(self, request) -> None:
        self.items.append(request)
        self._wake()

    def _available(self) -> bool:
        return bool(self.items)

    def _pop(self):
        return self.items.popleft()


class Slots(_OneTaker):
    """`count` buffers, each taken before use and put back after (simpy.Container(env, count,
    init=count), one unit at a time)."""

    def __init__(self, env, count: int) -> None:
        super().__init__(env)
        self.level = count

    def put(self) -> None:
        self.level += 1
        self._wake()

    def _available(self) -> bool:
        return self.level >= 1

    def _pop(self) -> None:
        self.level -= 1
