"""The connection the library's lines go up on (supervisor_link.py keeps it).

One job: a connection made with a hello first, lines written whole under one lock (the
heartbeat thread and the job's threads write at once), and the world events that found
no connection held, in order and bounded, until the next one. The supervisor must hear
those: a world event of a stranger is ignored, so they go out after the hello. Any
other line that finds no connection is lost (a heartbeat is due again soon).
"""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import threading
from collections.abc import Callable

from mwrun.protocol import Verb

CONNECT_TIMEOUT = 1.0  # one attempt to reach the supervisor's socket; one line sent
HELD_EVENTS = 1000  # world events kept, in order, until the supervisor is reached


class Uplink:
    """``hello()``: the first line of each new connection."""

    def __init__(self, path: str, hello: Callable[[], dict]):
        self._path = path
        self._hello = hello
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None  # where lines go up (None: not connected)
        self._held: collections.deque[dict] = collections.deque(maxlen=HELD_EVENTS)

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> socket.socket | None:
        """One attempt: the new connection (its lines down are the caller's to read),
        with the hello and the held events sent; None if the socket could not be
        reached."""
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:
            return None
        try:
            sock.settimeout(CONNECT_TIMEOUT)
            sock.connect(self._path)
        except OSError:
            sock.close()
            return None
        with self._lock:
            self._sock = sock
            held, self._held = list(self._held), collections.deque(maxlen=HELD_EVENTS)
            for message in [self._hello(), *held]:
                self._send_locked(message)
        return sock

    def send(self, message: dict) -> bool:
        """Send a line up; False where it could not go (held, if a world event)."""
        with self._lock:
            if self._sock is None:
                if message.get("verb") == Verb.WORLD:  # the supervisor must hear these
                    self._held.append(message)
                return False
            return self._send_locked(message)

    def _send_locked(self, message: dict) -> bool:
        if self._sock is None:
            return False
        try:
            self._sock.sendall(json.dumps(message).encode() + b"\n")
            return True
        except OSError:
            # The thread reading it closes it: shut down, it reads the end at once.
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock = None
            return False

    def lost(self, sock: socket.socket) -> None:
        """``sock`` ended (its reader saw the end): lines wait for the next connection."""
        with self._lock:
            if self._sock is sock:
                self._sock = None

    def take(self) -> socket.socket | None:
        """The connection, no longer used for lines (the link is closing)."""
        with self._lock:
            sock, self._sock = self._sock, None
        return sock
