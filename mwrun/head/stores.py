"""The worlds' stores, hosted by the supervisor so that a store outlives any rank.

One torch TCPStore per world, listening on the socket placement bound for it (so the
port cannot be taken between choosing and using it). The supervisor writes the world
protocol here (see protocol.py). A plain torch.distributed script connects to the
same store through MASTER_ADDR/MASTER_PORT and writes its rendezvous keys at the top
level; those are deleted when the next generation opens, so restarted members never
find a previous attempt's keys (what breaks torchrun's restarts).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from datetime import timedelta

from mwrun import protocol
from mwrun.plan.placement import Plan

# A gloo group's rendezvous: each rank sets PREFIX/R to its address, as in
# 'default_pg/0//cpu//0/2' (torch 2.x); the group exists once every rank's key is there.
_GLOO_RANK = re.compile(r"^(?P<prefix>.*//cpu//\d+)/(?P<rank>\d+)$")


class WorldStores:
    """Built world by world (``build``), each usable as soon as it is: at hundreds of
    worlds the last store is up seconds after the first."""

    def __init__(self, plan: Plan, listeners: dict[str, socket.socket]):
        self._plan, self._listeners = plan, listeners
        self._sizes = {name: w.size for name, w in plan.worlds.items()}
        self._stores = {}

    def build(self, name: str) -> None:
        import torch.distributed as dist

        world, listener = self._plan.worlds[name], self._listeners[name]
        fd = os.dup(listener.fileno())  # the store owns this descriptor
        listener.close()
        store = dist.TCPStore(world.addr, world.port, None, True,
                              timeout=timedelta(seconds=max(world.timeout, 5.0)),
                              wait_for_workers=False, master_listen_fd=fd)
        protocol.start(store, [protocol.FIRST_INCARNATION] * self._sizes[name])
        self._stores[name] = store  # one assignment: another thread may look

    def has(self, name: str) -> bool:
        return name in self._stores

    def unbuilt_listeners(self) -> list[socket.socket]:
        return [sock for name, sock in self._listeners.items() if name not in self._stores]

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        protocol.mark_broken(self._stores[world], generation, self._sizes[world], reason)

    def open_next(self, world: str, generation: int, incarnations: list[int]) -> None:
        store = self._stores[world]
        if hasattr(store, "list_keys"):
            for key in store.list_keys():
                if not key.startswith(protocol.PREFIX):
                    with contextlib.suppress(RuntimeError):
                        store.delete_key(key)
        protocol.open_next(store, generation, incarnations)

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
        protocol.close(self._stores[world], generation, self._sizes[world], reason, ended)

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
