"""What a process's beats say, and hang detection: the awake clock (hangs.py: a stalled
supervisor fools no one), each beat and hello moving the process's next look at its
silence (a LOOK timer), a look judging it (unresponsive at once, hung later), and a
hung process's kill held back while its stacks are captured.

It moves no state: what it judges (late, hung) is marked on the process's Worker and
reconciled (reconcile.py); a process that beats on time costs one heap entry per beat
and is never looked at.
"""

from __future__ import annotations

import signal

from mwrun.head.decide import hangs
from mwrun.head.decide.deadlines import Timer, next_on_grid, on_grid
from mwrun.head.decide.events import Why
from mwrun.head.decide.processbook import LOOKED, TICK, Processes
from mwrun.head.decide.reconcile import ProcessReconciler
from mwrun.head.decide.records import ProcessRecord
from mwrun.plan import nccl as nccl_rules
from mwrun.schema import ProcessState as P


class Beats:
    def __init__(self, processes: Processes, settle: ProcessReconciler,
                 capture_wait: float = 0.0):
        self.processes, self.settle, self.host = processes, settle, processes.host
        # A member declared hung is killed once its world's stacks are captured
        # (postmortem.py says so: ``kill_hung``), or this long after at the latest.
        self.capture_wait = capture_wait
        self.timers = timers = processes.timers
        timers.handle(Timer.HANG_KILL, lambda name, now: self._hang_kill(name))
        self.nccl_warned: set[str] = set()  # known-bad NCCL versions warned of once
        self.clock = hangs.AwakeClock(self.host.now(), TICK)  # what beats are judged on
        timers.set((Timer.AWAKE, ""), next_on_grid(self.host.now(), TICK))

    def signal(self, name: str, sig: int, why: Why) -> None:
        """A signal sent (a drill's, say): a STOP is looked for in /proc at the next
        tick, not beats later."""
        self.processes.signal(name, sig, why)
        if sig in hangs.STOPS:
            self.processes.records[name].worker.stop_sent_at = self.awake()
            look, soon = (Timer.LOOK, name), next_on_grid(self.host.now(), TICK)
            if look in self.timers and soon < (self.timers.when(look) or soon):
                self.timers.set(look, soon)

    def hello(self, rec: ProcessRecord, interval: float, nccl: str | None) -> None:
        worker = rec.worker
        worker.said_hello, worker.beat_every, worker.last_beat = True, interval, self.awake()
        self.processes.unheard.discard(rec.plan.name)
        self._look_after(rec, worker.last_beat)
        rec.nccl, warning = nccl, nccl_rules.warning(rec.plan.name, nccl, self.nccl_warned)
        if warning is not None:  # once per known-bad version, at its first hello
            self.nccl_warned.add(str(nccl))
            self.processes.say(warning)

    def heartbeat(self, rec: ProcessRecord, next_in: object, hold: object = None) -> None:
        """A beat, the most seconds to its next one, as it says (hangs.beat_gap), and the
        most its beats wait on the way (hangs.beat_hold)."""
        worker = rec.worker
        worker.last_beat, worker.beat_gap = self.awake(), hangs.beat_gap(next_in,
                                                                         worker.beat_every)
        worker.beat_hold = hangs.beat_hold(hold, worker.beat_gap)
        self.responsive(rec, None)
        self._look_after(rec, worker.last_beat)

    def _look_after(self, rec: ProcessRecord, awake: float) -> None:
        """A beat (or a hello) moves the next look at its silence to when the next beat
        is overdue: a process that beats on time is never looked at, and no tick costs
        anything per process (one heap entry per beat, as the beat itself costs)."""
        if rec.state in LOOKED:  # on the tick's grid: the looks due together, one wakeup
            wait = hangs.next_look(rec.worker, rec.plan.hang_timeout, awake, TICK)
            self.timers.set((Timer.LOOK, rec.plan.name), on_grid(self.host.now() + wait, TICK))

    def tick(self, name: str, now: float) -> None:
        """The awake clock is read at least once a TICK: a longer gap is a stall."""
        self.awake()
        self.timers.set((Timer.AWAKE, name), next_on_grid(now, TICK))

    def look(self, name: str, now: float) -> None:
        """Its silence judged now (LOOK came due), and the next look set."""
        rec = self.processes.records.get(name)
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
            self.processes.say(f"the supervisor itself was not running for {stalled:.1f}s ({why});"
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
        or hangs.STOPPED), long before it is declared hung; and that it answers again.
        Marked, and reconciled only when it changed (a beat on time costs nothing)."""
        if rec.worker.late == late:
            return
        rec.worker.late = late
        old = rec.state
        if self.settle.reconcile(rec) is not None and P.UNRESPONSIVE in (old, rec.state):
            self.processes.say(rec.why)  # RUNNING <-> UNRESPONSIVE

    def hang(self, rec: ProcessRecord, why: str) -> None:
        """Declared hung: its stacks, and its worlds' other members', are captured
        (the Hung event starts it) before it is killed, within ``capture_wait``."""
        name = rec.plan.name
        wait = self.capture_wait
        then = f"capturing stacks for at most {wait:g}s, then killing it" if wait \
            else "killing it"
        rec.worker.hung, rec.why = why, f"{name} hung: {why}; {then}"
        self.settle.reconcile(rec)  # STARTING|RUNNING|UNRESPONSIVE -> HUNG, told
        self.processes.say(rec.why)
        if wait:
            self.timers.set((Timer.HANG_KILL, name), self.host.now() + wait)
        else:
            self.processes.signal(name, signal.SIGKILL, Why.HANG)

    def kill_hung(self, name: str) -> None:
        """The hang kill a capture held back: now (captured, or its wait is over); none
        for one that ended meanwhile (a restart clears its deadline)."""
        if (Timer.HANG_KILL, name) in self.timers:
            self.timers.clear((Timer.HANG_KILL, name))
            self._hang_kill(name)

    def _hang_kill(self, name: str) -> None:
        rec = self.processes.records.get(name)
        if rec is not None and rec.state is P.HUNG:
            self.processes.signal(name, signal.SIGKILL, Why.HANG)
