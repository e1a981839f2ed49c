"""A process whose heartbeats are late shows as unresponsive at once, hung only later."""

from mwrun.head.states import ProcessState as P
from mwrun.head.supervisor import PLAIN_GRACE
from tests.unit.test_supervisor import join_all, make


def test_late_heartbeats_show_unresponsive_then_running_again():
    sup, host = make()  # timeout 10, beats every 1 s
    join_all(sup)
    host.t += 1.5
    for name in ("leader", "worker-1"):
        sup.on_heartbeat(name, sup.procs[name].pid)
    sup.on_tick()
    assert sup.procs["worker-0"].state is P.RUNNING  # one beat late is no news
    host.t += 0.6
    sup.on_tick()
    rec = sup.procs["worker-0"]
    assert rec.state is P.UNRESPONSIVE and rec.state.alive
    assert ("worker-0 is unresponsive (its heartbeats are late)",) in host.of("say")
    assert sup.worlds["world1"].breaks == 0  # nothing is decided on it yet
    sup.on_heartbeat("worker-0", rec.pid)
    assert rec.state is P.RUNNING
    assert ("worker-0 responds again",) in host.of("say")


def test_unresponsive_becomes_hung_after_the_timeout():
    sup, host = make()
    join_all(sup)
    for _ in range(21):
        host.t += 0.5
        for name in ("leader", "worker-1"):
            sup.on_heartbeat(name, sup.procs[name].pid)
        sup.on_tick()
        if host.t - 100.0 < 10.0:
            assert sup.procs["worker-0"].state in (P.RUNNING, P.UNRESPONSIVE)
    assert sup.procs["worker-0"].state is P.HUNG


def test_a_stopped_plain_process_is_unresponsive_as_soon_as_proc_says_so():
    sup, host = make()  # no hello: plain scripts never beat
    host.t += PLAIN_GRACE
    sup.on_tick()
    assert sup.procs["worker-1"].state is P.RUNNING
    host.status["worker-1"] = "stopped"
    sup.on_tick()
    assert sup.procs["worker-1"].state is P.UNRESPONSIVE
    host.status["worker-1"] = "sleeping"
    sup.on_tick()
    assert sup.procs["worker-1"].state is P.RUNNING
