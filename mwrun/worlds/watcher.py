"""A world's watcher: one light thread per world and member, asleep in the world's
store on its own wake key until the generation ends (no polling; see mwrun.protocol).
Woken, it reads why: a break (which it applies to the membership), a removal or a
resize that leaves this member out (the world is closed for it: seats.py), this
member's own close, or, by hand, the store's host leaving; a lost store is a break of
its own.
"""

from __future__ import annotations

import contextlib
import threading
from datetime import timedelta

from mwrun import protocol
from mwrun.errors import BrokenWorldError
from mwrun.worlds import failures, seats, signals, storehost
from mwrun.worlds.interruptible import ASLEEP, letting_go

_FOREVER = timedelta(hours=1)  # a watcher's wait, renewed for as long as the world lives
STOP_WAIT = 5.0  # seconds stop() waits for the thread to read its wake key


class Watcher:
    """The watcher of the generation ``membership`` holds (membership.py)."""

    def __init__(self, membership):
        self._membership = membership
        self._thread: threading.Thread | None = None
        self._watching = (-1, 0)  # (generation, rank) of the thread

    def start(self, generation: int, rank: int) -> None:
        self._watching = (generation, rank)
        self._thread = threading.Thread(target=self._watch, args=(generation, rank),
                                        name=f"mwrun-watch-{self._membership.name}",
                                        daemon=True)
        signals.start(self._thread)
        ASLEEP.add(self)  # the exit hook wakes it (interruptible.wake_all)

    def is_current(self) -> bool:
        """Whether the caller is the watcher thread itself."""
        return self._thread is threading.current_thread()

    def stop(self, store) -> None:
        """End the thread: it may still sleep (a break that was not published, like a
        peer leaving, wakes no one), so wake it with its own key, in ``store``."""
        thread, self._thread = self._thread, None
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            return
        self._wake(store)
        thread.join(timeout=STOP_WAIT)

    def wake(self) -> threading.Thread | None:
        """The process exits without close(): wake the thread as stop() does; it reads
        ``close`` and ends (interruptible.ASLEEP)."""
        thread = self._thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            return None
        self._wake(self._membership.stores.shared)
        return thread

    def _wake(self, store) -> None:
        generation, rank = self._watching
        if store is not None:
            with contextlib.suppress(RuntimeError, TimeoutError):
                store.set(protocol.wake_key(generation, rank), "close")

    def join(self, timeout: float) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout)

    def _watch(self, generation: int, rank: int) -> None:
        membership = self._membership
        spec = membership.stores.spec
        wake = protocol.wake_key(generation, rank)
        try:
            client = membership.stores.client(spec.timeout, generation)
            while True:
                try:
                    client.wait([wake], _FOREVER)
                    break
                except (RuntimeError, TimeoutError) as exc:
                    if not failures.store_timed_out(exc):
                        raise
        except (RuntimeError, TimeoutError, BrokenWorldError) as exc:
            with letting_go():
                self._lost(generation, exc)
            return
        # Woken: from here until the generation is let go, a caller that saw the error
        # may exit, and the exit hook waits for this thread (interruptible.LETTING_GO).
        with letting_go():
            try:
                why = self._woken(client, generation, rank, wake)
            except (RuntimeError, TimeoutError, BrokenWorldError) as exc:
                self._lost(generation, exc)
                return
            if why is not None:
                reason, ended, closes = why
                membership.broke(generation, reason, publish=False, ended=ended,
                                 closes=closes)

    def _woken(self, client, generation: int, rank: int,
               wake: str) -> tuple[str, bool, str | None] | None:
        """Why the generation broke (reason, ended, closes), read where the wake came
        from; None where there is nothing to break (a close, the host gone)."""
        membership = self._membership
        if protocol.text(client.get(wake)) == "close" or membership.state.closed:
            return None
        host = protocol.host_left(client, generation)
        if host is not None:  # read: the host may close its store now
            protocol.heard(client, generation, rank)
            storehost.gone(membership, generation, host)
            return None
        reason = protocol.broken_reason(client, generation) or "marked broken"
        return (reason, protocol.ended(client, generation),
                seats.closes(client, generation, reason, membership.process))

    def _lost(self, generation: int, exc: BaseException) -> None:
        """The world's store failed this watcher: a break of its own."""
        membership = self._membership
        spec = membership.stores.spec
        if membership.state.closed:
            return
        if storehost.by_a_peer(spec):  # by hand, its host died without a word
            storehost.gone(membership, generation, 0, exc)
            return
        reason = f"lost the world's store at {spec.addr}:{spec.port} (its host has gone)"
        membership.stores.forget()  # reconnect on rejoin
        membership.broke(generation, reason, publish=False, ended=False, closes=None)
