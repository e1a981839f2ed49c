"""A stand-in for the head's end of the supervisor link: a real Unix socket server that
reads every line its clients send (hello, heartbeat, world, scale, ...) as they come,
and writes lines down to a client named by its hello."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time


class FakeHead:
    def __init__(self, path: str):
        self.path = path
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(16)
        self.lines: list[dict] = []  # every line from every client, in arrival order
        self._queue: queue.Queue = queue.Queue()
        self._clients: dict[str, socket.socket] = {}  # process -> its latest connection
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.hellos = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):  # closed by drop() or close()
            for raw in conn.makefile("rb"):
                message = json.loads(raw)
                with self._lock:
                    if message.get("verb") == "hello":
                        self._clients[message["process"]] = conn
                        self.hellos += 1
                    self.lines.append(message)
                self._queue.put(message)

    def expect(self, predicate, timeout: float = 60.0) -> dict:
        """The first line from now on for which ``predicate`` is true."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"the head never got it; lines: {self.lines[-20:]}")
            with contextlib.suppress(queue.Empty):
                message = self._queue.get(timeout=left)
                if predicate(message):
                    return message

    def seen_verb(self, verb: str, timeout: float = 60.0, **fields) -> dict:
        """The first line ever got (not only from now on) with this verb and fields:
        for a line that may come before an ``expect`` that consumes it waiting for
        another (the order of two processes' lines is theirs)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                found = next((m for m in self.lines if m.get("verb") == verb and
                              all(m.get(k) == v for k, v in fields.items())), None)
            if found is not None:
                return found
            time.sleep(0.02)
        raise AssertionError(f"the head never got it; lines: {self.lines[-20:]}")

    def expect_verb(self, verb: str, timeout: float = 60.0, **fields) -> dict:
        return self.expect(lambda m: m.get("verb") == verb and
                           all(m.get(k) == v for k, v in fields.items()), timeout)

    def send(self, process: str, message: dict | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        with self._lock:
            conn = self._clients[process]
        conn.sendall(data)

    def drop(self, process: str) -> None:
        """Close the connection of ``process`` (as a head that went away would)."""
        with self._lock:
            conn = self._clients.pop(process)
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()

    def close(self) -> None:
        self.server.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()
