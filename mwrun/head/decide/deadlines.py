"""Every timer of the head in one heap, and what each kind of timer calls when it is due.

``Deadlines`` is the heap: setting a key again moves its deadline, clearing it cancels
it; the entries left behind are skipped when they come up. Each operation costs
O(log n), so "what is due next?" after every event costs the same at 10 processes as at
1,000, and a turn with nothing due touches no process.

``Timers`` is the one heap the head keeps: a key is ``(Timer, name)``, and each part
that owns a kind of timer says, when it is built, what to call for it (``handle``).
The loop sleeps until ``earliest()`` and then ``fire``s what is due; nothing scans
every process to find what is due.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from enum import Enum
from typing import Generic, TypeVar


class Timer(str, Enum):
    """The kinds of timer the head keeps, each owned by one part."""

    AWAKE = "awake"  # the awake clock read, once a TICK (decide/hangs.py: stalls)
    TICK = "tick"  # the loop's periodic turn: agents' beats, the reaper, plain worlds
    RESTART = "restart"  # a process's restart backoff is over (decide/supervisor.py)
    LOOK = "look"  # a live process's heartbeats (or /proc) are looked at (hangs.py)
    HANG_KILL = "hang_kill"  # a hung process's kill, after its stacks are captured
    DRAIN = "drain"  # a draining world's drain_timeout (decide/reshaping.py)
    LEAVE = "leave"  # a retired process with no world left: SIGTERM
    RETIRE_KILL = "retire_kill"  # a retired process past its grace: SIGKILL
    STOP = "stop"  # the job's stop: SIGKILL after the grace, then giving up
    CAPTURE = "capture"  # a post-mortem bundle's capture runs out of time
    SAVE = "save"  # state.json written behind (observe/document.py)
    SAMPLE = "sample"  # the history's rate samples (observe/history.py)


K = TypeVar("K", bound=Hashable)


class Deadlines(Generic[K]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K]] = []
        self._when: dict[K, float] = {}
        self._order = 0  # ties in time come out in the order they were set

    def set(self, key: K, when: float) -> None:
        self._when[key] = when
        self._order += 1
        heapq.heappush(self._heap, (when, self._order, key))

    def __contains__(self, key: object) -> bool:
        return key in self._when

    def when(self, key: K) -> float | None:
        return self._when.get(key)

    def clear(self, key: K) -> None:
        self._when.pop(key, None)

    def earliest(self) -> float | None:
        heap = self._heap
        while heap and self._when.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)  # moved or cleared since it was set
        return heap[0][0] if heap else None

    def due(self, now: float) -> list[K]:
        """The keys whose deadline has come, earliest first (cleared: each once)."""
        keys = []
        while (when := self.earliest()) is not None and when <= now:
            keys.append(heapq.heappop(self._heap)[2])
            del self._when[keys[-1]]
        return keys

    def __len__(self) -> int:
        """Live deadlines (entries moved or cleared are not counted)."""
        return len(self._when)


Handler = Callable[[str, float], None]  # (the timer's name, now)


class Timers(Deadlines[tuple[Timer, str]]):
    """The head's one heap of ``(Timer, name)`` keys, and a handler per kind."""

    def __init__(self) -> None:
        super().__init__()
        self._handlers: dict[Timer, Handler] = {}

    def handle(self, kind: Timer, handler: Handler) -> None:
        """``handler`` is called for each due timer of ``kind`` (one owner per kind)."""
        if kind in self._handlers:
            raise ValueError(f"timers of kind {kind.value} have an owner already")
        self._handlers[kind] = handler

    def fire(self, now: float) -> int:
        """Call the handler of every timer due at ``now``, earliest first, one at a time
        (a handler that clears another due timer cancels it); how many were called.
        A handler sets its own timer again only for after ``now``."""
        fired = 0
        while (when := self.earliest()) is not None and when <= now:
            key = heapq.heappop(self._heap)[2]
            del self._when[key]
            kind, name = key
            handler = self._handlers.get(kind)
            if handler is not None:
                handler(name, now)
            fired += 1
        return fired

