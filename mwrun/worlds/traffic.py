"""A world's traffic as this member sees it: its completed calls, counted by the calls.

Counts (calls, bytes of the tensors they carried, failures, the moment the last one
completed) are plain attributes, changed without a lock: the heartbeat thread only
reads them, and two threads calling on one world at the same instant may, rarely, lose
one count, which a rate shown to people can afford (a lock per call could not). The
supervisor turns them into rates (supervisor_link.py carries them).
"""

from __future__ import annotations

import time
from time import monotonic


class Traffic:
    __slots__ = ("_bytes", "_calls", "_failures", "_first", "_last")

    def __init__(self):
        self._calls = self._bytes = self._failures = 0
        self._last = 0.0
        self._first = (-1, 0.0)  # (generation, wall clock): its first completed call

    def count(self, nbytes: int, generation: int) -> None:
        """A call of ``generation`` completed (async ones, once their Work was waited
        for); the first of each generation is timed on the wall clock, for the
        supervisor's phases of a fault (the heartbeat's ``first_calls``)."""
        self._calls += 1
        self._bytes += nbytes
        self._last = monotonic()
        if self._first[0] < generation:
            self._first = (generation, time.time())

    def failed(self) -> None:
        self._failures += 1

    def totals(self) -> tuple[int, int, int, float | None]:
        """(calls, bytes, failures, seconds since the last completed call) so far:
        counts since this process joined, across generations."""
        last = self._last
        return self._calls, self._bytes, self._failures, \
            (monotonic() - last if last else None)

    def first_call(self) -> tuple[int, float] | None:
        """(generation, wall-clock time) of the latest generation's first completed
        call, once there is one."""
        first = self._first
        return first if first[0] >= 0 else None
