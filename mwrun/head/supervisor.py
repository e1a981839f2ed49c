"""The supervisor's decisions: the only place that moves process, world and run states.

It acts through a ``host`` (the event loop in loop.py, or a fake in tests) that
spawns and signals processes, writes the worlds' stores, tells the user, and gives
the time. Events come in as method calls: a process exited, said hello, heartbeat, a
world event from the library, a tick, a control request.
"""

from __future__ import annotations

import signal
from collections import Counter

from mwrun.errors import StartError
from mwrun.head import drills, hangs, policy, records
from mwrun.head.deadlines import Deadlines
from mwrun.head.records import ProcessRecord, WorldRecord
from mwrun.plan.placement import Plan
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W

TICK = 0.5  # seconds between checks for hung processes and due restarts
KILL_WAIT = 5.0  # after SIGKILL, how long to wait for processes stuck in the kernel
LATE_BEATS = 2  # heartbeats missed in a row before a process shows as unresponsive


class Supervisor:
    def __init__(self, plan: Plan, host, grace: float = 10.0):
        self.plan = plan
        self.host = host
        self.grace = grace
        self.state = R.STARTING
        self.tally: Counter = Counter()  # processes per state (records.ProcessRecord)
        self.procs = {name: ProcessRecord(p, self.tally) for name, p in plan.processes.items()}
        self.worlds = {name: WorldRecord(w) for name, w in plan.worlds.items()}
        self.stopping = False
        self.failed_stop = False  # the job was stopped because a world said on_failure: stop
        self.kill_at: float | None = None
        self.give_up_at: float | None = None
        self.restarts_due = Deadlines()  # process -> when its restart is due
        self.clock = hangs.AwakeClock(host.now(), TICK)  # what heartbeats are judged on

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        for rec in self.procs.values():
            self._spawn(rec)
        self.clock = hangs.AwakeClock(self.host.now(), TICK)  # spawning many is no stall
        if self.state is R.STARTING:  # STARTING -> RUNNING
            self.state = R.RUNNING
        self._settle(*self.procs.values())

    def _spawn(self, rec: ProcessRecord) -> None:
        name = rec.plan.name
        generations = {w: self.worlds[w].generation for w in rec.plan.worlds}
        try:
            pid = self.host.spawn(name, generations, rec.restarts)
        except StartError as exc:
            rec.state = P.STARTING
            self._ended(rec, policy.Exit(None, start_error=str(exc)))
            return
        now = self.host.now()
        # RESTARTING -> STARTING, or a first start
        rec.state, rec.pid, rec.exit_code = P.STARTING, pid, None
        rec.started, rec.started_at = now, self.host.wall()
        rec.generations, rec.ready, rec.left = generations, set(), set()
        rec.said_hello, rec.beat_every, rec.stopped_since, rec.hung = False, None, None, None
        rec.restart_at, rec.suspect_since, rec.joined_at = None, None, None
        self.restarts_due.clear(name)

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
            self._world_progress(world, now)
        for world in worlds.values():
            for rec in (self.procs[m] for m in world.plan.members):
                if rec.state is P.STARTING and all(self._joined(rec, w, now)
                                                   for w in rec.plan.worlds):
                    rec.state, rec.joined_at = P.RUNNING, now  # STARTING -> RUNNING
        if any(self.tally[state] for state in P if state.expected):
            return
        failed = self.failed_stop or self.tally[P.FAILED] > 0
        for world in self.worlds.values():
            world.state = W.CLOSED  # any -> CLOSED: the job is over
        self.state = R.FAILED if failed else R.FINISHED  # RUNNING|STOPPING -> FINISHED|FAILED

    def _joined(self, rec: ProcessRecord, world: str, now: float) -> bool:
        if not rec.state.alive:
            return False
        # Joined means it said so (the library's "ready"), or, for a plain
        # torch.distributed script, that its group's rendezvous shows in the world's
        # store (on_store_seen). Having merely run for a while proves nothing.
        return world in rec.ready and rec.generations.get(world) == self.worlds[world].generation

    def _world_progress(self, world: WorldRecord, now: float) -> None:
        members = [self.procs[m] for m in world.plan.members]
        if world.state is W.BROKEN and all(m.state.alive for m in members):
            world.state = W.FORMING  # BROKEN -> FORMING: everyone is back
        if world.state is W.FORMING and all(self._joined(m, world.plan.name, now)
                                            for m in members):
            world.state, world.reason = W.HEALTHY, None  # FORMING -> HEALTHY
            world.healthy_since, world.opaque = now, None

    # -- events ----------------------------------------------------------------------------

    def on_exit(self, name: str, code: int | None, lost: str | None = None) -> None:
        """It exited with ``code``; or its host was ``lost`` (the agent kills what it
        ran, the code is unknown): a failure like a crash."""
        rec = self.procs[name]
        if rec.state.alive:
            self._ended(rec, policy.Exit(code, hung=rec.hung, lost=lost))
            self._settle(rec)

    def on_spawned(self, name: str, pid: int) -> None:
        """A start its host answered later (a remote host's agent): its pid."""
        rec = self.procs[name]
        if rec.state is P.STARTING and rec.pid is None:
            rec.pid = pid

    def on_spawn_failed(self, name: str, error: str) -> None:
        """A start its host answered later could not be made: as a start error."""
        rec = self.procs[name]
        if rec.state is P.STARTING and rec.pid is None:
            self._ended(rec, policy.Exit(None, start_error=error))
            self._settle(rec)

    def _ended(self, rec: ProcessRecord, exit: policy.Exit) -> None:
        name = rec.plan.name
        rec.pid, rec.exit_code = None, exit.code
        what = exit.describe(name)
        if self.stopping:
            rec.state = P.EXITED if exit.code == 0 else P.STOPPED  # live -> EXITED|STOPPED
            rec.why = what
            return
        rec.loop = policy.crash_loop(rec.loop, rec.joined_at, self.host.now())
        decision = policy.after_exit(rec.plan.restart, rec.plan.max_restarts,
                                     rec.plan.restart_backoff, rec.restarts, exit, rec.loop)
        if decision.restart:
            rec.loop += 1
            rec.state, rec.restart_at = P.RESTARTING, self.host.now() + decision.delay
            self.restarts_due.set(name, rec.restart_at)
            when = f"in {decision.delay:g}s" if decision.delay else "at once"
            rec.why = f"{what}; {decision.why} {when}"
        else:
            rec.state = P.EXITED if exit.clean else P.FAILED  # live -> EXITED|FAILED
            rec.why = what if exit.clean else f"{what}; {decision.why}"
        self.host.say(rec.why)
        for world_name in rec.plan.worlds:
            world = self.worlds[world_name]
            # A member that finished for good closes its worlds; anything else breaks them.
            finished = exit.clean and not decision.restart
            if world.state in (W.FORMING, W.HEALTHY) and not finished and \
                    rec.generations.get(world_name) == world.generation:
                self._break(world, what)
            if policy.stops_the_job(world.plan.on_failure, exit) and not self.stopping:
                self.failed_stop = True
                self.request_stop(f"world {world_name} has on_failure: stop, and {what}")
                return
            self._close_if_hopeless(world)

    def _break(self, world: WorldRecord, reason: str, written: bool = False) -> None:
        """``written``: a member wrote the break to the world's store itself."""
        generation = world.generation
        world.state, world.reason = W.BROKEN, reason  # FORMING|HEALTHY -> BROKEN
        world.breaks += 1
        if not written:
            self.host.mark_broken(world.plan.name, generation, reason)
        if self._can_reform(world):
            world.generation += 1
            self.host.open_next(world.plan.name, generation)

    def _nothing_to_join(self, rec: ProcessRecord) -> bool:
        return all(self.worlds[w].state is W.CLOSED for w in rec.plan.worlds)

    def _can_reform(self, world: WorldRecord) -> bool:
        return all(self.procs[m].state.expected for m in world.plan.members)

    def _close_if_hopeless(self, world: WorldRecord) -> None:
        if world.state is W.CLOSED or self._can_reform(world):
            return
        gone = next(self.procs[m] for m in world.plan.members if not self.procs[m].state.expected)
        reason = gone.why if gone.state is P.FAILED else f"{gone.why} and will not restart"
        world.state, world.reason = W.CLOSED, reason  # any -> CLOSED
        self.host.close_world(world.plan.name, world.generation, reason)

    def on_hello(self, name: str, pid: int, interval: float) -> None:
        rec = self.procs.get(name)
        if rec is None or rec.pid != pid:
            return  # a message from an earlier incarnation
        rec.said_hello, rec.beat_every, rec.last_beat = True, interval, self._awake()
        self._settle(rec)

    def on_heartbeat(self, name: str, pid: int) -> None:
        rec = self.procs.get(name)
        if rec is not None and rec.pid == pid:
            rec.last_beat = self._awake()
            self._responsive(rec, late=False)

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
            self._break(world, reason, written=True)
        self._settle(rec)

    def plain_forming(self) -> list[str]:
        """Worlds forming with a live member that has not spoken the mwrun protocol
        (yet): the loop looks into their stores for a plain group's rendezvous."""
        return [name for name, world in self.worlds.items() if world.state is W.FORMING
                and any(self.procs[m].state.alive and not self.procs[m].said_hello
                        for m in world.plan.members)]

    def on_store_seen(self, world_name: str, ranks: set[int] | None) -> None:
        """What a forming world's store shows of a plain torch.distributed group: the
        ranks whose rendezvous keys are there, or None when mwrun cannot read them (a
        backend whose keys it does not know); the world is then shown as unknown."""
        world = self.worlds[world_name]
        if world.state is not W.FORMING:
            return
        if ranks is None:
            world.opaque = "mwrun cannot see this world's process group form in its store"
            return
        world.opaque = None
        if set(range(world.plan.size)) <= ranks:  # the whole group met: it exists
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
            if rec.state is P.RESTARTING and self._nothing_to_join(rec):
                touched.append(rec)
                # RESTARTING -> FAILED|EXITED: every world it would join has closed for
                # good; a failure that is never repaired fails the job.
                rec.state = P.EXITED if rec.exit_code == 0 else P.FAILED
                self.restarts_due.clear(rec.plan.name)
                rec.why = f"{rec.why}; not restarted: its worlds closed"
                self.host.say(rec.why)
            elif rec.state is P.RESTARTING and not self.stopping and rec.restart_at <= now \
                    and self.host.reachable(rec.plan.name):  # its host is there (again)
                rec.restarts += 1
                self.host.say(f"restarting {rec.plan.name} (restart {rec.restarts}"
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
            self.host.say(f"the supervisor itself was not running for {stalled:.1f}s"
                          " (stopped, starved or busy); that silence counts against no"
                          " process")
        return awake

    def _check_hung(self, rec: ProcessRecord, now: float) -> None:
        """``now`` is awake time: the supervisor's own stalls never count as silence."""
        limit = rec.plan.hang_timeout
        if rec.beat_every is not None:
            # The library beats from its own thread: silence past the deadline means
            # stopped or wedged. /proc is read only then, to confirm it.
            silent = now - rec.last_beat
            self._responsive(rec, late=silent >= LATE_BEATS * rec.beat_every)
            if silent < limit:
                rec.suspect_since = None
                return
            stopped = self.host.probe(rec.plan.name) == "stopped"
            if rec.suspect_since is None:
                rec.suspect_since = now
            why = hangs.verdict(silent, limit, stopped, now - rec.suspect_since, rec.beat_every)
            if why is not None:
                self._hang(rec, why)
            return
        stopped = self.host.probe(rec.plan.name) == "stopped"  # a plain process: ask /proc
        self._responsive(rec, late=stopped)
        if stopped:
            rec.stopped_since = rec.stopped_since if rec.stopped_since is not None else now
            if now - rec.stopped_since >= limit:
                self._hang(rec, f"stopped for {limit:g}s")
            return
        rec.stopped_since = None

    def _responsive(self, rec: ProcessRecord, late: bool) -> None:
        """Show at once that a running process stopped answering, long before it is
        declared hung; and that it answers again."""
        if late and rec.state is P.RUNNING:
            rec.state = P.UNRESPONSIVE  # RUNNING -> UNRESPONSIVE
            rec.why = f"{rec.plan.name} is unresponsive (" + (
                "its heartbeats are late)" if rec.beat_every is not None else "stopped)")
            self.host.say(rec.why)
        elif not late and rec.state is P.UNRESPONSIVE:
            rec.state = P.RUNNING  # UNRESPONSIVE -> RUNNING
            rec.why = f"{rec.plan.name} responds again"
            self.host.say(rec.why)

    def _hang(self, rec: ProcessRecord, why: str) -> None:
        rec.state, rec.hung = P.HUNG, why  # STARTING|RUNNING -> HUNG
        rec.why = f"{rec.plan.name} hung: {why}; killing it"
        self.host.say(rec.why)
        self.host.signal(rec.plan.name, signal.SIGKILL)

    # -- requests --------------------------------------------------------------------------

    def request_stop(self, reason: str = "stop requested") -> None:
        now = self.host.now()
        if self.stopping:
            self.host.say("stopping now: SIGKILL to every process")
            self.kill_at = now
            self._settle(*self._escalate(now))
            return
        self.stopping = True
        self.state = R.STOPPING  # STARTING|RUNNING -> STOPPING
        self.host.say(f"{reason}: stopping every process (SIGTERM, then SIGKILL after"
                      f" {self.grace:g}s)")
        self.kill_at = now + self.grace
        for rec in self.procs.values():
            if rec.state.alive:
                self.host.signal(rec.plan.name, signal.SIGTERM)
                self.host.signal(rec.plan.name, signal.SIGCONT)  # a stopped one must wake to die
            elif rec.state is P.RESTARTING:
                rec.state, rec.why = P.STOPPED, "its restart was cancelled by the stop"
                self.restarts_due.clear(rec.plan.name)
        self._settle(*self.procs.values())

    def _escalate(self, now: float) -> list[ProcessRecord]:
        """SIGKILL once the grace is over, give up once KILL_WAIT is; the records
        this moved."""
        given_up = []
        if self.kill_at is not None and now >= self.kill_at:
            self.kill_at = None
            self.give_up_at = now + KILL_WAIT
            for rec in self.procs.values():
                if rec.state.alive:
                    self.host.signal(rec.plan.name, signal.SIGKILL)
        elif self.give_up_at is not None and now >= self.give_up_at:
            # Processes stuck in the kernel (D state) ignore even SIGKILL; leave them
            # rather than hang the supervisor forever, and say so.
            for rec in self.procs.values():
                if rec.state.alive:
                    self.host.say(f"{rec.plan.name} (pid {rec.pid}) did not die; giving up")
                    # live -> FAILED: a process left running is a failed job
                    rec.state, rec.why = P.FAILED, "did not die after SIGKILL"
                    given_up.append(rec)
            self.give_up_at = None
        return given_up

    def kill_world(self, world_name: str, rank: int | None, sig: int) -> list[dict]:
        """The fault drill (see drills.py); raises ValueError."""
        return drills.kill_world(self, world_name, rank, sig)

    def signature(self) -> tuple:
        """Changes when anything the status document shows of the run, a process or a
        world changes (cheap: see records.changes)."""
        return self.state, records.changes()

    def deadline(self) -> float | None:
        """The next moment something is due (a restart, a kill), besides the regular
        TICK the loop keeps for hang checks; None if nothing is."""
        times = (self.restarts_due.earliest(), self.kill_at, self.give_up_at)
        return min((t for t in times if t is not None), default=None)
