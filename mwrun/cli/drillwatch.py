"""``mwrun drill``, what it keeps an eye on while it runs: its progress line
(``Display``) and the run's status document (``Watch``), read about once a beat,
which the drill's ledger (mwrun.records) counts from."""

from __future__ import annotations

from collections.abc import Callable

from mwrun import runs
from mwrun.cli.drillscale import GOING
from mwrun.errors import RunError
from mwrun.records import KILL_LEADS, Ledger

SHOW_EVERY = 1.0  # seconds between progress updates (each reads the history)
LOOK_EVERY = 1.0  # seconds between readings of the status document (about a beat)


class Display:
    """The drill's progress line: in place on a terminal; elsewhere a line only when
    what it says changed (not one per second)."""

    def __init__(self, say: Callable[[str], None], tty: bool):
        self.say, self.tty = say, tty
        self.shown, self.shown_at = "", float("-inf")
        self.in_place = False  # a line drawn in place, not ended yet

    def due(self, now: float, force: bool = False) -> bool:
        if now - self.shown_at < SHOW_EVERY and not force:
            return False
        self.shown_at = now
        return True

    def show(self, text: str, key: str | None = None) -> None:
        """``key``: what changed (a plain line is said only when it did)."""
        if self.tty:
            self.say(f"\r{text}\x1b[K")
            self.in_place = True
        elif (key or text) != self.shown:
            self.say(text + "\n")
        self.shown = key or text

    def end_line(self) -> None:
        """Below a line drawn in place, before anything else is said."""
        if self.in_place:
            self.say("\n")
            self.in_place = False


class Watch:
    """The run as the drill last read it: its status document (at most every
    LOOK_EVERY, unless forced), which the ledger reads each of, and the faults sent
    whose break no document has shown yet."""

    def __init__(self, run_id: str, control: str, ask, clock):
        self.run_id, self.control, self.ask, self.clock = run_id, control, ask, clock
        self.ledger = Ledger()
        self.doc: dict | None = None  # the latest status document read
        self.looked_at = float("-inf")
        # faults sent whose break is not in a document yet: (world, process, breaks, t)
        self.struck: list[tuple[str, str, int | None, float]] = []

    def still_live(self) -> None:  # or RunError
        if not runs.is_live(runs.read_state(self.run_id) or {}):
            raise RunError(f"run {self.run_id} ended during the drill") from None

    def look(self, force: bool = False) -> dict:
        """The status document (read at most every LOOK_EVERY unless ``force``)."""
        now = self.clock()
        if self.doc is not None and not force and now - self.looked_at < LOOK_EVERY:
            return self.doc
        try:
            doc = self.ask(self.control, {"verb": "status"})["status"]
        except RunError:
            self.still_live()
            if self.doc is None:
                raise
            return self.doc  # a busy head: the last one will do
        self.doc, self.looked_at = doc, now
        self.ledger.see(doc, now)
        return doc

    def worlds_now(self) -> set[str] | None:
        """The worlds the run has now, those being removed aside (None: not known)."""
        try:
            doc = self.ask(self.control, {"verb": "status"})["status"]
        except RunError:
            self.still_live()
            return None
        return {w["name"] for w in doc["worlds"] if w["state"] not in GOING}

    def pending(self) -> list[tuple[str, str, int | None, float]]:
        """The faults sent whose break no document has shown yet (for at most
        KILL_LEADS): the status may still show their world healthy, their member
        serving (as the ledger read the latest document)."""
        now = self.clock()
        self.struck = [(w, p, breaks, t) for w, p, breaks, t in self.struck
                       if now - t < KILL_LEADS and (life := self.ledger.now.get(w))
                       is not None and (breaks is None or life.breaks <= breaks)]
        return self.struck
