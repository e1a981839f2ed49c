"""The supervisor's decisions: what happens, marked on the records it touches and
reconciled; the run's own state moves here.

It acts through a ``host`` (the event loop in loop.py, or a fake in tests) that
spawns and signals processes (told why), writes the worlds' stores, and gives the
time. What happens comes in as method calls: a process exited, said hello,
heartbeat, a world event from the library, a tick, a control request. Each is marked on
the records it touches (a process's goal and what was seen of its start, a world's
goal and marks) and reconciled at once: a process's state moves in reconcile.py alone,
a world's in worldreconcile.py alone, each move told as an event there (the console,
the history and state.json subscribe). What the library tells is in members.py; a
membership that changes while the job runs (elastic jobs: scale and drain) in
reshaping.py; ``reconcile`` below ends what was marked over (a drain) and the run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from mwrun.head.decide import adoption, drills, policy
from mwrun.head.decide import events as ev
from mwrun.head.decide.beats import Beats
from mwrun.head.decide.deadlines import Timer, Timers
from mwrun.head.decide.events import Event, Events, Why
from mwrun.head.decide.firstwords import FirstWords
from mwrun.head.decide.members import Members
from mwrun.head.decide.moves import checked
from mwrun.head.decide.plain import PlainGroups
from mwrun.head.decide.processbook import TICK, Hands, Processes
from mwrun.head.decide.reconcile import ProcessReconciler
from mwrun.head.decide.records import ProcessRecord
from mwrun.head.decide.reshaping import Reshaping
from mwrun.head.decide.restarts import Restarts
from mwrun.head.decide.stopping import Stopping
from mwrun.head.decide.worldbook import Stores, Worlds
from mwrun.membership.revision import Revision
from mwrun.plan.placement import Plan
from mwrun.schema import RUN_MOVES, Start
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R

__all__ = ["TICK", "Host", "Supervisor"]


class Host(Hands, Stores, Protocol):
    """What the supervisor acts through (loop.Loop; a scripted fake in tests)."""

    def reachable(self, name: str) -> bool: ...
    def tell(self, process: str, message: dict) -> None: ...  # down to its library


class Supervisor:
    def __init__(self, plan: Plan, host: Host, events: Events | None = None,
                 grace: float = 10.0, capture_wait: float = 0.0,
                 timers: Timers | None = None):
        self.plan = plan
        self.host = host
        self.events = events if events is not None else Events()
        self.state = R.STARTING
        # The head's one heap of timers (the loop's, shared with its other parts).
        self.timers = timers if timers is not None else Timers()
        self.processes = Processes(plan.processes, host, self.events.emit, self.timers)
        self.procs = self.processes.records  # read: the status document, the loop, tests
        self.book = Worlds(plan, self.procs, host, self.events.emit)
        self.worlds = self.book.records  # read: the status document, the loop, tests
        # The one place a process's state moves: its goal and what was seen of it.
        self.settle = ProcessReconciler(self.processes, self.book.joined_all)
        self.beats = Beats(self.processes, self.settle, capture_wait)  # what beats say; hangs
        # The job was stopped as a failure: a world said on_failure: stop, or the head
        # lost what the job cannot go on without (fail).
        self.failed_stop = False
        self.stop = Stopping(self.processes, self.settle, grace)
        self.reshaping = Reshaping(self.processes, self.settle, self.book, host, grace)
        self.restarts = Restarts(self.processes, self.settle, self.book, self.reshaping,
                                 self.stop, host)
        # What the library inside each process tells (its hello, beats, worlds).
        self.members = Members(self.processes, self.beats, self.book, self.reshaping,
                               self.reconcile)
        # What each process printed until its first start said hello (firstwords.py).
        self.first_words = FirstWords(self.procs, self.worlds)
        # The drills (kill_world): signalled as a drill, so their exits are told as one.
        self.drills = drills.Drills(
            self.worlds, self.procs, lambda name, s: self.beats.signal(name, s, Why.DRILL),
            host.tell, self.processes.say,
            lambda *late: self.events.emit(ev.MadeLate(*late)))
        # What plain torch.distributed groups show in their worlds' stores.
        self.plain = PlainGroups(self.processes, self.book, self.events.emit, self.reconcile)
        self._handle_timers()

    def _handle_timers(self) -> None:
        """What each of the decisions' timers calls when it is due: every timer of the
        supervisor in one table. While the job stops, only the stop's own act."""
        def unless_stopping(act):
            return lambda name, now: None if self.stopping else act(name, now)
        handle = self.timers.handle
        # The awake clock's reading once a TICK (a stall is a longer gap), and the run's
        # end looked for, as every settle does (a check of counts, not of processes).
        handle(Timer.AWAKE, self._awake)
        handle(Timer.RESTART, unless_stopping(
            lambda name, now: self.reconcile(*self._then(self.restarts.due(name, now),
                                                       self.procs.get(name)))))
        handle(Timer.LOOK, unless_stopping(self.beats.look))
        handle(Timer.DRAIN, lambda name, now: self.reconcile(*self.reshaping.drain_over(name)))
        handle(Timer.LEAVE, unless_stopping(self.reshaping.leave_over))
        handle(Timer.RETIRE_KILL, unless_stopping(
            lambda name, now: self.reshaping.grace_over(name)))
        handle(Timer.STOP, lambda name, now: self.reconcile(*self.stop.due(name, now)))

    # -- life cycle -----------------------------------------------------------------------

    def start(self, taken: adoption.Taken | None = None) -> None:
        """Start every process; a new head (``taken``: what its agents run) takes the
        starts that run as they are, ends those found retired (adoption.py), and
        starts only the rest."""
        if taken is not None:
            adoption.resume(self.processes, self.book, self.reshaping, taken, self.host.now(),
                            self.host.wall())
        for rec in list(self.procs.values()):
            if not rec.worker.made:  # (one found making its start has no pid yet)
                self._then(self.restarts.start(rec))
        self.beats.clock.read(self.host.now())  # spawning many is no stall
        if self.state is R.STARTING:  # STARTING -> RUNNING
            self._move(R.RUNNING)
            self._emit(ev.Running())
        self.reconcile(*self.procs.values())

    def _move(self, state: R) -> None:
        """Every change of the run's state goes here, checked against its machine."""
        self.state = checked(RUN_MOVES, "the run", self.state, state)

    def _awake(self, name: str, now: float) -> None:
        self.beats.tick(name, now)
        self.reconcile()

    @property
    def stopping(self) -> bool:
        return self.stop.asked

    def _emit(self, event: Event) -> None:
        self.events.emit(event)

    def _then(self, stop_why: str | None, *touched: ProcessRecord | None
              ) -> list[ProcessRecord]:
        """What restarts said: the job stops when a world with on_failure: stop lost a
        member (``stop_why``); the records to settle."""
        if stop_why is not None:
            self.fail(stop_why)
        return [rec for rec in touched if rec is not None]

    def fail(self, why: str) -> None:
        """Stop the job as a failure (once): its processes are stopped as by ``mwrun
        stop``, and the run ends failed, saying ``why``."""
        if not self.stopping:
            self.failed_stop = True
            self.request_stop(why)

    @property
    def finished(self) -> bool:
        return self.state.final

    @property
    def exit_code(self) -> int:
        return 1 if self.state is R.FAILED else 0

    def reconcile(self, *touched: ProcessRecord, only: Iterable[str] | None = None) -> None:
        """Reconcile what an event marked: the worlds of the processes it touched and
        their members (never every world: at 1,000 processes that made bring-up
        quadratic), or ``only`` the worlds it was about (a leader in a thousand worlds
        says something of one of them at a time). Here, and only here, a drain marked
        over ends, a world whose members are back forms, a member that joined every
        world runs, one with nothing left to rejoin gives up its restart, and the run
        ends when nothing is left."""
        now = self.host.now()
        names = only if only is not None else [w for rec in touched for w in rec.plan.worlds]
        for name in names:  # a drain marked over ends here, and only here
            world = self.worlds.get(name)
            if world is not None and world.drained is not None:
                self.reshaping.finish(world)
        worlds = {w: self.worlds[w] for w in names if w in self.worlds}
        for world in worlds.values():
            self.book.progress(world, now)
        for world in worlds.values():
            for rec in (self.procs[m] for m in world.plan.members):
                if rec.state is P.STARTING:
                    self.settle.reconcile(rec)  # STARTING -> RUNNING once it joined all
                elif rec.state is P.RESTARTING and self.book.nothing_to_join(rec):
                    self.restarts.not_restarted(rec)
        tally = self.processes.tally
        if self.finished or any(tally[state] for state in P if state.expected):
            return
        failed = self.failed_stop or tally[P.FAILED] > 0
        self.book.close_all()
        self._move(R.FAILED if failed else R.FINISHED)  # RUNNING|STOPPING -> FINISHED|FAILED
        self._emit(ev.RunEnded(self.state))

    # -- events ----------------------------------------------------------------------------

    def on_exit(self, name: str, code: int | None, lost: str | None = None,
                at: float | None = None) -> None:
        """Exited with ``code`` (seen ``at``, if its host said); or its host was lost."""
        rec = self.procs.get(name)
        if rec is not None and rec.state.alive:
            exit = policy.Exit(code, hung=rec.worker.hung, lost=lost, drilled=rec.worker.drilled)
            if not self.stopping:  # a first start that ended before its hello: not started
                exit = self.first_words.judged(rec, exit)
            self.reconcile(*self._then(self.restarts.ended(rec, exit, at), rec))

    def on_spawned(self, name: str, pid: int, at: float | None = None,
                   start: Start | None = None) -> None:
        """A start its host answered later (a remote host's agent, a zygote): its pid,
        made ``at``, ``start`` (warm, cold)."""
        rec = self.procs.get(name)
        if rec is not None and rec.state is P.STARTING and rec.worker.pid is None:
            rec.worker.pid, rec.worker.start = pid, start
            self._emit(ev.Spawned(name, pid, rec.restarts, at, start))

    def on_spawn_failed(self, name: str, error: str) -> None:
        """A start its host answered later could not be made: as a start error."""
        rec = self.procs.get(name)
        if rec is not None and rec.state is P.STARTING and rec.worker.pid is None:
            exit = policy.Exit(None, start_error=error)
            self.reconcile(*self._then(self.restarts.ended(rec, exit), rec))

    def on_tick(self) -> None:
        """Whatever of the head's timers is due now (the loop fires them the same way)."""
        self.timers.fire(self.host.now())

    # -- requests --------------------------------------------------------------------------

    def request_stop(self, reason: str = "stop requested") -> None:
        if not self.stopping:
            self._move(R.STOPPING)  # STARTING|RUNNING -> STOPPING
        self.reconcile(*self.stop.ask(reason, self.host.now()))

    def revise(self, revision: Revision) -> None:
        """Move the running job to a new membership (a scale, a drain): see reshaping.py."""
        now = self.host.now()
        self.reshaping.apply(revision, now)
        for name in revision.started:  # every world they join is at its generation now
            self._then(self.restarts.start(self.procs[name]))
        self.reshaping.retire(revision, now)
        self.reconcile(only=revision.worlds)  # the worlds it changed, and their members

    def deadline(self) -> float | None:
        """The next moment any of the head's timers is due; or None."""
        return self.timers.earliest()

