"""The supervisor's decisions, driven by scripted events and a fake clock."""

import signal

import pytest

from mwrun.errors import StartError
from mwrun.head.decide import events as ev
from mwrun.head.decide.policy import STABLE_AFTER
from mwrun.head.decide.processbook import Made
from mwrun.head.decide.supervisor import TICK, Supervisor
from mwrun.head.decide.worldbook import Worlds
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import Start
from mwrun.schema import WorldState as W

STAR = """\
timeout: 10
processes:
  leader: {cmd: x, restart: on-failure}
  worker: {replicas: 2, cmd: y, restart: on-failure, max_restarts: 2, restart_backoff: 1}
worlds:
  world1: {members: [leader, worker-0]}
  world2: {members: [leader, worker-1]}
"""


class FakeHost:
    def __init__(self):
        self.t = 100.0
        self.next_pid = 1000
        self.calls = []
        self.status = {}
        self.fail_start = set()
        self.unreachable = set()
        self.events = []  # what the supervisor emitted, in order
        self.whys = []  # (process, signal, why) as the supervisor told the host
        self.starts = []  # (process, incarnation) of every start asked
        self.admits = []  # (world, generation, incarnations) of every generation opened
        self.told = []  # (process, message) down to a library

    def bus(self):
        return ev.Events((self.hear,))

    def hear(self, event):
        self.events.append(event)
        if isinstance(event, ev.Said):
            self.calls.append(("say", event.text))

    def reachable(self, name):
        return name not in self.unreachable

    def tell(self, process, message):
        self.told.append((process, message))

    def now(self):
        return self.t

    def wall(self):
        return 1_800_000_000.0 + self.t

    def spawn(self, name, generations, restarts, incarnation=1):
        self.starts.append((name, incarnation))
        if name in self.fail_start:
            raise StartError("No such file or directory: 'x'")
        self.next_pid += 1
        self.calls.append(("spawn", name, dict(generations), restarts))
        return Made(self.next_pid, Start.COLD)

    def signal(self, name, sig, why):
        self.calls.append(("signal", name, sig))
        self.whys.append((name, sig, why))

    def mark_broken(self, world, generation, reason):
        self.calls.append(("broken", world, generation, reason))

    def open_next(self, world, generation, incarnations=None):
        self.calls.append(("open", world, generation))
        self.admits.append((world, generation + 1, incarnations))

    def close_world(self, world, generation, reason, ended=False):
        self.calls.append(("close", world, generation, reason))

    def probe(self, name):
        return self.status.get(name, "sleeping")

    def of(self, kind):
        return [c[1:] for c in self.calls if c[0] == kind]


def make(text=STAR, grace=5.0, host=None, subscribers=()):
    """A started supervisor on a fake host; ``subscribers`` hear its events too."""
    topo = parse(text, "t.yaml")
    plan = place(topo, {"localhost": HostInventory(True, (0, 1), ())}, lambda a, t: 40000)
    host = host or FakeHost()
    sup = Supervisor(plan, host, ev.Events((host.hear, *subscribers)), grace=grace)
    sup.start()
    return sup, host


def join_all(sup):
    for name, rec in sup.procs.items():
        sup.members.on_hello(name, rec.worker.pid, 1.0)
        for world in rec.plan.worlds:
            sup.members.on_world_event(name, rec.worker.pid, world,
                                       sup.worlds[world].generation, "ready")


def test_start_spawns_everyone_and_worlds_form_when_all_joined():
    sup, host = make()
    assert [c[0] for c in host.of("spawn")] == ["leader", "worker-0", "worker-1"]
    assert host.of("spawn")[0] == ("leader", {"world1": 0, "world2": 0}, 0)
    assert sup.state is R.RUNNING
    assert all(w.state is W.FORMING for w in sup.worlds.values())
    join_all(sup)
    assert all(w.state is W.HEALTHY for w in sup.worlds.values())
    assert all(r.state is P.RUNNING for r in sup.procs.values())


def test_crash_isolates_the_world_and_restarts_only_the_failed_process():
    sup, host = make()
    join_all(sup)
    sup.on_exit("worker-0", -9)
    assert host.of("broken") == [("world1", 0, "worker-0 was killed by SIGKILL")]
    assert host.of("open") == [("world1", 0)]
    assert sup.worlds["world1"].state is W.BROKEN and sup.worlds["world1"].generation == 1
    assert sup.worlds["world2"].state is W.HEALTHY  # untouched
    assert sup.procs["worker-0"].state is P.RESTARTING
    assert sup.procs["leader"].state is P.RUNNING
    assert sup.deadline() == host.t  # the first restart is due at once
    sup.on_tick()
    assert host.of("spawn")[-1] == ("worker-0", {"world1": 1}, 1)
    assert sup.worlds["world1"].state is W.FORMING
    rec = sup.procs["worker-0"]
    sup.members.on_world_event("worker-0", rec.worker.pid, "world1", 1, "ready")
    assert sup.worlds["world1"].state is W.FORMING  # the leader has not rejoined yet
    leader = sup.procs["leader"]
    sup.members.on_world_event("leader", leader.worker.pid, "world1", 1, "ready")
    assert sup.worlds["world1"].state is W.HEALTHY
    assert sup.worlds["world1"].breaks == 1
    assert [s for s in host.of("signal")] == []  # nobody else was touched


def test_each_generation_admits_one_incarnation_per_rank():
    """Fencing: every start counts one more; a generation opened after a crash admits the
    live members as they are and the crashed one as its next start, which is the start
    that comes."""
    sup, host = make()
    join_all(sup)
    assert host.starts == [("leader", 1), ("worker-0", 1), ("worker-1", 1)]
    assert [w.admitted for w in sup.worlds.values()] == [[1, 1], [1, 1]]  # generation 0
    sup.on_exit("worker-0", -9)
    assert host.admits == [("world1", 1, [1, 2])]
    sup.on_tick()
    assert host.starts[-1] == ("worker-0", 2) and sup.procs["worker-0"].worker.incarnation == 2


def test_a_generation_that_counts_on_a_start_that_died_is_spent():
    """A member broke the world while its peer was alive but stopped; the next generation
    admitted that peer as it was. Killed as hung, it will never join it: that
    generation is spent, and the one after admits its next start (never a generation
    that refuses every copy of a rank)."""
    sup, host = make()
    join_all(sup)
    leader, worker0 = sup.procs["leader"], sup.procs["worker-0"]
    sup.members.on_world_event("leader", leader.worker.pid,
                               "world1", 0, "broken", "a call timed out")
    assert host.admits == [("world1", 1, [1, 1])]  # the worker lives: as it is
    sup.on_exit("worker-0", -9)  # then it was killed (a hang)
    assert ("broken", "world1", 1, "worker-0 was killed by SIGKILL") in host.calls
    assert host.admits[-1] == ("world1", 2, [1, 2])
    sup.on_tick()
    assert host.starts[-1] == ("worker-0", 2)
    assert sup.worlds["world1"].generation == 2 and worker0.worker.generations == {"world1": 2}


def test_backoff_doubles_in_a_crash_loop_and_resets_once_stable():
    sup, host = make(STAR.replace("max_restarts: 2", "max_restarts: 9"))
    join_all(sup)
    for expected_delay in (0.0, 1.0, 2.0):  # crashes before it rejoins: a crash loop
        sup.on_exit("worker-1", 1)
        restart_at = sup.procs["worker-1"].restart_at
        assert restart_at - host.t == expected_delay
        host.t = restart_at
        sup.on_tick()
        assert sup.procs["worker-1"].state is P.STARTING
    rec = sup.procs["worker-1"]
    sup.members.on_world_event("worker-1", rec.worker.pid, "world2",
                               sup.worlds["world2"].generation, "ready")
    leader = sup.procs["leader"]
    sup.members.on_world_event("leader", leader.worker.pid, "world2",
                               sup.worlds["world2"].generation, "ready")
    assert rec.state is P.RUNNING
    host.t += 1.0  # rejoined, but not for long: still the same loop
    sup.on_exit("worker-1", 1)
    assert rec.restart_at - host.t == 4.0
    host.t = rec.restart_at
    sup.on_tick()
    sup.members.on_world_event("worker-1", rec.worker.pid, "world2",
                               sup.worlds["world2"].generation, "ready")
    sup.members.on_world_event("leader", leader.worker.pid, "world2",
                               sup.worlds["world2"].generation, "ready")
    host.t += STABLE_AFTER  # up and joined long enough: the next failure is a new fault
    sup.on_exit("worker-1", 1)
    assert rec.restart_at == host.t and rec.why.endswith("at once")


def test_a_drills_kill_restarts_at_once_even_inside_a_crash_loop():
    sup, host = make(STAR.replace("max_restarts: 2", "max_restarts: 9"))
    join_all(sup)
    rec = sup.procs["worker-1"]
    sup.on_exit("worker-1", 1)  # a crash: restarted at once, a crash loop begins
    host.t = rec.restart_at
    sup.on_tick()
    sup.drills.kill_world("world2", None, signal.SIGKILL)  # the drill hits it again, at once
    sup.on_exit("worker-1", -9)
    assert rec.restart_at == host.t and rec.why.endswith("at once")
    host.t = rec.restart_at
    sup.on_tick()
    sup.on_exit("worker-1", 1)  # crashing by itself after that is the loop again
    assert rec.restart_at - host.t == 1.0


def test_restart_budget_exhausted_fails_the_process_closes_the_world_and_the_job():
    sup, host = make()
    join_all(sup)
    for _ in range(2):
        sup.on_exit("worker-1", 3)
        host.t = sup.procs["worker-1"].restart_at
        sup.on_tick()
    sup.on_exit("worker-1", 3)
    rec = sup.procs["worker-1"]
    assert rec.state is P.FAILED
    assert "no restarts left (max_restarts: 2)" in rec.why
    [close] = host.of("close")
    assert close[0] == "world2" and close[2].startswith("worker-1 exited with code 3")
    assert sup.worlds["world2"].state is W.CLOSED
    assert sup.worlds["world1"].state is W.HEALTHY
    for name in ("leader", "worker-0"):
        sup.on_exit(name, 0)
    assert sup.finished and sup.state is R.FAILED and sup.exit_code == 1


def test_clean_finish_exit_code_zero():
    sup, _ = make()
    join_all(sup)
    for name in sup.procs:
        sup.on_exit(name, 0)
    assert sup.state is R.FINISHED and sup.exit_code == 0
    assert all(w.state is W.CLOSED for w in sup.worlds.values())


# The call timeout below the hang deadline, as the timeout chain wants (plan/timeouts.py).
HANGS = STAR.replace("timeout: 10\n", "timeout: 5\nhang_timeout: 10\n")


def next_tick(sup, host):
    """The loop's next tick: TICK later (what is due is due by then, not before)."""
    host.t += TICK
    sup.on_tick()


def run_for(sup, host, seconds, beating=()):
    """Let ``seconds`` pass as the loop does: a tick every TICK, with a heartbeat from
    each process in ``beating`` every tick."""
    for _ in range(round(seconds / TICK)):
        host.t += TICK
        for name in beating:
            sup.members.on_heartbeat(name, sup.procs[name].worker.pid)
        sup.on_tick()


def test_stopped_process_is_declared_hung_after_its_hang_timeout_and_killed():
    sup, host = make(HANGS)
    join_all(sup)
    host.status["worker-0"] = "stopped"
    run_for(sup, host, 9.5, beating=("leader", "worker-1"))  # a stopped one cannot beat
    assert sup.procs["worker-0"].state is P.UNRESPONSIVE
    run_for(sup, host, 0.5, beating=("leader", "worker-1"))
    assert sup.procs["worker-0"].state is P.HUNG
    assert ("worker-0", signal.SIGKILL) in host.of("signal")
    sup.on_exit("worker-0", -9)
    assert host.of("broken")[-1] == ("world1", 0, "worker-0 hung (stopped, no heartbeat for"
                                                  " 10s) and was killed")
    assert sup.procs["worker-0"].state is P.RESTARTING


def test_a_stopped_plain_process_is_found_through_proc():
    sup, host = make(HANGS)  # no hello: plain torch.distributed scripts never beat
    host.status["worker-1"] = "stopped"
    next_tick(sup, host)
    run_for(sup, host, 9.5)
    assert sup.procs["worker-1"].state is not P.HUNG
    run_for(sup, host, 0.5)
    assert sup.procs["worker-1"].worker.hung == "stopped for 10s"


def test_a_silent_process_is_hung_only_once_a_fresh_grace_confirms_it():
    sup, host = make(HANGS)
    join_all(sup)
    run_for(sup, host, 10.0, beating=("leader", "worker-1"))
    # suspect (unresponsive already: its beats are late), not stopped: the grace begins
    assert sup.procs["worker-0"].state is P.UNRESPONSIVE
    run_for(sup, host, 2.5, beating=("leader", "worker-1"))
    assert sup.procs["worker-0"].state is P.UNRESPONSIVE  # the grace is 3 of its 1 s beats
    run_for(sup, host, 0.5, beating=("leader", "worker-1"))
    assert sup.procs["worker-0"].state is P.HUNG
    assert sup.procs["worker-0"].worker.hung == "no heartbeat for 13s"
    assert sup.procs["leader"].state is P.RUNNING


def test_a_beat_during_the_grace_clears_the_suspicion():
    sup, host = make(HANGS)
    join_all(sup)
    run_for(sup, host, 10.0, beating=("leader", "worker-1"))
    run_for(sup, host, 2.0, beating=("leader", "worker-0", "worker-1"))
    run_for(sup, host, 9.5, beating=("leader", "worker-1"))
    assert sup.procs["worker-0"].state is P.UNRESPONSIVE  # late again, not hung
    assert ("worker-0", signal.SIGKILL) not in host.of("signal")


def test_the_supervisors_own_stall_is_forgiven():
    sup, host = make(HANGS)
    join_all(sup)
    run_for(sup, host, 5.0, beating=list(sup.procs))
    host.t += 30.0  # SIGSTOP, a debugger, a paused VM: no turn for 30 s
    sup.on_tick()
    run_for(sup, host, 1.0)  # the beats sent meanwhile are still being read
    assert all(r.state is P.RUNNING for r in sup.procs.values())
    assert not host.of("signal")
    assert any("supervisor itself was not running for 29.5s" in c[0] for c in host.of("say"))
    run_for(sup, host, 20.0)  # silent while the supervisor runs: that does count
    assert all(r.state is P.HUNG for r in sup.procs.values())


def test_a_slow_start_is_not_taken_for_a_stall():
    class SlowSpawns(FakeHost):
        def spawn(self, name, generations, restarts, incarnation=1):
            self.t += 3.0  # a loaded machine: every spawn takes seconds
            return super().spawn(name, generations, restarts)

    host = SlowSpawns()
    sup = Supervisor(place(parse(HANGS, "t.yaml"), {"localhost": HostInventory(True, (0, 1), ())},
                           lambda a, t: 40000), host, host.bus())
    sup.start()
    sup.on_tick()
    assert not [c for c in host.of("say") if "not running" in c[0]]


def test_an_infinite_hang_timeout_turns_hang_detection_off():
    sup, host = make(HANGS.replace("hang_timeout: 10", "hang_timeout: .inf"))
    join_all(sup)
    host.status["worker-0"] = "stopped"
    run_for(sup, host, 300.0)
    assert sup.procs["worker-0"].state is P.UNRESPONSIVE  # stopped, and never hung
    assert all(r.state in (P.RUNNING, P.UNRESPONSIVE) for r in sup.procs.values())
    assert not host.of("signal")


def test_the_default_hang_timeout_is_well_above_the_call_timeout():
    sup, _ = make()
    assert {r.plan.hang_timeout for r in sup.procs.values()} == {60.0}


def test_on_failure_stop_stops_the_whole_job_and_fails_it():
    sup, host = make(STAR.replace("world2: {members: [leader, worker-1]}",
                                  "world2: {members: [leader, worker-1], on_failure: stop}"))
    join_all(sup)
    sup.on_exit("worker-1", 2)
    assert sup.state is R.STOPPING
    assert ("leader", signal.SIGTERM) in host.of("signal")
    assert ("worker-0", signal.SIGTERM) in host.of("signal")
    for name in ("leader", "worker-0"):
        sup.on_exit(name, -15)
    assert sup.state is R.FAILED and sup.exit_code == 1


def test_stop_terms_then_kills_after_grace_and_counts_as_success():
    sup, host = make(grace=5.0)
    join_all(sup)
    sup.request_stop("Ctrl-C")
    assert sup.state is R.STOPPING
    assert host.of("signal")[:2] == [("leader", signal.SIGTERM), ("leader", signal.SIGCONT)]
    sup.on_exit("leader", 0)
    sup.on_exit("worker-0", -15)
    host.t += 5.0
    sup.on_tick()
    assert ("worker-1", signal.SIGKILL) in host.of("signal")
    assert ("leader", signal.SIGKILL) not in host.of("signal")
    sup.on_exit("worker-1", -9)
    assert sup.procs["leader"].state is P.EXITED
    assert sup.procs["worker-1"].state is P.STOPPED
    assert sup.state is R.FINISHED and sup.exit_code == 0
    assert len(host.of("spawn")) == 3  # no restarts during a stop


def test_second_stop_kills_at_once():
    sup, host = make()
    sup.request_stop("Ctrl-C")
    sup.request_stop("SIGTERM received")
    assert ("worker-1", signal.SIGKILL) in host.of("signal")
    # what asked again is said: a SIGKILL nobody typed is traced to its sender's signal
    assert ("SIGTERM received: stopping now: SIGKILL to every process",) in host.of("say")


def test_kill_world_signals_only_exclusive_members_or_one_rank():
    sup, host = make()
    join_all(sup)
    hit = sup.drills.kill_world("world1", None, signal.SIGKILL)
    assert [h["process"] for h in hit] == ["worker-0"]
    assert host.of("signal") == [("worker-0", signal.SIGKILL)]
    hit = sup.drills.kill_world("world2", 0, signal.SIGSTOP)
    assert hit[0]["process"] == "leader" and hit[0]["rank"] == 0
    with pytest.raises(ValueError, match="no world named 'nope'"):
        sup.drills.kill_world("nope", None, signal.SIGKILL)
    with pytest.raises(ValueError, match=r"ranks 0\.\.1, not 5"):
        sup.drills.kill_world("world1", 5, signal.SIGKILL)


def test_kill_world_without_exclusive_members_needs_a_rank():
    text = ("processes:\n  a: {cmd: x}\n  b: {cmd: y}\n"
            "worlds:\n  w1: {members: [a, b]}\n  w2: {members: [b, a]}\n")
    sup, _ = make(text)
    with pytest.raises(ValueError, match="name one with --rank"):
        sup.drills.kill_world("w1", None, signal.SIGKILL)


def test_plain_members_are_never_taken_as_joined_for_having_run_a_while():
    sup, host = make()
    host.t += 60.0  # once, 3 s of silence passed for having joined
    sup.on_tick()
    assert all(w.state is W.FORMING for w in sup.worlds.values())
    assert all(r.state is P.STARTING for r in sup.procs.values())


def test_a_plain_group_joins_when_its_rendezvous_shows_in_the_store():
    sup, host = make()
    assert sup.plain.forming() == ["world1", "world2"]
    sup.plain.on_store_seen("world1", {0})  # rank 1 has not reached init_process_group yet
    assert sup.worlds["world1"].state is W.FORMING
    sup.plain.on_store_seen("world1", {0, 1})
    assert sup.worlds["world1"].state is W.HEALTHY
    assert sup.worlds["world1"].healthy_since == host.t
    assert sup.procs["worker-0"].state is P.RUNNING
    assert sup.procs["leader"].state is P.STARTING  # world2 has not formed
    assert sup.plain.forming() == ["world2"]


def test_a_plain_group_mwrun_cannot_read_is_unknown_never_healthy():
    sup, host = make()
    sup.plain.on_store_seen("world2", None)
    host.t += 60.0
    sup.on_tick()
    world = sup.worlds["world2"]
    assert world.state is W.FORMING and world.opaque.startswith("mwrun cannot see")


def test_an_mwrun_member_still_starting_is_not_joined_by_the_store():
    sup, _ = make()
    for name, rec in sup.procs.items():
        sup.members.on_hello(name, rec.worker.pid, 1.0)
    assert sup.plain.forming() == []
    sup.plain.on_store_seen("world1", {0, 1})  # said hello: only its own "ready" counts
    assert sup.worlds["world1"].state is W.FORMING


def test_a_command_that_cannot_start_fails_at_once_and_only_its_world_closes():
    topo_text = STAR
    topo = parse(topo_text, "t.yaml")
    plan = place(topo, {"localhost": HostInventory(True, (0,), ())}, lambda a, t: 40000)
    host = FakeHost()
    host.fail_start.add("worker-1")
    sup = Supervisor(plan, host, host.bus())
    sup.start()
    rec = sup.procs["worker-1"]
    assert rec.state is P.FAILED
    assert rec.why.startswith("worker-1 could not start: No such file")
    assert sup.worlds["world2"].state is W.CLOSED
    join_all(sup)
    assert sup.worlds["world1"].state is W.HEALTHY


def test_messages_from_an_earlier_incarnation_are_ignored():
    sup, host = make()
    old_pid = sup.procs["worker-0"].worker.pid
    sup.on_exit("worker-0", 1)
    host.t += 1.0
    sup.on_tick()
    sup.members.on_hello("worker-0", old_pid, 1.0)
    assert not sup.procs["worker-0"].worker.said_hello
    sup.members.on_world_event("worker-0", old_pid, "world1", 1, "ready")
    assert "world1" not in sup.procs["worker-0"].worker.ready


def test_a_member_reported_break_moves_the_world_to_its_next_generation():
    sup, host = make()
    join_all(sup)
    leader = sup.procs["leader"]
    sup.members.on_world_event("leader", leader.worker.pid,
                               "world2", 0, "broken", "rank 0: timed out")
    # everyone is alive, so the world goes straight on to form its next generation
    world = sup.worlds["world2"]
    assert (world.state, world.breaks, world.reason) == (W.FORMING, 1, "rank 0: timed out")
    assert host.of("open") == [("world2", 0)]
    assert host.of("broken") == []  # the member wrote the store itself
    assert sup.worlds["world2"].generation == 1


def test_a_member_that_finishes_closes_its_world_without_a_break():
    sup, host = make()
    join_all(sup)
    rec = sup.procs["worker-0"]
    sup.members.on_world_event("worker-0", rec.worker.pid, "world1", 0, "closed")
    leader = sup.procs["leader"]
    # the leader's call fails as the worker leaves: not a break to re-form from
    sup.members.on_world_event("leader", leader.worker.pid,
                               "world1", 0, "broken", "rank 1 left the world")
    sup.on_exit("worker-0", 0)
    world = sup.worlds["world1"]
    assert (world.state, world.breaks, world.generation) == (W.CLOSED, 0, 0)
    assert host.of("broken") == [] and host.of("open") == []
    assert host.of("close") == [("world1", 0, "worker-0 exited normally and will not restart")]


def test_no_restart_into_worlds_that_have_closed():
    sup, host = make()
    join_all(sup)
    sup.on_exit("worker-0", -9)  # restarting, backoff 1 s
    sup.on_exit("leader", 0)  # meanwhile the leader finishes: world1 can never form again
    assert sup.worlds["world1"].state is W.CLOSED
    host.t += 2
    sup.on_tick()
    rec = sup.procs["worker-0"]
    assert rec.state is P.FAILED and rec.why.endswith("not restarted: its worlds closed")
    assert [c[0] for c in host.of("spawn")] == ["leader", "worker-0", "worker-1"]
    sup.on_exit("worker-1", 0)
    # Its crash was never repaired: a CI pipeline must see the job fail.
    assert sup.state is R.FAILED and sup.exit_code == 1


def test_a_clean_exit_not_restarted_into_closed_worlds_is_no_failure():
    sup, host = make(STAR.replace("restart: on-failure, max", "restart: always, max"))
    join_all(sup)
    sup.on_exit("worker-0", 0)  # restart: always, backoff 1 s
    sup.on_exit("leader", 0)
    host.t += 2
    sup.on_tick()
    assert sup.procs["worker-0"].state is P.EXITED
    sup.on_exit("worker-1", 0)
    sup.on_tick()
    assert sup.state is R.FINISHED and sup.exit_code == 0


def test_a_process_that_does_not_die_after_sigkill_fails_the_job():
    sup, host = make(grace=1.0)
    join_all(sup)
    sup.request_stop("Ctrl-C")
    for name in ("leader", "worker-0"):
        sup.on_exit(name, -15)
    host.t += 1.0
    sup.on_tick()  # SIGKILL to worker-1, which is stuck in the kernel
    assert ("worker-1", signal.SIGKILL) in host.of("signal")
    host.t += 10.0
    sup.on_tick()
    assert sup.procs["worker-1"].state is P.FAILED
    assert sup.state is R.FAILED and sup.exit_code == 1


def test_a_process_that_just_beat_is_not_probed():
    sup, host = make()
    join_all(sup)
    host.status["worker-0"] = "stopped"  # what /proc would say, were it asked
    host.t += 1.5
    sup.members.on_heartbeat("worker-0", sup.procs["worker-0"].worker.pid)
    host.t += 20
    sup.members.on_heartbeat("worker-0", sup.procs["worker-0"].worker.pid)
    sup.on_tick()
    assert sup.procs["worker-0"].state is P.RUNNING


def test_after_bye_silence_is_not_a_hang():
    sup, host = make()
    join_all(sup)
    sup.members.on_bye("worker-0", sup.procs["worker-0"].worker.pid)
    host.t += 60
    sup.on_tick()
    assert sup.procs["worker-0"].state is P.RUNNING
    assert ("worker-0", signal.SIGKILL) not in host.of("signal")


def test_a_lost_host_fails_its_process_breaks_its_world_and_restarts_once_back():
    sup, host = make()
    # worker-0 is on a host that is lost: a failure like a crash, with its reason.
    host.unreachable.add("worker-0")
    sup.on_exit("worker-0", None, lost="host node1 lost")
    assert ("world1", 0, "worker-0 failed: host node1 lost") in host.of("broken")
    assert sup.procs["worker-0"].state is P.RESTARTING
    host.t += 100
    sup.on_tick()
    assert sup.procs["worker-0"].state is P.RESTARTING  # not while the host is away
    host.unreachable.clear()
    next_tick(sup, host)
    assert sup.procs["worker-0"].state is P.STARTING
    assert [c for c in host.of("spawn") if c[0] == "worker-0"][-1][2] == 1


def test_heartbeats_that_change_nothing_emit_nothing_and_a_change_is_told():
    sup, host = make()
    join_all(sup)
    host.events.clear()
    for _ in range(3):
        host.t += 0.5
        for name, rec in sup.procs.items():
            sup.members.on_heartbeat(name, rec.worker.pid)
        sup.on_tick()
    assert host.events == []  # nothing shown changed: state.json is not rewritten
    sup.on_exit("worker-0", -9)
    assert host.events[0] == ev.Exited("worker-0", 1002, -9, P.RESTARTING,
                                       "worker-0 was killed by SIGKILL; restart 1 of 2 at once")


def _pairs(n: int) -> str:
    procs = "".join(f"  p{i}: {{cmd: x, restart: on-failure}}\n" for i in range(n))
    worlds = "".join(f"  w{i}: {{members: [p{2 * i}, p{2 * i + 1}]}}\n" for i in range(n // 2))
    return f"timeout: 10\nprocesses:\n{procs}worlds:\n{worlds}"


@pytest.mark.parametrize("n", [10, 1000])
def test_the_work_of_one_event_is_what_it_touches_not_the_whole_job(n, monkeypatch):
    """One member's exit, hello or ready derives the states of its own worlds only: at
    1,000 processes as at 10 (it once re-derived every world after every event)."""
    sup, _ = make(_pairs(n))
    join_all(sup)
    assert all(w.state is W.HEALTHY for w in sup.worlds.values())
    derived = []
    real = Worlds.progress
    monkeypatch.setattr(Worlds, "progress",
                        lambda self, world, now: derived.append(world) or real(self, world, now))
    sup.on_exit("p0", -9)
    sup.members.on_hello("p1", sup.procs["p1"].worker.pid, 1.0)
    assert [w.plan.name for w in derived] == ["w0", "w0"]
    assert sup.worlds["w0"].state is W.BROKEN and sup.deadline() is not None


def test_a_stall_spent_waiting_for_a_cpu_is_said_to_be_starvation():
    from mwrun.head.decide.hangs import AwakeClock
    waits = iter([1.0, 1.0, 5.5, 5.6, 5.6])  # seconds waited for a CPU, as schedstat says
    clock = AwakeClock(100.0, 0.05, lambda: next(waits))
    clock.read(100.6)  # a sample
    assert clock.read(105.6)[1] == pytest.approx(4.95) and clock.starved == pytest.approx(4.5)
    clock.read(106.2)
    # not waiting for a CPU all that time: stopped (or the supervisor blocked itself)
    assert clock.read(110.2)[1] == pytest.approx(3.95) and clock.starved == 0.0
    blind = AwakeClock(0.0, 0.05, lambda: None)  # no /proc
    blind.read(3.0)
    assert blind.starved is None
