"""``mwrun drill``, live: measure each world's fault-free pace, send the schedule's
faults through the supervisor's ``kill_world`` request (so it records each as a
drill, as ``mwrun kill-world --rank R`` does), show progress, wait for the last
faults to recover, then write the summary into the run's history and say it.

With ``--scale``, its scale operations are asked through the ``scale`` request (op
ids of the drill's own), never waited for: the loop goes on, following each with
``op`` requests until it ended, and faults pick their target when they are due, from
the status document then (drillscale.py).

Everything it measures of the faults it reads back from the run's history
(timeline.py), the same records ``mwrun report`` reads: the drill keeps no clock of
its own on the faults. What the history does not hold (each member's failed calls)
it reads from the status document about once a second (drillscale.Ledger). Ctrl-C
ends the drill, never the job: the summary so far is still given.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from mwrun import runs
from mwrun.cli import drill as d
from mwrun.cli import drillrisk, timeline
from mwrun.cli import drillscale as ds
from mwrun.errors import RunError, UsageError
from mwrun.schema import HISTORY, PLAN, OpState
from mwrun.schema import Event as E

POLL = 0.1  # seconds between looks at the clock while waiting for the next fault
SHOW_EVERY = 1.0  # seconds between progress updates (each reads the history)
BASELINE_WAIT = 60.0  # seconds the drill waits for BASELINE_MIN of fault-free pace
RECOVER_WAIT = 30.0  # seconds after the drill for its last faults to recover
LOOK_EVERY = 1.0  # seconds between readings of the status document (about a beat)
OP_POLL = 0.2  # seconds between looks at a scale operation under way
OP_WAIT = 120.0  # seconds a scale operation may take (a drain waits drain_timeout)
SETTLE = 2.0  # seconds of beats after the last change, for the last counts to arrive


def start(run: str | None, every: str, duration: str, worlds: str | None, sig: str,
          seed: int | None, *, warn, say, scale: tuple[str, ...] = ()) -> int:
    """The command line's drill: checked arguments, the schedule, the drill; its exit
    status. Every mistake (numbers, signal, world, --scale, no live run) is one
    UsageError."""
    mean, length = d.seconds("--every", every), d.seconds("--for", duration)
    sig = sig.upper().removeprefix("SIG")
    if sig not in d.SIGNALS:
        raise UsageError(f"--signal can be {', '.join(d.SIGNALS)}, not {sig}")
    only = [w.strip() for w in worlds.split(",") if w.strip()] if worlds is not None else None
    if only == []:  # --worlds "": naming none is not asking for all of them
        raise UsageError(f"--worlds names no world ({worlds!r}): give WORLD,... or leave it"
                         " out to drill every world")
    scales = ds.parse_scales(scale)
    try:
        run_id, state = runs.find(run, warn=warn)
        if not runs.is_live(state):
            raise RunError(f"run {run_id} is not running (it is {state.get('state')})")
        doc = runs.request(state["control"], {"verb": "status"})["status"]
    except RunError as exc:
        raise UsageError(str(exc)) from None
    ds.check_scales(doc, scales)
    try:
        hit = d.targets(doc, only)
    except UsageError:
        if not scales or any(w not in {x["name"] for x in doc["worlds"]} for w in only or []):
            raise
        hit = {}  # the membership changes: someone may be hit later; each fault looks
    shots = d.schedule(seed, mean, length, hit, scales)
    settings = {"every": mean, "for": length, "signal": sig, "seed": seed, "targets": only}
    _, code = Drill(run_id, state["control"], shots, settings, tty=sys.stdout.isatty(),
                    say=say, recover_wait=RECOVER_WAIT + _hang_wait(run_id, sig),
                    scales=scales, op_prefix=f"drill-{secrets.token_hex(3)}", hit=hit,
                    warn=warn).run()
    return code


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
        self.ledger = ds.Ledger()
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
        return {w["name"] for w in doc["worlds"] if w["state"] not in ds.GOING}

    def pending(self) -> list[tuple[str, str, int | None, float]]:
        """The faults sent whose break no document has shown yet (for at most
        KILL_LEADS): the status may still show their world healthy, their member
        serving (as the ledger read the latest document)."""
        now = self.clock()
        self.struck = [(w, p, breaks, t) for w, p, breaks, t in self.struck
                       if now - t < d.KILL_LEADS and (life := self.ledger.now.get(w))
                       is not None and (breaks is None or life.breaks <= breaks)]
        return self.struck


class Operations:
    """The drill's scale operations: each asked of the head (never waited for), then
    followed, every OP_POLL, until it ends; as the head last told them."""

    def __init__(self, prefix: str, ask, control: str, clock, still_live):
        self.prefix = prefix  # the drill's op ids: PREFIX-1, PREFIX-2, ...
        self.ask, self.control, self.clock, self.still_live = ask, control, clock, still_live
        self.records: list[dict] = []  # every operation asked
        self.running: dict[str, dict] = {}  # op id -> its record, while under way
        self.skipped: list[str] = []  # operations not asked, and why
        self.polled_at = float("-inf")

    def _record(self, move: ds.Move, count: int, desired: int, at: float) -> dict:
        op = f"{self.prefix}-{len(self.records) + 1}"
        record = {"op": op, "process": move.process, "asked": round(at, 4),
                  "from": desired, "to": count, "state": OpState.RUNNING.value,
                  "error": None, "changes": []}
        self.records.append(record)
        return record

    def move(self, move: ds.Move, doc: dict, hit: set[str]) -> bool:
        """Ask the head for ``move`` as the run is now (``hit``: replicas just faulted);
        whether it ended at once (refused, or nothing to change)."""
        at = self.clock()
        under_way = [op["op"] for op in self.running.values() if op["process"] == move.process]
        found = ds.move_count(doc, move, under_way, hit)
        if isinstance(found, str):
            self.skipped.append(f"{ds.clock_text(at)} {move.process}: {found}")
            return False
        record = self._record(move, *found, at)
        op = record["op"]
        try:
            reply = self.ask(self.control, {"verb": "scale", "op": op,
                                            "changes": [f"{move.process}={found[0]}"]})
        except RunError as exc:
            self.still_live()
            record.update(state="refused", error=str(exc))
            return False
        if reply.get("repeated"):  # another drill used this id: nothing was changed
            record.update(state="refused", error=f"op id {op} was used already")
            return False
        record.update(state=reply["state"], changes=reply["changes"])
        if record["state"] == OpState.RUNNING.value:
            self.running[op] = record
            self.polled_at = self.clock()  # asked again OP_POLL from now
            return False
        return True

    def follow(self) -> bool:
        """Each operation under way, as the head tells it now; whether one ended."""
        now = self.clock()
        if not self.running or now - self.polled_at < OP_POLL:
            return False
        self.polled_at, ended = now, False
        for op, record in list(self.running.items()):
            try:
                reply = self.ask(self.control, {"verb": "op", "op": op})
            except RunError as exc:
                self.still_live()
                record["error"] = str(exc)  # asked again next time
                continue
            record.update(state=reply["state"], changes=reply["changes"], error=None)
            if record["state"] != OpState.RUNNING.value:
                del self.running[op]
                ended = True
        return ended

    def busy(self) -> set[str]:
        """The replicas an operation of the drill's is adding or retiring now."""
        return {c["process"] for op in self.running.values() for c in op["changes"]}

    def late(self) -> float:
        """When the last operation under way has had its time (OP_WAIT)."""
        return max((op["asked"] + OP_WAIT for op in self.running.values()), default=0.0)


class Drill:
    def __init__(self, run_id: str, control: str, shots: Iterable[d.Shot | ds.Move],
                 settings: dict, *, say: Callable[[str], None], tty: bool, clock=time.time,
                 sleep=time.sleep, ask=runs.request, run_dir: Path | None = None,
                 recover_wait: float = RECOVER_WAIT, scales: list[ds.Scaling] | None = None,
                 op_prefix: str = "drill", hit: dict | None = None,
                 warn: Callable[[str], None] | None = None):
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
        self.sent: list[d.Sent] = []
        self.window = d.Window(clock(), clock())
        self.problem: str | None = None  # why the drill ended early
        self.display = Display(say, tty)
        self.watch = Watch(run_id, control, ask, clock)
        self.operations = Operations(op_prefix, ask, control, clock, self.watch.still_live)
        self.changed_at = float("-inf")  # the last fault was sent or operation ended
        self.hit = hit or {}  # world -> the members it may hit (drillrisk: what it costs)
        self.warn = warn or (lambda text: say(f"mwrun: {text}\n"))

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
        """Wait for BASELINE_MIN of fault-free pace in every world with traffic (every
        world the run has now: the history also names those a scale-down removed)."""
        deadline = self.clock() + BASELINE_WAIT
        while True:
            now = self.clock()
            tl = self.timeline()
            there = self.watch.worlds_now()
            worlds = [w for w in tl.worlds if there is None or w in there]
            bases = {w: b for w in worlds if (b := d.baseline(tl, w, now)) is not None}
            waiting = [w for w in worlds if w not in bases]
            if not waiting or now >= deadline:
                break
            self.display.show(f"drill: measuring each world's fault-free pace ({len(bases)}"
                              f" of {len(worlds)} worlds steady for {d.BASELINE_MIN:.0f} s)")
            self.sleep(0.5)
        self.display.end_line()
        if waiting:
            self.say(f"drill: no fault-free pace for {', '.join(waiting)} (no steady traffic"
                     f" for {d.BASELINE_MIN:.0f} s): its pace kept is not measured\n")
        faults, moves = d.expected(self.settings["every"], self.settings["for"], self.scales)
        planned = f"about {faults:.0f} fault(s)" + (f" and {moves:.0f} scale operation(s)"
                                                    if self.scales else "")
        if bases:
            paces = ", ".join(f"{w} {p:.2f}" for w, (a, b) in bases.items()
                              if (p := d.pace_of(tl, w, a, b)) is not None)
            self.say(f"drill: fault-free pace (calls/s, over up to {d.BASELINE_MAX:.0f} s"
                     f" before the drill): {paces}; {planned} over"
                     f" {self.settings['for']:g} s\n")
        if self.scales:
            self.say(f"drill: scale operations of {', '.join(map(str, self.scales))};"
                     " worlds that appear meanwhile have no fault-free pace: they are left"
                     " out of the pace figures\n")
        self.window = d.Window(now, now + self.settings["for"], bases)
        doc = self.watch.look(force=True)  # the counts the drill's are measured from
        for line in drillrisk.risks(doc, self.hit, faults):  # with the members' traffic
            self.warn(f"drill: warning: {line}")

    def _shoot(self) -> None:
        for shot in self.shots:
            self._wait_until(self.window.started + shot.at)
            if isinstance(shot, ds.Move):
                self._move(shot)
            else:
                self._fault(shot)
        self._wait_until(self.window.ended)

    def _fault(self, shot: d.Shot) -> None:
        if self.scales:  # the membership moves: whom to hit is read now
            doc = self.watch.look(force=True)
            down = {w for w, _, _, _ in self.watch.pending()}
            chosen = ds.choose(shot.draw, ds.live_targets(doc, self.settings["targets"],
                                                          self.operations.busy(), down))
            if chosen is None:
                self.sent.append(d.Sent(shot, self.clock(), skipped="no member may be hit"
                                        " now (none in a healthy world of its own that no"
                                        " scale operation is changing)"))
                return
            shot = d.Shot(shot.at, *chosen, shot.draw)
        t = self.clock()
        try:
            self.ask(self.control, {"verb": "kill_world", "world": shot.world,
                                    "rank": shot.rank, "signal": self.settings["signal"]})
        except RunError as exc:
            self.watch.still_live()
            self.sent.append(d.Sent(shot, t, skipped=str(exc)))  # e.g. still restarting
            return
        self.sent.append(d.Sent(shot, t))
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
            outcomes = d.match(tl, self.sent)
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
        window = d.Window(self.window.started, now, self.window.bases)
        record = d.summarize(self.timeline(), self.sent, window, self.settings)
        done = min(now, self.window.ended) - self.window.started
        faults = sum(w["faults"] for w in record["worlds"].values())
        downs = [(f["sent"], f["downtime"]) for w in record["worlds"].values()
                 for f in w["list"] if f["downtime"] is not None]
        last = d._secs(max(downs)[1]) if downs else "-"
        ops, running = self.operations.records, self.operations.running
        shown = f", {len(ops)} scale op(s) ({len(running)} under way)" if self.scales else ""
        self.display.show(
            f"drill {done:.0f}/{self.settings['for']:.0f} s: {faults} fault(s){shown},"
            f" last down {last}, pace kept {d._pct(record['kept_faulted'])} (faulted)"
            f" {d._pct(record['kept_others'])} (others)",
            key=f"{faults} {last} {len(ops)} {len(running)}")

    def _finish(self, interrupted: bool) -> tuple[dict, int]:
        self.display.end_line()
        if self.problem is None and self.watch.ledger.looks:
            with contextlib.suppress(RunError, KeyboardInterrupt):
                self.watch.look(force=True)  # the latest counts
        record = d.summarize(self.timeline(), self.sent, self.window,
                             {**self.settings, "interrupted": interrupted},
                             ops=self.operations.records if self.scales else None,
                             watch=self.watch.ledger.result(), skipped_ops=self.operations.skipped)
        self.problem = deliver(record, self.problem, self.ask, self.control, self.run_id,
                               self.run_dir, self.clock)
        for line in d.lines(record):
            self.say(line + "\n")
        if self.problem is not None:
            self.say(f"drill: {self.problem}\n")
        return record, max(d.exit_status(record), self.problem is not None)


def deliver(record: dict, problem: str | None, ask, control: str, run_id: str,
            run_dir: Path, clock) -> str | None:
    """The drill's record into the run's history: through the head, or, when the run
    ended under the drill (``problem``) or before it could be asked, appended by the
    drill itself, saying so (``run_ended``), so that the history and ``report`` hold
    every drill. The drill's problem then, if any."""
    if problem is not None:
        record["run_ended"] = problem
    try:
        ask(control, {"verb": "drill", "summary": record})
        return problem
    except RunError as exc:
        if runs.is_live(runs.read_state(run_id) or {}):
            return f"the summary was not recorded in the history: {exc}"
    record["run_ended"] = problem = problem or f"run {run_id} ended before the drill did"
    # No head writes there any more; one write, appended, is whole even beside a
    # head's last lines.
    line = json.dumps({"t": round(clock(), 4), "event": E.DRILL, **record}) + "\n"
    try:
        fd = os.open(run_dir / HISTORY, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        return f"{problem}; the summary was not recorded in the history: {exc}"
    return problem
