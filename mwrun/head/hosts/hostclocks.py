"""Every remote host's clock, as the head sees it: the offset of each host's agent from
the head's own (``clocks.Offset``), measured afresh for each new agent (at launch, and
when its host is reached again), so that the times a host tells (a process spawned,
an exit seen) stand beside the head's.
"""

from __future__ import annotations

from collections.abc import Callable

from mwrun.head.hosts.clocks import Offset
from mwrun.head.hosts.remote import AgentLink
from mwrun.host.frames import Kind


class Clocks:
    """The remote hosts' clocks: each one's offset, asked over its link."""

    def __init__(self, wall: Callable[[], float]):
        self.wall = wall  # the head's wall clock
        self.offsets: dict[str, Offset] = {}  # host -> its clock's offset

    def measure(self, link: AgentLink, fresh: bool = False) -> None:
        """Ask the agent its clock (a new agent: measured afresh)."""
        if fresh:
            self.offsets[link.name] = Offset()
        link.send(Kind.CLOCK, sent=self.wall())

    def answered(self, link: AgentLink, msg: dict) -> None:
        """The agent's answer (``clock {sent, at}``): one more sample, and the next
        question while a few more are wanted."""
        offset = self.offsets.setdefault(link.name, Offset())
        sent, at = number(msg.get("sent")), number(msg.get("at"))
        if sent is not None and at is not None:
            offset.add(sent, at, self.wall())
            if offset.wanted:
                self.measure(link)

    def to_head(self, host: str, t) -> float | None:
        """A time on ``host``'s clock (as its agent, or a process there, told it), on the
        head's; None for what is not a time. Told in a frame that has just arrived, so
        never later than now: the measured offset is good to a few milliseconds, and
        without this bound a remote exit could land after the break the head wrote
        because of it (a fault's phases out of order)."""
        t = number(t)
        offset = self.offsets.get(host)
        return t if t is None or offset is None else min(offset.to_head(t), self.wall())


def number(value) -> float | None:
    """A time an agent told, or None for anything else (a bool, a string, NaN)."""
    return float(value) if type(value) in (int, float) and value == value else None
