"""What the head and its keeper say to each other: JSON lines over one Unix stream
socket, with the descriptors a message carries (the worlds' bound listeners) passed
beside it (SCM_RIGHTS).

A message's descriptors go first, at most ``FDS_AT_ONCE`` with each newline sent ahead
of it (the kernel takes at most 253 at once, and a job has hundreds of worlds), and the
message itself last, saying how many it carries: once its line is read, everything
sent before it, descriptors included, has been read too. Shared by both sides; imports
nothing of either.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections import deque
from collections.abc import Sequence

FDS_AT_ONCE = 250  # SCM_MAX_FD is 253
READ_SIZE = 1 << 16


def send(sock: socket.socket, message: dict, fds: Sequence[int] = ()) -> None:
    """Send one message (blocking) with ``fds`` (copies: the caller keeps its own)."""
    for start in range(0, len(fds), FDS_AT_ONCE):
        socket.send_fds(sock, [b"\n"], list(fds[start:start + FDS_AT_ONCE]))
    sock.sendall(json.dumps({**message, "fds": len(fds)}).encode() + b"\n")


class Reader:
    """The messages that arrived on a socket, each with its descriptors."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.data = b""
        self.fds: deque[int] = deque()  # received, not yet taken by a message
        self.ended = False

    def read(self) -> list[tuple[dict, list[int]]]:
        """What one read brought (it blocks while nothing is there, unless the socket
        does not); ``ended`` once the other side is gone."""
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, READ_SIZE, FDS_AT_ONCE)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:  # reset, or closed under us: gone either way
            data, fds = b"", []
        self.fds.extend(fds)
        if not data:
            self.ended = True
            self.close_fds()
            return []
        self.data += data
        *lines, self.data = self.data.split(b"\n")
        messages = []
        for line in lines:
            if line:  # an empty one carried descriptors
                message = json.loads(line)
                messages.append((message, [self.fds.popleft()
                                           for _ in range(message.pop("fds", 0))]))
        return messages

    def close_fds(self) -> None:
        """Descriptors received that no message took (the other side ended first)."""
        while self.fds:
            with contextlib.suppress(OSError):
                os.close(self.fds.popleft())
