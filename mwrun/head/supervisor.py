"""The supervisor's decisions: the only place that moves process, world and run states.

It acts through a ``host`` (the event loop in loop.py, or a fake in tests) that
spawns and signals processes, writes the worlds' stores, tells the user, and gives
the time. Events come in as method calls: a process exited, said hello, heartbeat, a
world event from the library, a tick, a control request.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from mwrun.errors import StartError
from mwrun.head import policy
from mwrun.head.states import ProcessState as P
from mwrun.head.states import RunState as R
from mwrun.head.states import WorldState as W
from mwrun.plan.placement import Plan, ProcessPlan, WorldPlan

TICK = 0.5  # seconds between checks for hung processes and due restarts
# A member that never speaks the mwrun protocol (a plain torch.distributed script)
# counts as joined once it has run this long; mwrun cannot see inside its group.
PLAIN_GRACE = 3.0
KILL_WAIT = 5.0  # after SIGKILL, how long to wait for processes stuck in the kernel
LATE_BEATS = 2  # heartbeats missed in a row before a process shows as unresponsive


@dataclass
class ProcessRecord:
    plan: ProcessPlan
    state: P = P.STARTING
    pid: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    started_at: float | None = None  # wall clock, for people
    started: float = 0.0  # monotonic
    restart_at: float | None = None
    generations: dict[str, int] = field(default_factory=dict)  # world -> generation it is in
    ready: set[str] = field(default_factory=set)  # worlds it joined at that generation
    left: set[str] = field(default_factory=set)  # worlds it closed (finished with)
    said_hello: bool = False
    beat_every: float | None = None
    last_beat: float = 0.0
    stopped_since: float | None = None
    hung: str | None = None
    why: str = ""  # the last thing that happened to it, for status


@dataclass
class WorldRecord:
    plan: WorldPlan
    generation: int = 0
    state: W = W.FORMING
    breaks: int = 0
    reason: str | None = None


class Supervisor:
    def __init__(self, plan: Plan, host, grace: float = 10.0):
        self.plan = plan
        self.host = host
        self.grace = grace
        self.state = R.STARTING
        self.procs = {name: ProcessRecord(p) for name, p in plan.processes.items()}
        self.worlds = {name: WorldRecord(w) for name, w in plan.worlds.items()}
        self.stopping = False
        self.failed_stop = False  # the job was stopped because a world said on_failure: stop
        self.kill_at: float | None = None
        self.give_up_at: float | None = None

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        for rec in self.procs.values():
            self._spawn(rec)
        if self.state is R.STARTING:  # STARTING -> RUNNING
            self.state = R.RUNNING
        self._settle()

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
        rec.restart_at = None

    @property
    def finished(self) -> bool:
        return self.state.final

    @property
    def exit_code(self) -> int:
        return 1 if self.state is R.FAILED else 0

    def _settle(self) -> None:
        """Derive world and process states after any event; end the run when nothing is left."""
        now = self.host.now()
        for world in self.worlds.values():
            self._world_progress(world, now)
        for rec in self.procs.values():
            if rec.state is P.STARTING and all(self._joined(rec, w, now) for w in rec.plan.worlds):
                rec.state = P.RUNNING  # STARTING -> RUNNING
        if any(r.state.alive or r.state is P.RESTARTING for r in self.procs.values()):
            return
        failed = self.failed_stop or any(r.state is P.FAILED for r in self.procs.values())
        for world in self.worlds.values():
            world.state = W.CLOSED  # any -> CLOSED: the job is over
        self.state = R.FAILED if failed else R.FINISHED  # RUNNING|STOPPING -> FINISHED|FAILED

    def _joined(self, rec: ProcessRecord, world: str, now: float) -> bool:
        if not rec.state.alive:
            return False
        if world in rec.ready and rec.generations.get(world) == self.worlds[world].generation:
            return True
        return not rec.said_hello and now - rec.started >= PLAIN_GRACE

    def _world_progress(self, world: WorldRecord, now: float) -> None:
        members = [self.procs[m] for m in world.plan.members]
        if world.state is W.BROKEN and all(m.state.alive for m in members):
            world.state = W.FORMING  # BROKEN -> FORMING: everyone is back
        if world.state is W.FORMING and all(self._joined(m, world.plan.name, now)
                                            for m in members):
            world.state, world.reason = W.HEALTHY, None  # FORMING -> HEALTHY

    # -- events ----------------------------------------------------------------------------

    def on_exit(self, name: str, code: int) -> None:
        rec = self.procs[name]
        if not rec.state.alive:
            return
        self._ended(rec, policy.Exit(code, hung=rec.hung))
        self._settle()

    def _ended(self, rec: ProcessRecord, exit: policy.Exit) -> None:
        name = rec.plan.name
        rec.pid, rec.exit_code = None, exit.code
        what = exit.describe(name)
        if self.stopping:
            rec.state = P.EXITED if exit.code == 0 else P.STOPPED  # live -> EXITED|STOPPED
            rec.why = what
            return
        decision = policy.after_exit(rec.plan.restart, rec.plan.max_restarts,
                                     rec.plan.restart_backoff, rec.restarts, exit)
        if decision.restart:
            rec.state, rec.restart_at = P.RESTARTING, self.host.now() + decision.delay
            rec.why = f"{what}; {decision.why} in {decision.delay:g}s"
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

    def _break(self, world: WorldRecord, reason: str) -> None:
        generation = world.generation
        world.state, world.reason = W.BROKEN, reason  # FORMING|HEALTHY -> BROKEN
        world.breaks += 1
        self.host.mark_broken(world.plan.name, generation, reason)
        if self._can_reform(world):
            world.generation += 1
            self.host.open_next(world.plan.name, generation)

    def _nothing_to_join(self, rec: ProcessRecord) -> bool:
        return all(self.worlds[w].state is W.CLOSED for w in rec.plan.worlds)

    def _can_reform(self, world: WorldRecord) -> bool:
        return all(self.procs[m].state.alive or self.procs[m].state is P.RESTARTING
                   for m in world.plan.members)

    def _close_if_hopeless(self, world: WorldRecord) -> None:
        if world.state is W.CLOSED or self._can_reform(world):
            return
        gone = next(self.procs[m] for m in world.plan.members
                    if not (self.procs[m].state.alive or self.procs[m].state is P.RESTARTING))
        reason = gone.why if gone.state is P.FAILED else f"{gone.why} and will not restart"
        world.state, world.reason = W.CLOSED, reason  # any -> CLOSED
        self.host.close_world(world.plan.name, world.generation, reason)

    def on_hello(self, name: str, pid: int, interval: float) -> None:
        rec = self.procs.get(name)
        if rec is None or rec.pid != pid:
            return  # a message from an earlier incarnation
        rec.said_hello, rec.beat_every, rec.last_beat = True, interval, self.host.now()
        self._settle()

    def on_heartbeat(self, name: str, pid: int) -> None:
        rec = self.procs.get(name)
        if rec is not None and rec.pid == pid:
            rec.last_beat = self.host.now()
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
            world.state, world.reason = W.BROKEN, reason
            world.breaks += 1
            if self._can_reform(world):
                world.generation += 1
                self.host.open_next(world_name, generation)
        self._settle()

    def on_tick(self) -> None:
        now = self.host.now()
        for rec in self.procs.values():
            if rec.state is P.RESTARTING and self._nothing_to_join(rec):
                # RESTARTING -> STOPPED: every world it would join has closed for good
                rec.state, rec.why = P.STOPPED, f"{rec.why}; not restarted: its worlds closed"
                self.host.say(rec.why)
            elif rec.state is P.RESTARTING and not self.stopping and rec.restart_at <= now:
                rec.restarts += 1
                self.host.say(f"restarting {rec.plan.name} (restart {rec.restarts}"
                              f" of {rec.plan.max_restarts})")
                self._spawn(rec)
            elif rec.state in (P.STARTING, P.RUNNING, P.UNRESPONSIVE) and not self.stopping:
                self._check_hung(rec, now)
        if self.stopping:
            self._escalate(now)
        self._settle()

    def _check_hung(self, rec: ProcessRecord, now: float) -> None:
        timeout = min(self.worlds[w].plan.timeout for w in rec.plan.worlds)
        if rec.beat_every is not None:
            # The library beats from its own thread: silence for a whole timeout means
            # stopped or wedged. /proc is read only then, to say which.
            self._responsive(rec, late=now - rec.last_beat >= LATE_BEATS * rec.beat_every)
            if now - rec.last_beat >= timeout:
                stopped = self.host.probe(rec.plan.name) == "stopped"
                self._hang(rec, ("stopped, " if stopped else "") + f"no heartbeat for {timeout:g}s")
            return
        stopped = self.host.probe(rec.plan.name) == "stopped"  # a plain process: ask /proc
        self._responsive(rec, late=stopped)
        if stopped:
            rec.stopped_since = rec.stopped_since if rec.stopped_since is not None else now
            if now - rec.stopped_since >= timeout:
                self._hang(rec, f"stopped for {timeout:g}s")
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
            self._escalate(now)
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
        self._settle()

    def _escalate(self, now: float) -> None:
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
                    rec.state, rec.why = P.STOPPED, "did not die after SIGKILL"
            self.give_up_at = None

    def kill_world(self, world_name: str, rank: int | None, sig: int) -> list[dict]:
        """The fault drill: signal WORLD's own members (or one rank). Raises ValueError."""
        world = self.worlds.get(world_name)
        if world is None:
            raise ValueError(f"no world named {world_name!r}; worlds: {', '.join(self.worlds)}")
        members = world.plan.members
        if rank is not None:
            if not 0 <= rank < len(members):
                raise ValueError(f"world {world_name} has ranks 0..{len(members) - 1},"
                                 f" not {rank}")
            targets = [members[rank]]
        else:
            targets = [m for m in members if len(self.procs[m].plan.worlds) == 1]
            if not targets:
                raise ValueError(f"every member of {world_name} is also in another world;"
                                 " name one with --rank")
        hit = []
        for name in targets:
            rec = self.procs[name]
            if rec.state.alive:
                self.host.signal(name, sig)
                hit.append({"process": name, "pid": rec.pid, "rank": members.index(name)})
        if not hit:
            states = ", ".join(f"{t}: {self.procs[t].state.value}" for t in targets)
            raise ValueError(f"no live member of {world_name} to signal ({states})")
        names = ", ".join(f"{h['process']} (pid {h['pid']})" for h in hit)
        self.host.say(f"kill-world {world_name}: {signal.Signals(sig).name} to {names}")
        return hit

    def signature(self) -> tuple:
        """Everything the status document shows that events change (cheap to compare)."""
        return (self.state, tuple((r.state, r.pid, r.restarts, r.exit_code, r.why)
                                  for r in self.procs.values()),
                tuple((w.state, w.generation, w.breaks, w.reason) for w in self.worlds.values()))

    def deadline(self) -> float | None:
        """The next moment something is due (a restart, a kill), besides the regular
        TICK the loop keeps for hang checks; None if nothing is."""
        times = [r.restart_at for r in self.procs.values()
                 if r.state is P.RESTARTING and r.restart_at is not None]
        times += [t for t in (self.kill_at, self.give_up_at) if t is not None]
        return min(times, default=None)
