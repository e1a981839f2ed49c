"""The control channel: a Unix socket in the run folder, JSON lines, small handlers.

Each request is one JSON object on one line with a ``verb``; the reply is one line,
``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``. The socket is the
owner's only (mode 0600, and the peer's uid is checked). Verbs:

- ``status`` -> ``{"ok": true, "status": <status document>}``
- ``bringup`` -> ``{"ok": true, "state": <run state>, "waiting": {world: ...},
  "failed": {process: what happened}}``: what ``launch --detach`` waits on (progress.py)
- ``kill_world {world, rank?, signal?}`` -> ``{"ok": true, "signalled": [...]}``
- ``stop {force?}`` -> ``{"ok": true}``; the run then stops on its own time (see
  ``Verbs.stop`` for a stop asked again)
- ``drill {summary}`` -> ``{"ok": true}``: a ``mwrun drill``'s summary, appended to the
  run's history as one ``drill`` record (the history file is the head's alone: it
  rotates it, so no other process may append to it)
- ``scale {changes: ["worker=6", "cache=+1"], op?}`` and ``drain {replicas:
  ["worker-3"], op?}`` -> ``{"ok": true, "op", "state", "changes": [...]}`` (elastic.py;
  refused whole with ``{"ok": false, "refused": true, "error"}``); ``op {op}`` -> that
  operation as it stands (what ``mwrun scale`` waits on)
- ``hello``, ``heartbeat``, ``world``, ``bye`` -> no reply: what the library tells the
  supervisor (see mwrun/worlds/supervisor_link.py); ``scale`` with ``process``, ``pid``,
  ``id``, ``target``, ``count`` is the library's ``job.scale``: its answer goes down
  its own connection as ``{"verb": "reply", "id", ...}`` (downlink.py)
- ``stacks {processes?: [...], world?}`` -> ``{"ok": true, "id", "age_s", "waiting":
  [process], "members": [{process, pid, host, state, reason, answered, threads?}]}``:
  each selected member's library asked for its threads' stacks (stacks.py);
  ``stacks_result {id}`` -> that ask as it stands; ``stacks_told {process, pid, id,
  threads}`` -> no reply: a library's answer

The verbs only translate requests into calls on the supervisor: the operator's are
``verbs.Verbs``'s methods, the library's ``library.Library``'s, each one's docstring its
protocol, and ``dispatcher.Dispatcher`` serves each line to them. This is the server;
the client (``request``) is ``mwrun.runs``'s, so the command line asks a supervisor
without importing the head.
"""

from __future__ import annotations

import collections
import contextlib
import json
import selectors
import socket

from mwrun import runs
from mwrun.host import sockets
from mwrun.runs import peer_uid, same_user, signal_number  # noqa: F401 - shared with the client

MAX_LINE = 1 << 20
MAX_PENDING = 1000  # requests read but not yet served, per client
MAX_UNSENT = 1 << 20  # bytes of replies a client may leave unread before it is dropped
REQUESTS_PER_TURN = 16  # requests served per client in one turn of the loop


class Connection:
    """One client: bytes in, whole lines out, replies queued and sent without blocking.

    The loop must never wait on a client: replies go out as the socket takes them, and
    a client that lets more than MAX_UNSENT bytes of replies pile up (it sends but
    does not read) is dropped.
    """

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
            data = self.sock.recv(65536)
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
        """Send what the socket takes now; False when the client must be dropped."""
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


class Clients:
    """The control socket's clients, served from the loop's selector without ever
    waiting on one: a bounded number of requests per client per turn (one client
    sending thousands cannot hold the loop; the rest wait in ``backlog``)."""

    def __init__(self, selector, serve_line):
        self.selector = selector
        self.serve_line = serve_line  # (one request line, its connection) -> reply or None
        self.backlog: set[Connection] = set()  # clients with requests left to serve

    def accept(self, listener: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            sock, _ = listener.accept()
            if not same_user(sock):
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
        """A line down to a client that asked nothing (the library: downlink.py)."""
        if not connection.closed:
            connection.reply(message)
            self._flush(connection)

    def _flush(self, connection: Connection) -> None:
        if not connection.flush():
            self._drop(connection)  # it does not read its replies
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.unsent else 0)
        self.selector.modify(connection.sock, events, (self._request, connection))

    def _drop(self, connection: Connection) -> None:
        self.backlog.discard(connection)
        if connection.closed:
            return
        self.selector.unregister(connection.sock)
        connection.close()


listen = sockets.listen  # in the run folder, or a private folder under /tmp


# The client's side is the reader's (mwrun.runs): the command line asks a supervisor
# without importing the head.
request = runs.request
