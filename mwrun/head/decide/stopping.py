"""Stopping the whole job: SIGTERM (and SIGCONT: a stopped process must wake to die)
to every live process, SIGKILL once the grace is over, and giving up on a process that
outlives even that (stuck in the kernel) after KILL_WAIT. A second ask kills at once:
a second Ctrl-C; ``mwrun stop`` asks again only with --force (serve/verbs.py)."""

from __future__ import annotations

import signal

from mwrun.head.decide import events as ev
from mwrun.head.decide.deadlines import Timer
from mwrun.head.decide.events import Why
from mwrun.head.decide.processbook import Processes
from mwrun.head.decide.reconcile import ProcessReconciler
from mwrun.head.decide.records import ProcessRecord
from mwrun.schema import Goal
from mwrun.schema import ProcessState as P

KILL_WAIT = 5.0  # after SIGKILL, how long to wait for processes stuck in the kernel
KILL = (Timer.STOP, "kill")  # the grace is over: SIGKILL to every live process
GIVE_UP = (Timer.STOP, "give_up")  # KILL_WAIT after that: what lives on is left


class Stopping:
    def __init__(self, processes: Processes, settle: ProcessReconciler, grace: float):
        self.processes, self.settle, self.grace = processes, settle, grace
        self.timers = processes.timers  # the head's one heap: KILL, then GIVE_UP
        self.asked = False

    def ask(self, reason: str, now: float) -> list[ProcessRecord]:
        """Begin the stop (or, asked again, kill at once); what it moved."""
        procs = self.processes
        if self.asked:  # said with what asked again (a second Ctrl-C, a SIGTERM, --force)
            procs.say(f"{reason}: stopping now: SIGKILL to every process")
            return self.due("kill", now)
        self.asked = True
        procs.emit(ev.Stopping(reason))
        procs.say(f"{reason}: stopping every process (SIGTERM, then SIGKILL after"
                  f" {self.grace:g}s)")
        self.timers.set(KILL, now + self.grace)
        for rec in list(procs.records.values()):
            if rec.goal is not Goal.RETIRE:  # a retired one ends as it would have
                rec.goal = Goal.STOP
            if rec.state.alive:
                procs.signal(rec.plan.name, signal.SIGTERM, Why.STOP)
                procs.signal(rec.plan.name, signal.SIGCONT, Why.STOP)  # a stopped one must wake
            elif rec.state is P.RESTARTING:
                rec.why = "its restart was cancelled by the stop"
                self.timers.clear((Timer.RESTART, rec.plan.name))
                self.settle.reconcile(rec)  # RESTARTING -> STOPPED, told
        return list(procs.records.values())

    def due(self, which: str, now: float) -> list[ProcessRecord]:
        """``kill``: the grace is over (or the stop was asked again), SIGKILL;
        ``give_up``: KILL_WAIT after that. What it moved."""
        procs, given_up = self.processes, []
        if which == KILL[1]:
            self.timers.clear(KILL)
            self.timers.set(GIVE_UP, now + KILL_WAIT)
            for rec in list(procs.records.values()):
                if rec.state.alive:
                    procs.signal(rec.plan.name, signal.SIGKILL, Why.STOP)
        elif which == GIVE_UP[1]:
            # Processes stuck in the kernel (D state) ignore even SIGKILL; leave them
            # rather than hang the supervisor forever, and say so.
            for rec in list(procs.records.values()):
                if rec.state.alive:
                    procs.say(f"{rec.plan.name} (pid {rec.worker.pid}) did not die; giving up")
                    rec.worker.abandoned = True  # a process left running is a failed job
                    rec.why = "did not die after SIGKILL"
                    self.settle.reconcile(rec)  # live -> FAILED, told
                    given_up.append(rec)
        return given_up

    def grace_left(self, now: float) -> float | None:
        """Seconds until SIGKILL while the stop's grace runs; None once it was sent."""
        kill_at = self.timers.when(KILL)
        return None if kill_at is None else max(kill_at - now, 0.0)
