"""A process's end and its next start: the restart policy (policy.py) applied where a
start ends, and the start made when its backoff is over.

A start that ends (it exited, its host was lost, it could not start) moves to
RESTARTING, with its backoff as a RESTART timer in the head's one heap, or to where it
ends for good (EXITED, FAILED; STOPPED while the job stops; a retired replica leaves
the job). Its worlds break (a member they count on ended), drain on (a draining world
ends now, without a break) or close (nothing can re-form them). The RESTART timer
starts it again once its host is there, or gives it up when every world it would join
closed meanwhile.

Each method returns why the whole job must stop now (a world with ``on_failure:
stop`` lost a member), or None: the supervisor stops the job, never this.
"""

from __future__ import annotations

from typing import Protocol

from mwrun.head.decide import policy
from mwrun.head.decide.deadlines import Timer
from mwrun.head.decide.processbook import TICK, Processes
from mwrun.head.decide.reconcile import ProcessReconciler
from mwrun.head.decide.records import ProcessRecord
from mwrun.head.decide.reshaping import Reshaping
from mwrun.head.decide.stopping import Stopping
from mwrun.head.decide.worldbook import Worlds
from mwrun.schema import Goal
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W


class Reach(Protocol):
    """What restarts need of the host besides the processes' hands."""

    def now(self) -> float: ...
    def reachable(self, name: str) -> bool: ...


class Restarts:
    def __init__(self, processes: Processes, settle: ProcessReconciler, book: Worlds,
                 reshaping: Reshaping, stop: Stopping, host: Reach):
        self.processes, self.settle, self.book = processes, settle, book
        self.reshaping, self.stop, self.host = reshaping, stop, host
        self.timers = processes.timers

    def start(self, rec: ProcessRecord) -> str | None:
        """Start ``rec`` (its first start, a restart, a new replica) into the
        generations its worlds are at; a start that cannot be made ends at once."""
        generations = {w: self.book.records[w].generation for w in rec.plan.worlds}
        error = self.processes.spawn(rec, generations)
        if error is None:
            self.settle.reconcile(rec)  # -> STARTING, told
            return None
        return self.ended(rec, policy.Exit(None, start_error=error))

    def ended(self, rec: ProcessRecord, exit: policy.Exit, at: float | None = None
              ) -> str | None:
        """This start of ``rec`` ended (``at``: when its host saw it, if it said)."""
        name, worker = rec.plan.name, rec.worker
        worker.exit, worker.ended_pid, worker.ended_at, worker.pid = exit, worker.pid, at, None
        what = exit.describe(name)
        stopping = self.stop.asked
        if stopping or rec.retired:  # its goal (STOP, RETIRE) says how it ends
            rec.why = f"{what} (retired)" if rec.retired and not stopping else what
            self.settle.reconcile(rec)  # live -> EXITED|STOPPED, told
            if rec.retired:
                self.reshaping.gone(rec)
            return None
        rec.loop = policy.crash_loop(rec.loop, worker.joined_at, self.host.now(), worker.drilled)
        decision = policy.after_exit(rec.plan.restart, rec.plan.max_restarts,
                                     rec.plan.restart_backoff, rec.spent, exit, rec.loop)
        if decision.restart:  # its goal stays RUN: again after the backoff
            rec.loop += 1
            rec.restart_at = self.host.now() + decision.delay
            self.timers.set((Timer.RESTART, name), rec.restart_at)
            when = f"in {decision.delay:g}s" if decision.delay else "at once"
            rec.why = f"{what}; {decision.why} {when}"
        else:
            rec.goal = Goal.END
            rec.why = what if exit.clean else f"{what}; {decision.why}"
        self.settle.reconcile(rec)  # live -> RESTARTING|EXITED|FAILED, told
        self.processes.say(rec.why)
        for world_name in list(rec.plan.worlds):
            world = self.book.records.get(world_name)
            if world is None:
                continue
            if world.state is W.DRAINING:  # going anyway: its end comes now, no break
                self.reshaping.over(world, what)
                continue
            # A member that finished for good closes its worlds; anything else breaks them.
            finished = exit.clean and not decision.restart
            if not finished and self.book.in_play(world, rec):
                self.book.lost_member(world, what)
            if policy.stops_the_job(world.plan.on_failure, exit):
                return f"world {world_name} has on_failure: stop, and {what}"
            self.book.close_if_hopeless(world)
        return None

    def due(self, name: str, now: float) -> str | None:
        """RESTART: its backoff is over; started again once its host is there."""
        rec = self.processes.records.get(name)
        if rec is None or rec.state is not P.RESTARTING:
            return None
        if self.book.nothing_to_join(rec):
            self.not_restarted(rec)
            return None
        if not self.host.reachable(name):  # its host is lost: again when it is back
            self.timers.set((Timer.RESTART, name), now + TICK)
            return None
        rec.restarts += 1
        rec.spent += not rec.worker.drilled  # a drill's fault spends none (spawn unmarks)
        which = policy.restart_text(rec.restarts, rec.spent, rec.plan.max_restarts,
                                    rec.worker.drilled)
        self.processes.say(f"restarting {rec.plan.name} ({which})")
        return self.start(rec)

    def not_restarted(self, rec: ProcessRecord) -> None:
        """RESTARTING -> FAILED|EXITED: every world it would join has closed for good;
        a failure that is never repaired fails the job."""
        rec.goal = Goal.END
        self.timers.clear((Timer.RESTART, rec.plan.name))
        rec.why = f"{rec.why}; not restarted: its worlds closed"
        self.settle.reconcile(rec)  # RESTARTING -> EXITED|FAILED, told
        self.processes.say(rec.why)
