"""``mwrun drill``, live (drillstart.py checks its arguments and starts it): measure
each world's fault-free pace, send the schedule's
faults through the supervisor's ``kill_world`` request (so it records each as a
drill, as ``mwrun kill-world --rank R`` does), show progress, wait for the last
faults to recover, then write the summary into the run's history and say it.

With ``--scale``, its scale operations are asked through the ``scale`` request (op
ids of the drill's own), never waited for: the loop goes on, following each with
``op`` requests until it ended, and faults pick their target when they are due, from
the status document then (drillscale.py). With ``--head``, the head itself is killed
now and then, and the drill waits for the new one (drillhead.py).

Everything it measures of the faults it reads back from the run's history through
mwrun.records, the same records ``mwrun report`` reads: the drill keeps no clock of
its own on the faults. What the history does not hold (each member's failed calls)
it reads from the status document about once a second (drillwatch.Watch, counted by
records.Ledger). Ctrl-C ends the drill, never the job: the summary so far is still
given.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from mwrun import runs
from mwrun.cli import drill as d
from mwrun.cli import drillrisk, drillsave, drillview
from mwrun.cli import drillscale as ds
from mwrun.cli.drillhead import HeadKill, HeadKills
from mwrun.cli.drillops import Operations
from mwrun.cli.drillwatch import Display, Watch
from mwrun.errors import RunError
from mwrun.records import (
    BASELINE_MAX,
    BASELINE_MIN,
    Sent,
    Shot,
    Timeline,
    Window,
    baseline,
    exit_status,
    match,
    pace_of,
    read,
    summarize,
)

POLL = 0.1  # seconds between looks at the clock while waiting for the next fault
BASELINE_WAIT = 60.0  # seconds the drill waits for BASELINE_MIN of fault-free pace
RECOVER_WAIT = 30.0  # seconds after the drill for its last faults to recover
SETTLE = 2.0  # seconds of beats after the last change, for the last counts to arrive


class Drill:
    def __init__(self, run_id: str, control: str, shots: Iterable[Shot | ds.Move | HeadKill],
                 settings: dict, *, say: Callable[[str], None], tty: bool, clock=time.time,
                 sleep=time.sleep, ask=runs.request, run_dir: Path | None = None,
                 recover_wait: float = RECOVER_WAIT, scales: list[ds.Scaling] | None = None,
                 op_prefix: str = "drill", hit: dict | None = None,
                 warn: Callable[[str], None] | None = None, heads: HeadKills | None = None):
        self.run_id = run_id
        self.control = control
        self.shots = shots  # drawn as the drill reaches them (d.schedule is lazy)
        self.settings = settings  # every, for, signal, seed, targets: into the record
        self.scales = scales or []
        if self.scales:  # the record says what the drill was asked to scale
            self.settings = {**settings, "scales": [str(s) for s in self.scales]}
        self.say = say
        self.clock = clock
        self.sleep = sleep
        self.ask = ask
        self.run_dir = run_dir or runs.run_path(run_id)
        self.recover_wait = recover_wait
        self.sent: list[Sent] = []
        self.window = Window(clock(), clock())
        self.problem: str | None = None  # why the drill ended early
        self.display = Display(say, tty)
        self.watch = Watch(run_id, control, ask, clock)
        self.operations = Operations(op_prefix, ask, control, clock, self.watch.still_live)
        self.changed_at = float("-inf")  # the last fault was sent or operation ended
        self.hit = hit or {}  # world -> the members it may hit (drillrisk: what it costs)
        self.warn = warn or (lambda text: say(f"mwrun: {text}\n"))
        self.heads = heads  # --head: the head's kills (drillhead.py), else None

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

    def timeline(self) -> Timeline:
        return read(self.run_dir, self.run_id)

    def _measure(self) -> None:
        """Wait for BASELINE_MIN of fault-free pace in every world with traffic (every
        world the run has now: the history also names those a scale-down removed)."""
        deadline = self.clock() + BASELINE_WAIT
        while True:
            now = self.clock()
            tl = self.timeline()
            there = self.watch.worlds_now()
            worlds = [w for w in tl.worlds if there is None or w in there]
            bases = {w: b for w in worlds if (b := baseline(tl, w, now)) is not None}
            waiting = [w for w in worlds if w not in bases]
            if not waiting or now >= deadline:
                break
            self.display.show(f"drill: measuring each world's fault-free pace ({len(bases)}"
                              f" of {len(worlds)} worlds steady for {BASELINE_MIN:.0f} s)")
            self.sleep(0.5)
        self.display.end_line()
        if waiting:
            self.say(f"drill: no fault-free pace for {', '.join(waiting)} (no steady traffic"
                     f" for {BASELINE_MIN:.0f} s): its pace kept is not measured\n")
        faults, moves = d.expected(self.settings["every"], self.settings["for"], self.scales)
        planned = f"about {faults:.0f} fault(s)" + (f" and {moves:.0f} scale operation(s)"
                                                    if self.scales else "")
        if bases:
            paces = ", ".join(f"{w} {p:.2f}" for w, (a, b) in bases.items()
                              if (p := pace_of(tl, w, a, b)) is not None)
            self.say(f"drill: fault-free pace (calls/s, over up to {BASELINE_MAX:.0f} s"
                     f" before the drill): {paces}; {planned} over"
                     f" {self.settings['for']:g} s\n")
        if self.scales:
            self.say(f"drill: scale operations of {', '.join(map(str, self.scales))};"
                     " worlds that appear meanwhile have no fault-free pace: they are left"
                     " out of the pace figures\n")
        self.window = Window(now, now + self.settings["for"], bases)
        doc = self.watch.look(force=True)  # the counts the drill's are measured from
        for line in drillrisk.risks(doc, self.hit, faults):  # with the members' traffic
            self.warn(f"drill: warning: {line}")

    def _shoot(self) -> None:
        for shot in self.shots:
            self._wait_until(self.window.started + shot.at)
            if isinstance(shot, ds.Move):
                self._move(shot)
            elif isinstance(shot, HeadKill):
                assert self.heads is not None, "drillstart gives head kills their HeadKills"
                self.heads.kill(self._wait_until, self.display.show, self.window.ended)
            else:
                self._fault(shot)
        self._wait_until(self.window.ended)

    def _fault(self, shot: Shot) -> None:
        if self.scales:  # the membership moves: whom to hit is read now
            doc = self.watch.look(force=True)
            down = {w for w, _, _, _ in self.watch.pending()}
            chosen = ds.choose(shot.draw, ds.live_targets(doc, self.settings["targets"],
                                                          self.operations.busy(), down))
            if chosen is None:
                self.sent.append(Sent(shot, self.clock(), skipped="no member may be hit"
                                        " now (none in a healthy world of its own that no"
                                        " scale operation is changing)"))
                return
            shot = Shot(shot.at, *chosen, shot.draw)
        t = self.clock()
        try:
            self.ask(self.control, {"verb": "kill_world", "world": shot.world,
                                    "rank": shot.rank, "signal": self.settings["signal"]})
        except RunError as exc:
            self.watch.still_live()
            self.sent.append(Sent(shot, t, skipped=str(exc)))  # e.g. still restarting
            return
        self.sent.append(Sent(shot, t))
        self.watch.struck.append((shot.world, shot.process,
                                  self.watch.ledger.fault(shot.world), t))
        self.changed_at = t

    def _move(self, move: ds.Move) -> None:
        """Ask the head for the scale operation; never wait for it here."""
        doc = self.watch.look(force=True)
        if self.operations.move(move, doc, {p for _, p, _, _ in self.watch.pending()}):
            self.changed_at = max(self.changed_at, self.clock())

    def _tick(self) -> None:
        """Beside the schedule: the operations followed, the counts read (from the
        drill's start on: see _measure)."""
        if self.operations.follow():
            self.changed_at = max(self.changed_at, self.clock())
        if self.watch.doc is not None:
            self.watch.look()

    def _wait_until(self, at: float) -> None:
        while (left := at - self.clock()) > 0:
            self._tick()
            self._progress()
            self.sleep(min(POLL, left))

    def _recover(self) -> None:
        """Wait for every fault sent to recover, every scale operation to end, the
        counts to cover the drill and the last beats after the last change to come."""
        deadline = self.clock() + self.recover_wait
        while True:
            now = self.clock()
            late = self.operations.late()
            if now >= max(deadline, late):
                return
            self._tick()
            tl = self.timeline()
            covered = all(p[-1][0] >= self.window.ended for p in tl.counts.values() if p)
            outcomes = match(tl, self.sent)
            last = max([self.changed_at, *(o.fault.back for o in outcomes
                                           if o.fault is not None and o.fault.back is not None)])
            if covered and not self.operations.running and now >= last + SETTLE and \
                    all(o.recovered for o in outcomes):
                return
            self._progress(force=True)
            self.sleep(0.5)

    def _progress(self, force: bool = False) -> None:
        now = self.clock()
        if not self.display.due(now, force):
            return
        window = Window(self.window.started, now, self.window.bases)
        record = summarize(self.timeline(), self.sent, window, self.settings)
        done = min(now, self.window.ended) - self.window.started
        self.display.show(*drillview.progress(
            record, done, self.settings["for"], len(self.operations.records),
            len(self.operations.running), bool(self.scales)))

    def _finish(self, interrupted: bool) -> tuple[dict, int]:
        self.display.end_line()
        if self.problem is None and self.watch.ledger.looks:
            with contextlib.suppress(RunError, KeyboardInterrupt):
                self.watch.look(force=True)  # the latest counts
        record = summarize(self.timeline(), self.sent, self.window,
                             {**self.settings, "interrupted": interrupted},
                             ops=self.operations.records if self.scales else None,
                             watch=self.watch.ledger.result(), skipped_ops=self.operations.skipped)
        if self.heads is not None:
            record["head"] = self.heads.record()
        self.problem = drillsave.deliver(record, self.problem, self.ask, self.control, self.run_id,
                               self.run_dir, self.clock)
        for line in drillview.lines(record):
            self.say(line + "\n")
        if self.problem is not None:
            self.say(f"drill: {self.problem}\n")
        return record, max(exit_status(record), self.problem is not None)
