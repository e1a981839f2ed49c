"""The worlds' stores, brought up without making the job, or the loop, wait for torch.

The supervisor needs torch only for its TCPStores, and importing it takes seconds (many
on a busy machine). A thread imports it and builds the stores the moment the plan is
sound; meanwhile the processes start (each world's listening socket is already bound,
so a member that connects early waits in its backlog) and the loop serves Ctrl-C,
status and output from its first moment. What the supervisor writes to a store before
the stores exist (a member that died at once) waits, in order, and is written on the
loop's first turn after they do: the loop never waits for the import.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from mwrun.head.stores import WorldStores  # no torch until one is built

# The store's server threads copy the mask of the thread that builds them: blocked
# here, a Ctrl-C always reaches the loop's main thread.
_BLOCKED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD}
CLOSE_WAIT = 60.0  # at the end, for a build still under way (an import never ends sooner)


class PendingStores:
    def __init__(self, plan, listeners):
        self._plan, self._listeners = plan, listeners
        self._stores: WorldStores | None = None  # the loop's, once taken from the build
        self._built: WorldStores | None = None
        self._error: BaseException | None = None
        self._queued: list[tuple[str, tuple]] = []
        self._wake: Callable[[], None] | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._build, name="mwrun-stores", daemon=True)
        self._thread.start()

    def _build(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
        try:
            import torch.distributed  # noqa: F401 - the slow part, off the loop

            self._built = WorldStores(self._plan, self._listeners)
        except BaseException as exc:  # handed to the loop, which ends the run with it
            self._error = exc
        finally:
            self._done.set()
            with self._lock:
                wake = self._wake
            if wake is not None:
                wake()

    def serve(self, wake: Callable[[], None]) -> None:
        """From now on, wake the loop when the stores exist (at once if they do)."""
        with self._lock:
            self._wake = wake
        if self._done.is_set():
            wake()

    def ready(self) -> bool:
        """Whether the stores exist; on the first call after, what waited is written
        (raises what the build raised: a run without stores cannot go on)."""
        if self._stores is None and self._done.is_set():
            if self._error is not None:
                raise self._error
            self._stores = self._built
            queued, self._queued = self._queued, []
            for verb, args in queued:
                getattr(self._stores, verb)(*args)
        return self._stores is not None

    def _write(self, verb: str, *args) -> None:
        if self.ready():
            getattr(self._stores, verb)(*args)
        else:
            self._queued.append((verb, args))

    def mark_broken(self, world: str, generation: int, reason: str) -> None:
        self._write("mark_broken", world, generation, reason)

    def open_next(self, world: str, generation: int) -> None:
        self._write("open_next", world, generation)

    def close_world(self, world: str, generation: int, reason: str) -> None:
        self._write("close_world", world, generation, reason)

    def plain_ranks(self, world: str) -> set[int] | None:
        """Before the stores exist, no rank can have met in them."""
        return self._stores.plain_ranks(world) if self.ready() else set()

    def close(self) -> None:
        self._thread.join(CLOSE_WAIT)
        stores = self._stores or self._built
        if stores is not None:
            stores.close()
        elif not self._thread.is_alive():
            for sock in self._listeners.values():
                sock.close()
