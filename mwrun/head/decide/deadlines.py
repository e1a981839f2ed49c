"""Every timer of the head in one heap, and what each kind of timer calls when it is due.

``Deadlines`` is the heap: setting a key again moves its deadline in place, clearing it
takes it out. Each operation costs O(log n), so "what is due next?" after every event
costs the same at 10 processes as at 1,000, a deadline moved by every heartbeat leaves
nothing behind, and a turn with nothing due touches no process.

``Timers`` is the one heap the head keeps: a key is ``(Timer, name)``, and each part
that owns a kind of timer says, when it is built, what to call for it (``handle``).
The loop sleeps until ``earliest()`` and then ``fire``s what is due; nothing scans
every process to find what is due.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from enum import Enum
from typing import Generic, TypeVar


def on_grid(when: float, step: float) -> float:
    """``when``, moved on to the next multiple of ``step``: timers that need no better
    than a tick's precision (looks at silent processes, the periodic turns) fall due
    together, one wakeup of the loop for them all rather than one each."""
    return math.ceil(when / step) * step


def next_on_grid(now: float, step: float) -> float:
    """The first multiple of ``step`` after ``now``: a periodic timer's next turn."""
    return (math.floor(now / step) + 1) * step


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
    """An indexed binary heap: each key has one entry, moved in place when it is set
    again and taken out when it is cleared, so a deadline moved on every heartbeat
    leaves nothing behind for a later turn to skip (O(log n) a set, O(1) the earliest)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K]] = []
        self._at: dict[K, int] = {}  # key -> its entry's index in the heap
        self._order = 0  # ties in time come out in the order they were set

    def set(self, key: K, when: float) -> None:
        self._order += 1
        entry = (when, self._order, key)
        i = self._at.get(key)
        if i is None:
            self._heap.append(entry)
            self._at[key] = i = len(self._heap) - 1
        else:
            self._heap[i] = entry
        self._sift_down(self._sift_up(i))

    def __contains__(self, key: object) -> bool:
        return key in self._at

    def when(self, key: K) -> float | None:
        i = self._at.get(key)
        return None if i is None else self._heap[i][0]

    def clear(self, key: K) -> None:
        i = self._at.pop(key, None)
        if i is None:
            return
        last = self._heap.pop()
        if i < len(self._heap):  # the last entry fills the hole, then finds its place
            self._heap[i] = last
            self._at[last[2]] = i
            self._sift_down(self._sift_up(i))

    def earliest(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[K]:
        """The keys whose deadline has come, earliest first (cleared: each once)."""
        keys = []
        while self._heap and self._heap[0][0] <= now:
            keys.append(self._heap[0][2])
            self.clear(keys[-1])
        return keys

    def __len__(self) -> int:
        return len(self._heap)

    # The sifts move a hole, not the entry (as heapq does): each level costs one write
    # and one index update, so a deadline moved on every heartbeat stays cheap.
    def _sift_up(self, i: int) -> int:
        heap, at = self._heap, self._at
        entry = heap[i]
        while i > 0:
            parent = (i - 1) >> 1
            if not entry < heap[parent]:
                break
            heap[i] = heap[parent]
            at[heap[i][2]] = i
            i = parent
        heap[i] = entry
        at[entry[2]] = i
        return i

    def _sift_down(self, i: int) -> None:
        heap, at, n = self._heap, self._at, len(self._heap)
        entry = heap[i]
        while (child := 2 * i + 1) < n:
            if child + 1 < n and heap[child + 1] < heap[child]:
                child += 1
            if not heap[child] < entry:
                break
            heap[i] = heap[child]
            at[heap[i][2]] = i
            i = child
        heap[i] = entry
        at[entry[2]] = i


Handler = Callable[[str, float], None]  # (the timer's name, now)


class Timers(Deadlines[tuple[Timer, str]]):
    """The head's one heap of ``(Timer, name)`` keys, and a handler per kind.

    The looks at every live process (LOOK) fall on the tick's grid, thousands on the
    same few moments, and move on every heartbeat: they are kept in groups, one per
    moment, each group one entry of the heap. A beat moves its process from one group
    to another (two dict operations) instead of sifting an entry through a heap of a
    thousand (about 6 us in Python, paid a thousand times a second at 1,000 ranks).
    They fall due as before: in the order they were set, each once."""

    GROUPED = frozenset((Timer.LOOK,))

    def __init__(self) -> None:
        super().__init__()
        self._handlers: dict[Timer, Handler] = {}
        self._moment: dict[tuple[Timer, str], float] = {}  # a grouped key -> its moment
        # (kind, moment) -> its names, in the order they were set
        self._groups: dict[tuple[Timer, float], dict[str, None]] = {}

    def handle(self, kind: Timer, handler: Handler) -> None:
        """``handler`` is called for each due timer of ``kind`` (one owner per kind)."""
        if kind in self._handlers:
            raise ValueError(f"timers of kind {kind.value} have an owner already")
        self._handlers[kind] = handler

    # -- grouped kinds: the same operations, on a group per moment ---------------------------

    def set(self, key: tuple[Timer, str], when: float) -> None:
        kind, name = key
        if kind not in self.GROUPED:
            super().set(key, when)
            return
        if key in self._moment:
            self._leave(key)
        group = self._groups.get((kind, when))
        if group is None:
            group = self._groups[(kind, when)] = {}
            super().set(_entry(kind, when), when)
        group[name] = None
        self._moment[key] = when

    def clear(self, key: tuple[Timer, str]) -> None:
        if key[0] not in self.GROUPED:
            super().clear(key)
        elif key in self._moment:
            self._leave(key)

    def when(self, key: tuple[Timer, str]) -> float | None:
        if key[0] in self.GROUPED:
            return self._moment.get(key)
        return super().when(key)

    def __contains__(self, key: object) -> bool:
        return key in self._moment or super().__contains__(key)

    def __len__(self) -> int:
        return super().__len__() - len(self._groups) + len(self._moment)

    def _leave(self, key: tuple[Timer, str]) -> None:
        kind, name = key
        when = self._moment.pop(key)
        group = self._groups[(kind, when)]
        del group[name]
        if not group:
            del self._groups[(kind, when)]
            super().clear(_entry(kind, when))

    def due(self, now: float) -> list[tuple[Timer, str]]:
        keys = []
        for kind, name in super().due(now):
            if kind not in self.GROUPED:
                keys.append((kind, name))
                continue
            when = float(name)
            group = self._groups.pop((kind, when))
            for member in group:
                del self._moment[(kind, member)]
                keys.append((kind, member))
        return keys

    def fire(self, now: float) -> int:
        """Call the handler of every timer due at ``now``, earliest first, one at a time
        (a handler that clears another due timer cancels it); how many were called.
        A handler sets its own timer again only for after ``now``."""
        fired = 0
        while self._heap and self._heap[0][0] <= now:
            entry = self._heap[0]
            kind, name = key = entry[2]
            handler = self._handlers.get(kind)
            if kind in self.GROUPED:
                fired += self._fire_group(kind, entry[0], handler, now)
                continue
            try:
                if handler is not None:
                    handler(name, now)
            finally:  # a timer its handler set again moved in place; else it is done
                i = self._at.get(key)
                if i is not None and self._heap[i] is entry:
                    super().clear(key)
            fired += 1
        return fired

    def _fire_group(self, kind: Timer, when: float, handler: Handler | None,
                    now: float) -> int:
        """Each name of the group due at ``when``, in order; a name its handler (or one
        before it) clears or moves is not called here."""
        fired = 0
        group = self._groups.get((kind, when), {})
        while group:
            name = next(iter(group))
            self._leave((kind, name))  # the group's heap entry goes with its last name
            if handler is not None:
                handler(name, now)
            fired += 1
        if (kind, when) not in self._groups:
            super().clear(_entry(kind, when))  # an empty group's entry, if left
        return fired


def _entry(kind: Timer, when: float) -> tuple[Timer, str]:
    """The heap's key of the group of ``kind`` due at ``when`` (a process is never
    named so: names are words)."""
    return (kind, repr(when))
