"""A world's watcher: one light thread per world and member, asleep in the world's
store on its own wake key until the generation ends (no polling; see mwrun.protocol).
Woken, it reads why: a break (which it applies to the world), a removal or a resize
that leaves this member out (the world is closed for it: seats.py), this member's own
close, or, by hand, the store's host leaving; a lost store is a break of its own.
"""

from __future__ import annotations

from datetime import timedelta

from mwrun import protocol
from mwrun.errors import BrokenWorldError
from mwrun.worlds import failures, seats, storehost

_FOREVER = timedelta(hours=1)  # a watcher's wait, renewed for as long as the world lives


def watch(world, generation: int) -> None:
    """The watcher thread of ``world``'s ``generation`` (started once it formed)."""
    wake = protocol.wake_key(generation, world.rank)
    try:
        client = world._client(world.timeout)
        while True:
            try:
                client.wait([wake], _FOREVER)
                break
            except (RuntimeError, TimeoutError) as exc:
                if not failures.store_timed_out(exc):
                    raise
        if protocol.text(client.get(wake)) == "close" or world._closed:
            return
        host = protocol.host_left(client, generation)
        if host is not None:  # read: the host may close its store now
            protocol.heard(client, generation, world.rank)
            storehost.gone(world, generation, host)
            return
        reason = protocol.broken_reason(client, generation) or "marked broken"
        ended = protocol.ended(client, generation)
        closes = seats.closes(client, generation, reason, world._process)
    except (RuntimeError, TimeoutError, BrokenWorldError) as exc:
        if world._closed:
            return
        if storehost.by_a_peer(world._spec):  # by hand, its host died without a word
            storehost.gone(world, generation, 0, exc)
            return
        reason = (f"lost the world's store at {world._spec.addr}:{world._spec.port}"
                  " (its host has gone)")
        world._store = None  # reconnect on rejoin
        ended, closes = False, None
    world._break(generation, reason, publish=False, ended=ended, closes=closes)
