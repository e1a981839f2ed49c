"""The worlds' part of the supervisor's decisions: each world's record, what is marked
on it (a member lost, a resize, a drain, its end), and what the rest of the head asks
of the worlds (who joined, who can come back). Its state is moved by the world
reconcile alone (worldreconcile.py), which each mark asks for.

It reads the process records (who is alive, who joined which generation) and writes
only world records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mwrun.head.decide import worldreconcile
from mwrun.head.decide.events import Event, WorldAdded
from mwrun.head.decide.moves import checked
from mwrun.head.decide.records import ProcessRecord, WorldRecord
from mwrun.head.decide.worldreconcile import WorldReconciler
from mwrun.plan.placement import Plan, WorldPlan
from mwrun.schema import WORLD_MOVES
from mwrun.schema import WorldGoal as G
from mwrun.schema import WorldState as W


class Stores(worldreconcile.Stores, Protocol):
    """Where a world's members watch: the part of the host the worlds need."""

    def add_world(self, plan: WorldPlan, incarnations: list[int]) -> None: ...


class Hands(Stores, Protocol):
    def now(self) -> float: ...


class Worlds:
    def __init__(self, plan: Plan, procs: dict[str, ProcessRecord], host: Hands,
                 emit: Callable[[Event], None]):
        self.records = {name: WorldRecord(w) for name, w in plan.worlds.items()}
        self.procs = procs  # read only
        self.host = host
        self.emit = emit
        self.settle = WorldReconciler(self, host, emit)  # the one place a world moves

    def move(self, world: WorldRecord, state: W) -> None:
        """Every change of a world's state goes here, checked against its machine.
        Called by the world reconcile alone (worldreconcile.py)."""
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
        """A world an event touched: reconciled (its members back, or joined)."""
        self.settle.reconcile(world, now)

    def _settle(self, world: WorldRecord) -> None:
        self.settle.reconcile(world, self.host.now())

    # -- what is marked on a world ----------------------------------------------------------

    def lost_member(self, world: WorldRecord, reason: str) -> None:
        """A member in the world's current generation ended: it breaks (or, broken
        already, that generation is spent: worldreconcile.py)."""
        world.lost = reason
        self._settle(world)

    def broke(self, world: WorldRecord, reason: str, written: bool = False) -> None:
        """``written``: a member wrote the break to the world's store itself."""
        world.lost, world.written = reason, written
        self._settle(world)

    def add(self, plan: WorldPlan) -> WorldRecord:
        """A new world (a new replica's): its store is made, generation 0 admits its
        members as they are (the new replica: its first start)."""
        world = self.records[plan.name] = WorldRecord(plan, admitted=self.admits(plan.members))
        self.host.add_world(plan, world.admitted)
        self.emit(WorldAdded(plan.name, plan.members))
        return world

    def resize(self, world: WorldRecord, plan: WorldPlan) -> None:
        """Re-form at the next generation with ``plan``'s members, whatever the current
        one was doing: its members see one break that says so (protocol.resized)."""
        if world.state is W.CLOSED:
            return
        if world.resized_from is None:
            world.resized_from = world.plan.size
        world.plan, world.target, world.drain_until, world.drained = plan, None, None, None
        world.goal = G.FORM
        self._settle(world)

    def drain(self, world: WorldRecord, target: WorldPlan | None, until: float,
              seconds: float) -> bool:
        """Its retired members leave: a healthy world drains (calls work until a member
        releases it or ``until``) toward ``target`` (None: it is removed). False when it
        cannot wait (forming, broken): finish it now."""
        if world.state is W.DRAINING:  # another member leaves too: the sooner end
            world.target, world.drain_until = target, min(world.drain_until or until, until)
            return True
        world.target = target
        if world.state is not W.HEALTHY:
            return False
        world.goal, world.drain_until, world.drain_seconds = G.DRAIN, until, seconds
        self._settle(world)  # HEALTHY -> DRAINING
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
        world.goal, world.removed = G.GONE, reason
        self._settle(world)

    def close_if_hopeless(self, world: WorldRecord) -> None:
        """A member will never come back: it closes."""
        if world.state is W.CLOSED or self.can_reform(world):
            return
        world.goal, world.end = G.END, self.settle.hopeless(world)
        self._settle(world)

    def close_all(self) -> None:
        """The job is over: every world closes (those not closed yet)."""
        for world in list(self.records.values()):
            if world.state is not W.CLOSED:
                world.goal = G.END
                self._settle(world)

    # -- what the rest of the head asks -----------------------------------------------------

    def admits(self, members) -> list[int]:
        """Each member as it is if alive, else its next start (a new one, a restart)."""
        return [self.procs[m].worker.incarnation + (0 if self.procs[m].state.alive else 1)
                for m in members]

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
