"""``mwrun drill``, live: measure each world's fault-free pace, send the schedule's
faults through the supervisor's ``kill_world`` request (so it records each as a
drill, as ``mwrun kill-world --rank R`` does), show progress, wait for the last
faults to recover, then write the summary into the run's history and say it.

Everything it measures it reads back from the run's history (timeline.py), the
same records ``mwrun report`` reads: the drill keeps no clock of its own on the
faults. Ctrl-C ends the drill, never the job: the summary so far is still given.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mwrun import runs
from mwrun.cli import drill as d
from mwrun.cli import timeline
from mwrun.errors import RunError, UsageError
from mwrun.schema import PLAN

POLL = 0.1  # seconds between looks at the clock while waiting for the next fault
SHOW_EVERY = 1.0  # seconds between progress updates (each reads the history)
BASELINE_WAIT = 60.0  # seconds the drill waits for BASELINE_MIN of fault-free pace
RECOVER_WAIT = 30.0  # seconds after the drill for its last faults to recover


def start(run: str | None, every: str, duration: str, worlds: str | None, sig: str,
          seed: int | None, *, warn, say) -> int:
    """The command line's drill: checked arguments, the schedule, the drill; its exit
    status. Every mistake (numbers, signal, world, no live run) is one UsageError."""
    every, duration = _seconds("--every", every), _seconds("--for", duration)
    sig = sig.upper().removeprefix("SIG")
    if sig not in d.SIGNALS:
        raise UsageError(f"--signal can be {', '.join(d.SIGNALS)}, not {sig}")
    only = [w.strip() for w in worlds.split(",") if w.strip()] if worlds else None
    try:
        run_id, state = runs.find(run, warn=warn)
        if not runs.is_live(state):
            raise RunError(f"run {run_id} is not running (it is {state.get('state')})")
        doc = runs.request(state["control"], {"verb": "status"})["status"]
    except RunError as exc:
        raise UsageError(str(exc)) from None
    shots = d.schedule(seed, every, duration, d.targets(doc, only))
    settings = {"every": every, "for": duration, "signal": sig, "seed": seed, "targets": only}
    _, code = Drill(run_id, state["control"], shots, settings, tty=sys.stdout.isatty(),
                    say=say, recover_wait=RECOVER_WAIT + _hang_wait(run_id, sig)).run()
    return code


def _seconds(option: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{option} must be a number of seconds more than 0, not {text!r}")
    return value


def _hang_wait(run_id: str, sig: str) -> float:
    """A stopped member is a fault only once it is declared hung (after its
    hang_timeout, then killed and restarted): a STOP drill waits that much longer for
    its last faults. The plan as launched says the longest hang_timeout."""
    if sig != "STOP":
        return 0.0
    try:
        plan = json.loads((runs.run_path(run_id) / PLAN).read_text())
        return max(float(p["hang_timeout"]) for p in plan["processes"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 90.0  # the default hang_timeout (3 x the default timeout)


class Drill:
    def __init__(self, run_id: str, control: str, shots: list[d.Shot], settings: dict, *,
                 say: Callable[[str], None], tty: bool, clock=time.time, sleep=time.sleep,
                 ask=runs.request, run_dir: Path | None = None,
                 recover_wait: float = RECOVER_WAIT):
        self.run_id = run_id
        self.control = control
        self.shots = shots
        self.settings = settings  # every, for, signal, seed, targets: into the record
        self.say = say
        self.tty = tty
        self.clock = clock
        self.sleep = sleep
        self.ask = ask
        self.run_dir = run_dir or runs.run_path(run_id)
        self.recover_wait = recover_wait
        self.sent: list[d.Sent] = []
        self.window = d.Window(clock(), clock())
        self.shown_at = float("-inf")
        self.shown = ""
        self.problem: str | None = None  # why the drill ended early
        self.in_place = False  # a progress line drawn in place, not ended yet

    def run(self) -> tuple[dict, int]:
        """The drill, start to end: its record and exit status."""
        interrupted = False
        try:
            self._measure()
            self._shoot()
            self._recover()
        except KeyboardInterrupt:
            interrupted = True
            self.window.ended = min(self.window.ended, self.clock())
        except RunError as exc:  # the run ended under the drill
            self.problem = str(exc)
            self.window.ended = min(self.window.ended, self.clock())
        return self._finish(interrupted)

    def timeline(self) -> timeline.Timeline:
        return timeline.build(*timeline.load(self.run_dir, self.run_id), self.run_id)

    def _measure(self) -> None:
        """Wait for BASELINE_MIN of fault-free pace in every world with traffic."""
        deadline = self.clock() + BASELINE_WAIT
        while True:
            now = self.clock()
            tl = self.timeline()
            bases = {w: b for w in tl.worlds if (b := d.baseline(tl, w, now)) is not None}
            waiting = [w for w in tl.worlds if w not in bases]
            if not waiting or now >= deadline:
                break
            self._show(f"drill: measuring each world's fault-free pace ({len(bases)} of"
                       f" {len(tl.worlds)} worlds steady for {d.BASELINE_MIN:.0f} s)")
            self.sleep(0.5)
        self._end_line()
        if waiting:
            self.say(f"drill: no fault-free pace for {', '.join(waiting)} (no steady traffic"
                     f" for {d.BASELINE_MIN:.0f} s): its pace kept is not measured\n")
        if bases:
            paces = ", ".join(f"{w} {p:.2f}" for w, (a, b) in bases.items()
                              if (p := d.pace_of(tl, w, a, b)) is not None)
            self.say(f"drill: fault-free pace (calls/s, over up to {d.BASELINE_MAX:.0f} s"
                     f" before the drill): {paces}; {len(self.shots)} fault(s) over"
                     f" {self.settings['for']:g} s\n")
        self.window = d.Window(now, now + self.settings["for"], bases)

    def _shoot(self) -> None:
        for shot in self.shots:
            self._wait_until(self.window.started + shot.at)
            t = self.clock()
            try:
                self.ask(self.control, {"verb": "kill_world", "world": shot.world,
                                        "rank": shot.rank, "signal": self.settings["signal"]})
                self.sent.append(d.Sent(shot, t))
            except RunError as exc:
                if not runs.is_live(runs.read_state(self.run_id) or {}):
                    raise RunError(f"run {self.run_id} ended during the drill") from None
                self.sent.append(d.Sent(shot, t, skipped=str(exc)))  # e.g. still restarting
        self._wait_until(self.window.ended)

    def _wait_until(self, at: float) -> None:
        while (left := at - self.clock()) > 0:
            self._progress()
            self.sleep(min(POLL, left))

    def _recover(self) -> None:
        """Wait for every fault sent to recover, and the counts to cover the drill."""
        deadline = self.clock() + self.recover_wait
        while self.clock() < deadline:
            tl = self.timeline()
            covered = all(p[-1][0] >= self.window.ended for p in tl.counts.values() if p)
            if covered and all(o.recovered for o in d.match(tl, self.sent)):
                return
            self._progress(force=True)
            self.sleep(0.5)

    def _progress(self, force: bool = False) -> None:
        now = self.clock()
        if now - self.shown_at < SHOW_EVERY and not force:
            return
        self.shown_at = now
        window = d.Window(self.window.started, now, self.window.bases)
        record = d.summarize(self.timeline(), self.sent, window, self.settings)
        done = min(now, self.window.ended) - self.window.started
        faults = sum(w["faults"] for w in record["worlds"].values())
        downs = [(f["sent"], f["downtime"]) for w in record["worlds"].values()
                 for f in w["list"] if f["downtime"] is not None]
        last = d._secs(max(downs)[1]) if downs else "-"
        self._show(f"drill {done:.0f}/{self.settings['for']:.0f} s: {faults} fault(s),"
                   f" last down {last}, pace kept {d._pct(record['kept_faulted'])} (faulted)"
                   f" {d._pct(record['kept_others'])} (others)",
                   key=f"{faults} {last}")

    def _show(self, text: str, key: str | None = None) -> None:
        """In place on a terminal; elsewhere a line only when ``key`` (what changed)
        did, not one per second."""
        if self.tty:
            self.say(f"\r{text}\x1b[K")
            self.in_place = True
        elif (key or text) != self.shown:
            self.say(text + "\n")
        self.shown = key or text

    def _end_line(self) -> None:
        """Below a line drawn in place, before anything else is said."""
        if self.in_place:
            self.say("\n")
            self.in_place = False

    def _finish(self, interrupted: bool) -> tuple[dict, int]:
        self._end_line()
        record = d.summarize(self.timeline(), self.sent, self.window,
                             {**self.settings, "interrupted": interrupted})
        if self.problem is None:
            try:
                self.ask(self.control, {"verb": "drill", "summary": record})
            except RunError as exc:
                self.problem = f"the summary was not recorded in the history: {exc}"
        for line in d.lines(record):
            self.say(line + "\n")
        if self.problem is not None:
            self.say(f"drill: {self.problem}\n")
        return record, max(d.exit_status(record), self.problem is not None)
