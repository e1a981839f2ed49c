"""The supervisor's decisions: the only place that moves process, world and run states.

It acts through a ``host`` (the event loop in loop.py, or a fake in tests) that
spawns and signals processes (told why), writes the worlds' stores, and gives the
time. What happens comes in as method calls: a process exited, said hello,
heartbeat, a world event from the library, a tick, a control request. What it
decides goes out as events (events.py), each emitted where the change is made: the
console, the history and state.json subscribe.
"""

from __future__ import annotations

import signal
from collections import Counter
from typing import Protocol

from mwrun.errors import StartError
from mwrun.head import drills, hangs, policy
from mwrun.head import events as ev
from mwrun.head.deadlines import Deadlines
from mwrun.head.events import Event, Events, Why
from mwrun.head.records import ProcessRecord
from mwrun.head.worldbook import Stores, Worlds
from mwrun.plan import nccl as nccl_rules
from mwrun.plan.placement import Plan
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W

TICK = 0.5  # seconds between checks for hung processes and due restarts
KILL_WAIT = 5.0  # after SIGKILL, how long to wait for processes stuck in the kernel


class Host(Stores, Protocol):
    """What the supervisor acts through (loop.Loop; a scripted fake in tests)."""

    def now(self) -> float: ...  # monotonic: every decision is timed on it
    def wall(self) -> float: ...
    def spawn(self, name: str, generations: dict[str, int], restarts: int,
              incarnation: int) -> int | None: ...
    def signal(self, name: str, sig: int, why: Why) -> None: ...
    def probe(self, name: str) -> str | None: ...
    def reachable(self, name: str) -> bool: ...


class Supervisor:
    def __init__(self, plan: Plan, host: Host, events: Events | None = None,
                 grace: float = 10.0):
        self.plan = plan
        self.host = host
        self.events = events if events is not None else Events()
        self.grace = grace
        self.state = R.STARTING
        self.procs = {name: ProcessRecord(p) for name, p in plan.processes.items()}
        # Processes per state, kept by _move: "is anything left?" costs the same at 10
        # processes as at 1,000.
        self.tally: Counter = Counter({P.STARTING: len(self.procs)})
        self.book = Worlds(plan, self.procs, host, self.events.emit)
        self.worlds = self.book.records  # read: the status document, the loop, tests
        self.stopping = False
        self.failed_stop = False  # the job was stopped because a world said on_failure: stop
        self.kill_at: float | None = None
        self.give_up_at: float | None = None
        self.restarts_due = Deadlines()  # process -> when its restart is due
        self.nccl_warned: set[str] = set()  # known-bad NCCL versions warned of once
        self.clock = hangs.AwakeClock(host.now(), TICK)  # what heartbeats are judged on

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        for rec in self.procs.values():
            self._spawn(rec)
        self.clock = hangs.AwakeClock(self.host.now(), TICK)  # spawning many is no stall
        if self.state is R.STARTING:  # STARTING -> RUNNING
            self.state = R.RUNNING
            self._emit(ev.Running())
        self._settle(*self.procs.values())

    def _emit(self, event: Event) -> None:
        self.events.emit(event)

    def _say(self, text: str) -> None:
        self._emit(ev.Said(text))

    def _move(self, rec: ProcessRecord, state: P) -> None:
        """Every change of a process's state goes here: the tally follows it."""
        self.tally[rec.state] -= 1
        self.tally[state] += 1
        rec.state = state

    def _signal(self, name: str, sig: int, why: Why) -> None:
        self.host.signal(name, sig, why)
        self.procs[name].drilled |= why is Why.DRILL
        if sig in hangs.STOPS:  # /proc is read at the next tick, not beats later
            self.procs[name].stop_sent_at = self._awake()
        self._emit(ev.Signalled(name, signal.Signals(sig), why))

    def _spawn(self, rec: ProcessRecord) -> None:
        name = rec.plan.name
        generations = {w: self.worlds[w].generation for w in rec.plan.worlds}
        try:
            pid = self.host.spawn(name, generations, rec.restarts, rec.incarnation + 1)
        except StartError as exc:
            self._move(rec, P.STARTING)
            self._ended(rec, policy.Exit(None, start_error=str(exc)))
            return
        now = self.host.now()
        self._move(rec, P.STARTING)  # RESTARTING -> STARTING, or a first start
        rec.pid, rec.exit_code, rec.incarnation = pid, None, rec.incarnation + 1
        rec.started, rec.started_at = now, self.host.wall()
        rec.generations, rec.ready, rec.left = generations, set(), set()
        rec.said_hello, rec.beat_every, rec.stopped_since, rec.hung = False, None, None, None
        rec.restart_at = rec.suspect_since = rec.joined_at = rec.beat_gap = rec.stop_sent_at = None
        rec.drilled = False
        self.restarts_due.clear(name)
        self._emit(ev.Spawned(name, pid, rec.restarts) if pid is not None else
                   ev.ProcessChanged(name, P.STARTING, rec.why))  # its pid comes later

    @property
    def finished(self) -> bool:
        return self.state.final

    @property
    def exit_code(self) -> int:
        return 1 if self.state is R.FAILED else 0

    def _settle(self, *touched: ProcessRecord) -> None:
        """Derive the states an event may have moved: the worlds of the processes it
        touched and their members (never every world: at 1,000 processes that made
        bring-up quadratic); end the run when nothing is left."""
        now = self.host.now()
        worlds = {w: self.worlds[w] for rec in touched for w in rec.plan.worlds}
        for world in worlds.values():
            self.book.progress(world, now)
        for world in worlds.values():
            for rec in (self.procs[m] for m in world.plan.members):
                if rec.state is P.STARTING and all(self.book.joined(rec, w)
                                                   for w in rec.plan.worlds):
                    self._move(rec, P.RUNNING)  # STARTING -> RUNNING
                    rec.joined_at = now
                    self._emit(ev.ProcessChanged(rec.plan.name, P.RUNNING, rec.why))
        if self.finished or any(self.tally[state] for state in P if state.expected):
            return
        failed = self.failed_stop or self.tally[P.FAILED] > 0
        self.book.close_all()
        self.state = R.FAILED if failed else R.FINISHED  # RUNNING|STOPPING -> FINISHED|FAILED
        self._emit(ev.RunEnded(self.state))

    # -- events ----------------------------------------------------------------------------

    def on_exit(self, name: str, code: int | None, lost: str | None = None,
                at: float | None = None) -> None:
        """Exited with ``code`` (seen ``at``, if its host said); or its host was lost."""
        rec = self.procs[name]
        if rec.state.alive:
            self._ended(rec, policy.Exit(code, hung=rec.hung, lost=lost), at)
            self._settle(rec)

    def on_spawned(self, name: str, pid: int, at: float | None = None) -> None:
        """A start its host answered later (a remote host's agent): its pid, made ``at``."""
        rec = self.procs[name]
        if rec.state is P.STARTING and rec.pid is None:
            rec.pid = pid
            self._emit(ev.Spawned(name, pid, rec.restarts, at))

    def on_spawn_failed(self, name: str, error: str) -> None:
        """A start its host answered later could not be made: as a start error."""
        rec = self.procs[name]
        if rec.state is P.STARTING and rec.pid is None:
            self._ended(rec, policy.Exit(None, start_error=error))
            self._settle(rec)

    def _ended(self, rec: ProcessRecord, exit: policy.Exit, at: float | None = None) -> None:
        name, pid = rec.plan.name, rec.pid
        rec.pid, rec.exit_code = None, exit.code
        what = exit.describe(name)
        if self.stopping:
            self._move(rec, P.EXITED if exit.code == 0 else P.STOPPED)  # live -> EXITED|STOPPED
            rec.why = what
            self._emit(ev.Exited(name, pid, exit.code, rec.state, what, at, bool(exit.lost)))
            return
        rec.loop = policy.crash_loop(rec.loop, rec.joined_at, self.host.now(), rec.drilled)
        decision = policy.after_exit(rec.plan.restart, rec.plan.max_restarts,
                                     rec.plan.restart_backoff, rec.restarts, exit, rec.loop)
        if decision.restart:
            rec.loop += 1
            self._move(rec, P.RESTARTING)
            rec.restart_at = self.host.now() + decision.delay
            self.restarts_due.set(name, rec.restart_at)
            when = f"in {decision.delay:g}s" if decision.delay else "at once"
            rec.why = f"{what}; {decision.why} {when}"
        else:
            self._move(rec, P.EXITED if exit.clean else P.FAILED)  # live -> EXITED|FAILED
            rec.why = what if exit.clean else f"{what}; {decision.why}"
        self._emit(ev.Exited(name, pid, exit.code, rec.state, rec.why, at, bool(exit.lost)))
        self._say(rec.why)
        for world_name in rec.plan.worlds:
            world = self.worlds[world_name]
            # A member that finished for good closes its worlds; anything else breaks them.
            finished = exit.clean and not decision.restart
            if not finished and self.book.in_play(world, rec):
                self.book.lost_member(world, what)
            if policy.stops_the_job(world.plan.on_failure, exit) and not self.stopping:
                self.failed_stop = True
                self.request_stop(f"world {world_name} has on_failure: stop, and {what}")
                return
            self.book.close_if_hopeless(world)

    def on_hello(self, name: str, pid: int, interval: float, nccl: str | None = None) -> None:
        rec = self.procs.get(name)
        if rec is None or rec.pid != pid:
            return  # a message from an earlier incarnation
        rec.said_hello, rec.beat_every, rec.last_beat = True, interval, self._awake()
        rec.nccl, warning = nccl, nccl_rules.warning(name, nccl, self.nccl_warned)
        if warning is not None:  # once per known-bad version, at its first hello
            self.nccl_warned.add(str(nccl))
            self._say(warning)
        self._settle(rec)

    def on_abort_hung(self, name: str, pid: int, reason: str) -> None:
        """Its communicator's abort never returned (worlds/aborts.py): killed as hung."""
        rec = self.procs.get(name)
        if rec is not None and rec.pid == pid and rec.state.alive and rec.hung is None:
            self._hang(rec, reason or "a communicator abort did not return")

    def on_heartbeat(self, name: str, pid: int, next_in: object = None) -> None:
        """A beat, and the most seconds to its next one, as it says (hangs.beat_gap)."""
        rec = self.procs.get(name)
        if rec is not None and rec.pid == pid:
            rec.last_beat, rec.beat_gap = self._awake(), hangs.beat_gap(next_in, rec.beat_every)
            self._responsive(rec, None)

    def on_bye(self, name: str, pid: int) -> None:
        rec = self.procs.get(name)
        if rec is not None and rec.pid == pid:
            rec.beat_every = None  # it left its worlds; from now on /proc tells if it hangs

    def on_world_event(self, name: str, pid: int, world_name: str, generation: int,
                       event: str, reason: str = "") -> None:
        rec, world = self.procs.get(name), self.worlds.get(world_name)
        if rec is None or world is None or rec.pid != pid or world_name not in rec.plan.worlds:
            return
        left = any(world_name in self.procs[m].left for m in world.plan.members)
        if event == "ready" and generation == world.generation:
            rec.ready.add(world_name)
            rec.generations[world_name] = generation
        elif event == "closed" and generation == world.generation:
            rec.left.add(world_name)  # its exit decides whether the world goes on
        elif event == "broken" and generation == world.generation and not left \
                and world.state in (W.FORMING, W.HEALTHY):
            # A member saw the break first (a timeout, a drill by hand): its store says
            # so already; the rest of the world follows it to the next generation.
            self.book.broke(world, reason, written=True)
        self._settle(rec)

    def plain_forming(self) -> list[str]:
        """Worlds whose stores the loop looks into for a plain group (worldbook.py)."""
        return self.book.plain_forming()

    def on_store_seen(self, world_name: str, ranks: set[int] | None) -> None:
        """What a forming world's store shows of a plain torch.distributed group: the
        ranks whose rendezvous keys are there, or None when mwrun cannot read them (a
        backend whose keys it does not know); the world is then shown as unknown."""
        world = self.worlds[world_name]
        if world.state is not W.FORMING:
            return
        if self.book.seen(world, ranks):  # the whole group met: it exists
            for member in world.plan.members:
                rec = self.procs[member]
                if rec.state.alive and not rec.said_hello:
                    rec.ready.add(world_name)
                    rec.generations[world_name] = world.generation
        self._settle(*(self.procs[m] for m in world.plan.members))

    def on_tick(self) -> None:
        now = self.host.now()
        awake = self._awake()
        touched = []  # whose worlds may have moved
        for rec in self.procs.values():
            if rec.state is P.RESTARTING and self.book.nothing_to_join(rec):
                touched.append(rec)
                # RESTARTING -> FAILED|EXITED: every world it would join has closed for
                # good; a failure that is never repaired fails the job.
                self._move(rec, P.EXITED if rec.exit_code == 0 else P.FAILED)
                self.restarts_due.clear(rec.plan.name)
                rec.why = f"{rec.why}; not restarted: its worlds closed"
                self._emit(ev.ProcessChanged(rec.plan.name, rec.state, rec.why))
                self._say(rec.why)
            elif rec.state is P.RESTARTING and not self.stopping \
                    and rec.restart_at is not None and rec.restart_at <= now \
                    and self.host.reachable(rec.plan.name):  # its host is there (again)
                rec.restarts += 1
                self._say(f"restarting {rec.plan.name} (restart {rec.restarts}"
                          f" of {rec.plan.max_restarts})")
                self._spawn(rec)
                touched.append(rec)
            elif rec.state in (P.STARTING, P.RUNNING, P.UNRESPONSIVE) and not self.stopping:
                self._check_hung(rec, awake)
        if self.stopping:
            touched += self._escalate(now)
        self._settle(*touched)

    def _awake(self) -> float:
        """The awake clock (see hangs.py); says so when the supervisor finds it stalled."""
        awake, stalled = self.clock.read(self.host.now())
        if stalled:
            self._say(f"the supervisor itself was not running for {stalled:.1f}s"
                      " (stopped, starved or busy); that silence counts against no"
                      " process")
        return awake

    def _check_hung(self, rec: ProcessRecord, now: float) -> None:
        """``now`` is awake time: the supervisor's own stalls never count as silence."""
        late, hung = hangs.judge(rec, now, lambda: self.host.probe(rec.plan.name) == "stopped")
        self._responsive(rec, late)
        if hung is not None:
            self._hang(rec, hung)

    def _responsive(self, rec: ProcessRecord, late: str | None) -> None:
        """Show at once that a running process stopped answering (``late``: hangs.LATE
        or hangs.STOPPED), long before it is declared hung; and that it answers again."""
        if late is not None and rec.state is P.RUNNING:
            self._move(rec, P.UNRESPONSIVE)  # RUNNING -> UNRESPONSIVE
            rec.why = f"{rec.plan.name} is unresponsive ({late})"
        elif late is None and rec.state is P.UNRESPONSIVE:
            self._move(rec, P.RUNNING)  # UNRESPONSIVE -> RUNNING
            rec.why = f"{rec.plan.name} responds again"
        else:
            return
        self._emit(ev.ProcessChanged(rec.plan.name, rec.state, rec.why))
        self._say(rec.why)

    def _hang(self, rec: ProcessRecord, why: str) -> None:
        self._move(rec, P.HUNG)  # STARTING|RUNNING|UNRESPONSIVE -> HUNG
        rec.hung, rec.why = why, f"{rec.plan.name} hung: {why}; killing it"
        self._emit(ev.Hung(rec.plan.name, why))
        self._say(rec.why)
        self._signal(rec.plan.name, signal.SIGKILL, Why.HANG)

    # -- requests --------------------------------------------------------------------------

    def request_stop(self, reason: str = "stop requested") -> None:
        now = self.host.now()
        if self.stopping:
            self._say("stopping now: SIGKILL to every process")
            self.kill_at = now
            self._settle(*self._escalate(now))
            return
        self.stopping = True
        self.state = R.STOPPING  # STARTING|RUNNING -> STOPPING
        self._emit(ev.Stopping(reason))
        self._say(f"{reason}: stopping every process (SIGTERM, then SIGKILL after"
                  f" {self.grace:g}s)")
        self.kill_at = now + self.grace
        for rec in self.procs.values():
            if rec.state.alive:
                self._signal(rec.plan.name, signal.SIGTERM, Why.STOP)
                # a stopped one must wake to die
                self._signal(rec.plan.name, signal.SIGCONT, Why.STOP)
            elif rec.state is P.RESTARTING:
                self._move(rec, P.STOPPED)
                rec.why = "its restart was cancelled by the stop"
                self.restarts_due.clear(rec.plan.name)
                self._emit(ev.ProcessChanged(rec.plan.name, P.STOPPED, rec.why))
        self._settle(*self.procs.values())

    def _escalate(self, now: float) -> list[ProcessRecord]:
        """SIGKILL once the grace is over, give up once KILL_WAIT is: what it moved."""
        given_up = []
        if self.kill_at is not None and now >= self.kill_at:
            self.kill_at = None
            self.give_up_at = now + KILL_WAIT
            for rec in self.procs.values():
                if rec.state.alive:
                    self._signal(rec.plan.name, signal.SIGKILL, Why.STOP)
        elif self.give_up_at is not None and now >= self.give_up_at:
            # Processes stuck in the kernel (D state) ignore even SIGKILL; leave them
            # rather than hang the supervisor forever, and say so.
            for rec in self.procs.values():
                if rec.state.alive:
                    self._say(f"{rec.plan.name} (pid {rec.pid}) did not die; giving up")
                    # live -> FAILED: a process left running is a failed job
                    self._move(rec, P.FAILED)
                    rec.why = "did not die after SIGKILL"
                    self._emit(ev.Abandoned(rec.plan.name, rec.pid, rec.why))
                    given_up.append(rec)
            self.give_up_at = None
        return given_up

    def kill_world(self, world_name: str, rank: int | None, sig: int) -> list[dict]:
        """The fault drill (see drills.py); raises ValueError."""
        hit = drills.kill_world(self.worlds, self.procs, world_name, rank, sig,
                                lambda name, s: self._signal(name, s, Why.DRILL))
        self._say(drills.told(world_name, sig, hit))
        return hit

    def deadline(self) -> float | None:
        """The next moment a restart or a kill is due (hang checks keep TICK); or None."""
        times = (self.restarts_due.earliest(), self.kill_at, self.give_up_at)
        return min((t for t in times if t is not None), default=None)
