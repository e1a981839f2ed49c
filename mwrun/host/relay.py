"""The library's messages on a remote host, relayed by its agent: each process's library
connects to the agent's socket and says what it would say to the supervisor (hello,
heartbeats, world events, bye, scale); the ``Relay`` serves that socket as the head
serves its own (host/jsonlines.py, its bounds included), sends the library's own verbs
(``protocol.LIBRARY_VERBS``) on to the head (``control`` frames: host/frames.py), and
writes the head's lines down (``tell``) back on the connection the process opened.

Heartbeats are held up to a quarter of their process's interval (at most HOLD_MAX)
and go to the head together: one frame a second rather than one per process beat,
while a quarter interval late is far inside the head's lateness bound (two intervals).
Each held beat says how long it may be held (``hold``): the head looks at a silence
only after the gap plus that, so a beat held is never taken for a missing one (each
such look asked the agent for /proc, one frame each way).
Any other message sends what is held first: the head hears them in the order said.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
from collections.abc import Callable
from typing import Any, Protocol

from mwrun.host import sockets
from mwrun.host.frames import Kind
from mwrun.host.jsonlines import Connection, Server
from mwrun.protocol import LIBRARY_VERBS, Verb

HOLD_SHARE = 0.25
HOLD_MAX = 1.0  # seconds at most: the traffic the head shows (status, metrics) lags no more


def hold_for(pace: float) -> float:
    """The most a beat of a process that beats every ``pace`` seconds is held here."""
    return min(HOLD_MAX, HOLD_SHARE * pace)


class Uplink(Protocol):
    """The link to the head, as the relay sends on it (``agent.Agent``)."""

    def send(self, kind: str, **fields: Any) -> None: ...

    def away(self) -> str | None:
        """Why the head cannot answer now (host/absence.py); None while it is here."""


class Relay:
    """This host's libraries and the head, between them: their connections (on the
    agent's socket at ``path``), their messages up, held heartbeats, lines down."""

    def __init__(self, path: str, selector: selectors.BaseSelector, uplink: Uplink,
                 clock: Callable[[], float]):
        self.path, self.selector, self.uplink, self.clock = path, selector, uplink, clock
        self.server = Server(selector, self._serve_line, dropped=self._dropped)
        self.listener: socket.socket | None = None  # once listening (the agent's loop runs)
        self.intervals: dict[str, float] = {}  # process -> its heartbeat interval (hello)
        self.held: list[dict] = []  # heartbeats not yet sent
        self.held_until: float | None = None  # when the first of them is due
        self.library: dict[str, Connection] = {}  # process -> its library's connection here

    def listen(self) -> None:
        """Take connections on the agent's socket, in the agent's selector."""
        self.listener = sockets.listen(self.path)
        self.selector.register(self.listener, selectors.EVENT_READ,
                               (self.server.accept, self.listener))

    @property
    def backlog(self) -> bool:
        """Whether libraries' lines wait to be served (``serve``): the loop must not sleep."""
        return bool(self.server.backlog)

    def serve(self) -> None:
        """The lines left from an earlier turn (a library sent more than a turn serves)."""
        self.server.serve_backlog()

    # -- up: the library's messages to the head -----------------------------------------

    def _serve_line(self, line: bytes, conn: Connection) -> None:
        with contextlib.suppress(ValueError, RecursionError):
            request = json.loads(line)
            verb = request.get("verb") if isinstance(request, dict) else None
            if isinstance(verb, str) and verb in LIBRARY_VERBS:
                self._up(request, conn)

    def _dropped(self, conn: Connection) -> None:
        for name in [n for n, c in self.library.items() if c is conn]:
            del self.library[name]

    def _up(self, request: dict, conn: Connection) -> None:
        if request.get("verb") == Verb.HELLO:
            with contextlib.suppress(KeyError, TypeError, ValueError):  # it may say none
                self.intervals[str(request.get("process"))] = float(request["interval"])
            self.library[str(request.get("process"))] = conn  # the way down to it (tell)
        if request.get("verb") == Verb.SCALE and (away := self.uplink.away()) is not None:
            # Nobody would answer: job.scale raises this at once rather than wait.
            self.server.push(conn, {"verb": Verb.REPLY, "id": request.get("id"), "ok": False,
                                    "error": f"the head is away ({away}); a scale waits for"
                                             " none: ask again once it is back"})
            return
        if request.get("verb") != Verb.HEARTBEAT:
            self._send_held()  # in the order the library said them
            self.uplink.send(Kind.CONTROL, request=request)
            return
        self.held.append(request)
        pace = self.intervals.get(str(request.get("process")), 0.0)
        with contextlib.suppress(TypeError, ValueError):  # its next beat may come sooner
            pace = min(pace, float(request.get("next", pace)))
        hold = hold_for(pace)
        if hold > 0:  # what the head allows for (decide/hangs.py)
            request["hold"] = round(hold, 3)
        until = self.clock() + hold
        self.held_until = until if self.held_until is None else min(self.held_until, until)

    def release(self, now: float) -> None:
        """The held heartbeats, once the first of them is due."""
        if self.held_until is not None and now >= self.held_until:
            self._send_held()

    def _send_held(self) -> None:
        if self.held:
            self.uplink.send(Kind.CONTROL, requests=self.held)
        self.held, self.held_until = [], None

    # -- down: the head's lines to a library ----------------------------------------------

    def tell(self, process: str, message: dict) -> None:
        """A line from the head down to a process's library (head/downlink.py); nothing
        when its library has not said hello here (or is gone)."""
        conn = self.library.get(process)
        if conn is not None:
            self.server.push(conn, message)

    def close(self) -> None:
        """No more connections: the socket closed and its file removed."""
        if self.listener is not None:
            self.listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
