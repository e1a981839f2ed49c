"""A process whose heartbeats are late shows as unresponsive at once, hung only later."""

import signal

from mwrun.schema import ProcessState as P
from tests.unit.test_supervisor import HANGS, TICK, FakeHost, join_all, make, next_tick, run_for


def test_late_heartbeats_show_unresponsive_then_running_again():
    sup, host = make(HANGS)  # hang_timeout 10, beats every 1 s
    join_all(sup)
    run_for(sup, host, 1.5, beating=("leader", "worker-1"))
    assert sup.procs["worker-0"].state is P.RUNNING  # one beat late is no news
    run_for(sup, host, 1.0, beating=("leader", "worker-1"))
    rec = sup.procs["worker-0"]
    assert rec.state is P.UNRESPONSIVE and rec.state.alive
    assert ("worker-0 is unresponsive (its heartbeats are late)",) in host.of("say")
    assert sup.worlds["world1"].breaks == 0  # nothing is decided on it yet
    sup.members.on_heartbeat("worker-0", rec.worker.pid)
    assert rec.state is P.RUNNING
    assert ("worker-0 responds again",) in host.of("say")


def test_unresponsive_becomes_hung_after_the_hang_timeout():
    sup, host = make(HANGS)
    join_all(sup)
    run_for(sup, host, 9.5, beating=("leader", "worker-1"))
    assert sup.procs["worker-0"].state is P.UNRESPONSIVE
    run_for(sup, host, 6.0, beating=("leader", "worker-1"))  # the deadline, then the grace
    assert sup.procs["worker-0"].state is P.HUNG


def test_a_stopped_plain_process_is_unresponsive_as_soon_as_proc_says_so():
    sup, host = make(HANGS)  # no hello: plain scripts never beat
    for world in ("world1", "world2"):
        sup.plain.on_store_seen(world, {0, 1})  # their groups met in the stores
    assert sup.procs["worker-1"].state is P.RUNNING
    host.status["worker-1"] = "stopped"
    next_tick(sup, host)
    assert sup.procs["worker-1"].state is P.UNRESPONSIVE
    host.status["worker-1"] = "sleeping"
    next_tick(sup, host)
    assert sup.procs["worker-1"].state is P.RUNNING


def hello_every(sup, interval):
    """Every process joined, each saying it beats every ``interval`` seconds when idle."""
    for name, rec in sup.procs.items():
        sup.members.on_hello(name, rec.worker.pid, interval)
        for world in rec.plan.worlds:
            sup.members.on_world_event(name, rec.worker.pid, world, 0, "ready")


class Probes(FakeHost):
    """Counts the /proc reads the supervisor asks for."""

    def __init__(self):
        super().__init__()
        self.probed = []

    def probe(self, name):
        self.probed.append(name)
        return super().probe(name)


def test_a_beat_is_late_by_the_pace_the_process_said_not_its_idle_interval():
    sup, host = make(HANGS)
    hello_every(sup, 5.0)  # idle, it would beat every 5 s; while its calls move, every 1 s
    rec = sup.procs["worker-0"]
    sup.members.on_heartbeat("worker-0", rec.worker.pid, 1.0)
    run_for(sup, host, 1.5, beating=("leader", "worker-1"))
    assert rec.state is P.RUNNING  # its next beat is due; not late yet
    run_for(sup, host, 1.0, beating=("leader", "worker-1"))
    assert (rec.state, rec.why) == (P.UNRESPONSIVE,
                                    "worker-0 is unresponsive (its heartbeats are late)")
    sup.members.on_heartbeat("worker-0", rec.worker.pid, 5.0)  # back, idle: 5 s to its next beat
    run_for(sup, host, 9.5, beating=("leader", "worker-1"))
    assert rec.state is P.RUNNING


def test_a_stopped_library_process_is_unresponsive_once_a_beat_is_missing():
    sup, host = make(HANGS)
    hello_every(sup, 5.0)
    host.status["worker-0"] = "stopped"  # SIGSTOP from anyone: only /proc knows
    run_for(sup, host, 5.0, beating=("leader", "worker-1"))
    assert sup.procs["worker-0"].state is P.RUNNING  # no beat is missing yet
    run_for(sup, host, 0.5, beating=("leader", "worker-1"))
    assert sup.procs["worker-0"].state is P.UNRESPONSIVE  # 5.5 s, not two beats (10 s)
    assert ("worker-0 is unresponsive (stopped)",) in host.of("say")


def test_a_drill_stop_shows_unresponsive_at_the_next_tick_and_cont_running_again():
    sup, host = make(HANGS, host=Probes())
    hello_every(sup, 5.0)
    run_for(sup, host, 3.0, beating=list(sup.procs))
    assert host.probed == []  # processes that beat on time cost no /proc read
    sup.drills.kill_world("world1", None, signal.SIGSTOP)
    host.status["worker-0"] = "stopped"
    next_tick(sup, host)
    rec = sup.procs["worker-0"]
    assert (rec.state, rec.why) == (P.UNRESPONSIVE, "worker-0 is unresponsive (stopped)")
    assert set(host.probed) == {"worker-0"}
    host.status["worker-0"] = "sleeping"  # SIGCONT: it beats again
    sup.members.on_heartbeat("worker-0", rec.worker.pid, 1.0)
    assert rec.state is P.RUNNING
    probed = len(host.probed)
    run_for(sup, host, 3.0, beating=list(sup.procs))
    assert len(host.probed) == probed  # on time again: no more reads


def test_a_tick_judges_no_process_that_beats_on_time(monkeypatch):
    """A tick costs what is due: members whose beats come on time are never judged (the
    head once judged every process on every tick)."""
    from mwrun.head.decide import hangs

    judged = []
    judge = hangs.judge
    monkeypatch.setattr(hangs, "judge", lambda *a, **k: judged.append(1) or judge(*a, **k))
    sup, host = make(HANGS)
    hello_every(sup, 1.0)
    run_for(sup, host, 2.0, beating=list(sup.procs))  # the first looks after the start
    judged.clear()
    run_for(sup, host, 10.0, beating=list(sup.procs))
    assert judged == []
    run_for(sup, host, 2.0, beating=("leader", "worker-1"))  # one falls silent: looked at
    assert judged and sup.procs["worker-0"].state is P.UNRESPONSIVE


def relayed_beats(sup, host, seconds, hold, held=(1.0, 0.0), every=4.0):
    """Every process beats every ``every`` seconds through its host's agent, which holds
    each beat for one of ``held`` seconds in turn (a relay sends what it holds together,
    so one beat waits its whole hold and the next hardly at all); each beat says
    ``hold`` (None: says nothing). The loop ticks every TICK meanwhile."""
    start, arrivals = host.t, []
    for i, sent in enumerate(range(0, int(seconds), int(every))):
        arrivals.append(start + sent + held[i % len(held)])
    while host.t < start + seconds:
        host.t += TICK
        while arrivals and arrivals[0] <= host.t:
            arrivals.pop(0)
            for name, rec in sup.procs.items():
                sup.members.on_heartbeat(name, rec.worker.pid, every, hold)
        sup.on_tick()


def test_a_beat_held_by_its_agent_as_long_as_it_says_is_on_time():
    """An agent holds its processes' beats up to a quarter interval to send them together
    (host/relay.py) and says so in each (``hold``): the head waits that much past a
    beat's gap before it looks (each look at a remote process asks its agent for /proc,
    a frame each way), and a process that does fall silent is still seen."""
    sup, host = make(HANGS, host=Probes())
    hello_every(sup, 4.0)
    relayed_beats(sup, host, 24.0, hold=1.0)
    assert host.probed == []
    assert all(rec.state is P.RUNNING for rec in sup.procs.values())
    relayed_beats(sup, host, 24.0, hold=None)  # the same beats, saying nothing of it
    assert host.probed  # a beat held long after one sent at once: looked at as missing
    for name, rec in sup.procs.items():  # a held beat from each, then worker-0 stops
        sup.members.on_heartbeat(name, rec.worker.pid, 4.0, 1.0)
    host.probed.clear()
    host.status["worker-0"] = "stopped"
    others = {name: rec.worker.pid for name, rec in sup.procs.items() if name != "worker-0"}
    for _ in range(10):  # 5 s: its gap (4 s) and hold (1 s)
        next_tick(sup, host)
        for name, pid in others.items():
            sup.members.on_heartbeat(name, pid, 4.0, 1.0)
    assert host.probed == [] and sup.procs["worker-0"].state is P.RUNNING
    next_tick(sup, host)
    assert sup.procs["worker-0"].state is P.UNRESPONSIVE
    assert ("worker-0 is unresponsive (stopped)",) in host.of("say")


def test_a_beat_cannot_say_it_is_held_longer_than_half_its_gap():
    from mwrun.head.decide import hangs

    assert hangs.beat_hold(1.0, 4.0) == 1.0
    assert hangs.beat_hold(30.0, 4.0) == 2.0
    assert [hangs.beat_hold(h, 4.0) for h in (None, "1", -1, 0, float("inf"))] == [0.0] * 5
    assert hangs.beat_hold(1.0, None) == 0.0
