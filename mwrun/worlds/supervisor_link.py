"""The library's line to the supervisor: heartbeats and world events.

Under ``mwrun launch``, ``MWRUN_CONTROL`` names the supervisor's control socket. The
library keeps one connection to it and writes JSON lines that need no reply:
``hello`` once (with ``nccl``: this process's NCCL version, or null; worlds/nccl.py),
``heartbeat`` from one thread at a steady pace (so the supervisor can
tell a stopped or wedged process from a quiet one), and ``world`` events (a
generation formed, or broke as seen from here; or ``abort_hung``: aborting a broken
world's communicator did not return in time, and the supervisor must kill this
process, see worlds/aborts.py). If the supervisor goes away the link
falls silent; the job's worlds do not depend on it. ``bye`` ends the beating when the
process leaves its worlds (``job.close()``).

Each heartbeat carries this process's traffic per world, counted by the calls
themselves (see calls.py): ``"t"`` (its monotonic clock) and ``"traffic": {world:
[calls, bytes, failures, seconds since the last completed call or null]}``, counts
since the process joined; and ``"first_calls": {world: [generation, wall-clock time]}``,
when the latest generation of each world had its first completed call (the
supervisor's ``first_call`` phase of a fault, head/faults.py). World events carry
``"t"``, this process's wall clock when it joined or saw the break. The supervisor
turns the counts into rates, so while the counts
move (and for the supervisor's rate window after), beats come once a second whatever
the hang timeout allows; an idle process beats only at its interval, which keeps a
supervisor watching hundreds of idle processes idle itself.
The supervisor may be busy when a process starts (forking hundreds of others, its
listen backlog full): the link then keeps trying from its thread, with backoff, says so
once on stderr, and holds the world events it must not lose (in order, bounded) until
the hello has gone out. A process is never silently left without its supervisor.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import socket
import sys
import threading
import time

from mwrun.worlds import signals

TRAFFIC_EVERY = 1.0  # seconds between beats while traffic moves, for its rates
# Seconds of fast beats after the counts last moved: the supervisor's rate window
# (head/traffic.py WINDOW), so a rate falls to 0 in steps, as the traffic did.
TRAFFIC_TAIL = 5.0
CONNECT_TIMEOUT = 1.0  # one attempt to reach the supervisor's socket
RETRY_FIRST, RETRY_CAP = 0.05, 2.0  # backoff between attempts, seconds
SAY_AFTER = 5.0  # seconds of failed attempts before the process says so, once
HELD_EVENTS = 1000  # world events kept, in order, until the supervisor is reached


def beat_due(now: float, sent_at: float, moved_at: float, interval: float,
             step: float) -> bool:
    """Whether to beat at this check (one every ``step`` seconds): while the traffic
    counts moved within TRAFFIC_TAIL, always; when idle, once per ``interval`` (the
    half step allows for a check that wakes a little early)."""
    return now - moved_at <= TRAFFIC_TAIL or now - sent_at >= interval - step / 2


def next_beat(now: float, moved_at: float, interval: float, step: float) -> float:
    """The most seconds until the beat after one sent ``now``: a check's step while the
    traffic keeps the beats fast, else the idle interval. Told with each beat, so the
    supervisor knows when one is late (and shows the process unresponsive) by this
    process's own pace, not by the slowest it could beat."""
    return step if now + step - moved_at <= TRAFFIC_TAIL else interval


def aligned(step: float, now: float | None = None) -> float:
    """Seconds until the next multiple of ``step`` on the wall clock. Every process of
    a job checks at the same moments, so their beats reach the supervisor together and
    it reads a hundred in one turn of its loop, not a hundred turns (each turn's own
    cost was most of what watching many processes cost it)."""
    now = time.time() if now is None else now
    return step - now % step


class SupervisorLink:
    def __init__(self, path: str, process: str, interval: float, *, stderr=None,
                 nccl: str | None = None):
        self._path = path
        self._nccl = nccl  # this process's NCCL version, told in the hello (None: no NCCL)
        self._process = process
        self._interval = interval
        self._stderr = stderr
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._held: collections.deque[dict] = collections.deque(maxlen=HELD_EVENTS)
        self._thread: threading.Thread | None = None
        self.worlds: dict = {}  # name -> World, set by init once they exist

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def start(self) -> SupervisorLink:
        """One attempt now; if the supervisor cannot be reached yet, the beating
        thread keeps trying (the process's worlds never wait for it)."""
        self._connect()
        self._thread = threading.Thread(target=self._run, name="mwrun-heartbeat", daemon=True)
        signals.start(self._thread)
        return self

    def _connect(self) -> bool:
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:
            return False
        try:
            sock.settimeout(CONNECT_TIMEOUT)
            sock.connect(self._path)
        except OSError:
            sock.close()
            return False
        hello = {"verb": "hello", "process": self._process, "pid": os.getpid(),
                 "interval": self._interval, "nccl": self._nccl}
        with self._lock:
            self._sock = sock
            held, self._held = list(self._held), collections.deque(maxlen=HELD_EVENTS)
            for message in [hello, *held]:  # hello first: events of a stranger are ignored
                self._send_locked(message)
        return self._sock is not None

    def send(self, message: dict) -> None:
        with self._lock:
            if self._sock is None:
                if message.get("verb") == "world":  # the supervisor must hear these
                    self._held.append(message)
                return
            self._send_locked(message)

    def _send_locked(self, message: dict) -> None:
        if self._sock is None:
            return
        try:
            self._sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            self._sock.close()
            self._sock = None

    def world_event(self, world: str, generation: int, event: str, reason: str = "") -> None:
        self.send({"verb": "world", "process": self._process, "pid": os.getpid(),
                   "world": world, "generation": generation, "event": event,
                   "reason": reason, "t": time.time()})

    def _run(self) -> None:
        if self._reach():
            self._beat()

    def _reach(self) -> bool:
        """Until the supervisor answers (or the link is closed): try with backoff, and
        say once that the process runs unsupervised meanwhile."""
        began, wait, said = time.monotonic(), RETRY_FIRST, False
        while self._sock is None:
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
        stream = self._stderr or sys.stderr
        with contextlib.suppress(OSError, ValueError):
            print(text, file=stream, flush=True)

    def _beat(self) -> None:
        step = min(self._interval, TRAFFIC_EVERY)
        sent_at = moved_at = time.monotonic()
        counts = None
        while not self._stop.wait(aligned(step)):
            now = time.monotonic()
            worlds = list(self.worlds.items())
            traffic = {name: w._traffic() for name, w in worlds}
            seen = {name: t[:3] for name, t in traffic.items()}
            if seen != counts:
                counts, moved_at = seen, now
            if not beat_due(now, sent_at, moved_at, self._interval, step):
                continue
            sent_at = now
            firsts = {name: first for name, w in worlds if (first := w._first()) is not None}
            self.send({"verb": "heartbeat", "process": self._process, "pid": os.getpid(),
                       "t": now, "traffic": traffic, "first_calls": firsts,
                       "next": next_beat(now, moved_at, self._interval, step)})
            if self._sock is None:
                return  # the supervisor went away: the job's worlds do not need it

    def close(self) -> None:
        """Stop beating, and say so: a process may go on working after leaving its
        worlds, and silence must not then look like a hang."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.send({"verb": "bye", "process": self._process, "pid": os.getpid()})
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
