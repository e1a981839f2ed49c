"""The job's worlds: the live set (``job.worlds``), those still forming beside it, and
the events that change it, posted in order.

A world enters the live set when ``init`` makes it, or once it has formed (one the
head added, or ``job.add_world``): then ``added``. It leaves it when it is removed (by
the head, by a resize that leaves this member out, or ``job.remove_world``): then
``removed``. What a world tells of itself (``broken``, ``resized``, ``reformed``,
``removed``) is posted only while it is in the live set: a world still forming is no
one's business yet, and one that never formed leaves quietly.

Locks: a world tells its changes under its state's lock (state.py), and the roster's
is taken inside it; so the roster never takes a world's state lock under its own.
"""

from __future__ import annotations

import threading

from mwrun.errors import MwrunError
from mwrun.worlds.events import EventKind, EventQueue, WorldEvent


class Roster:
    def __init__(self, events: EventQueue):
        self.events = events
        self._lock = threading.Lock()
        self._live: dict = {}  # name -> World, in job.worlds
        self._forming: dict = {}  # name -> World, joining in the background
        self._draining: dict[str, int | None] = {}  # told to drain while still forming

    def snapshot(self) -> dict:
        """A fresh dict of the live worlds: iterating it never races a change."""
        with self._lock:
            return dict(self._live)

    def everything(self) -> list:
        """Every world of the job, live or forming (what ``job.close()`` leaves)."""
        with self._lock:
            return [*self._live.values(), *self._forming.values()]

    def knows(self, name: str) -> bool:
        with self._lock:
            return name in self._live or name in self._forming

    def enter(self, world) -> None:
        """A world of ``init``: in the live set from the start, formed or not."""
        with self._lock:
            self._live[world.name] = world

    def claim(self, world) -> None:
        """A world that forms before it enters; MwrunError if its name is taken."""
        with self._lock:
            if world.name in self._live or world.name in self._forming:
                raise MwrunError(f"this process has a world named {world.name!r} already")
            self._forming[world.name] = world

    def formed(self, world) -> bool:
        """The claimed world formed: it enters the live set, ``added`` is posted, and a
        drain told meanwhile applies now. False if it was dropped while it formed."""
        with self._lock:
            if not _same(self._forming.get(world.name), world):
                return False
            del self._forming[world.name]
            self._live[world.name] = world
            self.events.post(WorldEvent(EventKind.ADDED, world.name, world.generation))
            drain = world.name in self._draining
            generation = self._draining.pop(world.name, None)
        if drain:
            self.drain(world.name, generation)
        return True

    def drop(self, world, reason: str | None = None) -> bool:
        """Take ``world`` out of the job; True if it was live (``removed`` is posted)."""
        with self._lock:
            self._draining.pop(world.name, None)
            if _same(self._forming.get(world.name), world):
                del self._forming[world.name]
                return False
            if not _same(self._live.get(world.name), world):
                return False
            del self._live[world.name]
            self.events.post(WorldEvent(EventKind.REMOVED, world.name, world.generation,
                                        reason))
            return True

    def live(self, name: str):
        """The live world ``name``; MwrunError if the job has none of that name."""
        with self._lock:
            world = self._live.get(name)
            known = ", ".join(self._live) or "none"
        if world is None:
            raise MwrunError(f"no world named {name!r}; this process is in: {known}")
        return world

    def drain(self, name: str, generation: int | None) -> None:
        """The head retires ``name``: ``draining``, once, when it is live (or once it
        has formed)."""
        with self._lock:
            world = self._live.get(name)
            if world is None:
                if name in self._forming:
                    self._draining[name] = generation
                return
            if world.membership.state.drain():
                gen = world.generation if generation is None else generation
                self.events.post(WorldEvent(EventKind.DRAINING, name, gen))

    def slow(self, name: str, generation: int, member: str | None,
             lag_s: float | None) -> None:
        """The head named the member world ``name`` waits for (None: none any more):
        ``slow``, posted while the world is live."""
        reason = "no member is waited for any more" if member is None else \
            f"its peers wait for {member}: {(lag_s or 0.0) * 1000:.0f} ms more per collective"
        with self._lock:
            if name in self._live:
                self.events.post(WorldEvent(EventKind.SLOW, name, generation, reason,
                                            member=member, lag_s=lag_s))

    def tell(self, world, kind: EventKind, generation: int, reason: str | None) -> None:
        """What a world tells of itself (``broken``, ``resized``, ``reformed``,
        ``removed``): posted while it is live; ``removed`` takes it out."""
        if kind is EventKind.REMOVED:
            self.drop(world, reason)
            return
        with self._lock:
            if _same(self._live.get(world.name), world):
                self.events.post(WorldEvent(kind, world.name, generation, reason))


def _same(found, world) -> bool:
    """Whether the world a table holds under its name is this one (not another made
    under the same name since)."""
    return found is world
