"""The head <-> agent link: length-prefixed JSON frames over a byte stream.

A frame is a 4-byte big-endian length and that many bytes of one JSON object with a
``kind``. The stream is an ssh session's stdin/stdout (ssh authenticates it) or a TCP
connection opened with a per-run secret (Slurm). The agent speaks first, a ``hello``
with ``PROTOCOL`` and its mwrun version; the head refuses a link of another version
before it sends anything.

Agent -> head: ``hello {protocol, version, host, inventory}``, ``spawned {name, pid,
t}``, ``failed {name, error}`` (could not start), ``lines {name, lines}``, ``exited
{name, code, t}`` (``t``: this host's wall clock when it happened), ``clock {sent, at}``
(the answer to the head's, ``at`` this host's wall clock), ``probed {name, status,
cpu, rss}``, ``control {request}`` (one message of the library's, relayed) or
``control {requests}`` (heartbeats held a moment and sent together), ``say {text}``
(for the user: its zygotes), ``beat``.
Head -> agent: ``prepare {LaunchSpec}`` (start its zygote now), ``spawn {LaunchSpec}``
(the fields of ``mwrun.launchspec.LaunchSpec``: name, argv, cwd, env, unset,
unset_prefixes, prepend, cpus, netns, preload, warm; checked for shape on arrival),
``stopping`` (the job is stopping: a start still waiting for its zygote is not made),
``keeper {args, modules, env, log}`` (start the worlds' stores' keeper: answered ``kept
{pid, warm}`` or ``kept {error}``),
``signal {name, signal}``, ``probe {name}``, ``clock {sent}`` (the head's wall clock:
answer at once, head/clocks.py), ``tell {name, message}`` (a line down to that
process's library), ``beat``, ``stop`` (kill everything, then exit).
An ssh host's agent is told the run's secret in a ``secret {secret, epoch}`` frame (the
head's machine's in its environment): never in an argv. A new head (``mwrun adopt``)
connects to an agent's door (host/door.py), over ssh through ``mwrun agent-door``: the
agent
sends ``challenge {nonce}``, the head ``adopt {epoch, proof}``; the agent answers with a
``hello`` that carries ``adopted {epoch, processes, dropped}`` (what it runs), then the
libraries' last words (``control``) and what it kept while the head was away.
Any frame shows that its sender lives; a side that sent nothing for ``BEAT`` seconds
sends a ``beat``.
Either side that hears nothing for ``SILENCE`` seconds takes the other for gone (the
agent counts from the head's first frame: the head starts talking once its loop runs).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import select
import struct
from collections import deque
from enum import Enum

# 6: a new head adopts an agent (``adopt``, answered by a hello with what it runs);
# 5: the head's ``stopping``, the keeper started by an agent; 4: clock exchanges,
# spawned/exited carry the host's time; 3: a spawn carries a launchspec.LaunchSpec;
# 2: heartbeats held together
PROTOCOL = 6
# Seconds without a frame before a side sends a beat. The head reads and writes every
# host's link: at 1,000 ranks on 125 hosts, beats once a second were 250 frames a
# second, most of what an idle job costs it, and each write wakes that host's ssh or
# agent (bench/README.rst); every five seconds leaves SILENCE three beats.
BEAT = 5.0
# No frame for this long: the other side is gone. A closed link is seen at once; this
# is for a head or host that is stopped or cut off, and must outlast a busy moment (a
# head importing torch on a loaded machine sends nothing for seconds).
SILENCE = 15.0


def unread(fd: int) -> bool:
    """Whether something waits unread on ``fd``. A side starved of CPU (a loaded
    machine) finds its peer silent past SILENCE with frames queued that it has not
    read yet: that silence is its own, never the peer's, so it is checked first.
    (poll, not select: a head of a thousand processes holds descriptors past 1024.)"""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        ready = poller.poll(0)
    except (OSError, ValueError):  # no descriptor: nothing more will come
        return False
    return any(not events & select.POLLNVAL for _, events in ready)


def received(fd: int, size: int) -> bytes | None:
    """What a non-blocking link's descriptor holds now (b"": nothing yet); None at its
    end (closed, or an error that ends it). Both ends of a link read this way."""
    try:
        data = os.read(fd, size)
    except BlockingIOError:
        return b""
    except OSError:
        return None
    return data or None


MAX_FRAME = 16 * 2**20
_HEADER = struct.Struct(">I")


class Kind(str, Enum):
    """Every frame's ``kind`` (see above): the one spelling of each, on both sides."""

    HELLO = "hello"
    CHALLENGE = "challenge"  # the head's first frame to a connect-back (Slurm)
    BEAT = "beat"
    CLOCK = "clock"
    STOP = "stop"
    STOPPING = "stopping"
    PREPARE = "prepare"
    SPAWN = "spawn"
    SIGNAL = "signal"
    PROBE = "probe"
    TELL = "tell"  # a line down to a process's library (head/downlink.py)
    SPAWNED = "spawned"
    FAILED = "failed"
    LINES = "lines"
    EXITED = "exited"
    PROBED = "probed"
    CONTROL = "control"
    SAY = "say"
    CLOSED = "closed"  # a link's end, as its reader tells it
    CAPTURE = "capture"  # read a process's stacks from outside (host/spy.py), for a bundle
    CAPTURED = "captured"  # what that read: {name, key, pid, result}
    KEEPER = "keeper"  # start the worlds' stores' keeper: {args, modules, env, log}
    KEPT = "kept"  # it started: {pid, warm}, or {error}
    ADOPT = "adopt"  # a new head's answer to an agent's challenge: {epoch, proof}
    REFUSED = "refused"  # an agent's answer to a head it does not obey: {why}
    SECRET = "secret"  # the run's secret, to an ssh agent: {secret, epoch} (host/door.py)


def proof(secret: str, nonce: str) -> str:
    """What an agent answers to the head's challenge: the secret itself never travels."""
    return hmac.new(secret.encode(), nonce.encode(), hashlib.sha256).hexdigest()


def adoption_proof(secret: str, nonce: str, epoch: int) -> str:
    """What a new head answers to an agent's challenge: the secret, bound to its epoch
    (an epoch replayed with another head's proof proves nothing)."""
    return proof(secret, f"{nonce}:{epoch}")


def proven(hello, secret: str, nonce: str) -> bool:
    """Whether a connect-back's first frame is a hello that proves the run's secret.
    Its shape and its proof are checked before anything else of it is read: a client
    that knows no secret must not reach any code that parses what it sent."""
    if not isinstance(hello, dict) or hello.get("kind") != Kind.HELLO:
        return False
    said = hello.get("proof")
    return isinstance(said, str) and hmac.compare_digest(said, proof(secret, nonce))


class FrameError(ValueError):
    """The stream does not carry mwrun frames (or a frame is damaged)."""


def encode(message: dict) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise FrameError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


class Decoder:
    """Bytes in (any slicing), whole messages out."""

    def __init__(self):
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        self._pending += data
        messages = []
        while len(self._pending) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._pending)
            if size > MAX_FRAME:
                raise FrameError(f"frame of {size} bytes announced; not an mwrun link?")
            if len(self._pending) < _HEADER.size + size:
                break
            body = bytes(self._pending[_HEADER.size:_HEADER.size + size])
            del self._pending[:_HEADER.size + size]
            try:
                message = json.loads(body)
            except ValueError:
                raise FrameError("a frame that is not JSON") from None
            if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
                raise FrameError("a frame without a kind")
            messages.append(message)
        return messages


class Outbox:
    """Frames waiting to be written to a non-blocking descriptor, bounded by the
    caller: ``size`` tells how much is queued so a writer can stop reading its own
    sources (back-pressure) rather than drop anything. It knows where each frame
    ends, so that a link that closed mid-frame can be left (``cut``) and what it
    never got whole written to the next one (an agent's new head)."""

    def __init__(self):
        self._queue = bytearray()
        # Offsets count every byte ever queued: _queue[0] is byte _base; each queued
        # frame's end, and the start of the first one (bytes before _base went out).
        self._base = 0
        self._ends: deque[int] = deque()
        self._start = 0

    @property
    def size(self) -> int:
        return len(self._queue)

    def put(self, message: dict) -> None:
        self._queue += encode(message)
        self._ends.append(self._base + len(self._queue))

    def put_first(self, messages: list[dict]) -> None:
        """Frames ahead of everything queued (what an adopting head must hear first);
        only where no frame is half written (a fresh link, after ``cut``)."""
        assert self._start == self._base, "cut() the link's half-written frame first"
        first = [encode(m) for m in messages]
        ends, at = [], self._base
        for data in first:
            at += len(data)
            ends.append(at)
        shift = at - self._base
        self._queue[:0] = b"".join(first)
        self._ends = deque([*ends, *(end + shift for end in self._ends)])

    def cut(self) -> int:
        """The link closed: the rest of a frame it got part of is dropped (a new link
        must never start mid-frame); how many bytes were dropped."""
        if self._start == self._base or not self._ends:
            return 0
        end = self._ends.popleft()
        dropped = end - self._base
        del self._queue[:dropped]
        self._base = self._start = end
        return dropped

    def flush(self, write) -> bool:
        """Write what the descriptor takes now; True once everything is out.
        ``write(bytes) -> int`` may raise BlockingIOError (nothing taken)."""
        while self._queue:
            try:
                sent = write(bytes(self._queue[:65536]))
            except BlockingIOError:
                return False
            del self._queue[:sent]
            self._base += sent
            while self._ends and self._ends[0] <= self._base:
                self._start = self._ends.popleft()
        return True
