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


class Downlink:
    def __init__(self, local: Callable[[Any, dict], None],
                 remote: Callable[[str, dict], bool]):
        self.local = local  # writes to a connection here (never waits)
        self.remote = remote  # sends through the process's agent; False: not remote
        self.lines: dict[str, tuple[int, Line | None]] = {}  # process -> (pid, connection)
        self.held: dict[str, collections.deque[dict]] = {}

    def hello(self, process: str, pid: int, line: Line | None) -> None:
        """``process`` (as ``pid``) said hello on ``line`` (None: relayed by its agent)."""
        self.lines[process] = (pid, line)
        for message in self.held.pop(process, ()):
            self._send(process, line, message)

    def started(self, process: str) -> None:
        """A new start: what waited for the last one is not news to this one."""
        self.lines.pop(process, None)
        self.held.pop(process, None)

    def tell(self, process: str, message: dict) -> None:
        found = self.lines.get(process)
        if found is None or (found[1] is not None and found[1].closed):
            self.lines.pop(process, None)
            self.held.setdefault(process, collections.deque(maxlen=HELD)).append(message)
            return
        self._send(process, found[1], message)

    def _send(self, process: str, line: Line | None, message: dict) -> None:
        if line is not None:
            self.local(line, message)
        else:
            self.remote(process, message)
