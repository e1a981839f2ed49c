"""The worlds' stores, hosted by the keeper so that a store outlives any rank.

One torch TCPStore per world, listening on the socket placement bound for it (so the
port cannot be taken between choosing and using it). The head writes the world
protocol here (see protocol.py), through its keeper. A plain torch.distributed script
connects to the same store through MASTER_ADDR/MASTER_PORT and writes its rendezvous
keys at the top level; those are deleted when the next generation opens, so restarted
members never find a previous attempt's keys (what breaks torchrun's restarts).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from datetime import timedelta
from typing import TYPE_CHECKING

from mwrun import lookups, protocol
from mwrun.plan.placement import WorldPlan

if TYPE_CHECKING:
    from torch.distributed import TCPStore  # imported when the first store is built

# A gloo group's rendezvous: each rank sets PREFIX/R to its address, as in
# 'default_pg/0//cpu//0/2' (torch 2.x); the group exists once every rank's key is there.
_GLOO_RANK = re.compile(r"^(?P<prefix>.*//cpu//\d+)/(?P<rank>\d+)$")


class WorldStores:
    """Built world by world (``build``), each usable as soon as it is: at hundreds of
    worlds the last store is up seconds after the first. A world added while the job
    runs (``register``: a new replica's) gets its store the same way, on the socket the
    head bound when the plan revision chose its port; a removed world's store stays a
    while (its members read why it closed there), then goes (``drop``)."""

    def __init__(self, worlds: dict[str, WorldPlan], listeners: dict[str, socket.socket]):
        self._worlds, self._listeners = dict(worlds), listeners
        self._members = {name: list(w.members) for name, w in worlds.items()}
        self._admitted = {name: [protocol.FIRST_INCARNATION] * w.size
                          for name, w in worlds.items()}
        self._stores: dict[str, TCPStore] = {}

    def register(self, world: WorldPlan, incarnations: list[int],
                 listener: socket.socket) -> None:
        """A world added while the job runs, to be built (on its bound ``listener``)."""
        name = world.name
        self._stores.pop(name, None)  # a removed world of that name: its store goes now
        self._worlds[name], self._members[name] = world, list(world.members)
        self._admitted[name] = list(incarnations)
        self._listeners[name] = listener

    def build(self, name: str) -> None:
        import torch.distributed as dist

        lookups.numeric_only()  # before the first store: no peer is reverse-resolved
        world, listener = self._worlds[name], self._listeners.pop(name)
        fd = os.dup(listener.fileno())  # the store owns this descriptor
        listener.close()
        store = dist.TCPStore(world.addr, world.port, None, True,
                              timeout=timedelta(seconds=max(world.timeout, 5.0)),
                              wait_for_workers=False, master_listen_fd=fd)
        protocol.start(store, self._admitted[name], self._members[name])
        self._stores[name] = store  # one assignment: another thread may look

    def has(self, name: str) -> bool:
        return name in self._stores

    def unbuilt_listeners(self) -> list[socket.socket]:
        return list(self._listeners.values())

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        protocol.mark_broken(self._stores[world], generation, len(self._members[world]),
                             reason)

    def _clean(self, store) -> None:
        """A plain group's rendezvous keys go before a generation opens: restarted
        members never find a previous attempt's keys (what breaks torchrun's restarts)."""
        if hasattr(store, "list_keys"):
            for key in store.list_keys():
                if not key.startswith(protocol.PREFIX):
                    with contextlib.suppress(RuntimeError):
                        store.delete_key(key)

    def open_next(self, world: str, generation: int, incarnations: list[int]) -> None:
        store = self._stores[world]
        self._clean(store)
        protocol.open_next(store, generation, incarnations, self._members[world])

    def resize(self, world: str, generation: int, incarnations: list[int],
               members: list[str], reason: str) -> None:
        store = self._stores[world]
        self._clean(store)
        protocol.resize(store, generation, len(self._members[world]), incarnations, members,
                        reason)
        self._members[world] = list(members)

    def remove(self, world: str, generation: int, reason: str) -> None:
        protocol.remove(self._stores[world], generation, len(self._members[world]), reason)

    def drop(self, world: str) -> None:
        """A removed world's store goes (its server stops with its last reference)."""
        self._stores.pop(world, None)
        for table in (self._worlds, self._members, self._admitted):
            table.pop(world, None)

    def plain_ranks(self, world: str) -> set[int] | None:
        """The ranks of a plain torch.distributed gloo group that have met in the world's
        store (keys outside mwrun's own), or None when the store cannot list its keys
        or holds keys of a kind mwrun does not know how to read (nccl's)."""
        store = self._stores[world]
        if not hasattr(store, "list_keys"):
            return None
        try:
            keys = [k for k in store.list_keys() if not k.startswith(protocol.PREFIX)]
        except RuntimeError:
            return None
        return plain_ranks(keys)

    def close_world(self, world: str, generation: int, reason: str, ended: bool = False) -> None:
        protocol.close(self._stores[world], generation, len(self._members[world]), reason,
                       ended)

    def close(self) -> None:
        self._stores.clear()  # the servers stop with their last reference


def plain_ranks(keys: list[str]) -> set[int] | None:
    """The ranks of the gloo group whose rendezvous keys are among a store's plain
    (non-mwrun) keys; None if there are keys but none of gloo's (nccl's, a script's
    own): mwrun cannot tell from them whether the group exists."""
    ranks: dict[str, set[int]] = {}
    for key in keys:
        found = _GLOO_RANK.match(key)
        if found is not None:
            ranks.setdefault(found["prefix"], set()).add(int(found["rank"]))
    if not ranks:
        return None if keys else set()
    # Several prefixes are several groups (a script's new_group()s), which can only
    # come after the default group, the biggest: it is the one to judge by.
    return max(ranks.values(), key=len)
