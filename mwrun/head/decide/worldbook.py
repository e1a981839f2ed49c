"""The worlds' part of the supervisor's decisions: each world's record and its state
machine (states.WorldState), driven by the supervisor for the worlds an event
touches.

It reads the process records (who is alive, who joined which generation) and writes
only world records; it acts on the worlds' stores through the supervisor's host and
tells each change it makes as an event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mwrun import protocol
from mwrun.head.decide.events import (
    Event,
    WorldAdded,
    WorldBroken,
    WorldChanged,
    WorldClosed,
    WorldDraining,
    WorldFormed,
    WorldRemoved,
    WorldResized,
)
from mwrun.head.decide.moves import checked
from mwrun.head.decide.records import ProcessRecord, WorldRecord
from mwrun.plan.placement import Plan, WorldPlan
from mwrun.schema import WORLD_MOVES
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W


class Stores(Protocol):
    """Where a world's members watch: the part of the host this needs."""

    def mark_broken(self, world: str, generation: int, reason: str) -> None: ...
    def open_next(self, world: str, generation: int, incarnations: list[int]) -> None: ...
    def close_world(self, world: str, generation: int, reason: str,
                    ended: bool = False) -> None: ...
    def add_world(self, plan: WorldPlan, incarnations: list[int]) -> None: ...
    def resize(self, world: str, generation: int, incarnations: list[int],
               members: list[str], reason: str) -> None: ...
    def remove(self, world: str, generation: int, reason: str) -> None: ...


class Worlds:
    def __init__(self, plan: Plan, procs: dict[str, ProcessRecord], stores: Stores,
                 emit: Callable[[Event], None]):
        self.records = {name: WorldRecord(w) for name, w in plan.worlds.items()}
        self.procs = procs  # read only
        self.stores = stores
        self.emit = emit

    def move(self, world: WorldRecord, state: W) -> None:
        """Every change of a world's state goes here, checked against its machine."""
        world.state = checked(WORLD_MOVES, f"world {world.plan.name}", world.state, state)

    def joined_all(self, rec: ProcessRecord) -> bool:
        """It joined every world it is in (a process in none never joins one)."""
        worlds = rec.plan.worlds
        return bool(worlds) and all(self.joined(rec, w) for w in worlds)

    def joined(self, rec: ProcessRecord, world: str) -> bool:
        if not rec.state.alive:
            return False
        # Joined means it said so (the library's "ready"), or, for a plain
        # torch.distributed script, that its group's rendezvous shows in the world's
        # store (seen). Having merely run for a while proves nothing.
        worker = rec.worker
        return world in worker.ready and \
            worker.generations.get(world) == self.records[world].generation

    def progress(self, world: WorldRecord, now: float) -> None:
        members = [self.procs[m] for m in world.plan.members]
        if world.state is W.BROKEN and all(m.state.alive for m in members):
            self.move(world, W.FORMING)  # BROKEN -> FORMING: everyone is back
            self.emit(WorldChanged(world.plan.name, W.FORMING, world.reason))
        if world.state is W.FORMING and all(self.joined(m, world.plan.name) for m in members):
            self.move(world, W.HEALTHY)  # FORMING -> HEALTHY
            world.reason = None
            world.healthy_since, world.opaque = now, None
            self.emit(WorldFormed(world.plan.name, world.generation))

    def lost_member(self, world: WorldRecord, reason: str) -> None:
        """A member in the world's current generation ended: the world breaks; or, when
        it was broken already (that generation open for the members' return), the
        generation is spent and the next one admits the member's next start (fencing:
        an admitted incarnation never changes)."""
        if world.state in (W.FORMING, W.HEALTHY):
            self.broke(world, reason)
        elif world.state is W.BROKEN:
            generation = world.generation
            self.stores.mark_broken(world.plan.name, generation, reason)
            self._open_next(world, generation)

    def broke(self, world: WorldRecord, reason: str, written: bool = False) -> None:
        """``written``: a member wrote the break to the world's store itself."""
        generation = world.generation
        self.move(world, W.BROKEN)  # FORMING|HEALTHY -> BROKEN
        world.reason = reason
        world.breaks += 1
        if not written:
            self.stores.mark_broken(world.plan.name, generation, reason)
        self._open_next(world, generation)
        self.emit(WorldBroken(world.plan.name, generation, reason))

    def _open_next(self, world: WorldRecord, generation: int) -> None:
        """After ``generation`` broke, the next one, if every member is coming back: it
        admits (fencing, protocol.py ``admit``) each live member as it is, and one to
        be restarted as its next start. Known now, so no generation waits on a start."""
        if self.can_reform(world):
            members = [self.procs[m] for m in world.plan.members]
            world.admitted = [rec.worker.incarnation + (0 if rec.state.alive else 1)
                              for rec in members]
            world.generation = generation + 1
            self.stores.open_next(world.plan.name, generation, world.admitted)

    # -- a membership that changes (elastic jobs) ----------------------------------------

    def _admits(self, members) -> list[int]:
        """Each member as it is if alive, else its next start (a new one, a restart)."""
        return [self.procs[m].worker.incarnation + (0 if self.procs[m].state.alive else 1)
                for m in members]

    def add(self, plan: WorldPlan) -> WorldRecord:
        """A new world (a new replica's): its store is made, generation 0 admits its
        members as they are (the new replica: its first start)."""
        world = self.records[plan.name] = WorldRecord(plan, admitted=self._admits(plan.members))
        self.stores.add_world(plan, world.admitted)
        self.emit(WorldAdded(plan.name, plan.members))
        return world

    def resize(self, world: WorldRecord, plan: WorldPlan) -> None:
        """Re-form at the next generation with ``plan``'s members, whatever the current
        one was doing: its members see one break that says so (protocol.resize)."""
        if world.state is W.CLOSED:
            return
        generation, old = world.generation, world.plan.size
        world.plan, world.target, world.drain_until, world.drained = plan, None, None, None
        if not self.can_reform(world):
            self.close_if_hopeless(world)
            return
        world.admitted = self._admits(plan.members)
        world.generation = generation + 1
        self.move(world, W.FORMING)  # any -> FORMING, resized
        world.reason = None
        self.stores.resize(plan.name, generation, world.admitted, list(plan.members),
                           protocol.resized(old, plan.size))
        self.emit(WorldResized(plan.name, world.generation, plan.members))

    def drain(self, world: WorldRecord, target: WorldPlan | None, until: float,
              seconds: float) -> bool:
        """Its retired members leave: a healthy world drains (calls work until a member
        releases it or ``until``) toward ``target`` (None: it is removed). False when it
        cannot wait (forming, broken): finish it now."""
        if world.state is W.DRAINING:  # another member leaves too: the sooner end
            world.target, world.drain_until = target, min(world.drain_until or until, until)
            return True
        if world.state is not W.HEALTHY:
            world.target = target
            return False
        self.move(world, W.DRAINING)  # HEALTHY -> DRAINING
        world.target, world.drain_until = target, until
        self.emit(WorldDraining(world.plan.name, world.generation, seconds))  # HEALTHY -> DRAINING
        return True

    def finish(self, world: WorldRecord, why: str) -> None:
        """A drain is over (released, its deadline, a member ended): re-form without the
        retired members, or go."""
        if world.target is None:
            self.remove(world, why)
        else:
            self.resize(world, world.target)

    def remove(self, world: WorldRecord, reason: str) -> None:
        """The world closes for good on purpose and leaves the job (its members see
        WorldClosedError, protocol.remove)."""
        name = world.plan.name
        if world.state is not W.CLOSED:
            self.stores.remove(name, world.generation, reason)
        self.move(world, W.CLOSED)  # any -> CLOSED, removed
        world.reason = reason
        del self.records[name]
        self.emit(WorldRemoved(name, reason))

    def in_play(self, world: WorldRecord, rec: ProcessRecord) -> bool:
        """Whether the world's current generation counts on this start of ``rec``: it
        is in it, or it is the incarnation that generation admits (a member that was
        alive when it opened, then died: the generation can never form without it)."""
        rank = world.plan.members.index(rec.plan.name)
        return rec.worker.generations.get(world.plan.name) == world.generation or \
            world.admitted[rank] == rec.worker.incarnation

    def nothing_to_join(self, rec: ProcessRecord) -> bool:
        return all(self.records[w].state is W.CLOSED for w in rec.plan.worlds)

    def can_reform(self, world: WorldRecord) -> bool:
        return all(self.procs[m].state.expected for m in world.plan.members)

    def close_if_hopeless(self, world: WorldRecord) -> None:
        if world.state is W.CLOSED or self.can_reform(world):
            return
        gone = next(self.procs[m] for m in world.plan.members if not self.procs[m].state.expected)
        reason = gone.why if gone.state is P.FAILED else f"{gone.why} and will not restart"
        self.move(world, W.CLOSED)  # any -> CLOSED
        world.reason = reason
        # A member that finished (exited 0, not restarted) ends the world: no break
        # (the run's summary counts none), and its members are told it ended.
        self.stores.close_world(world.plan.name, world.generation, reason,
                                ended=gone.state is P.EXITED)
        self.emit(WorldClosed(world.plan.name, reason))

    def close_all(self) -> None:
        """The job is over: every world closes (those not closed yet)."""
        for name, world in self.records.items():
            if world.state is not W.CLOSED:
                self.move(world, W.CLOSED)  # any -> CLOSED
                self.emit(WorldClosed(name, world.reason))
