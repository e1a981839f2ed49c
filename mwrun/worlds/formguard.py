"""Building a generation's group so that a break stops it.

Every member arrives (joining.py) before it builds its group, but a member can still
die between its arrival and the moment it publishes its address in the group's
rendezvous: then its peers wait in torch's C++, inside the store's ``wait``, for the
world's whole timeout, and their ``rejoin()`` fails with "could not connect" although
the world's host has long opened the next generation. A warm restart arrives within
tens of milliseconds, so a fault that hits it again (a drill's, a crash loop's) lands
in that window often enough (measured here: 2 full test runs of 3).

So the group is built over a store connection of its own, and a light thread waits on
this member's ``forming`` key, which every break sets (``protocol.mark_broken``). Woken
while the group is still being built, it shuts that connection down: the wait in C++
fails at once ("connection closed"), and the member joins the next generation as
after any break before forming. The socket is told apart as gloo_abort tells its own:
the one descriptor that making the connection added, whose peer is the store's port;
where that is not exactly one, nothing is cut and a break waits for the timeout, as
before.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import torch.distributed as dist

from mwrun import protocol
from mwrun.errors import BrokenWorldError, WorldClosedError
from mwrun.worlds import failures, gloo_abort
from mwrun.worlds.failures import summarize
from mwrun.worlds.worldstore import connecting

if TYPE_CHECKING:
    from mwrun.worlds.backends import Backend
    from mwrun.worlds.joining import Seat
    from mwrun.worlds.worldstore import WorldStore

_FOREVER_S = 3600.0  # the guard's wait, renewed until the build ends
STOP_WAIT_S = 5.0  # settle() waits this long for the guard to read its key


def build(stores: WorldStore, store, seat: Seat, create: Callable[[dist.Store, Seat], Backend],
          drop: Callable[[Backend], None]) -> Backend | None:
    """The group of ``seat``'s generation, made by ``create(prefixed_store, seat)`` over a
    connection of its own; None where the generation broke meanwhile (the member then
    joins the next one, as after a break before it arrived). ``store``: the member's
    shared client; ``drop(group)`` lets a group built too late go. BrokenWorldError
    where the group could not be built and the generation did not break."""
    spec = stores.spec
    connection = Connection(lambda: stores.client(spec.timeout, seat.generation), spec.port,
                            connecting(spec.addr, spec.port))
    if not connection.cuttable:  # rare, and then a break before forming costs the timeout
        print(f"mwrun: world {stores.name!r} g{seat.generation}: its group is built with"
              f" no guard ({connection.found} new connections to its store, not one): a"
              " break before it forms waits for the world's timeout", file=sys.stderr,
              flush=True)
    guard = FormingGuard(stores, connection, seat.generation, seat.rank)
    guard.start()
    try:
        group = create(dist.PrefixStore(seat.prefix, connection.store), seat)
    except (BrokenWorldError, WorldClosedError):
        guard.settle(store)
        raise
    except RuntimeError as exc:  # torch's: the store, or a peer's connection
        if guard.settle(store) or _broke(store, seat.generation):
            return None
        reason = f"rank {seat.rank} could not connect to its peers: {summarize(exc)}"
        raise BrokenWorldError(stores.name, seat.generation, reason) from None
    except BaseException:
        guard.settle(store)
        raise
    if guard.settle(store):  # it broke just as the group was built: of no use now
        drop(group)
        return None
    return group


def _broke(store, generation: int) -> bool:
    try:
        return protocol.broken_reason(store, generation) is not None
    except (RuntimeError, TimeoutError):
        return False


def _socket_to(fd: int, port: int) -> int | None:
    """A duplicate of ``fd`` if it is a socket connected to ``port`` (else None)."""
    try:
        dup = os.dup(fd)
    except OSError:
        return None
    try:
        if not stat.S_ISSOCK(os.fstat(dup).st_mode):
            os.close(dup)
            return None
        with socket.socket(fileno=os.dup(dup)) as sock:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and \
                    sock.getpeername()[1] == port and sock.getsockname()[1] != port:
                return dup
    except OSError:
        pass
    os.close(dup)
    return None


class Connection:
    """A store client of its own, and a way to shut its socket down from any thread."""

    def __init__(self, make: Callable[[], dist.Store], port: int, lock):
        # ``lock``: held by every connection this process makes to the store
        # (worldstore.connecting), so no other thread's socket to the port is new here:
        # a leader whose other worlds re-formed at the same moment found two, and built
        # with no guard (a drill's world lost for good, a CI run of stop 40).
        with lock:
            before = gloo_abort.fd_targets()
            self.store = make()
            after = gloo_abort.fd_targets()
        new = [fd for fd, target in after.items() if before.get(fd) != target]
        found = [d for d in (_socket_to(fd, port) for fd in new) if d is not None]
        self.found = len(found)  # new sockets to the store's port: one, or no guard
        self._socket = found.pop() if len(found) == 1 else None  # a dup: never reused
        for other in found:  # another thread connected to the store meanwhile: unsure
            os.close(other)
        self._lock = threading.Lock()

    @property
    def cuttable(self) -> bool:
        return self._socket is not None

    def cut(self) -> None:
        """Every call blocked on this connection fails now, and every later one."""
        with self._lock:
            if self._socket is None:
                return
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(self._socket)) as s:
                s.shutdown(socket.SHUT_RDWR)

    def forget(self) -> None:
        """Let go of the duplicate descriptor (the connection itself stays)."""
        with self._lock:
            if self._socket is not None:
                os.close(self._socket)
                self._socket = None


class FormingGuard:
    """Cuts ``connection`` if generation ``generation`` breaks before ``settle()``.
    ``stores``: the member's WorldStore (a client per wait, the waits in flight)."""

    def __init__(self, stores: WorldStore, connection: Connection, generation: int,
                 rank: int):
        self._stores = stores
        self._connection = connection
        self._key = protocol.forming_key(generation, rank)
        self._generation = generation
        self._lock = threading.Lock()
        self._settled = False
        self.cut = False  # a break cut the connection while the group was built
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self._connection.cuttable:
            return
        thread = threading.Thread(target=self._watch, name="mwrun-forming", daemon=True)
        if self._stores.waits.start(thread):  # not once the world closes or we exit
            self._thread = thread

    def settle(self, store) -> bool:  # store: a torch Store
        """The build has ended (either way): no cut from now on. Returns whether one
        happened. Wakes the guard with the key it waits on, in ``store``."""
        with self._lock:
            self._settled = True
        thread, self._thread = self._thread, None
        if thread is not None:
            with contextlib.suppress(RuntimeError, TimeoutError):
                store.set(self._key, "settled")
            thread.join(timeout=STOP_WAIT_S)
        self._connection.forget()
        return self.cut

    def _watch(self) -> None:
        try:
            client = self._stores.client(self._stores.spec.timeout, self._generation)
            while True:
                try:
                    client.wait([self._key], timedelta(seconds=_FOREVER_S))
                    break
                except (RuntimeError, TimeoutError) as exc:
                    if not failures.store_timed_out(exc):
                        return  # the store is gone: the build fails on its own
            with self._lock:
                if self._settled:
                    return
                self.cut = True
                self._connection.cut()
        except (RuntimeError, TimeoutError, BrokenWorldError):  # no store: the build
            return  # fails on its own
        finally:
            self._stores.waits.discard(threading.current_thread())
