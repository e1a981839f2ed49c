"""Handles on calls in flight (``async_op=True``), waitable and awaitable."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time

from mwrun.worlds import signals
from mwrun.worlds.inflight import CALLS


class Work:
    """A call in flight on one generation of a world.

    ``wait()`` raises ``BrokenWorldError`` if the world broke, never reports a failed
    call as done. ``await work`` does the same without blocking the event loop.
    """

    __slots__ = ("_calls", "_generation", "_issued", "_nbytes", "_p2p", "_work")

    def __init__(self, calls, work, generation: int, p2p: bool, nbytes: int = 0,
                 issued: tuple[str, str, float] | None = None):
        self._calls = calls  # the world's calls (calls.py): they wait and count
        self._work = work
        # The call's inflight.py entry when it was issued: a wait on it is in that call,
        # since then (a stacks dump says "all_reduce for 31s", not "wait for 0s").
        self._issued = issued
        self._generation = generation
        self._p2p = p2p
        self._nbytes: int | None = nbytes  # counted once, by the first wait() that sees it done

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the call is done; after ``timeout`` seconds raise TimeoutError.

        gloo closes a point-to-point connection whose wait times out, so for send and
        recv a timeout breaks the world (BrokenWorldError) rather than leaving the
        call pending; a timed-out collective (and any nccl call: its communicator is
        never given a timed wait) stays pending and may be waited again.
        """
        ident = threading.get_ident()
        CALLS[ident] = self._issued or (self._calls.name, "wait", time.monotonic())
        try:
            self._calls.wait(self._work, self._generation, self._p2p, timeout)
        finally:
            CALLS.pop(ident, None)
        if self._nbytes is not None:
            self._calls.count(self._nbytes, self._generation)
            self._nbytes = None
        return True

    def is_completed(self) -> bool:
        """True once the call has finished, successfully or not (wait() tells which)."""
        return self._work.is_completed()

    def __await__(self):
        return self._await().__await__()

    async def _await(self) -> bool:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def settle(exc: BaseException | None) -> None:
            if not done.done():
                if exc is None:
                    done.set_result(True)
                else:
                    done.set_exception(exc)

        def report(exc: BaseException | None = None) -> None:
            # The loop may be closed (Ctrl-C ended asyncio.run): no one waits any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, exc)

        if self._p2p:  # gloo gives no future for send/recv: a pooled thread waits for us
            _pool.submit(self.wait, report)
        else:
            self._work.get_future().add_done_callback(lambda _: report())
        await done
        return self.wait() if not self._p2p else True


class _WaiterPool:
    """Reused daemon threads that sit in Work.wait() for asyncio callers.

    One thread per call that is being awaited at the same moment (each must block in
    its own wait), created only when none is idle, and gone after a minute unused.
    Daemon threads, so a call nobody waits for any more never holds up exit.
    """

    IDLE_SECONDS = 60.0

    def __init__(self):
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, fn, report) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._tasks.put((fn, report))
        if spawn:
            signals.start(threading.Thread(target=self._serve, name="mwrun-await",
                                           daemon=True))

    def _serve(self) -> None:
        while True:
            try:
                fn, report = self._tasks.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0 and self._tasks.empty():
                        self._idle -= 1
                        return
                continue
            try:
                fn()
            except Exception as exc:  # the awaiting task gets it; this thread goes on
                report(exc)
            else:
                report(None)
            with self._lock:
                self._idle += 1


_pool = _WaiterPool()
