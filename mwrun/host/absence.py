"""The head's absence, as an agent lives it (DESIGN, "A head that can die").

With ``head_grace`` (topology, seconds) an agent whose head went away (its link closed,
or silent past ``frames.SILENCE``) keeps this host's processes running and its relay
serving for that long, and keeps what it would have told the head: the frames that
matter whatever their number (starts, exits, what an agent says) always, output
lines up to ``KEEP`` bytes, the rest counted; heartbeats never. No head
by then: everything is stopped as it always was. Without a grace (0) the agent stops
everything at once, as before a head could come back.

On the head's own machine the agent also writes the absence down in the run folder
(``note``: a small JSON file the head names), so that ``mwrun status`` can say the
head is away, since when, and when the job ends without one.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable

from mwrun.host.frames import Kind
from mwrun.host.headrestart import HeadRestart

KEEP = 4 * 2**20  # bytes of output lines and library messages kept for a new head
# Few, and vital: a start, an exit, what an agent says, and what a library tells of its
# worlds (an adopting head hears each library's state at the head's death, then these).
ALWAYS = frozenset({Kind.SPAWNED, Kind.FAILED, Kind.EXITED, Kind.SAY, Kind.CONTROL})


class Absence:
    """Whether the head is away, since when, until when the job waits for one, and
    what was kept for it meanwhile."""

    def __init__(self, grace: float, note: str | None, clock: Callable[[], float],
                 wall: Callable[[], float], restart: HeadRestart | None = None):
        """``restart``: the head's machine's agent starts a new head meanwhile
        (head_restart: host/headrestart.py)."""
        self.grace, self.note, self.clock, self.wall = grace, note, clock, wall
        self.restart = restart
        self.since: float | None = None  # on the agent's clock
        self.since_wall: float | None = None
        self.why = ""
        self.dropped = 0  # frames not kept (over KEEP)

    def noted(self, note: str) -> None:
        """Where to write the absence, told late (an agent srun started: host/asks.py)."""
        if self.note is None:
            self.note = note

    @property
    def away(self) -> bool:
        return self.since is not None

    def begin(self, why: str) -> bool:
        """The head went (``why``); True if the job goes on without it for a while."""
        if self.grace <= 0 or self.away:
            return self.away
        self.since, self.since_wall, self.why = self.clock(), self.wall(), why
        self._write(stopped=None)
        if self.restart is not None:
            self.restart.lost(self.since)
        return True

    def back(self) -> None:
        """A new head adopted the job (host/door.py): no absence any more, and no note."""
        if self.away and self.note is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.note)
        self.since = self.since_wall = None
        self.why = ""
        if self.restart is not None:
            self.restart.adopted(self.clock())

    def tick(self, now: float) -> None:
        """A new head started, if one is due (head_restart)."""
        if self.restart is not None:
            self.restart.tick(now, self.away)

    def over(self, now: float) -> bool:
        """Whether the grace has run out (the agent then stops everything)."""
        return self.since is not None and now - self.since >= self.grace

    def due(self) -> float | None:
        """When the grace runs out, or a new head is due to start if sooner, on the
        agent's clock (None: the head is here)."""
        if self.since is None:
            return None
        due = self.since + self.grace
        if self.restart is not None and self.restart.due_at is not None:
            due = min(due, self.restart.due_at)
        return due

    def keep(self, kind: str, queued: int, beats: bool = False) -> bool:
        """Whether a frame of ``kind`` joins the ``queued`` bytes kept for a new head;
        never heartbeats (``beats``): a new head wants none from before it came."""
        if beats:
            return False
        if kind in ALWAYS or queued < KEEP:
            return True
        self.dropped += 1
        return False

    def end(self, now: float) -> None:
        """The agent stops everything while the head is away (its grace ran out, or it
        was told to end): the note says which."""
        if self.away:
            self._write(stopped=self.wall(), reason=self.reason(self.over(now)))

    def reason(self, expired: bool = True) -> str:
        if expired:
            return (f"no head came back within head_grace ({self.grace:g}s) after"
                    f" {self.why}: every process stopped")
        return (f"its head's machine's agent was told to end (SIGTERM: mwrun stop, or the"
                f" machine) while the head was away ({self.why}): every process stopped")

    def _write(self, stopped: float | None, reason: str | None = None) -> None:
        if self.note is None:
            return
        doc = {"since": self.since_wall, "grace": self.grace, "why": self.why,
               "agent_pid": os.getpid(), "stopped": stopped, "dropped": self.dropped}
        if reason is not None:
            doc["reason"] = reason
        temp = f"{self.note}.{os.getpid()}.tmp"
        with contextlib.suppress(OSError):  # a run folder removed under us: nothing to tell
            with open(temp, "w") as file:
                json.dump(doc, file)
            os.replace(temp, self.note)
