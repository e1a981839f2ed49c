"""The library's line to the supervisor: heartbeats and world events.

Under ``mwrun launch``, ``MWRUN_CONTROL`` names the supervisor's control socket. The
library keeps one connection to it and writes JSON lines that need no reply:
``hello`` once, ``heartbeat`` from one thread at a steady pace (so the supervisor can
tell a stopped or wedged process from a quiet one), and ``world`` events (a
generation formed, or broke as seen from here). If the supervisor goes away the link
falls silent; the job's worlds do not depend on it. ``bye`` ends the beating when the
process leaves its worlds (``job.close()``).

Each heartbeat carries this process's traffic per world, counted by the calls
themselves (see calls.py): ``"t"`` (its monotonic clock) and ``"traffic": {world:
[calls, bytes, failures, seconds since the last completed call or null]}``, counts
since the process joined. The supervisor turns them into rates, so while the counts
move (and for the supervisor's rate window after), beats come once a second whatever
the hang timeout allows; an idle process beats only at its interval, which keeps a
supervisor watching hundreds of idle processes idle itself.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

from mwrun.worlds import signals

TRAFFIC_EVERY = 1.0  # seconds between beats while traffic moves, for its rates
# Seconds of fast beats after the counts last moved: the supervisor's rate window
# (head/traffic.py WINDOW), so a rate falls to 0 in steps, as the traffic did.
TRAFFIC_TAIL = 5.0


def beat_due(now: float, sent_at: float, moved_at: float, interval: float,
             step: float) -> bool:
    """Whether to beat at this check (one every ``step`` seconds): while the traffic
    counts moved within TRAFFIC_TAIL, always; when idle, once per ``interval`` (the
    half step allows for a check that wakes a little early)."""
    return now - moved_at <= TRAFFIC_TAIL or now - sent_at >= interval - step / 2


class SupervisorLink:
    def __init__(self, path: str, process: str, interval: float):
        self._path = path
        self._process = process
        self._interval = interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.worlds: dict = {}  # name -> World, set by init once they exist

    def start(self) -> SupervisorLink:
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(2.0)
            sock.connect(self._path)
        except OSError:
            return self  # no supervisor to talk to: run without heartbeats
        self._sock = sock
        self.send({"verb": "hello", "process": self._process, "pid": os.getpid(),
                   "interval": self._interval})
        self._thread = threading.Thread(target=self._beat, name="mwrun-heartbeat", daemon=True)
        signals.start(self._thread)
        return self

    def send(self, message: dict) -> None:
        with self._lock:
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
                   "reason": reason})

    def _beat(self) -> None:
        step = min(self._interval, TRAFFIC_EVERY)
        sent_at = moved_at = time.monotonic()
        counts = None
        while not self._stop.wait(step):
            now = time.monotonic()
            traffic = {name: w._traffic() for name, w in list(self.worlds.items())}
            seen = {name: t[:3] for name, t in traffic.items()}
            if seen != counts:
                counts, moved_at = seen, now
            if not beat_due(now, sent_at, moved_at, self._interval, step):
                continue
            sent_at = now
            self.send({"verb": "heartbeat", "process": self._process, "pid": os.getpid(),
                       "t": now, "traffic": traffic})
            if self._sock is None:
                return

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
