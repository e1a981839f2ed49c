"""Why a call failed, as the world's members agree on it: the first reason the store
records, which a member's own becomes only if it is the first.

A socket error is only the symptom; the cause (a member killed, a drill, a resize) is
what the store's host or the first member to notice wrote. Under the launcher the
supervisor writes it within milliseconds of a member's exit, so a failed call gives it
a moment (error path only, bounded) before writing its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mwrun import protocol
from mwrun.worlds import seats

SUPERVISOR_MOMENT = 0.1  # seconds a supervised member waits for the head's reason


@dataclass(frozen=True)
class Agreed:
    """``reason``: the break's; ``left``: the ranks that closed the world (a normal
    end, not a failure); ``host_gone``: by hand, the rank whose store has gone (with
    ``lost``, the store error that said so, if any); ``closes``: why the world is
    closed for this member rather than broken (seats.closes)."""

    reason: str
    left: tuple[int, ...] = ()
    host_gone: int | None = None
    lost: BaseException | None = None
    closes: str | None = None


def agreed(store, generation: int, size: int, mine: str, *, process: str | None,
           supervised: bool, by_a_peer: bool) -> Agreed:
    """The reason for a failed call of ``generation`` (``mine``: as this member saw it).
    ``by_a_peer``: by hand, another member hosts the store, so a lost store means that
    member has gone."""
    if store is None:
        return Agreed(mine)
    try:
        # A break recorded already is the cause; members that left after it (a
        # survivor that saw it and ended) are its consequence.
        found = protocol.broken_reason(store, generation)
        if found is not None:
            return _recorded(store, generation, found, process)
        host = protocol.host_left(store, generation)
        if host is not None:
            return Agreed(protocol.store_host_gone(host), (host,), host_gone=host)
        left = protocol.who_left(store, generation, size)
        if left:
            # Not published: another member may still be reading the last words of
            # the one that left, and a published break would abort that read.
            return Agreed(f"rank {left[0]} left the world (it closed it)", tuple(left))
        if supervised:
            give_up = time.monotonic() + SUPERVISOR_MOMENT
            while time.monotonic() < give_up:
                found = protocol.broken_reason(store, generation)
                if found is not None:
                    return _recorded(store, generation, found, process)
                time.sleep(0.002)
        won = protocol.mark_broken(store, generation, size, mine)
        return Agreed(won) if won == mine else _recorded(store, generation, won, process)
    except (RuntimeError, TimeoutError) as exc:
        if by_a_peer:
            return Agreed(protocol.store_host_gone(0), (0,), host_gone=0, lost=exc)
        return Agreed(mine)


def _recorded(store, generation: int, reason: str, process: str | None) -> Agreed:
    return Agreed(reason, closes=seats.closes(store, generation, reason, process))
