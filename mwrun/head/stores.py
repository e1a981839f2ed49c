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
import socket
from datetime import timedelta

from mwrun import protocol
from mwrun.plan.placement import Plan


class WorldStores:
    def __init__(self, plan: Plan, listeners: dict[str, socket.socket]):
        import torch.distributed as dist

        self._sizes = {name: w.size for name, w in plan.worlds.items()}
        self._stores = {}
        for name, world in plan.worlds.items():
            listener = listeners[name]
            fd = os.dup(listener.fileno())  # the store owns this descriptor
            listener.close()
            store = dist.TCPStore(world.addr, world.port, None, True,
                                  timeout=timedelta(seconds=max(world.timeout, 5.0)),
                                  wait_for_workers=False, master_listen_fd=fd)
            protocol.start(store)
            self._stores[name] = store

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        protocol.mark_broken(self._stores[world], generation, self._sizes[world], reason)

    def open_next(self, world: str, generation: int) -> None:
        store = self._stores[world]
        if hasattr(store, "list_keys"):
            for key in store.list_keys():
                if not key.startswith(protocol.PREFIX):
                    with contextlib.suppress(RuntimeError):
                        store.delete_key(key)
        protocol.open_next(store, generation)

    def close_world(self, world: str, generation: int, reason: str) -> None:
        protocol.close(self._stores[world], generation, self._sizes[world], reason)

    def close(self) -> None:
        self._stores.clear()  # the servers stop with their last reference
