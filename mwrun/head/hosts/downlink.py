"""The way down: the head tells a process's library of a change to its worlds (``add``,
``drain``) and answers its requests (``reply``), as JSON lines on the connection the
library opened to its supervisor (worlds/supervisor_link.py reads them). A process on
this host is written to on its control connection here; one on a remote host through
its agent (a ``tell`` frame, written there to the same kind of connection).

A process's library connects some time after it starts: what it is told before its
hello waits, in order (bounded), and goes down right after the hello. A new start of
the process drops what waited for the old one: its environment has the worlds as
they are by then.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, Protocol

HELD = 1000  # messages kept per process until its hello


class Line(Protocol):
    """A local library's connection (host/jsonlines.py's ``Connection``, sent through
    control.Clients)."""

    closed: bool


class Way:
    """The way down to one start of a process: what waits for its hello, then its line.
    A new start is a new Way (``Downlink.started``), never the last one's reset."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.line: Line | None = None  # None: relayed by its agent, or no hello yet
        self.heard = False  # it said hello
        self.held: collections.deque[dict] = collections.deque(maxlen=HELD)


class Downlink:
    def __init__(self, local: Callable[[Any, dict], None],
                 remote: Callable[[str, dict], bool]):
        self.local = local  # writes to a connection here (never waits)
        self.remote = remote  # sends through the process's agent; False: not remote
        self.ways: dict[str, Way] = {}  # process -> the way to its current start

    def hello(self, process: str, pid: int, line: Line | None) -> None:
        """``process`` (as ``pid``) said hello on ``line`` (None: relayed by its agent)."""
        way = self.ways.setdefault(process, Way())
        way.pid, way.line, way.heard = pid, line, True
        held, way.held = way.held, collections.deque(maxlen=HELD)
        for message in held:
            self._send(process, line, message)

    def started(self, process: str) -> None:
        """A new start: what waited for the last one is not news to this one."""
        self.ways[process] = Way()

    def forget(self, process: str) -> None:
        """It left the job."""
        self.ways.pop(process, None)

    def tell(self, process: str, message: dict) -> None:
        way = self.ways.setdefault(process, Way())
        if way.heard and way.line is not None and way.line.closed:
            self.ways[process] = way = Way()  # its line closed: held for whoever comes next
        if not way.heard:
            way.held.append(message)
            return
        self._send(process, way.line, message)

    def _send(self, process: str, line: Line | None, message: dict) -> None:
        if line is not None:
            self.local(line, message)
        else:
            self.remote(process, message)
