"""Where a new head knocks on an agent (``mwrun adopt``, ``mwrun restart-head``).

An agent started with the run's secret listens, beside its own socket, on a second
Unix socket in the same owner-only folder. Whoever connects is challenged: a nonce,
answered by ``adopt {epoch, proof}``, the proof binding the run's secret to that
epoch (frames.adoption_proof). The agent obeys a head whose epoch is above every one
it obeyed before (host/agent.py: that head's link replaces the old one, whose head is
stale from then on); anything else is refused, saying why, and closed. The secret is
never in an argv: the head's machine's agent has it in its environment from the head
that started it, an ssh host's is told it over its link (``secret`` frame: the door
opens then), and a new head reads it from the run folder. Over ssh a new head comes
in through ``mwrun agent-door`` (``bridge``), the agent's session joined to its door.
The handshake is read in the agent's loop (a knock costs it at most HANDSHAKE: only
this user can reach the owner-only folder).
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import select
import selectors
import socket
import sys
from collections.abc import Callable

from mwrun.host import frames, sockets
from mwrun.host.frames import Kind

HANDSHAKE = 2.0  # seconds a knocking head has to answer the challenge (it is local)


def door_path(control_path: str) -> str:
    """An agent's door, beside its own socket (``agent.own_path``)."""
    root, ext = os.path.splitext(control_path)
    return f"{root}-door{ext or '.sock'}"


class Door:
    """The agent's door: ``adopted(sock, epoch)`` for a head it obeys."""

    def __init__(self, path: str, secret: str, selector: selectors.BaseSelector,
                 adopted: Callable[[socket.socket, int], None], epoch: int = 0):
        self.path, self.secret, self.selector, self.adopted = path, secret, selector, adopted
        self.epoch = epoch  # the newest head obeyed so far
        self.listener: socket.socket | None = None

    def listen(self) -> None:
        """Open, once there is a secret to prove (an ssh agent is told it later)."""
        if self.listener is not None or not self.secret:
            return
        self.listener = sockets.listen(self.path, 8)
        self.selector.register(self.listener, selectors.EVENT_READ, (self._knocked, None))

    def told(self, secret: str, epoch: int) -> None:
        """The run's secret, and the epoch of the head that tells it (``secret`` frame)."""
        if not self.secret and secret:
            self.secret, self.epoch = secret, max(self.epoch, epoch)
            self.listen()

    def _knocked(self, _) -> None:
        assert self.listener is not None, "registered once listening"
        try:
            sock, _addr = self.listener.accept()
        except OSError:
            return
        sock.settimeout(HANDSHAKE)
        try:
            epoch = self._handshake(sock)
        except (OSError, frames.FrameError, ValueError, TypeError):
            sock.close()  # it did not answer as a head would, in time
            return
        if epoch is None:
            sock.close()
            return
        self.epoch = epoch
        sock.setblocking(False)
        self.adopted(sock, epoch)

    def _handshake(self, sock: socket.socket) -> int | None:
        nonce = secrets.token_hex(16)
        sock.sendall(frames.encode({"kind": Kind.CHALLENGE, "nonce": nonce}))
        answer = _first(sock)
        # Its shape and proof before anything else of it is read.
        if not isinstance(answer, dict) or answer.get("kind") != Kind.ADOPT \
                or not isinstance(answer.get("epoch"), int) \
                or not isinstance(answer.get("proof"), str):
            return None
        epoch = answer["epoch"]
        if not hmac.compare_digest(answer["proof"],
                                   frames.adoption_proof(self.secret, nonce, epoch)):
            _refuse(sock, "the run's secret was not proven")
            return None
        if epoch <= self.epoch:
            _refuse(sock, f"a newer head (epoch {self.epoch}) has this job; this head's"
                          f" epoch is {epoch}")
            return None
        return epoch

    def close(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.listener)
            self.listener.close()
            self.listener = None
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def _refuse(sock: socket.socket, why: str) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(frames.encode({"kind": Kind.REFUSED, "why": why}))


def _first(sock: socket.socket) -> dict | None:
    decoder = frames.Decoder()
    while True:
        data = sock.recv(65536)
        if not data:
            return None
        messages = decoder.feed(data)
        if messages:
            return messages[0]


def bridge(path: str) -> int:
    """``mwrun agent-door PATH``: this session's stdin and stdout joined to the agent's
    door at PATH, byte for byte, until either side closes: how a new head reaches the
    agent of an ssh host (ssh runs this there; the door's challenge then proves it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        print(f"mwrun agent-door: no agent answers at {path} ({exc.strerror or exc})",
              file=sys.stderr)
        return 1
    out, reading = sys.stdout.fileno(), True
    with sock:
        while True:
            watched = [sock] + ([sys.stdin.fileno()] if reading else [])
            for ready in select.select(watched, [], [])[0]:
                if ready is sock:
                    data = sock.recv(65536)
                    if not data:
                        return 0  # the agent closed the link
                    view = memoryview(data)
                    while view:
                        view = view[os.write(out, view):]
                    continue
                data = os.read(sys.stdin.fileno(), 65536)
                if not data:  # the head's side closed: the agent reads its end
                    reading = False
                    sock.shutdown(socket.SHUT_WR)
                else:
                    sock.sendall(data)
