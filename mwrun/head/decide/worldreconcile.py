"""The one place a world's state moves: what is wanted of it (``WorldRecord.goal``: set
by the plan's revisions, a drain, and the end of the job or of its members) and what
was seen of it (a member of its generation lost, a resize asked, its members back or
joined) are reconciled into its state, with the act each move takes on its store and
the event that tells it.

Whoever learns something of a world (the restarts, the library's reports, the
reshaping, the supervisor) marks it on the record and asks for a reconcile; nothing else
calls ``Worlds.move`` (tests/unit/test_layout.py holds that). Asked again, it does
nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from mwrun import protocol
from mwrun.head.decide.events import (
    Event,
    WorldBroken,
    WorldChanged,
    WorldClosed,
    WorldDraining,
    WorldFormed,
    WorldRemoved,
    WorldResized,
)
from mwrun.head.decide.records import ProcessRecord, WorldRecord
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldGoal as G
from mwrun.schema import WorldState as W


class Book(Protocol):
    """What the world reconcile reads of the world book, and its one mover."""

    records: dict[str, WorldRecord]
    procs: dict[str, ProcessRecord]

    def move(self, world: WorldRecord, state: W) -> None: ...
    def joined(self, rec: ProcessRecord, world: str) -> bool: ...
    def can_reform(self, world: WorldRecord) -> bool: ...
    def admits(self, members) -> list[int]: ...


class Stores(Protocol):
    """Where a world's members watch: the part of the host this needs."""

    def mark_broken(self, world: str, generation: int, reason: str) -> None: ...
    def open_next(self, world: str, generation: int, incarnations: list[int]) -> None: ...
    def close_world(self, world: str, generation: int, reason: str,
                    ended: bool = False) -> None: ...
    def resize(self, world: str, generation: int, incarnations: list[int],
               members: list[str], reason: str) -> None: ...
    def remove(self, world: str, generation: int, reason: str) -> None: ...


class WorldReconciler:
    def __init__(self, book: Book, stores: Stores, emit: Callable[[Event], None]):
        self.book, self.stores, self.emit = book, stores, emit

    @property
    def procs(self) -> Mapping[str, ProcessRecord]:
        return self.book.procs

    def reconcile(self, world: WorldRecord, now: float) -> None:
        """Move ``world`` until it is where its goal and its marks say."""
        if world.state is W.CLOSED:
            if world.goal is G.GONE and world.plan.name in self.book.records:
                self._remove(world)
            return
        if world.goal is G.GONE:
            self._remove(world)
            return
        if world.goal is G.END:
            self._close(world)
            return
        if world.resized_from is not None:
            self._resize(world)
            if world.state is W.CLOSED:
                return
        if world.lost is not None:
            self._lose(world)
        if world.goal is G.DRAIN and world.state is W.HEALTHY:
            self.book.move(world, W.DRAINING)  # HEALTHY -> DRAINING
            self.emit(WorldDraining(world.plan.name, world.generation, world.drain_seconds))
        members = [self.procs[m] for m in world.plan.members]
        if world.state is W.BROKEN and all(m.state.alive for m in members):
            self.book.move(world, W.FORMING)  # BROKEN -> FORMING: everyone is back
            self.emit(WorldChanged(world.plan.name, W.FORMING, world.reason))
        if world.state is W.FORMING and all(self.book.joined(m, world.plan.name)
                                            for m in members):
            self.book.move(world, W.HEALTHY)  # FORMING -> HEALTHY
            world.reason = None
            world.healthy_since, world.opaque = now, None
            self.emit(WorldFormed(world.plan.name, world.generation))

    def _lose(self, world: WorldRecord) -> None:
        """A member of its current generation ended (``lost``): it breaks; or, broken
        already (that generation open for the members' return), the generation is spent
        and the next one admits the member's next start (fencing: an admitted
        incarnation never changes)."""
        reason, written = world.lost or "", world.written
        world.lost, world.written = None, False
        generation = world.generation
        if world.state in (W.FORMING, W.HEALTHY):
            self.book.move(world, W.BROKEN)  # FORMING|HEALTHY -> BROKEN
            world.reason = reason
            world.breaks += 1
            if not written:
                self.stores.mark_broken(world.plan.name, generation, reason)
            self._open_next(world, generation)
            self.emit(WorldBroken(world.plan.name, generation, reason))
        elif world.state is W.BROKEN:
            self.stores.mark_broken(world.plan.name, generation, reason)
            self._open_next(world, generation)

    def _open_next(self, world: WorldRecord, generation: int) -> None:
        """After ``generation`` broke, the next one, if every member is coming back: it
        admits (fencing, protocol.py ``admit``) each live member as it is, and one to
        be restarted as its next start. Known now, so no generation waits on a start."""
        if self.book.can_reform(world):
            world.admitted = self.book.admits(world.plan.members)
            world.generation = generation + 1
            self.stores.open_next(world.plan.name, generation, world.admitted)

    def _resize(self, world: WorldRecord) -> None:
        """Re-form at the next generation with its new plan's members, whatever the
        current one was doing: its members see one break that says so
        (protocol.resized); or close, when one of them will never come back."""
        old, world.resized_from = world.resized_from, None
        plan = world.plan
        if not self.book.can_reform(world):
            self._close_hopeless(world)
            return
        generation = world.generation
        world.admitted = self.book.admits(plan.members)
        world.generation = generation + 1
        world.lost, world.written = None, False  # the resize is the break
        self.book.move(world, W.FORMING)  # any -> FORMING, resized
        world.reason = None
        self.stores.resize(plan.name, generation, world.admitted, list(plan.members),
                           protocol.resized(old or 0, plan.size))
        self.emit(WorldResized(plan.name, world.generation, plan.members))

    def _close_hopeless(self, world: WorldRecord) -> None:
        world.goal, world.end = G.END, self.hopeless(world)
        self._close(world)

    def hopeless(self, world: WorldRecord) -> tuple[str, bool]:
        """Why a world one of whose members will never come back ends, and whether that
        member finished (exited 0: the world ended, no failure)."""
        gone = next(self.procs[m] for m in world.plan.members
                    if not self.procs[m].state.expected)
        reason = gone.why if gone.state is P.FAILED else f"{gone.why} and will not restart"
        return reason, gone.state is P.EXITED

    def _close(self, world: WorldRecord) -> None:
        """It closes: a member will never come back (its store told, its members see it
        end), or the job is over (``end`` None: nothing more to tell its store)."""
        self.book.move(world, W.CLOSED)  # any -> CLOSED
        if world.end is not None:
            reason, ended = world.end
            world.reason = reason
            # A member that finished (exited 0, not restarted) ends the world: no break
            # (the run's summary counts none), and its members are told it ended.
            self.stores.close_world(world.plan.name, world.generation, reason, ended=ended)
        self.emit(WorldClosed(world.plan.name, world.reason))

    def _remove(self, world: WorldRecord) -> None:
        """It closes for good on purpose and leaves the job (its members see
        WorldClosedError, protocol.remove)."""
        name, reason = world.plan.name, world.removed or ""
        if world.state is not W.CLOSED:
            self.stores.remove(name, world.generation, reason)
        self.book.move(world, W.CLOSED)  # any -> CLOSED, removed
        world.reason = reason
        del self.book.records[name]
        self.emit(WorldRemoved(name, reason))
