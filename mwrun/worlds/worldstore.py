"""One member's connections to a world's store (mwrun.protocol describes its keys), and,
by hand, the store itself where this member hosts it (storehost.py).

A shared client for quick calls, made once; a fresh client for every wait, so that a
wait can be left behind (see interruptible); and the waits in flight, which end when
the world closes or the process exits (``stop_waits``). Once they have, nothing waits on the
store and no store is hosted again (storehost.py says why that order matters). Every
way it can fail is said as the world's: a store that cannot be reached, a wait that
times out, a lost store (``lost``: what that means depends on who hosts it).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import torch.distributed as dist

from mwrun import protocol
from mwrun.errors import BrokenWorldError, WorldClosedError
from mwrun.worlds import failures, storehost
from mwrun.worlds.failures import summarize
from mwrun.worlds.interruptible import Waits, interruptible

_CONNECTING: dict[tuple[str, int], threading.RLock] = {}
_CONNECTING_GUARD = threading.Lock()


def connecting(addr: str, port: int) -> threading.RLock:
    """This process's lock on making connections to the store at ``addr:port``: one at
    a time, so that the socket a connection adds is the only new one to that port
    (formguard.Connection finds its own so). Per store, so a store that cannot be
    reached holds up only the connections to it."""
    with _CONNECTING_GUARD:
        return _CONNECTING.setdefault((addr, port), threading.RLock())


class WorldStore:
    """``exiting()``: the error a wait raises when the world closes or the process
    exits meanwhile; ``lost(generation, exc)``: the error for a store lost for good."""

    def __init__(self, name: str, spec, exiting, lost):
        self.name = name
        self.spec = spec
        self.waits = Waits()  # store waits in flight (interruptible); ended by end()
        self.shared = None  # the client for quick calls, once made (None: made anew)
        self.server = None  # the store itself, while this member hosts it
        self._lock = threading.Lock()  # hosting and ending, never both at once
        self._exiting = exiting
        self._lost = lost

    def host(self) -> None:
        """Host the world's store (by hand, rank 0), unless it is hosted already; never
        once the waits have ended: then this raises ``exiting()``."""
        with self._lock:
            if self.server is not None:
                return
            if self.waits.ended:
                raise self._exiting()
            self.server = storehost.serve(self.name, self.spec)

    def stop_waits(self) -> None:
        """No wait starts from now on, and no store is hosted again."""
        with self._lock:
            self.waits.end()

    def leaving(self, generation: int, size: int, rank: int) -> None:
        """By hand, the host leaves: its peers are told first (storehost.leaving)."""
        server = self.server
        if server is not None:
            storehost.leaving(server, generation, size, rank)

    def drop(self) -> None:
        """Let the store go: the one this member hosts (its connections close with it,
        so tell the peers first: ``leaving``) and the shared client."""
        with self._lock:
            server, self.server = self.server, None
        self.shared = None
        del server  # its destructor ends its connections, outside the lock

    def client(self, timeout: float, generation: int = 0):
        """A new connection to the store (BrokenWorldError if it cannot be reached)."""
        spec = self.spec
        try:
            with connecting(spec.addr, spec.port):
                store = dist.TCPStore(spec.addr, spec.port, None, False,
                                      timeout=timedelta(seconds=max(timeout, 0.001)))
        except (RuntimeError, TimeoutError) as exc:
            raise BrokenWorldError(self.name, max(generation, 0),
                                   f"cannot reach the world's store at {spec.addr}:{spec.port}"
                                   f" ({summarize(exc)})") from None
        store.set_timeout(timedelta(seconds=spec.timeout))
        return store

    def connect(self, deadline: float | None, generation: int):
        """The shared client, made (interruptibly) if there is none."""
        if self.shared is None:
            self.shared = interruptible(self._exiting, self.waits, self.client,
                                        left(deadline, 300.0), generation)
        return self.shared

    def forget(self) -> None:
        """The shared client is of no use any more (its store was lost, or the world
        closed): the next ``connect`` makes a new one."""
        self.shared = None

    def value(self, store, key: str, deadline: float | None, generation: int) -> str:
        """The value of ``key`` once it exists; BrokenWorldError past ``deadline``."""
        if not self.wait_keys([key], deadline, generation):
            raise BrokenWorldError(self.name, generation,
                                   f"timed out waiting for the world's store ({key})")
        return protocol.text(store.get(key))

    def wait_keys(self, keys, deadline: float | None, generation: int) -> bool:
        """Wait until every key exists; False once ``deadline`` has passed. The wait
        has a connection of its own, so that it can be left behind (see interruptible)."""
        def wait() -> None:
            client = self.client(self.spec.timeout, generation)
            while True:
                try:
                    client.wait(keys, timedelta(seconds=min(left(deadline, 3600.0), 3600.0)))
                    return
                except (RuntimeError, TimeoutError) as exc:
                    if not failures.store_timed_out(exc) or \
                            time.monotonic() >= (deadline or float("inf")):
                        raise
        try:
            interruptible(self._exiting, self.waits, wait)
            return True
        except (BrokenWorldError, WorldClosedError):
            raise  # closed (or exiting) meanwhile: said as it is
        except (RuntimeError, TimeoutError) as exc:
            if not failures.store_timed_out(exc):
                raise self._lost(generation, exc) from None
            return False

    def arrive(self, store, arrivals: list[str], deadline: float | None,
               generation: int) -> None:
        """Wait for every member's arrival key; BrokenWorldError naming those missing."""
        if not self.wait_keys(arrivals, deadline, generation):
            missing = [r for r, k in enumerate(arrivals) if not store.check([k])]
            ranks = ", ".join(map(str, missing))
            raise BrokenWorldError(self.name, generation,
                                   f"rank{'s' * (len(missing) > 1)} {ranks} did not join"
                                   " in time")


def left(deadline: float | None, default: float) -> float:
    return default if deadline is None else max(deadline - time.monotonic(), 0.0)
