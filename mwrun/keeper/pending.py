"""The worlds' stores, brought up without making the keeper's loop wait for torch.

Importing torch takes a second (many on a busy machine; none for a keeper forked warm).
A thread imports it and builds the stores, side by side; meanwhile the processes start
(each world's listening socket is already bound, so a member that connects early waits
in its backlog) and the keeper's loop goes on reading what its head writes. What is
written to a world's store before that store exists (a member that died at once)
waits, in order, and is written on the loop's first turn after it does: the loop never
waits for the import, nor for the other worlds' stores.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed

from mwrun.keeper.stores import WorldStores  # no torch until one is built
from mwrun.plan.placement import WorldPlan

# The store's server threads copy the mask of the thread that builds them: blocked
# here, a signal always reaches the loop's main thread.
_BLOCKED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD}
BUILDERS = 32  # stores built at once (each mostly waits: see _build)
CLOSE_WAIT = 60.0  # at the end, for a build still under way (an import never ends sooner)
KEEP_REMOVED = 60.0  # seconds a removed world's store stays, for its members to read why


class PendingStores:
    def __init__(self, worlds: dict[str, WorldPlan], listeners: dict[str, socket.socket]):
        self._stores = WorldStores(worlds, listeners)  # filled by the thread, world by world
        self._worlds = list(worlds)
        self._error: BaseException | None = None
        self._queued: dict[str, list[tuple[str, tuple]]] = {}  # world -> writes waiting
        self._wake: Callable[[], None] | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._late: list[str] = []  # worlds added while the first builds ran
        self._removed: dict[str, float] = {}  # removed world -> when its store goes
        self._thread = threading.Thread(target=self._build, name="mwrun-stores", daemon=True)
        self._thread.start()

    def _build(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
        try:
            import torch.distributed  # noqa: F401 - the slow part, off the loop

            # Side by side: building a store connects a client to it, and torch names
            # that connection by a reverse lookup of its address (::ffff:127.0.0.1),
            # which a busy or unreachable resolver answers only after its timeout (5 s
            # here while a hundred processes start: the worlds formed in 5 s waves).
            with ThreadPoolExecutor(min(len(self._worlds), BUILDERS) or 1,
                                    thread_name_prefix="mwrun-stores",
                                    initializer=signal.pthread_sigmask,
                                    initargs=(signal.SIG_BLOCK, _BLOCKED)) as builders:
                built = {builders.submit(self._stores.build, name): name
                         for name in self._worlds}
                for done in as_completed(built):
                    done.result()  # what a build raised, raised here
                    if self._queued.get(built[done]):
                        self._wake_loop()  # a write waits for this one
        except BaseException as exc:  # handed to the loop, which ends the run with it
            self._error = exc
        finally:
            self._done.set()
            self._wake_loop()

    def _wake_loop(self) -> None:
        with self._lock:
            wake = self._wake
        if wake is not None:
            wake()

    def serve(self, wake: Callable[[], None]) -> None:
        """From now on, wake the loop when a store that a write waits for exists."""
        with self._lock:
            self._wake = wake
        if self._done.is_set():
            wake()

    def ready(self) -> bool:
        """Whether every store exists; what waited for a store that exists now is
        written (raises what the build raised: a run without stores cannot go on)."""
        if self._error is not None:
            raise self._error
        if self._done.is_set():
            while self._late:  # quick now: torch is imported, nothing is looked up
                old = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)  # see _BLOCKED
                try:
                    self._stores.build(self._late.pop(0))
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, old)
            now = time.monotonic()
            for world in [w for w, t in self._removed.items() if t <= now]:
                del self._removed[world]
                self._stores.drop(world)
        for world in [w for w in self._queued if self._stores.has(w)]:
            for verb, args in self._queued.pop(world):
                getattr(self._stores, verb)(world, *args)
        return self._done.is_set()

    def _write(self, verb: str, world: str, *args) -> None:
        self.ready()
        if self._stores.has(world) and world not in self._queued:
            getattr(self._stores, verb)(world, *args)
        else:
            self._queued.setdefault(world, []).append((verb, args))

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        self._write("mark_broken", world, generation, reason)

    def open_next(self, world: str, generation: int, incarnations: list[int]) -> None:
        self._write("open_next", world, generation, incarnations)

    def close_world(self, world: str, generation: int, reason: str, ended: bool = False) -> None:
        self._write("close_world", world, generation, reason, ended)

    # -- a membership that changes ---------------------------------------------------

    def add_world(self, plan: WorldPlan, incarnations: list[int],
                  listener: socket.socket) -> None:
        """A new world's store, on ``listener`` (bound by the head as the revision chose
        its port): built at once when torch is loaded (milliseconds), else after the
        first ones; what is written to it meanwhile waits, in order."""
        self._removed.pop(plan.name, None)  # a world made again under a removed one's name
        self._queued.pop(plan.name, None)  # (what waited was for the old one)
        self._stores.register(plan, incarnations, listener)
        self._late.append(plan.name)
        self.ready()

    def resize(self, world: str, generation: int, incarnations: list[int],
               members: list[str], reason: str) -> None:
        self._write("resize", world, generation, incarnations, members, reason)

    def remove(self, world: str, generation: int, reason: str) -> None:
        self._write("remove", world, generation, reason)
        self._removed[world] = time.monotonic() + KEEP_REMOVED

    def plain_ranks(self, world: str) -> set[int] | None:
        """Before its store exists, no rank can have met in it."""
        return self._stores.plain_ranks(world) if self._stores.has(world) else set()

    def close(self) -> None:
        self._thread.join(CLOSE_WAIT)
        if not self._thread.is_alive():
            for sock in self._stores.unbuilt_listeners():
                sock.close()
        self._stores.close()
