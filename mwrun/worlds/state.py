"""Where one member stands in its world: the state of ``Membership``, and the only code
that changes it.

::

    FORMING --formed--> FORMED --broke--> BROKEN --formed (rejoin)--> FORMED ...
    FORMING, BROKEN --give_up--> BROKEN (the world could not form; rejoin may still)
    any --close--> CLOSED (this member left it: calls, rejoin() raise WorldClosedError)
    any --gone--> GONE (the head closed it for this member: removed, or resized out)

Every change happens under one lock, and what the job must hear of it (``broken``,
``resized``, ``reformed``, ``removed``) is told under that lock too, so the job hears
in the order it happened. The fields are read bare (the calls read them on every call)
and never written outside this class.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import torch

from mwrun import protocol
from mwrun.errors import BrokenWorldError, MwrunError, WorldClosedError, WorldEnded
from mwrun.worlds.events import EventKind

if TYPE_CHECKING:  # backends imports torch.distributed: only its type is needed here
    from mwrun.worlds.backends import Backend

CLOSED_HERE = "this process closed it"


class WorldClosed(BrokenWorldError):
    """The world's host decided it will not re-form (a BrokenWorldError all the same)."""


class WorldFinished(WorldEnded, WorldClosed):
    """Closed because a member finished (exited 0, not restarted): ended, not broken."""


class GenerationState:
    """``tell(kind, generation, reason)``: the job hears a change (None: no one does)."""

    def __init__(self, name: str, rank: int, size: int, backend: str, tell=None):
        self.name = name
        self._lock = threading.Lock()
        self._draining = threading.Lock()
        self._tell = tell
        self.generation = -1  # the generation formed last (or that failed to form)
        self.rank, self.size = rank, size  # this member's seat in it
        self.group = None  # its backends.Backend while formed
        self.error: BrokenWorldError | WorldClosedError | None = None
        self.device = torch.device("cpu") if backend == "gloo" else torch.device("cuda", 0)
        self.broke_at = -1  # the last generation this member saw break
        self.over: BrokenWorldError | None = None  # by hand: its store host has gone
        self.closed = False  # this member closed it
        self.gone: WorldClosedError | None = None  # closed for this member by the head
        self.draining = False  # the head is retiring it

    def live(self):
        """The group of the generation formed, for a call; raises why there is none."""
        error = self.error
        if error is not None:
            raise error
        group = self.group
        if group is None:
            raise MwrunError(f"world {self.name!r} is closed" if self.closed
                             else f"world {self.name!r} has not formed")
        return group

    def exiting(self) -> BrokenWorldError | WorldClosedError:
        """What a wait raises when the world closed (or the process exits) meanwhile.
        A rejoin() under way when this process closes the world (Ctrl-C leaving ``with
        mwrun.init()`` while a thread recovers) ends as a break that will not re-form,
        which the recovery code written for breaks already ends on."""
        if self.gone is not None:
            return self.gone
        if self.closed:
            return WorldClosed(self.name, max(self.generation, 0), "this member closed it")
        return BrokenWorldError(self.name, max(self.generation, 0), "the process is exiting")

    # FORMING|BROKEN -> FORMED
    def formed(self, generation: int, rank: int, size: int, group, ended) -> bool:
        """A generation formed with ``group``; False (nothing changes) if the world was
        closed, or ``ended()`` (its waits ended: the process exits), meanwhile."""
        with self._lock:
            if self.closed or self.gone is not None or ended():
                return False
            reformed = self.generation >= 0 and self.error is not None
            self.group, self.generation, self.error = group, generation, None
            self.rank, self.size, self.device = rank, size, group.device
            if reformed:
                self._say(EventKind.REFORMED, generation)
            return True

    # FORMING|BROKEN -> BROKEN
    def give_up(self, error: BrokenWorldError) -> None:
        """Forming failed for good: the world stays broken until a rejoin() succeeds."""
        with self._lock:
            if self.gone is None and not self.closed:
                self.error, self.generation = error, error.generation

    # FORMED -> BROKEN
    def broke(self, generation: int, error: BrokenWorldError):
        """``generation`` broke with ``error``: (the error that stands, whether it broke
        now (not where the generation was not the one formed, or broke before), the
        group to abort)."""
        with self._lock:
            if self.generation != generation or self.error is not None:
                return self.error or error, False, None
            self.error, self.broke_at = error, generation
            resize = protocol.is_resize(error.reason)
            self._say(EventKind.RESIZED if resize else EventKind.BROKEN, generation,
                      error.reason)
            return error, True, self.group

    def broke_forming(self, generation: int) -> None:
        """A generation broke before it formed: never join it again."""
        with self._lock:
            self.broke_at = max(self.broke_at, generation)

    def host_over(self, error: BrokenWorldError) -> None:
        """By hand, the store's host has gone: the world is over for good."""
        with self._lock:
            if self.over is None:
                self.over = error

    # any -> GONE
    def go(self, error: WorldClosedError, generation: int | None):
        """The head closed the world for this member: (the error that stands, whether it
        changed now, the group to let go)."""
        with self._lock:
            if self.gone is not None or self.closed:
                return self.gone or self.exiting(), False, None
            if generation is not None and generation != self.generation:
                return self.error or error, False, None  # a generation it no longer holds
            self.gone = self.error = error
            group, self.group = self.group, None
            self._say(EventKind.REMOVED, error.generation, error.reason)
            return error, True, group

    # any -> CLOSED
    def close(self, end_waits) -> tuple[int, Backend | None, bool] | None:
        """This member leaves: (generation, group to let go, whether the head had
        closed it already), or None if it had left before. ``end_waits()`` runs
        under the lock: no wait starts once the world is closed."""
        with self._lock:
            if self.closed:
                return None
            self.closed = True
            end_waits()
            if self.gone is None:  # closed on purpose, by this process: not a break, so
                # code that rejoins after one does not try to rejoin this. Every call from
                # now on, one blocked now and rejoin() raise it; a break said since
                # changes nothing.
                self.error = WorldClosedError(self.name, max(self.generation, 0), CLOSED_HERE)
            group, self.group = self.group, None
            return self.generation, group, self.gone is not None

    def take_group(self):
        """The group of a broken generation, to let go before the next one forms."""
        with self._lock:
            group, self.group = self.group, None
            return group

    def drain(self) -> bool:
        """The head drains this world; True the first time. Not under the state's lock:
        the job calls it under its own, which a change told under this one takes."""
        with self._draining:
            first, self.draining = not self.draining, True
            return first

    def _say(self, kind: EventKind, generation: int, reason: str | None = None) -> None:
        if self._tell is not None:
            self._tell(kind, generation, reason)
