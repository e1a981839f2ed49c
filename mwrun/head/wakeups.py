"""What wakes the loop from its select besides its descriptors: a stop signal
(SIGINT, SIGTERM, SIGHUP: recorded by the handler, acted on by the loop, never in the
handler) and the thread that reads the worlds' stores' keeper (it said something: its
stores exist, or it failed or ended). Both write a byte to one socket pair the loop's
selector watches."""

from __future__ import annotations

import contextlib
import selectors
import signal
import socket
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Wakeups:
    def __init__(self, selector: selectors.BaseSelector, stop: Callable[[str], None]):
        self.stop = stop  # told "SIGINT received" and the like
        self.signals: list[int] = []
        self.read, self.write = socket.socketpair()
        for end in (self.read, self.write):
            end.setblocking(False)
        selector.register(self.read, selectors.EVENT_READ, (self._woken, self.read))
        self.old_fd: int | None = None
        self.old_handlers: dict = {}

    def install(self) -> None:
        self.old_fd = signal.set_wakeup_fd(self.write.fileno(), warn_on_full_buffer=False)
        self.old_handlers = {s: signal.signal(s, self._record) for s in STOP_SIGNALS}

    def restore(self) -> None:
        if self.old_fd is not None:
            signal.set_wakeup_fd(self.old_fd)
        for sig, handler in self.old_handlers.items():
            signal.signal(sig, handler)

    def wake(self) -> None:
        """From another thread (the stores'): the loop has something to do."""
        with contextlib.suppress(OSError):
            self.write.send(b"\0")

    def _record(self, signum, frame) -> None:
        self.signals.append(signum)  # acted on by the loop, never in the handler

    def _woken(self, read: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            while read.recv(4096):
                pass
        while self.signals:
            self.stop(f"{signal.Signals(self.signals.pop(0)).name} received")

    def close(self) -> None:
        for end in (self.read, self.write):
            end.close()
