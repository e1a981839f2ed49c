"""The processes' part of the supervisor's decisions: each process's record and its own
state machine (schema.ProcessState), driven by the supervisor; what the library tells
of one process (hello, heartbeats, bye, a hung abort); and hang detection.

It writes only process records (the worlds are worldbook's); it acts on processes
through the supervisor's host and tells each change as an event. A process that
leaves the job (a retired replica) is forgotten; one added later under the same name
goes on counting incarnations where the last one stopped (fencing never meets the
same number twice).
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from mwrun.errors import StartError
from mwrun.head.decide import events as ev
from mwrun.head.decide import hangs
from mwrun.head.decide.deadlines import Timer, Timers
from mwrun.head.decide.events import Event, Why
from mwrun.head.decide.moves import checked
from mwrun.head.decide.records import ProcessRecord, Worker
from mwrun.plan import nccl as nccl_rules
from mwrun.plan.placement import ProcessPlan
from mwrun.schema import PROCESS_MOVES
from mwrun.schema import ProcessState as P

TICK = 0.5  # seconds between the awake clock's readings, and looks at a silent process
LOOKED = (P.STARTING, P.RUNNING, P.UNRESPONSIVE)  # whose silence is judged (hangs.py)


class Hands(Protocol):
    """What the processes' part acts through (the supervisor's host)."""

    def now(self) -> float: ...
    def wall(self) -> float: ...
    def spawn(self, name: str, generations: dict[str, int], restarts: int,
              incarnation: int) -> int | None: ...
    def signal(self, name: str, sig: int, why: Why) -> None: ...
    def probe(self, name: str) -> str | None: ...


class Processes:
    def __init__(self, plans: dict[str, ProcessPlan], host: Hands,
                 emit: Callable[[Event], None], timers: Timers, capture_wait: float = 0.0):
        self.host, self.emit = host, emit
        # A member declared hung is killed once its world's stacks are captured
        # (postmortem.py says so: ``kill_hung``), or this long after at the latest.
        self.capture_wait = capture_wait
        # The head's one heap: (RESTART, name) its restart, (LOOK, name) when its
        # silence is next judged, (HANG_KILL, name) its hang kill; AWAKE, the clock.
        self.timers = timers
        timers.handle(Timer.HANG_KILL, lambda name, now: self._hang_kill(name))
        self.records = {name: ProcessRecord(p) for name, p in plans.items()}
        # Processes per state, kept by move: "is anything left?" costs the same at 10
        # processes as at 1,000.
        self.tally: Counter = Counter({P.STARTING: len(self.records)})
        self.incarnations: dict[str, int] = {}  # name -> starts made, across its records
        self.nccl_warned: set[str] = set()  # known-bad NCCL versions warned of once
        # Started and not heard from yet (no hello): whose worlds' stores the loop looks
        # into for a plain group, without a look at every world on every tick.
        self.unheard: set[str] = set(self.records)
        self.clock = hangs.AwakeClock(host.now(), TICK)  # what heartbeats are judged on
        timers.set((Timer.AWAKE, ""), host.now() + TICK)

    def say(self, text: str) -> None:
        self.emit(ev.Said(text))

    def move(self, rec: ProcessRecord, state: P) -> None:
        """Every change of a process's state goes here, checked against its machine;
        the tally follows it."""
        old = rec.state
        rec.state = checked(PROCESS_MOVES, f"process {rec.plan.name}", old, state)
        self.tally[old] -= 1
        self.tally[state] += 1

    def add(self, plan: ProcessPlan) -> ProcessRecord:
        """A process that joins the job: to be started (RESTARTING is expected and not
        alive: its worlds admit its next start, not a start it never made)."""
        rec = ProcessRecord(plan, state=P.RESTARTING,
                            worker=Worker(incarnation=self.incarnations.get(plan.name, 0)))
        self.records[plan.name] = rec
        self.tally[P.RESTARTING] += 1
        return rec

    def forget(self, name: str) -> None:
        rec = self.records.pop(name)
        self.tally[rec.state] -= 1
        self.unheard.discard(name)
        for kind in (Timer.RESTART, Timer.LOOK, Timer.HANG_KILL):
            self.timers.clear((kind, name))

    def spawn(self, rec: ProcessRecord, generations: dict[str, int]) -> str | None:
        """Start ``rec`` (again); why it could not, or None."""
        name = rec.plan.name
        try:
            pid = self.host.spawn(name, generations, rec.restarts, rec.worker.incarnation + 1)
        except StartError as exc:
            self.move(rec, P.STARTING)
            return str(exc)
        now = self.host.now()
        self.move(rec, P.STARTING)  # RESTARTING -> STARTING, or a first start
        # A new start is a new Worker: nothing of the last one's is carried, or reset.
        rec.worker = Worker(rec.worker.incarnation + 1, now, self.host.wall(), generations, pid)
        rec.restart_at = None
        self.incarnations[name] = rec.worker.incarnation
        self.unheard.add(name)
        self.timers.clear((Timer.RESTART, name))
        self.timers.clear((Timer.HANG_KILL, name))
        self.timers.set((Timer.LOOK, name), now + TICK)
        self.emit(ev.Spawned(name, pid, rec.restarts) if pid is not None else
                  ev.ProcessChanged(name, P.STARTING, rec.why))  # its pid comes later
        return None

    def signal(self, name: str, sig: int, why: Why) -> None:
        self.host.signal(name, sig, why)
        worker = self.records[name].worker
        worker.drilled |= why is Why.DRILL
        if sig in hangs.STOPS:  # /proc is read at the next tick, not beats later
            worker.stop_sent_at = self.awake()
            look, soon = (Timer.LOOK, name), self.host.now() + TICK
            if look in self.timers and soon < (self.timers.when(look) or soon):
                self.timers.set(look, soon)
        self.emit(ev.Signalled(name, signal.Signals(sig), why))

    # -- what the library tells of one process -----------------------------------------

    def awaits_pid(self, name: object) -> bool:
        """Whether ``name``'s start is made and its pid not told yet (a warm start, here
        or on an agent's host): what it says meanwhile is held (early.py)."""
        rec = self.records.get(name) if isinstance(name, str) else None
        return rec is not None and rec.state is P.STARTING and rec.worker.pid is None

    def live(self, name: str, pid: int) -> ProcessRecord | None:
        """The record of process ``name`` if ``pid`` is its current start (a message from
        an earlier incarnation, or a forgotten process, is none)."""
        rec = self.records.get(name)
        return rec if rec is not None and rec.worker.pid == pid else None

    def hello(self, rec: ProcessRecord, interval: float, nccl: str | None) -> None:
        worker = rec.worker
        worker.said_hello, worker.beat_every, worker.last_beat = True, interval, self.awake()
        self.unheard.discard(rec.plan.name)
        self._look_after(rec, worker.last_beat)
        rec.nccl, warning = nccl, nccl_rules.warning(rec.plan.name, nccl, self.nccl_warned)
        if warning is not None:  # once per known-bad version, at its first hello
            self.nccl_warned.add(str(nccl))
            self.say(warning)

    def heartbeat(self, rec: ProcessRecord, next_in: object) -> None:
        """A beat, and the most seconds to its next one, as it says (hangs.beat_gap)."""
        worker = rec.worker
        worker.last_beat, worker.beat_gap = self.awake(), hangs.beat_gap(next_in,
                                                                         worker.beat_every)
        self.responsive(rec, None)
        self._look_after(rec, worker.last_beat)

    def _look_after(self, rec: ProcessRecord, awake: float) -> None:
        """A beat (or a hello) moves the next look at its silence to when the next beat
        is overdue: a process that beats on time is never looked at, and no tick costs
        anything per process (one heap entry per beat, as the beat itself costs)."""
        if rec.state in LOOKED:
            self.timers.set((Timer.LOOK, rec.plan.name),
                            self.host.now() + hangs.next_look(rec.worker, rec.plan.hang_timeout,
                                                              awake, TICK))

    # -- hangs ------------------------------------------------------------------------

    def tick(self, name: str, now: float) -> None:
        """The awake clock is read at least once a TICK: a longer gap is a stall."""
        self.awake()
        self.timers.set((Timer.AWAKE, name), now + TICK)

    def look(self, name: str, now: float) -> None:
        """Its silence judged now (LOOK came due), and the next look set."""
        rec = self.records.get(name)
        if rec is None or rec.state not in LOOKED:
            return  # hung, draining or ended: looked at again from its next start
        awake = self.awake()
        self.check_hung(rec, awake)
        self._look_after(rec, awake)

    def awake(self) -> float:
        """The awake clock (see hangs.py); says so when the supervisor finds it stalled."""
        awake, stalled = self.clock.read(self.host.now())
        if stalled:
            starved = self.clock.starved
            why = f"starved: its threads waited {starved:.1f}s for a CPU" \
                if starved is not None and starved >= stalled / 2 else "stopped or busy"
            self.say(f"the supervisor itself was not running for {stalled:.1f}s ({why});"
                     " that silence counts against no process")
        return awake

    def check_hung(self, rec: ProcessRecord, now: float) -> None:
        """``now`` is awake time: the supervisor's own stalls never count as silence."""
        late, hung = hangs.judge(rec.worker, rec.plan.hang_timeout, now,
                                 lambda: self.host.probe(rec.plan.name) == "stopped")
        self.responsive(rec, late)
        if hung is not None:
            self.hang(rec, hung)

    def responsive(self, rec: ProcessRecord, late: str | None) -> None:
        """Show at once that a running process stopped answering (``late``: hangs.LATE
        or hangs.STOPPED), long before it is declared hung; and that it answers again."""
        if late is not None and rec.state is P.RUNNING:
            self.move(rec, P.UNRESPONSIVE)  # RUNNING -> UNRESPONSIVE
            rec.why = f"{rec.plan.name} is unresponsive ({late})"
        elif late is None and rec.state is P.UNRESPONSIVE:
            self.move(rec, P.RUNNING)  # UNRESPONSIVE -> RUNNING
            rec.why = f"{rec.plan.name} responds again"
        else:
            return
        self.emit(ev.ProcessChanged(rec.plan.name, rec.state, rec.why))
        self.say(rec.why)

    def hang(self, rec: ProcessRecord, why: str) -> None:
        """Declared hung: its stacks, and its worlds' other members', are captured
        (the Hung event starts it) before it is killed, within ``capture_wait``."""
        self.move(rec, P.HUNG)  # STARTING|RUNNING|UNRESPONSIVE -> HUNG
        name = rec.plan.name
        wait = self.capture_wait
        then = f"capturing stacks for at most {wait:g}s, then killing it" if wait \
            else "killing it"
        rec.worker.hung, rec.why = why, f"{name} hung: {why}; {then}"
        self.emit(ev.Hung(name, why))
        self.say(rec.why)
        if wait:
            self.timers.set((Timer.HANG_KILL, name), self.host.now() + wait)
        else:
            self.signal(name, signal.SIGKILL, Why.HANG)

    def kill_hung(self, name: str) -> None:
        """The hang kill a capture held back: now (captured, or its wait is over); none
        for one that ended meanwhile (a restart clears its deadline)."""
        if (Timer.HANG_KILL, name) in self.timers:
            self.timers.clear((Timer.HANG_KILL, name))
            self._hang_kill(name)

    def _hang_kill(self, name: str) -> None:
        rec = self.records.get(name)
        if rec is not None and rec.state is P.HUNG:
            self.signal(name, signal.SIGKILL, Why.HANG)
