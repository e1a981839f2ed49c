"""What happened to the job's worlds, in order: ``job.events()`` and ``job.aevents()``.

Each change of a world's membership or health is posted once, as it happens, to the
job's one queue: ``added`` (a world the head added, or ``job.add_world``, formed and is
in ``job.worlds``), ``draining`` (the head retires it), ``removed`` (it left
``job.worlds``), ``resized`` (it broke for a resize), ``broken`` (it broke for any other
reason; once per generation), ``reformed`` (it joined a later generation) and ``slow``
(under the launcher: the head named the ``member`` the world waits for, its peers
waiting ``lag_s`` seconds longer per collective; or, ``member`` None, that none is waited
for any more). Events are consumed once: two consumers each see some of them, never
both the same one.

The queue keeps the latest ``KEPT`` events for a job that never reads them (a process
that serves for weeks and breaks now and then must not grow for ever).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import threading
import time
from dataclasses import dataclass

KEPT = 10000


class EventKind(str, enum.Enum):
    """What happened to a world (a str: ``kind == "added"``, and it prints as its value)."""

    def __str__(self) -> str:  # (enum.StrEnum, from Python 3.11 only)
        return self.value

    def __format__(self, spec: str) -> str:
        return self.value.__format__(spec)

    ADDED = "added"
    DRAINING = "draining"
    REMOVED = "removed"
    RESIZED = "resized"
    BROKEN = "broken"
    REFORMED = "reformed"
    SLOW = "slow"


@dataclass(frozen=True)
class WorldEvent:
    """One change of one world: its ``kind``, the ``world``'s name, the ``generation``
    it concerns and, for a break, a removal or a slow member, the ``reason``; for
    ``slow``, the ``member`` waited for (None: none any more) and by how much
    (``lag_s``)."""

    kind: EventKind
    world: str
    generation: int
    reason: str | None = None
    member: str | None = None
    lag_s: float | None = None


class EventQueue:
    """Events in the order they were posted, for one consumer at a time; waits for the
    next one block a thread (``get``) or not (``wait_async``: asyncio)."""

    def __init__(self, kept: int = KEPT):
        self._events: collections.deque[WorldEvent] = collections.deque(maxlen=kept)
        self._ready = threading.Condition()
        self._wakers: list = []  # asyncio consumers to wake at the next post or close
        self.closed = False

    def post(self, event: WorldEvent) -> None:
        with self._ready:
            if self.closed:
                return
            self._events.append(event)
            self._ready.notify_all()
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()

    def close(self) -> None:
        """No event comes any more: waiting consumers end once they have the rest."""
        with self._ready:
            self.closed = True
            self._ready.notify_all()
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()

    def get(self, timeout: float | None = None) -> WorldEvent | None:
        """The next event, waiting up to ``timeout`` seconds (None: until one comes or
        the queue closes); None if none came."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._ready:
            while not self._events:
                if self.closed:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._ready.wait(left)
            return self._events.popleft()

    def take_or_wake(self, wake) -> WorldEvent | None:
        """The next event if there is one; else ``wake()`` is called (from whichever
        thread posts) once there is one or the queue closes, and None returned."""
        with self._ready:
            if self._events:
                return self._events.popleft()
            if self.closed:
                wake()
            else:
                self._wakers.append(wake)
            return None

    def forget(self, wake) -> None:
        with self._ready, contextlib.suppress(ValueError):
            self._wakers.remove(wake)

    def __iter__(self):
        return self.iterate(None)

    def iterate(self, timeout: float | None):
        """Events as they come; ends once none came for ``timeout`` seconds (0: the
        events queued now; None: when the queue closes)."""
        while True:
            event = self.get(timeout)
            if event is None:
                return
            yield event

    async def aiterate(self):
        """Events as they come, without blocking the event loop; ends when the queue
        closes."""
        loop = asyncio.get_running_loop()
        while True:
            woken = loop.create_future()

            def wake(woken=woken) -> None:
                with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                    loop.call_soon_threadsafe(_settle, woken)

            event = self.take_or_wake(wake)
            if event is not None:
                yield event
                continue
            try:
                await woken
            finally:
                self.forget(wake)
            if self.closed and not self._events:
                return


def _settle(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
