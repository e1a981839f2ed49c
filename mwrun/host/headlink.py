"""An agent's end of its link to the head: the descriptors it reads and writes (its
stdin and stdout, an ssh session's or the head's pipes; or one socket: a Slurm
connect-back, a new head at the agent's door), the frames each way, and what waits to
be written. A new head's link replaces the old one (``replace``): what the old one
never got whole goes to the new one, never half a frame.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import time
from collections.abc import Callable

from mwrun.host import frames

READ_SLICE = 65536  # bytes read from the head's link per turn


class HeadLink:
    def __init__(self, fd_in: int, fd_out: int, selector: selectors.BaseSelector,
                 readable: Callable[[object], None], silence: float = frames.SILENCE,
                 clock: Callable[[], float] = time.monotonic):
        self.fd_in, self.fd_out = fd_in, fd_out
        self.selector, self.readable = selector, readable
        self.silence, self.clock = silence, clock
        self.heard: float | None = None  # silence counts from the head's first frame
        self.decoder = frames.Decoder()
        self.outbox = frames.Outbox()
        self.watched = False
        self.broken = False  # a write found it closed

    def watch(self) -> None:
        """From now on its frames are read in the agent's loop."""
        os.set_blocking(self.fd_in, False)
        os.set_blocking(self.fd_out, False)
        self.selector.register(self.fd_in, selectors.EVENT_READ, (self.readable, None))
        self.watched = True

    def unwatch(self) -> None:
        """Not read any more (a closed link would read "" for ever)."""
        self.heard = None
        if self.watched:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.fd_in)
            self.watched = False

    def read(self) -> list[dict] | None:
        """The frames that came; None at its end. Raises frames.FrameError."""
        data = frames.received(self.fd_in, READ_SLICE)
        if not data:
            return None if data is None else []
        self.heard = self.clock()
        return self.decoder.feed(data)

    def silent(self, now: float) -> bool:
        """Whether the head has said nothing for ``silence`` seconds: taken for gone.
        A side starved of CPU finds frames it has not read yet: that silence is its
        own (frames.unread)."""
        return self.heard is not None and now - self.heard > self.silence \
            and not frames.unread(self.fd_in)

    def silent_at(self) -> float | None:
        """When the head's silence would run out (None: not counted yet)."""
        return None if self.heard is None else self.heard + self.silence

    @property
    def size(self) -> int:
        return self.outbox.size

    def put(self, message: dict) -> None:
        self.outbox.put(message)

    def flush(self) -> None:
        """What the link takes now; ``broken`` once it is closed."""
        self.outbox.flush(self._write)

    def _write(self, data: bytes) -> int:
        try:
            return os.write(self.fd_out, data)
        except BrokenPipeError:
            self.broken = True
            return len(data)  # (nobody reads it: dropped)

    def want_writes(self, more: bool) -> bool:
        """Wake the loop when the link can take more, while ``more`` waits (over a
        socket the link is one descriptor both ways); whether a watch was added that
        ``done_writing`` takes away."""
        events = selectors.EVENT_WRITE if more else 0
        if self.fd_out == self.fd_in:
            if self.watched:
                self.selector.modify(self.fd_in, selectors.EVENT_READ | events,
                                     (self.readable, None))
            return False
        if events:
            self.selector.register(self.fd_out, events, (lambda _: None, None))
        return bool(events)

    def done_writing(self) -> None:
        self.selector.unregister(self.fd_out)

    def replace(self, fd: int, first: list[dict]) -> None:
        """A new head's link (one socket) in place of this one: its descriptors
        closed (a stale head reads its end), half a frame never carried over, and
        ``first`` ahead of what still waits to be written."""
        self.unwatch()
        for old in {self.fd_in, self.fd_out}:
            with contextlib.suppress(OSError):
                os.close(old)
        self.outbox.cut()
        self.outbox.put_first(first)
        self.fd_in = self.fd_out = fd
        self.decoder = frames.Decoder()
        self.broken = False
        self.heard = self.clock()
        self.watch()

    def last_words(self) -> None:
        """Whatever the head may still read (final lines, exits), if it can."""
        with contextlib.suppress(OSError):
            os.set_blocking(self.fd_out, True)
            self.outbox.flush(self._write)
