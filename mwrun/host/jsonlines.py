"""A JSON-lines server for the libraries' links, served from a loop's selector without
ever waiting on a client: the head's control socket (head/serve/control.py) and each
agent's socket for the libraries on its host (host/relay.py) are this one server.

A client sends one JSON object per line; what the server's owner makes of a line
(``serve_line``) may be a reply, which goes back down the same connection, and lines
may be pushed down to a client that asked nothing (the head's orders to a library).
Every bound on a client is here: the longest line, the requests read but not served,
the requests served per turn, the replies left unread. A client beyond one is dropped
(or, for requests waiting, no longer read until they are served), so no client can
hold the loop or its memory.

The selector's data for each socket is ``(callback, argument)``: the loop calls
``callback(argument)`` for each socket select() reports.
"""

from __future__ import annotations

import collections
import contextlib
import json
import selectors
import socket
from collections.abc import Callable

from mwrun.protocol import MAX_LINE

READ_SLICE = 65536  # bytes read from one client per turn
MAX_PENDING = 1000  # requests read but not yet served, per client
MAX_UNSENT = 1 << 20  # bytes of replies a client may leave unread before it is dropped
REQUESTS_PER_TURN = 16  # requests served per client in one turn of the loop


class Connection:
    """One client: bytes in, whole lines out, replies queued and sent without blocking."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""
        self.pending: collections.deque[bytes] = collections.deque()  # lines to serve
        self.unsent = b""
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self) -> bool:
        """Take what the client sent (one read); False once it has gone or sent a line
        longer than MAX_LINE. Holds off while MAX_PENDING requests wait to be served."""
        if len(self.pending) >= MAX_PENDING:
            return True
        try:
            data = self.sock.recv(READ_SLICE)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not data:
            return False
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        self.pending.extend(line for line in lines if line.strip())
        return len(self.buffer) <= MAX_LINE

    def take(self, limit: int) -> list[bytes]:
        return [self.pending.popleft() for _ in range(min(limit, len(self.pending)))]

    def reply(self, message: dict) -> None:
        self.unsent += json.dumps(message).encode() + b"\n"

    def flush(self) -> bool:
        """Send what the socket takes now; False when the client must be dropped: it
        has gone, or lets more than MAX_UNSENT bytes pile up (it sends but does not
        read)."""
        while self.unsent:
            try:
                sent = self.sock.send(self.unsent)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return False
            self.unsent = self.unsent[sent:]
        return len(self.unsent) <= MAX_UNSENT

    def close(self) -> None:
        self.closed = True
        self.sock.close()


ServeLine = Callable[[bytes, Connection], dict | None]  # a line -> its reply, or none


class Server:
    """A listening socket's clients, served a bounded number of requests each per turn
    (one client sending thousands cannot hold the loop; the rest wait in ``backlog``,
    which the loop serves with ``serve_backlog`` each turn and does not sleep while it
    is not empty).

    ``admit``: whether to serve a client just accepted (the head's control socket
    checks its peer's uid); ``dropped``: told of each client dropped, so its owner can
    forget it."""

    def __init__(self, selector: selectors.BaseSelector, serve_line: ServeLine,
                 admit: Callable[[socket.socket], bool] = lambda sock: True,
                 dropped: Callable[[Connection], None] = lambda connection: None):
        self.selector, self.serve_line = selector, serve_line
        self.admit, self.dropped = admit, dropped
        self.backlog: set[Connection] = set()  # clients with requests left to serve

    def accept(self, listener: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            sock, _ = listener.accept()
            if not self.admit(sock):
                sock.close()
                return
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, (self._request, Connection(sock)))

    def serve_backlog(self) -> None:
        for connection in list(self.backlog):
            if connection in self.backlog:
                self._serve(connection)

    def _request(self, connection: Connection) -> None:
        # One select() can report a client that a callback before this one, in the
        # same turn, has dropped already (a push to a member just killed).
        if connection.closed:
            return
        if not connection.receive():
            self._drop(connection)
            return
        self._serve(connection)

    def _serve(self, connection: Connection) -> None:
        for line in connection.take(REQUESTS_PER_TURN):
            reply = self.serve_line(line, connection)
            if reply is not None:
                connection.reply(reply)
            if connection.closed:  # serving the line pushed to it, and that dropped it
                return
        if connection.pending:
            self.backlog.add(connection)
        else:
            self.backlog.discard(connection)
        self._flush(connection)

    def push(self, connection: Connection, message: dict) -> None:
        """A line down to a client that asked nothing (the library: head/hosts/downlink.py,
        host/relay.py)."""
        if not connection.closed:
            connection.reply(message)
            self._flush(connection)

    def _flush(self, connection: Connection) -> None:
        if not connection.flush():
            self._drop(connection)  # it does not read its replies
            return
        # Woken when its socket takes more, while lines wait to go down.
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.unsent else 0)
        self.selector.modify(connection.sock, events, (self._request, connection))

    def _drop(self, connection: Connection) -> None:
        self.backlog.discard(connection)
        if connection.closed:
            return
        self.selector.unregister(connection.sock)
        connection.close()
        self.dropped(connection)
