"""What the worlds' stores show of plain torch.distributed groups: a script written for
torchrun says nothing to its supervisor, so whether its world formed is read from the
world's store (the ranks whose rendezvous keys are there), for the forming worlds with
a member not heard from. A job whose members all said hello costs nothing here."""

from __future__ import annotations

from collections.abc import Callable

from mwrun.head.decide.events import Event, WorldChanged
from mwrun.head.decide.processbook import Processes
from mwrun.head.decide.records import WorldRecord
from mwrun.head.decide.worldbook import Worlds
from mwrun.schema import WorldState as W

OPAQUE = "mwrun cannot see this world's process group form in its store"


class PlainGroups:
    def __init__(self, processes: Processes, book: Worlds, emit: Callable[[Event], None],
                 reconcile: Callable[..., None]):
        self.processes, self.book, self.emit = processes, book, emit
        self.reconcile = reconcile  # the supervisor: what a store showed, reconciled

    def look_into_stores(self, ranks: Callable[[str], set[int] | None]) -> None:
        """What each forming world's store shows now of its plain members (``ranks``
        of a world: the stores', ``on_store_seen``)."""
        for world in self.forming():
            self.on_store_seen(world, ranks(world))

    def forming(self) -> list[str]:
        """Worlds forming with a live member that has not spoken the mwrun protocol
        (yet): the loop looks into their stores for a plain group's rendezvous. Found
        from the members not heard from (``Processes.unheard``, pruned of those no
        longer alive here), never from every world."""
        unheard, found = self.processes.unheard, dict[str, None]()  # in order, once each
        for name in list(unheard):
            rec = self.processes.records.get(name)
            if rec is None or not rec.state.alive or rec.worker.said_hello:
                unheard.discard(name)
                continue
            for world in rec.plan.worlds:
                record = self.book.records.get(world)
                if record is not None and record.state is W.FORMING:
                    found[world] = None
        return sorted(found)

    def on_store_seen(self, world_name: str, ranks: set[int] | None) -> None:
        """What a forming world's store shows of a plain torch.distributed group: the
        ranks whose rendezvous keys are there, or None when mwrun cannot read them (a
        backend whose keys it does not know); the world is then shown as unknown."""
        world = self.book.records.get(world_name)
        if world is None or world.state is not W.FORMING:
            return
        if self._met(world, ranks):  # the whole group met: it exists
            for member in world.plan.members:
                rec = self.processes.records[member]
                if rec.state.alive and not rec.worker.said_hello:
                    rec.worker.ready.add(world_name)
                    rec.worker.generations[world_name] = world.generation
        self.reconcile(*(self.processes.records[m] for m in world.plan.members),
                       only=[world_name])

    def _met(self, world: WorldRecord, ranks: set[int] | None) -> bool:
        """Whether the whole group met in the store; whether mwrun can tell, shown."""
        opaque = OPAQUE if ranks is None else None
        if opaque != world.opaque:  # asked every tick: only a change is news
            world.opaque = opaque
            self.emit(WorldChanged(world.plan.name, world.state, opaque))
        return ranks is not None and set(range(world.plan.size)) <= ranks
