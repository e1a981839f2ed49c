"""The supervisor's decisions: the only place that moves process, world and run states.

It acts through a ``host`` (the event loop in loop.py, or a fake in tests) that
spawns and signals processes (told why), writes the worlds' stores, and gives the
time. What happens comes in as method calls: a process exited, said hello,
heartbeat, a world event from the library, a tick, a control request. What it
decides goes out as events (events.py), each emitted where the change is made: the
console, the history and state.json subscribe. Each process's own state machine is
in processbook.py, each world's in worldbook.py; what the library tells in members.py;
a membership that changes while the job runs (elastic jobs: scale and drain) in
reshaping.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from mwrun.head.decide import drills, policy
from mwrun.head.decide import events as ev
from mwrun.head.decide.events import Event, Events, Why
from mwrun.head.decide.members import Members
from mwrun.head.decide.processbook import TICK, Hands, Processes
from mwrun.head.decide.records import ProcessRecord
from mwrun.head.decide.reshaping import Reshaping
from mwrun.head.decide.stopping import Stopping
from mwrun.head.decide.worldbook import Stores, Worlds
from mwrun.membership.revision import Revision
from mwrun.plan.placement import Plan
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W

__all__ = ["TICK", "Host", "Supervisor"]


class Host(Hands, Stores, Protocol):
    """What the supervisor acts through (loop.Loop; a scripted fake in tests)."""

    def reachable(self, name: str) -> bool: ...
    def tell(self, process: str, message: dict) -> None: ...  # down to its library


class Supervisor:
    def __init__(self, plan: Plan, host: Host, events: Events | None = None,
                 grace: float = 10.0, capture_wait: float = 0.0):
        self.plan = plan
        self.host = host
        self.events = events if events is not None else Events()
        self.state = R.STARTING
        self.processes = Processes(plan.processes, host, self.events.emit, capture_wait)
        self.procs = self.processes.records  # read: the status document, the loop, tests
        self.book = Worlds(plan, self.procs, host, self.events.emit)
        self.worlds = self.book.records  # read: the status document, the loop, tests
        self.failed_stop = False  # the job was stopped because a world said on_failure: stop
        self.stop = Stopping(self.processes, grace)
        self.reshaping = Reshaping(self.processes, self.book, host, grace, self._spawn)
        # What the library inside each process tells (its hello, beats, worlds).
        self.members = Members(self.processes, self.book, self.reshaping, self._settle)

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        for rec in self.procs.values():
            self._spawn(rec)
        self.processes.clock.read(self.host.now())  # spawning many is no stall
        if self.state is R.STARTING:  # STARTING -> RUNNING
            self.state = R.RUNNING
            self._emit(ev.Running())
        self._settle(*self.procs.values())

    @property
    def stopping(self) -> bool:
        return self.stop.asked

    def _emit(self, event: Event) -> None:
        self.events.emit(event)

    def _spawn(self, rec: ProcessRecord) -> None:
        generations = {w: self.worlds[w].generation for w in rec.plan.worlds}
        error = self.processes.spawn(rec, generations)
        if error is not None:
            self._ended(rec, policy.Exit(None, start_error=error))

    @property
    def finished(self) -> bool:
        return self.state.final

    @property
    def exit_code(self) -> int:
        return 1 if self.state is R.FAILED else 0

    def _settle(self, *touched: ProcessRecord, only: Iterable[str] | None = None) -> None:
        """Derive the states an event may have moved: the worlds of the processes it
        touched and their members (never every world: at 1,000 processes that made
        bring-up quadratic), or ``only`` the worlds it was about (a leader in a thousand
        worlds says something of one of them at a time); end the run when nothing is
        left."""
        now = self.host.now()
        names = only if only is not None else [w for rec in touched for w in rec.plan.worlds]
        worlds = {w: self.worlds[w] for w in names if w in self.worlds}
        for world in worlds.values():
            self.book.progress(world, now)
        for world in worlds.values():
            for rec in (self.procs[m] for m in world.plan.members):
                if rec.state is P.STARTING and all(self.book.joined(rec, w)
                                                   for w in rec.plan.worlds):
                    self.processes.move(rec, P.RUNNING)  # STARTING -> RUNNING
                    rec.joined_at = now
                    self._emit(ev.ProcessChanged(rec.plan.name, P.RUNNING, rec.why))
        tally = self.processes.tally
        if self.finished or any(tally[state] for state in P if state.expected):
            return
        failed = self.failed_stop or tally[P.FAILED] > 0
        self.book.close_all()
        self.state = R.FAILED if failed else R.FINISHED  # RUNNING|STOPPING -> FINISHED|FAILED
        self._emit(ev.RunEnded(self.state))

    # -- events ----------------------------------------------------------------------------

    def on_exit(self, name: str, code: int | None, lost: str | None = None,
                at: float | None = None) -> None:
        """Exited with ``code`` (seen ``at``, if its host said); or its host was lost."""
        rec = self.procs.get(name)
        if rec is not None and rec.state.alive:
            exit = policy.Exit(code, hung=rec.hung, lost=lost, drilled=rec.drilled)
            self._ended(rec, exit, at)
            self._settle(rec)

    def on_spawned(self, name: str, pid: int, at: float | None = None) -> None:
        """A start its host answered later (a remote host's agent): its pid, made ``at``."""
        rec = self.procs.get(name)
        if rec is not None and rec.state is P.STARTING and rec.pid is None:
            rec.pid = pid
            self._emit(ev.Spawned(name, pid, rec.restarts, at))

    def on_spawn_failed(self, name: str, error: str) -> None:
        """A start its host answered later could not be made: as a start error."""
        rec = self.procs.get(name)
        if rec is not None and rec.state is P.STARTING and rec.pid is None:
            self._ended(rec, policy.Exit(None, start_error=error))
            self._settle(rec)

    def _ended(self, rec: ProcessRecord, exit: policy.Exit, at: float | None = None) -> None:
        name, pid = rec.plan.name, rec.pid
        rec.pid, rec.exit_code = None, exit.code
        what = exit.describe(name)
        if self.stopping or rec.retired:
            self.processes.move(rec, P.EXITED if exit.code == 0 or rec.retired
                                else P.STOPPED)  # live -> EXITED|STOPPED
            rec.why = f"{what} (retired)" if rec.retired and not self.stopping else what
            self._emit(ev.Exited(name, pid, exit.code, rec.state, rec.why, at,
                                 bool(exit.lost)))
            if rec.retired:
                self.reshaping.gone(rec)
            return
        rec.loop = policy.crash_loop(rec.loop, rec.joined_at, self.host.now(), rec.drilled)
        decision = policy.after_exit(rec.plan.restart, rec.plan.max_restarts,
                                     rec.plan.restart_backoff, rec.spent, exit, rec.loop)
        if decision.restart:
            rec.loop += 1
            self.processes.move(rec, P.RESTARTING)
            rec.restart_at = self.host.now() + decision.delay
            self.processes.restarts_due.set(name, rec.restart_at)
            when = f"in {decision.delay:g}s" if decision.delay else "at once"
            rec.why = f"{what}; {decision.why} {when}"
        else:
            self.processes.move(rec, P.EXITED if exit.clean else P.FAILED)  # live -> EXITED|FAILED
            rec.why = what if exit.clean else f"{what}; {decision.why}"
        self._emit(ev.Exited(name, pid, exit.code, rec.state, rec.why, at, bool(exit.lost)))
        self.processes.say(rec.why)
        for world_name in list(rec.plan.worlds):
            world = self.worlds.get(world_name)
            if world is None:
                continue
            if world.state is W.DRAINING:  # going anyway: its end comes now, no break
                self.reshaping.finish(world, what)
                continue
            # A member that finished for good closes its worlds; anything else breaks them.
            finished = exit.clean and not decision.restart
            if not finished and self.book.in_play(world, rec):
                self.book.lost_member(world, what)
            if policy.stops_the_job(world.plan.on_failure, exit) and not self.stopping:
                self.failed_stop = True
                self.request_stop(f"world {world_name} has on_failure: stop, and {what}")
                return
            self.book.close_if_hopeless(world)

    def on_tick(self) -> None:
        now = self.host.now()
        awake = self.processes.awake()
        touched = self.reshaping.tick(now, self.stopping)  # drains over, retired ones stopped
        self.processes.kill_hung_due(now)  # hung members whose capture ran out of time
        for rec in list(self.procs.values()):
            if rec.state is P.RESTARTING and self.book.nothing_to_join(rec):
                touched.append(rec)
                # RESTARTING -> FAILED|EXITED: every world it would join has closed for
                # good; a failure that is never repaired fails the job.
                self.processes.move(rec, P.EXITED if rec.exit_code == 0 else P.FAILED)
                self.processes.restarts_due.clear(rec.plan.name)
                rec.why = f"{rec.why}; not restarted: its worlds closed"
                self._emit(ev.ProcessChanged(rec.plan.name, rec.state, rec.why))
                self.processes.say(rec.why)
            elif rec.state is P.RESTARTING and not self.stopping \
                    and rec.restart_at is not None and rec.restart_at <= now \
                    and self.host.reachable(rec.plan.name):  # its host is there (again)
                rec.restarts += 1
                rec.spent += not rec.drilled  # a drill's fault spends none (spawn unmarks)
                which = policy.restart_text(rec.restarts, rec.spent, rec.plan.max_restarts,
                                            rec.drilled)
                self.processes.say(f"restarting {rec.plan.name} ({which})")
                self._spawn(rec)
                touched.append(rec)
            elif rec.state in (P.STARTING, P.RUNNING, P.UNRESPONSIVE) and not self.stopping:
                self.processes.check_hung(rec, awake)
        if self.stopping:
            touched += self.stop.escalate(now)
        self._settle(*touched)

    # -- requests --------------------------------------------------------------------------

    def request_stop(self, reason: str = "stop requested") -> None:
        if not self.stopping:
            self.state = R.STOPPING  # STARTING|RUNNING -> STOPPING
        self._settle(*self.stop.ask(reason, self.host.now()))

    def revise(self, revision: Revision) -> None:
        """Move the running job to a new membership (a scale, a drain): see reshaping.py."""
        self.reshaping.apply(revision, self.host.now())
        self._settle(only=revision.worlds)  # the worlds it changed, and their members

    def kill_world(self, world_name: str, rank: int | None, sig: int) -> list[dict]:
        """The fault drill (see drills.py); raises ValueError."""
        hit = drills.kill_world(self.worlds, self.procs, world_name, rank, sig,
                                lambda name, s: self.processes.signal(name, s, Why.DRILL))
        self.processes.say(drills.told(world_name, sig, hit))
        return hit

    def deadline(self) -> float | None:
        """The next moment a restart, a drain's end or a kill is due (hang checks keep
        TICK); or None."""
        times = (*self.processes.deadlines(), self.reshaping.earliest(), *self.stop.deadlines())
        return min((t for t in times if t is not None), default=None)

