"""When the library beats, and what a heartbeat carries (supervisor_link.py sends it).

Each heartbeat carries this process's traffic per world, counted by the calls
themselves (traffic.py): ``"t"`` (its monotonic clock) and ``"traffic": {world:
[calls, bytes, failures, seconds since the last completed call or null]}``, counts
since the process joined; ``"first_calls": {world: [generation, wall-clock time]}``,
when the latest generation of each world had its first completed call (the
supervisor's ``first_call`` phase of a fault, head/faults.py); and ``"next"``, the most
seconds until the next beat. The supervisor turns the counts into rates, so while the
counts move (and for the supervisor's rate window after), beats come once a second
whatever the hang timeout allows; an idle process beats only at its interval, which
keeps a supervisor watching hundreds of idle processes idle itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

TRAFFIC_EVERY = 1.0  # seconds between beats while traffic moves, for its rates
# Seconds of fast beats after the counts last moved: the supervisor's rate window
# (head/traffic.py WINDOW), so a rate falls to 0 in steps, as the traffic did.
TRAFFIC_TAIL = 5.0


def beat_due(now: float, sent_at: float, moved_at: float, interval: float,
             step: float) -> bool:
    """Whether to beat at this check (one every ``step`` seconds): while the traffic
    counts moved within TRAFFIC_TAIL, always; when idle, once per ``interval`` (the
    half step allows for a check that wakes a little early)."""
    return now - moved_at <= TRAFFIC_TAIL or now - sent_at >= interval - step / 2


def next_beat(now: float, moved_at: float, interval: float, step: float) -> float:
    """The most seconds until the beat after one sent ``now``: a check's step while the
    traffic keeps the beats fast, else the idle interval. Told with each beat, so the
    supervisor knows when one is late (and shows the process unresponsive) by this
    process's own pace, not by the slowest it could beat."""
    return step if now + step - moved_at <= TRAFFIC_TAIL else interval


def aligned(step: float, now: float | None = None) -> float:
    """Seconds until the next multiple of ``step`` on the wall clock. Every process of
    a job checks at the same moments, so their beats reach the supervisor together and
    it reads a hundred in one turn of its loop, not a hundred turns (each turn's own
    cost was most of what watching many processes cost it)."""
    now = time.time() if now is None else now
    return step - now % step


class Beats:
    """The pace of one process's heartbeats. ``worlds()``: its worlds (name -> World),
    whose traffic the beats carry."""

    def __init__(self, interval: float, worlds: Callable[[], Mapping]):
        self.interval = interval
        self.step = min(interval, TRAFFIC_EVERY)  # a check every step seconds
        self._worlds = worlds
        self._sent = self._moved = time.monotonic()
        self._counts: dict | None = None

    def check(self) -> dict | None:
        """At a check: the heartbeat's fields if one is due, else None."""
        now = time.monotonic()
        worlds = list(self._worlds().items())
        traffic = {name: w.traffic.totals() for name, w in worlds}
        seen = {name: t[:3] for name, t in traffic.items()}
        if seen != self._counts:
            self._counts, self._moved = seen, now
        if not beat_due(now, self._sent, self._moved, self.interval, self.step):
            return None
        self._sent = now
        firsts = {name: first for name, w in worlds
                  if (first := w.traffic.first_call()) is not None}
        times = {name: found for name, w in worlds if (found := w.traffic.times())}
        return {"t": now, "traffic": traffic, "first_calls": firsts, "times": times,
                "next": next_beat(now, self._moved, self.interval, self.step)}
