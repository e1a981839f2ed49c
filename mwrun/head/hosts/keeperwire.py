"""The head's connection to the worlds' stores' keeper (stores.py): the loop never
waits on it. A writer thread takes the keeper's connection (once the keeper connects,
or the one an adopting head made) and sends what the loop puts, in order; a reader
thread takes what the keeper says (every store built, a build that failed, a plain
group's ranks, a new head taken) and wakes the loop. The one question the loop asks,
and waits for (at most ``ASK_WAIT``), is which ranks of a plain torch.distributed group
met in a store, once every store exists. A keeper that ends (or could not start)
before the head closes it ends the run: ``ready`` raises, naming its log.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import threading
from collections.abc import Callable
from typing import Protocol

from mwrun.errors import RunError
from mwrun.keeper import wire

ASK_WAIT = 2.0  # seconds for the keeper to say what a store shows (then: nothing yet)
# At the end, for the keeper to close its stores: a build still importing torch cannot
# be cut short (keeper/pending.py CLOSE_WAIT), then it is killed.
CLOSE_WAIT = 65.0
LOOK = 0.5  # seconds between looks at a keeper that has not connected yet

Item = tuple[dict, list[socket.socket]]


class Process(Protocol):
    """The keeper as a process (stores.KeeperProcess)."""

    pid: int | None

    def kept(self, told: dict) -> None: ...
    def gone(self) -> bool: ...
    def end(self) -> None: ...


class KeeperWire:
    def __init__(self, reach: Callable[[Callable[[], bool]], socket.socket | None],
                 process: Process, log_path, first: Item | None = None):
        """``reach(given_up)``: the keeper's connection, or None once ``given_up()``;
        ``first``: what it is sent before anything else (a launch's worlds)."""
        self.reach, self.process, self.log_path = reach, process, log_path
        self.sock: socket.socket | None = None  # the keeper's connection, once made
        self._cond = threading.Condition()
        self._built = self._ended = self._closing = False
        self._error: str | None = None
        self._answers: dict[int, list[int] | None] = {}
        self._asked = 0
        self._wake: Callable[[], None] | None = None
        self._out: queue.Queue[Item | None] = queue.Queue()
        if first is not None:
            self._out.put(first)
        self._writer = threading.Thread(target=self._write, name="mwrun-keeper-out",
                                        daemon=True)
        self._writer.start()

    def put(self, message: dict, socks: list[socket.socket] | None = None) -> None:
        """Sent after everything put before it; ``socks`` go with it (then closed here)."""
        self._out.put((message, socks or []))

    def failed(self, error: str) -> None:
        """The keeper could not be started: the run cannot go on (``ready`` says)."""
        with self._cond:
            self._error = error
            self._cond.notify_all()
        self._wake_loop()

    def serve(self, wake: Callable[[], None]) -> None:
        """From now on, wake the loop when the keeper said something."""
        with self._cond:
            self._wake = wake
        wake()

    def ready(self) -> bool:
        """Whether every store exists; raises RunError if the keeper failed or ended."""
        with self._cond:
            if self._error is not None:
                raise RunError(f"the worlds' stores could not be kept: {self._error}"
                               f" (the keeper's log: {self.log_path})")
            if self._ended and not self._closing and self.process.pid is None:
                raise RunError("the worlds' stores' keeper never reached the head (its log:"
                               f" {self.log_path})")
            if self._ended and not self._closing:
                raise RunError(f"the worlds' stores' keeper (pid {self.process.pid}) ended; the job"
                               f" cannot go on without them (its log: {self.log_path})")
            return self._built

    def plain_ranks(self, world: str) -> set[int] | None:
        """The ranks of a plain group that met in the world's store; before every store
        exists, or if the keeper does not answer in time, none yet (asked again)."""
        with self._cond:
            if not self._built or self._ended:
                return set()
            self._asked += 1
            ask = self._asked
        self._out.put(({"ask": ask, "world": world}, []))
        with self._cond:
            answered = self._cond.wait_for(lambda: ask in self._answers or self._ended,
                                           ASK_WAIT)
            ranks = self._answers.pop(ask, [])
            self._answers.clear()  # answers to asks given up on, come late
        if not answered:
            return set()
        return None if ranks is None else set(ranks)

    # -- the threads -------------------------------------------------------------------

    def _given_up(self) -> bool:
        with self._cond:
            if self._closing or self._error is not None:
                return True
        return self.process.gone()

    def _write(self) -> None:
        sock = self.reach(self._given_up)
        if sock is None:
            while (item := self._out.get_nowait() if not self._out.empty() else None):
                for held in item[1]:
                    held.close()  # the listeners it would have had
            self._gone()
            return
        self.sock = sock
        threading.Thread(target=self._read, args=(sock,), name="mwrun-keeper-in",
                         daemon=True).start()
        while (item := self._out.get()) is not None:
            message, socks = item
            try:
                wire.send(sock, message, [s.fileno() for s in socks])
            except OSError:
                return  # the keeper is gone: the reader says so
            finally:
                for held in socks:
                    held.close()  # the keeper holds it now

    def _read(self, sock: socket.socket) -> None:
        reader = wire.Reader(sock)
        while not reader.ended:
            for message, fds in reader.read():
                for fd in fds:
                    os.close(fd)
                with self._cond:
                    if "built" in message:
                        self._built = True
                    elif "adopted" in message:  # a new head's: the keeper it reached
                        self.process.kept({"pid": message.get("pid")})
                    elif "refused" in message:  # a newer head has the stores
                        self._error = f"the keeper refused this head: {message['refused']}"
                    elif "error" in message:
                        self._error = str(message["error"])
                    elif "ask" in message:
                        self._answers[int(message["ask"])] = message["ranks"]
                    self._cond.notify_all()
                self._wake_loop()
        self._gone()

    def _gone(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify_all()
        self._wake_loop()

    def _wake_loop(self) -> None:
        with self._cond:
            wake = self._wake
        if wake is not None:
            wake()

    # -- the end -----------------------------------------------------------------------

    def abandon(self) -> None:
        """A newer head has the keeper: nothing more is sent, our end is closed."""
        with self._cond:
            self._closing = True
        self._out.put(None)
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()

    def close(self) -> None:
        """Close every store (the keeper ends), or kill a keeper that does not."""
        with self._cond:
            self._closing = True
        self._out.put(({"close": True}, []))
        self._out.put(None)
        with self._cond:
            self._cond.wait_for(lambda: self._ended, CLOSE_WAIT if self.process.pid else 0.0)
        self.process.end()
        if self.sock is not None:
            self.sock.close()
        self._writer.join(LOOK * 4)  # it sees the close within a look
