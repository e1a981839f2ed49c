"""How far a remote host's clock is from the head's, so that times its agent (or a
process there) reports can stand beside the head's own (the phases of a fault,
faults.py).

The head sends ``clock {sent}`` (its wall clock), the agent answers at once with
``clock {sent, at}`` (its own), and the head, on receipt at ``recv``, takes the agent
to be ``at - (sent + recv) / 2`` ahead: the answer was made about half way through the
round trip, so the error is at most half of it. Of a few such exchanges the one with
the shortest round trip wins (a busy head or link only lengthens a trip).
"""

from __future__ import annotations

SAMPLES = 5  # exchanges per connection; the shortest round trip is kept


class Offset:
    def __init__(self):
        self.offset: float | None = None  # the host's clock minus the head's, seconds
        self.trip: float | None = None  # the round trip it was measured in
        self.samples = 0

    def add(self, sent: float, at: float, recv: float) -> None:
        trip = recv - sent
        self.samples += 1
        if trip >= 0 and (self.trip is None or trip < self.trip):
            self.offset, self.trip = at - (sent + recv) / 2, trip

    @property
    def wanted(self) -> bool:
        return self.samples < SAMPLES

    def to_head(self, t: float) -> float:
        """A time on the host's clock, on the head's (as is, before any measurement)."""
        return t - (self.offset or 0.0)
