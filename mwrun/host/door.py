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
The handshake is read in the agent's loop as its bytes come (``Knock``), never waited
for there.
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
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mwrun.host import frames, sockets
from mwrun.host.frames import Kind

HANDSHAKE = 15.0  # seconds a knocking head has to answer the challenge (ssh, a busy host)


def door_path(control_path: str) -> str:
    """An agent's door, beside its own socket (``agent.own_path``)."""
    root, ext = os.path.splitext(control_path)
    return f"{root}-door{ext or '.sock'}"


@dataclass(eq=False)
class Knock:
    """A head at the door whose answer to ``nonce`` has not come yet."""

    sock: socket.socket
    nonce: str
    until: float  # closed unanswered then
    decoder: frames.Decoder = field(default_factory=frames.Decoder)


class Door:
    """The agent's door: ``adopted(sock, epoch)`` for a head it obeys. A knock is
    answered in the agent's loop as its bytes come, never waited for there: a head
    that is slow to answer (over ssh, on a loaded host) holds up no exit or heartbeat,
    and the door waits for it HANDSHAKE."""

    def __init__(self, path: str, secret: str, selector: selectors.BaseSelector,
                 adopted: Callable[[socket.socket, int], None], epoch: int = 0,
                 clock: Callable[[], float] = time.monotonic):
        self.path, self.secret, self.selector, self.adopted = path, secret, selector, adopted
        self.epoch = epoch  # the newest head obeyed so far
        self.clock = clock
        self.listener: socket.socket | None = None
        self.knocks: list[Knock] = []

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

    def tick(self, now: float) -> None:
        """Knocks left unanswered for HANDSHAKE closed."""
        for knock in [k for k in self.knocks if now >= k.until]:
            self._drop(knock)

    def _knocked(self, _) -> None:
        assert self.listener is not None, "registered once listening"
        try:
            sock, _addr = self.listener.accept()
        except OSError:
            return
        nonce = secrets.token_hex(16)
        try:  # (a fresh socket's buffer takes a frame this small whole)
            sock.setblocking(False)
            sock.sendall(frames.encode({"kind": Kind.CHALLENGE, "nonce": nonce}))
        except OSError:
            sock.close()
            return
        knock = Knock(sock, nonce, self.clock() + HANDSHAKE)
        self.knocks.append(knock)
        self.selector.register(sock, selectors.EVENT_READ, (self._answered, knock))

    def _answered(self, knock: Knock) -> None:
        try:
            data = knock.sock.recv(65536)
            messages = knock.decoder.feed(data) if data else None
        except BlockingIOError:
            return
        except (OSError, frames.FrameError):
            messages = None
        if messages == []:
            return  # (a frame in pieces: the rest comes)
        try:
            epoch = self._judged(knock, messages[0]) if messages else None
        except (ValueError, TypeError):  # (compare_digest: a proof not in ASCII)
            epoch = None
        if epoch is None:
            self._drop(knock)  # it did not answer as a head would
            return
        self._unwatch(knock)
        self.epoch = epoch
        self.adopted(knock.sock, epoch)

    def _judged(self, knock: Knock, answer) -> int | None:
        """The epoch of the head that answered ``knock`` so, if it is obeyed; else None
        (refused, saying why, where it was a head's answer)."""
        # Its shape and proof before anything else of it is read.
        if not isinstance(answer, dict) or answer.get("kind") != Kind.ADOPT \
                or not isinstance(answer.get("epoch"), int) \
                or not isinstance(answer.get("proof"), str):
            return None
        epoch = answer["epoch"]
        if not hmac.compare_digest(answer["proof"],
                                   frames.adoption_proof(self.secret, knock.nonce, epoch)):
            _refuse(knock.sock, "the run's secret was not proven")
            return None
        if epoch <= self.epoch:
            _refuse(knock.sock, f"a newer head (epoch {self.epoch}) has this job; this"
                                f" head's epoch is {epoch}")
            return None
        return epoch

    def _unwatch(self, knock: Knock) -> None:
        self.knocks.remove(knock)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(knock.sock)

    def _drop(self, knock: Knock) -> None:
        self._unwatch(knock)
        knock.sock.close()

    def close(self) -> None:
        for knock in list(self.knocks):
            self._drop(knock)
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
