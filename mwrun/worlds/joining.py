"""Joining a world: which generation to join, this member's seat in it, and the wait
for every member to arrive (mwrun.protocol has the keys), before its group is built.

A generation that broke is never joined again, even if the store does not say so yet
(a peer that left publishes nothing): its key space holds the old group's addresses.
Its host's word on it (``next``) says whether the next generation may form or the
world is over. Nor is one that breaks while its group is built (``built``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mwrun import protocol
from mwrun.errors import WorldClosedError
from mwrun.worlds import fencing, formguard, seats
from mwrun.worlds.state import WorldClosed, WorldFinished

log = logging.getLogger("mwrun")


@dataclass(frozen=True)
class Seat:
    """Where this member sits in the generation it joins, and the key space its group
    rendezvouses in (named after the incarnations the generation admits)."""

    generation: int
    rank: int
    size: int
    prefix: str


def join(stores, store, membership, deadline: float | None) -> Seat:
    """Arrive in the generation ``store`` names (or the one after a break) and wait for
    every member there. ``membership`` gives this member's name, incarnation, current
    seat and the generation it saw break last (which it tells when one breaks here)."""
    state, name = membership.state, membership.name
    generation = int(stores.value(store, protocol.GEN, deadline, 0))
    while True:
        while generation <= state.broke_at or \
                protocol.broken_reason(store, generation) is not None:
            decision = stores.value(store, protocol.key(generation, "next"), deadline,
                                    generation)
            if decision.startswith(protocol.CLOSED):
                raise _closed(store, name, generation, decision[len(protocol.CLOSED):])
            generation += 1
        rank, size = seats.seat(store, name, generation, membership.process, state.rank,
                                state.size)
        incarnations = fencing.admitted(store, name, generation, rank, size,
                                        membership.incarnation)  # a stale copy ends
        _same_size(store, name, generation, rank, size)
        arrivals = protocol.arrival_keys(generation, size)
        log.debug("%s: rank %d joins generation %d", name, rank, generation)
        store.set(arrivals[rank], "here")
        stores.arrive(store, arrivals, deadline, generation)
        if protocol.broken_reason(store, generation) is None:
            return Seat(generation, rank, size, protocol.pg_prefix(generation, incarnations))
        # It broke before it formed (a member it counted on died meanwhile): that is
        # no end of the world, whose host opens the next one or closes it.
        state.broke_forming(generation)


def built(stores, store, membership, deadline: float | None, create, drop):
    """(seat, group): ``join``, then build the generation's group (formguard.build:
    ``create(prefixed_store, seat)``, ``drop(group)``). A generation that breaks while
    its group is built is left as one that broke before it formed: the next one is
    joined."""
    while True:
        seat = join(stores, store, membership, deadline)
        group = formguard.build(stores, store, seat, create, drop)
        if group is not None:
            return seat, group
        log.debug("%s: generation %d broke while its group was built", membership.name,
                  seat.generation)
        membership.state.broke_forming(seat.generation)


def _same_size(store, name: str, generation: int, rank: int, size: int) -> None:
    """By hand every member is told the world's size on its own: one told another size
    than the first to arrive closes the generation, and it is over for everyone."""
    first_size, first_rank = protocol.first_size(store, generation, rank, size)
    if first_size != size:
        why = protocol.misfit(store, generation, {first_rank: first_size, rank: size})
        raise WorldClosed(name, generation, why)


def _closed(store, name: str, generation: int, why: str) -> Exception:
    """The host closed the world: removed (drained), ended, or closed."""
    if protocol.removed(store, generation):
        return WorldClosedError(name, generation, why)
    broke = protocol.broken_reason(store, generation)
    if protocol.is_misfit(broke):  # said first, whatever the host (leaving) said since
        return WorldClosed(name, generation, str(broke))
    kind = WorldFinished if protocol.ended(store, generation) else WorldClosed
    return kind(name, generation, why)
