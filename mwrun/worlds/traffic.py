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
    __slots__ = ("_bytes", "_calls", "_failures", "_first", "_last", "_timed", "_waited")

    def __init__(self):
        self._calls = self._bytes = self._failures = self._timed = 0
        self._last = self._waited = 0.0
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

    def timed(self, nbytes: int, generation: int, started: float) -> None:
        """A collective that began at ``started`` (monotonic) completed: counted, and
        how long this member waited in it is added up. A member the others wait for
        arrives last and waits least (the head compares the members' waits: no clock
        shared between hosts is needed)."""
        self.count(nbytes, generation)
        self._timed += 1
        self._waited += self._last - started

    def failed(self) -> None:
        self._failures += 1

    def totals(self) -> tuple[int, int, int, float | None, int, float]:
        """(calls, bytes, failures, seconds since the last completed call, collectives
        timed, seconds waited in them) so far: counts since this process joined,
        across generations."""
        last = self._last
        return self._calls, self._bytes, self._failures, \
            (monotonic() - last if last else None), self._timed, round(self._waited, 6)

    def first_call(self) -> tuple[int, float] | None:
        """(generation, wall-clock time) of the latest generation's first completed
        call, once there is one."""
        first = self._first
        return first if first[0] >= 0 else None
