"""A world's traffic as this member sees it: its completed calls, counted by the calls.

Counts (calls, bytes of the tensors they carried, failures, the moment the last one
completed) are plain attributes, changed without a lock: the heartbeat thread only
reads them, and two threads calling on one world at the same instant may, rarely, lose
one count, which a rate shown to people can afford (a lock per call could not). The
supervisor turns them into rates (supervisor_link.py carries them).

A blocking call's time is also counted per operation into fixed buckets
(``protocol.CALL_TIME_BOUNDS``), from which the head serves Prometheus a histogram
(``mwrun_world_call_seconds``); an async call is not timed (from its issue to its wait
is the caller's own time too).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from time import monotonic

from mwrun.protocol import CALL_TIME_BOUNDS as BOUNDS


class Traffic:
    __slots__ = ("_bytes", "_calls", "_failures", "_first", "_last", "_timed", "_times",
                 "_waited")

    def __init__(self):
        self._calls = self._bytes = self._failures = self._timed = 0
        self._last = self._waited = 0.0
        self._first = (-1, 0.0)  # (generation, wall clock): its first completed call
        # operation -> [a count per bucket of BOUNDS, one above them all, the seconds of
        # every call added up]
        self._times: dict[str, list] = {}

    def count(self, nbytes: int, generation: int) -> None:
        """A call of ``generation`` completed (async ones, once their Work was waited
        for); the first of each generation is timed on the wall clock, for the
        supervisor's phases of a fault (the heartbeat's ``first_calls``)."""
        self._calls += 1
        self._bytes += nbytes
        self._last = monotonic()
        if self._first[0] < generation:
            self._first = (generation, time.time())

    def timed(self, nbytes: int, generation: int, started: float, op: str) -> None:
        """A collective ``op`` that began at ``started`` (monotonic) completed: counted,
        and how long this member waited in it is added up. A member the others wait for
        arrives last and waits least (the head compares the members' waits: no clock
        shared between hosts is needed)."""
        self.count(nbytes, generation)
        took = self._last - started
        self._timed += 1
        self._waited += took
        self._took(op, took)

    def answered(self, nbytes: int, generation: int, started: float, op: str) -> None:
        """A blocking send or recv that began at ``started`` completed: counted, and its
        time (for a recv, how long its peer took to answer) put in its bucket."""
        self.count(nbytes, generation)
        self._took(op, self._last - started)

    def _took(self, op: str, seconds: float) -> None:
        row = self._times.get(op)
        if row is None:
            row = self._times[op] = [0] * (len(BOUNDS) + 1) + [0.0]
        row[bisect_left(BOUNDS, seconds)] += 1
        row[-1] += seconds

    def failed(self) -> None:
        self._failures += 1

    def totals(self) -> tuple[int, int, int, float | None, int, float]:
        """(calls, bytes, failures, seconds since the last completed call, collectives
        timed, seconds waited in them) so far: counts since this process joined,
        across generations."""
        last = self._last
        return self._calls, self._bytes, self._failures, \
            (monotonic() - last if last else None), self._timed, round(self._waited, 6)

    def times(self) -> dict[str, list]:
        """Per operation: its count in each bucket of BOUNDS and above them, then its
        seconds added up, since this process joined (across generations)."""
        return {op: [*row[:-1], round(row[-1], 6)] for op, row in self._times.items()}

    def first_call(self) -> tuple[int, float] | None:
        """(generation, wall-clock time) of the latest generation's first completed
        call, once there is one."""
        first = self._first
        return first if first[0] >= 0 else None
