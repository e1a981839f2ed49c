"""``mwrun drill --signal SLOW``: the slow member drilled and timed.

No fault: at each moment of the schedule one member of a world (drawn as a fault's
would be) is told to come ``--delay`` seconds late to every call there
(``kill_world`` with signal SLOW, which the head records as ``late``), and the drill
times how long the head takes to name it (the status document's ``worlds[].slow``).
Once named (or after NAME_WAIT) its lateness ends, and the next member is made late
only once its world waits for no member again (at most CLEAR_WAIT), so every shot is
timed from a quiet world. The summary: how many were named, how fast, how many missed
or named wrongly; exit status 0 when every one was named, and no other member was.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mwrun import protocol, runs
from mwrun.errors import RunError, UsageError
from mwrun.records import Shot

NAME_WAIT = 30.0  # seconds a late member may go unnamed: then the shot is missed
CLEAR_WAIT = 60.0  # seconds the next shot waits for its world to wait for no member
POLL = 0.2  # seconds between looks at the status document
END = 0.001  # seconds of lateness that end it (a late order replaces the last one)


@dataclass
class Timed:
    """One late member: ``named_s`` after the order the head named it (None: missed);
    ``wrong``: another member named meanwhile, if one was."""

    world: str
    process: str
    named_s: float | None = None
    wrong: str | None = None


class SlowDrill:
    """``ask(request) -> reply`` (the run's control socket); the clock and the sleep
    are injected, so the loop is tested without a job."""

    def __init__(self, shots: Iterable[Shot], delay: float, *, ask: Callable[[dict], dict],
                 say: Callable[[str], None], clock=time.monotonic, sleep=time.sleep):
        self.shots, self.delay = shots, delay
        self.ask, self.say, self.clock, self.sleep = ask, say, clock, sleep
        self.timed: list[Timed] = []

    def run(self) -> int:
        start = self.clock()
        try:
            for shot in self.shots:
                self._until(start + shot.at)
                self._shoot(shot)
        except KeyboardInterrupt:
            self.say("drill: interrupted; the summary so far\n")
        for line in self.summary():
            self.say(line + "\n")
        named = [t for t in self.timed if t.named_s is not None]
        return 0 if self.timed and len(named) == len(self.timed) and \
            not any(t.wrong for t in self.timed) else 1

    def _shoot(self, shot: Shot) -> None:
        if not self._wait(lambda: self._slow(shot.world) is None, CLEAR_WAIT):
            self.say(f"drill: {shot.world} still waits for a member after {CLEAR_WAIT:g}s;"
                     " making the next one late all the same\n")
        self._late(shot, NAME_WAIT)
        began, timed = self.clock(), Timed(shot.world, shot.process)
        self.timed.append(timed)

        def named() -> bool:
            slow = self._slow(shot.world)
            if slow is not None and slow["member"] != shot.process:
                timed.wrong = timed.wrong or slow["member"]
            return slow is not None and slow["member"] == shot.process
        if self._wait(named, NAME_WAIT):
            timed.named_s = round(self.clock() - began, 3)
        self._late(shot, END)
        said = f"named after {timed.named_s:.1f}s" if timed.named_s is not None else \
            f"not named within {NAME_WAIT:g}s"
        self.say(f"drill: {shot.process} of {shot.world} {self.delay * 1000:g} ms late:"
                 f" {said}{f'; {timed.wrong} named instead' if timed.wrong else ''}\n")

    def _late(self, shot: Shot, hold: float) -> None:
        self.ask({"verb": "kill_world", "world": shot.world, "rank": shot.rank,
                  "signal": protocol.SLOW, "delay": self.delay, "for": hold})

    def _slow(self, world: str) -> dict | None:
        doc = self.ask({"verb": "status"})["status"]
        found = next((w for w in doc["worlds"] if w["name"] == world), None)
        if found is None:
            raise RunError(f"world {world} left the job during the drill")
        return found.get("slow")

    def _wait(self, condition: Callable[[], bool], seconds: float) -> bool:
        deadline = self.clock() + seconds
        while not condition():
            if self.clock() >= deadline:
                return False
            self.sleep(POLL)
        return True

    def _until(self, moment: float) -> None:
        while (left := moment - self.clock()) > 0:
            self.sleep(min(left, POLL))

    def summary(self) -> list[str]:
        took = [t.named_s for t in self.timed if t.named_s is not None]
        wrong = [t for t in self.timed if t.wrong]
        head = (f"drill: {len(self.timed)} member(s) made {self.delay * 1000:g} ms late;"
                f" {len(took)} named")
        if took:
            head += f" (median {statistics.median(took):.1f}s, max {max(took):.1f}s)"
        missed = len(self.timed) - len(took)
        return [head + (f"; {missed} missed" if missed else "") +
                (f"; another member named {len(wrong)} time(s)" if wrong else "")]


def delay_of(slow: bool, delay: float | None, scale: tuple[str, ...]) -> float | None:
    """--delay as the drill takes it (its default with --signal SLOW; None without);
    UsageError where it cannot be."""
    if not slow:
        if delay is not None:
            raise UsageError("--delay goes with --signal SLOW (how late the member comes)")
        return None
    if scale:
        raise UsageError("--signal SLOW drills the slow member alone; leave out --scale")
    delay = protocol.LATE_DELAY if delay is None else delay
    if not 0 < delay <= protocol.MAX_LATE_DELAY:
        raise UsageError(f"--delay must be more than 0 and at most"
                         f" {protocol.MAX_LATE_DELAY:g} seconds, not {delay:g}")
    return delay


def asker(run_id: str, state: dict, warn: Callable[[str], None]) -> Callable[[dict], dict]:
    """The run's control socket, one request at a time (RunError where it fails)."""
    return lambda request: runs.ask(run_id, state, request, say=warn)
