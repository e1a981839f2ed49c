"""A membership that changes while the job runs: the supervisor's part of elastic jobs.

A revision (membership/revision.py) is applied in one turn of the loop, in this order:
the processes that stay take their new plans (their new worlds; a world they are in
that drains stays theirs until it is gone), the new processes get records, each world
it touches acts (``form``: its store is made and its members are told ``add``;
``resize``: it re-forms at once at the next generation; ``drain``/``remove``: a healthy
world drains, calls still working, until a member releases it or its drain_timeout
passes, then re-forms without the retired members or closes for good), the new
processes start (every world they join is at its final generation already, so their
environment is right from the first instruction), and the retired ones turn DRAINING.

A retired process whose worlds are all gone has LEAVE_WAIT to end by itself (its calls
raise WorldClosedError: a worker written for it just returns), then gets SIGTERM, and
SIGKILL after the grace; its exit is no failure and starts no restart, and then it is
forgotten. Removal is a
drain, never a fault: no break, nothing in the fault records.
"""

from __future__ import annotations

import signal
from dataclasses import replace
from typing import Protocol

from mwrun.head.decide import events as ev
from mwrun.head.decide.deadlines import Timer
from mwrun.head.decide.events import Why
from mwrun.head.decide.processbook import Processes
from mwrun.head.decide.reconcile import ProcessReconciler
from mwrun.head.decide.records import ProcessRecord, WorldRecord
from mwrun.head.decide.worldbook import Worlds
from mwrun.membership.revision import Action, Revision
from mwrun.plan.environment import world_spec
from mwrun.plan.placement import WorldPlan
from mwrun.protocol import Verb
from mwrun.schema import Goal
from mwrun.schema import WorldState as W

DRAINS = (Action.DRAIN, Action.REMOVE)
LEAVE_WAIT = 2.0  # seconds a retired process whose worlds are gone may take to end itself


class Down(Protocol):
    """How the head tells a process's library of a change to its worlds."""

    def tell(self, process: str, message: dict) -> None: ...


class Reshaping:
    def __init__(self, processes: Processes, settle: ProcessReconciler, book: Worlds,
                 down: Down, grace: float):
        self.processes, self.settle, self.book = processes, settle, book
        self.down, self.grace = down, grace
        # The head's one heap: (DRAIN, world) when a drain ends at the latest, (LEAVE,
        # process) when a retired process with no world gets SIGTERM, (RETIRE_KILL,
        # process) when it gets SIGKILL; the supervisor says what each calls.
        self.timers = processes.timers

    def apply(self, rev: Revision, now: float) -> None:
        """Apply ``rev`` up to its new processes' start (see the module's docstring):
        the supervisor starts them (restarts.py), then ``retire``s."""
        procs, plan = self.processes.records, rev.plan
        for name in rev.changed:
            rec, proc = procs.get(name), plan.processes[name]
            if rec is not None:
                # A world it is in that drains stays its own until it is gone.
                draining = {w: rec.plan.worlds[w] for w, action in rev.worlds.items()
                            if action in DRAINS and w in rec.plan.worlds
                            and w not in proc.worlds}
                rec.plan = replace(proc, worlds={**proc.worlds, **draining})
        for name in rev.started:
            self.processes.add(plan.processes[name])
            self.processes.emit(ev.Added(name, rev.op))
        for name, action in rev.worlds.items():
            world = self.book.records.get(name)
            if action is Action.FORM:
                self._form(plan.worlds[name], set(rev.started))
            elif world is not None and action is Action.RESIZE:
                self.resize(world, plan.worlds[name])
            elif world is not None:
                self._drain(world, plan.worlds.get(name), rev.drains[name], now)

    def retire(self, rev: Revision, now: float) -> None:
        """The processes ``rev`` retires turn DRAINING (their new peers have started)."""
        for name in rev.retired:
            self._retire(self.processes.records[name], rev.op, now)

    def retire_found(self, rec: ProcessRecord, op: str, now: float) -> None:
        """A process a new head found running that ``op`` retired (adoption.py): the
        worlds it is still in were left draining; their drain is over now."""
        self.settle.reconcile(rec)  # RESTARTING (added) -> STARTING: its start is made
        self._retire(rec, op, now)
        for name in rec.plan.worlds:
            self.over(self.book.records[name], f"{op} was draining it when the head that"
                                               " asked for it died")

    # -- worlds -----------------------------------------------------------------------

    def _form(self, plan: WorldPlan, starting: set[str]) -> None:
        """A new world: its store, and its members that run already told to join it."""
        self.book.add(plan)
        for rank, member in enumerate(plan.members):
            if member not in starting:
                self.down.tell(member, {"verb": Verb.ADD, "world": plan.name,
                                        "spec": world_spec(plan, rank, 0)})

    def resize(self, world: WorldRecord, plan: WorldPlan) -> None:
        """Re-form at once with ``plan``'s members (a member joins; a drain that such a
        resize meets ends with it)."""
        before = world.plan.members
        self.timers.clear((Timer.DRAIN, world.plan.name))
        self.book.resize(world, plan)
        self._left(world.plan.name, [m for m in before if m not in plan.members])

    def _drain(self, world: WorldRecord, target: WorldPlan | None, seconds: float,
               now: float) -> None:
        if not self.book.drain(world, target, now + seconds, seconds):
            self.over(world, "it was not healthy, so nothing was left to drain")
            return
        self.timers.set((Timer.DRAIN, world.plan.name), world.drain_until or now)
        self.processes.say(f"{world.plan.name} drains: its calls work until a member"
                           f" releases it, {seconds:g}s at most")
        for member in world.plan.members:
            self.down.tell(member, {"verb": Verb.DRAIN, "world": world.plan.name,
                                    "generation": world.generation, "deadline": seconds})

    def over(self, world: WorldRecord, why: str) -> None:
        """Its drain is over, for ``why`` (the first reason heard wins): marked, and
        ended by the supervisor's reconcile (``finish``), the one place a drain ends."""
        if world.drained is None:
            world.drained = why

    def finish(self, world: WorldRecord) -> None:
        """End a drain marked over: re-form without the retired members, or close."""
        why, world.drained = world.drained, None
        before = world.plan.members
        self.timers.clear((Timer.DRAIN, world.plan.name))
        target = world.target
        leaving = [m for m in before if target is None or m not in target.members]
        self.book.finish(world, f"drained: {why}")
        self.processes.say(f"{world.plan.name} closed: {why}" if target is None else
                           f"{world.plan.name} re-forms without {', '.join(leaving)}: {why}")
        self._left(world.plan.name, leaving)

    def _left(self, world: str, members: list[str]) -> None:
        """These members are no longer in ``world``; a retired one with no world left
        is stopped."""
        for name in members:
            rec = self.processes.records.get(name)
            if rec is None or world not in rec.plan.worlds:
                continue
            worlds = dict(rec.plan.worlds)
            del worlds[world]
            rec.plan = replace(rec.plan, worlds=worlds)
            if rec.retired and not rec.plan.worlds:
                self._stop(rec)

    # -- retired processes ----------------------------------------------------------------

    def _retire(self, rec: ProcessRecord, op: str, now: float) -> None:
        rec.retired, rec.goal = op, Goal.RETIRE
        self.processes.emit(ev.Retired(rec.plan.name, op))
        if not rec.state.alive:  # restarting, failed, or never started: nothing to drain
            self.gone(rec)
            return
        rec.why = f"{rec.plan.name} is retired ({op}): its worlds drain, then it stops"
        self.settle.reconcile(rec)  # STARTING|RUNNING|UNRESPONSIVE -> DRAINING, told
        for name in list(rec.plan.worlds):
            world = self.book.records.get(name)
            if world is None or world.state is W.CLOSED:
                self._left(name, [rec.plan.name])
        if not rec.plan.worlds:
            self._stop(rec)

    def _stop(self, rec: ProcessRecord) -> None:
        """Its worlds are gone: it may end by itself for LEAVE_WAIT, then SIGTERM."""
        name = rec.plan.name
        if rec.state.alive and (Timer.RETIRE_KILL, name) not in self.timers \
                and (Timer.LEAVE, name) not in self.timers:
            self.timers.set((Timer.LEAVE, name), self.processes.host.now() + LEAVE_WAIT)

    def _terminate(self, name: str, now: float) -> None:
        self.processes.signal(name, signal.SIGTERM, Why.RETIRE)
        self.processes.signal(name, signal.SIGCONT, Why.RETIRE)  # a stopped one must wake
        self.timers.set((Timer.RETIRE_KILL, name), now + self.grace)

    def gone(self, rec: ProcessRecord) -> None:
        """A retired process ended: it leaves the job (its worlds that still wait for it
        end now)."""
        name = rec.plan.name
        self.timers.clear((Timer.RETIRE_KILL, name))
        self.timers.clear((Timer.LEAVE, name))
        for world_name in list(rec.plan.worlds):
            world = self.book.records.get(world_name)
            if world is not None and world.state is W.DRAINING:
                self.over(world, f"{name} ended")
        self.processes.forget(name)
        self.processes.emit(ev.Gone(name))

    def drain_over(self, name: str) -> list[ProcessRecord]:
        """A drain's deadline passed (DRAIN): it ends now. What it touched."""
        world = self.book.records.get(name)
        if world is None or world.state is not W.DRAINING:
            return []
        touched = [self.processes.records[m] for m in world.plan.members
                   if m in self.processes.records]
        self.over(world, "its drain_timeout passed")
        return touched

    def leave_over(self, name: str, now: float) -> None:
        """A retired process did not end by itself (LEAVE): SIGTERM, then its grace."""
        rec = self.processes.records.get(name)
        if rec is not None and rec.state.alive:
            self._terminate(name, now)

    def grace_over(self, name: str) -> None:
        """A retired process outlived its grace (RETIRE_KILL): SIGKILL."""
        rec = self.processes.records.get(name)
        if rec is not None and rec.state.alive:
            self.processes.signal(name, signal.SIGKILL, Why.RETIRE)
