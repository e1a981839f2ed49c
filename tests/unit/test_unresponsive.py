"""A process whose heartbeats are late shows as unresponsive at once, hung only later."""

from mwrun.schema import ProcessState as P
from tests.unit.test_supervisor import HANGS, join_all, make, run_for


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
    sup.on_heartbeat("worker-0", rec.pid)
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
        sup.on_store_seen(world, {0, 1})  # their groups met in the stores
    assert sup.procs["worker-1"].state is P.RUNNING
    host.status["worker-1"] = "stopped"
    sup.on_tick()
    assert sup.procs["worker-1"].state is P.UNRESPONSIVE
    host.status["worker-1"] = "sleeping"
    sup.on_tick()
    assert sup.procs["worker-1"].state is P.RUNNING
