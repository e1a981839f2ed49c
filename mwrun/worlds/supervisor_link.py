"""The library's line to the supervisor: heartbeats and world events up, orders down.

Under ``mwrun launch``, ``MWRUN_CONTROL`` names the supervisor's control socket. The
library keeps one connection to it and writes JSON lines that need no reply:
``hello`` once per connection (with ``nccl``: this process's NCCL version, or null;
worlds/nccl.py), ``heartbeat`` from one thread at a steady pace (so the supervisor can
tell a stopped or wedged process from a quiet one), and ``world`` events (a
generation formed (``ready``), broke as seen from here, or was closed by this member;
a world the head added formed here (``added``); this member lets a draining world go
(``released``); or ``abort_hung``: aborting a broken world's communicator did not
return in time, and the supervisor must kill this process, see worlds/aborts.py).
``bye`` ends the beating when the process leaves its worlds (``job.close()``).
``scale`` (``job.scale``) is the one request: it carries an ``id``, and its answer
comes down as a ``reply`` with that id.

The head may write lines down at any time after the hello (orders.py: ``add``,
``drain``, ``reply``, ``stacks``); the same thread reads them as they come (it waits on
the socket until the next beat is due, never longer), so the head never finds its lines
piling up unread, and hands each order to the job. ``stacks`` it answers itself, at
once, with every thread's stack and world call (``stacks_told``, stacks.py): the main
thread and its signal handlers are never asked. Lines it does not know are ignored.

What each heartbeat carries, and when one is due, is beats.py's. World events carry
``"t"``, this process's wall clock when it joined or saw the break.
The supervisor may be busy when a process starts (forking hundreds of others, its
listen backlog full), or its connection may drop: the link then keeps trying from its
thread, with backoff, says so once on stderr, and holds the world events it must not
lose (in order, bounded) until the hello has gone out. A process is never silently
left without its supervisor; its worlds never wait for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from mwrun.protocol import MAX_LINE, Verb, WorldReport
from mwrun.worlds import orders, signals, stacks
from mwrun.worlds.beats import Beats, aligned
from mwrun.worlds.uplink import Uplink

log = logging.getLogger("mwrun")
RETRY_FIRST, RETRY_CAP = 0.05, 2.0  # backoff between attempts, seconds
SAY_AFTER = 5.0  # seconds of failed attempts before the process says so, once


class Lines:
    """Bytes from the head cut into lines; a line longer than MAX_LINE is dropped."""

    def __init__(self):
        self._buffer = b""
        self._skipping = False  # inside a line too long to keep

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        *whole, self._buffer = self._buffer.split(b"\n")
        if self._skipping and whole:
            whole, self._skipping = whole[1:], False
        if len(self._buffer) > MAX_LINE:
            self._buffer, self._skipping = b"", True
        return [line for line in whole if line.strip()]


class Pending:
    """A request's answer, waited for: set once by the reader."""

    def __init__(self):
        self.done = threading.Event()
        self.reply: orders.Reply | None = None


class SupervisorLink:
    """``worlds()``: the worlds whose traffic each beat carries (the job's live set);
    ``on_order(order)``: what to do with an ``add`` or ``drain`` from the head (called
    on the link's thread, so it must not block)."""

    def __init__(self, path: str, process: str, interval: float, *,
                 worlds: Callable[[], Mapping] = dict, on_order=None, stderr=None,
                 nccl: str | None = None):
        self._path = path
        self._nccl = nccl  # this process's NCCL version, told in the hello (None: no NCCL)
        self._process = process
        self._interval = interval
        self._beats = Beats(interval, worlds)
        self._on_order = on_order
        self._stderr = stderr
        self._up = Uplink(path, self._hello)
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()  # close() wakes the thread
        self._reading: socket.socket | None = None  # the thread's: where lines come down
        self._replies: dict[str, Pending] = {}  # request id -> its answer, to come
        self._waiting = threading.Lock()  # for _replies: never the uplink's lock, which
        # a send holds while the socket takes its line, so that the reader never waits
        self._thread: threading.Thread | None = None

    @property
    def connected(self) -> bool:
        return self._up.connected

    def start(self) -> SupervisorLink:
        """One attempt now; if the supervisor cannot be reached yet, the link's thread
        keeps trying (the process's worlds never wait for it)."""
        self._connect()
        self._thread = threading.Thread(target=self._run, name="mwrun-heartbeat", daemon=True)
        signals.start(self._thread)
        return self

    def _hello(self) -> dict:
        return {"verb": Verb.HELLO, "process": self._process, "pid": os.getpid(),
                "interval": self._interval, "nccl": self._nccl}

    def _connect(self) -> bool:
        sock = self._up.connect()
        if sock is not None:
            self._reading = sock
        return self._up.connected

    def send(self, message: dict) -> bool:
        """Send a line up; False where it could not go (held, if a world event)."""
        return self._up.send(message)

    def world_event(self, world: str, generation: int, event: WorldReport,
                    reason: str = "") -> None:
        self.send({"verb": Verb.WORLD, "process": self._process, "pid": os.getpid(),
                   "world": world, "generation": generation, "event": event,
                   "reason": reason, "t": time.time()})

    def request(self, message: dict, timeout: float) -> orders.Reply | None:
        """Send ``message`` with a fresh ``id`` and wait up to ``timeout`` seconds for
        the head's reply; None if it could not be sent or no reply came in time."""
        rid = uuid.uuid4().hex
        slot = Pending()
        with self._waiting:
            self._replies[rid] = slot
        try:
            if not self.send({**message, "id": rid}):
                return None
            slot.done.wait(timeout)
            return slot.reply
        finally:
            with self._waiting:
                self._replies.pop(rid, None)

    def _run(self) -> None:
        step = self._beats.step
        check_at = time.time() + aligned(step)
        lines = Lines()
        while not self._stop.is_set():
            sock = self._reading
            if sock is None:
                if not self._reach():
                    return
                lines = Lines()  # a new connection: nothing of the old one is a line
                continue
            wanted = [self._wake_r, sock]
            try:
                readable, _, _ = select.select(wanted, [], [], max(check_at - time.time(), 0))
            except (OSError, ValueError):  # closed under us: close() is ending the link
                return
            if sock in readable:
                self._read(sock, lines)
            if time.time() >= check_at:
                beat = self._beats.check()
                if beat is not None:
                    self.send({"verb": Verb.HEARTBEAT, "process": self._process,
                               "pid": os.getpid(), **beat})
                check_at = time.time() + aligned(step)

    def _read(self, sock: socket.socket, lines: Lines) -> None:
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return
        except OSError:
            data = b""
        if not data:  # the supervisor went away, or a send failed: try again
            self._up.lost(sock)
            self._reading = None
            sock.close()
            return
        for line in lines.feed(data):
            self._hear(orders.parse(line))

    def _hear(self, order: orders.Order | None) -> None:
        if isinstance(order, orders.Reply):
            with self._waiting:
                slot = self._replies.get(order.id)
            if slot is not None:
                slot.reply = order
                slot.done.set()
        elif isinstance(order, orders.Stacks):
            self.send(stacks.told(self._process, order.id, order.flight))
        elif order is not None and self._on_order is not None:
            try:
                self._on_order(order)
            except Exception:  # an order the job cannot follow never ends the link
                log.exception("mwrun: could not follow the supervisor's %s", order)

    def _reach(self) -> bool:
        """Until the supervisor answers (or the link is closed): try with backoff, and
        say once that the process runs unsupervised meanwhile."""
        began, wait, said = time.monotonic(), RETRY_FIRST, False
        while self._reading is None:
            if self._stop.wait(wait):
                return False
            if self._connect():
                if said:
                    self._say(f"mwrun: {self._process} reached its supervisor after"
                              f" {time.monotonic() - began:.1f}s; it is supervised again")
                return True
            wait = min(wait * 2, RETRY_CAP)
            if not said and time.monotonic() - began >= SAY_AFTER:
                said = True
                self._say(f"mwrun: {self._process} cannot reach its supervisor at"
                          f" {self._path} yet; it keeps trying (until then nothing"
                          " watches it for hangs or counts its traffic)")
        return True

    def _say(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            print(text, file=self._stderr or sys.stderr, flush=True)

    def close(self) -> None:
        """Stop beating, and say so: a process may go on working after leaving its
        worlds, and silence must not then look like a hang."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.send({"verb": Verb.BYE, "process": self._process, "pid": os.getpid()})
        socks = {sock for sock in (self._up.take(), self._reading) if sock is not None}
        self._reading = None
        for sock in socks:
            sock.close()
        if self._thread is None or not self._thread.is_alive():
            self._wake_r.close()
            self._wake_w.close()
