"""A new head takes a running job as its agents found it (head/decide/adoption.py,
``Supervisor.start(taken)``): nothing found running is started again, each world is at
its members' generation, a start that ended while the head was away is handled as any
exit once its agent tells it, and a process no agent runs is started. Scripted events,
a fake clock (test_supervisor's host)."""

import signal
from dataclasses import replace

from mwrun.head.decide import adoption
from mwrun.head.decide.adoption import Found
from mwrun.head.decide.deadlines import Timer
from mwrun.head.decide.supervisor import Supervisor
from mwrun.membership import replay
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import Start
from mwrun.schema import WorldState as W
from tests.unit.test_reshaping import ElasticHost
from tests.unit.test_supervisor import STAR

FOUND = {"leader": Found(501, 3, 2, True, {"world1": 4, "world2": 1}, 1_700_000_000.0),
         "worker-0": Found(502, 2, 1, False, {"world1": 4}),
         "worker-1": Found(503, 1, 0, True, {"world2": 1})}


def launched():
    return place(parse(STAR, "t.yaml"), {"localhost": HostInventory(True, (0, 1), ())},
                 lambda a, t: 40000)


def adopted(found, revised=None, breaks=None):
    revised = revised or replay.revised(launched(), [])
    host = ElasticHost()
    sup = Supervisor(revised.plan, host, host.bus(), grace=5.0)
    sup.start(adoption.taken(revised, found, breaks or {}))
    return sup, host


def joined(sup, names=None):
    for name in names or sup.procs:
        rec = sup.procs[name]
        sup.members.on_hello(name, rec.worker.pid, 1.0)
        for world in rec.plan.worlds:
            sup.members.on_world_event(name, rec.worker.pid, world,
                                       sup.worlds[world].generation, "ready")


def test_what_runs_is_taken_as_it_is_and_nothing_is_started():
    sup, host = adopted(FOUND)
    assert host.of("spawn") == [] and sup.state is R.RUNNING
    leader = sup.procs["leader"]
    assert (leader.worker.pid, leader.worker.incarnation, leader.restarts) == (501, 3, 2)
    assert leader.worker.started_at == 1_700_000_000.0  # its start, not the adoption
    assert sup.worlds["world1"].generation == 4 and sup.worlds["world2"].generation == 1
    assert sup.worlds["world1"].admitted == [3, 2]  # each member's own start
    joined(sup)  # the libraries' words, replayed by their agents
    assert all(r.state is P.RUNNING for r in sup.procs.values())
    assert all(w.state is W.HEALTHY for w in sup.worlds.values())
    assert host.of("broken") == [] and host.of("open") == []


def test_a_start_that_ended_while_the_head_was_away_is_handled_as_any_exit():
    sup, host = adopted(FOUND)
    joined(sup, ["leader", "worker-1"])
    sup.on_exit("worker-0", -9)  # its agent kept the exit for the new head
    assert host.of("broken")[0][:2] == ("world1", 4)  # its world, at its generation
    assert ("world1", 4) in [o[:2] for o in host.of("open")]
    sup.on_tick()  # its restart, due at once
    assert host.starts[-1] == ("worker-0", 3)  # its next start, numbered on from 2
    assert sup.worlds["world2"].state is W.HEALTHY  # the other world saw nothing


def test_a_process_no_agent_runs_is_started_into_its_worlds_generation():
    found = {k: v for k, v in FOUND.items() if k != "worker-1"}
    _, host = adopted(found)
    assert [c[0] for c in host.of("spawn")] == ["worker-1"]
    assert host.of("spawn")[0][1] == {"world2": 1}


def test_an_agents_report_that_is_not_one_is_not_taken():
    assert Found.read({"pid": "x", "incarnation": 1}) is None
    assert Found.read(["not", "a", "dict"]) is None
    assert Found.read({"pid": 7, "incarnation": 2, "generations": {"w": "3"}}) == \
        Found(7, 2, 0, False, {"w": 3})


def test_each_worlds_breaks_are_counted_on_from_the_last_heads():
    sup, _ = adopted(FOUND, breaks={"world1": 3})
    assert (sup.worlds["world1"].breaks, sup.worlds["world2"].breaks) == (3, 0)


def test_a_replica_found_running_though_retired_has_its_world_closed_and_is_stopped():
    """worker-1 was drained (op-1 removed world2) and the head died before it ended:
    the new head closes world2 at once and stops worker-1 as any retired replica."""
    old = launched()
    plan = replace(old, processes={n: p for n, p in old.processes.items() if n != "worker-1"},
                   worlds={"world1": old.worlds["world1"]})
    plan.processes["leader"] = replace(old.processes["leader"], worlds={"world1": 0})
    revised = replay.Revised(plan, {}, 1, {"worker-1": (old.processes["worker-1"], "op-1")},
                             {"world2": old.worlds["world2"]}, ("op-1",))
    sup, host = adopted(FOUND, revised)
    assert host.of("spawn") == []  # nothing started: worker-1 is not wanted back
    assert "world2" not in sup.worlds  # closed for good, its store told:
    assert [c[:2] for c in host.of("remove")] == [("world2", 1)]  # at its found generation
    retired = sup.procs["worker-1"]
    assert retired.state is P.DRAINING and retired.retired == "op-1"
    host.t = sup.timers.when((Timer.LEAVE, "worker-1"))  # it did not end by itself
    sup.on_tick()
    assert ("worker-1", signal.SIGTERM) in [(n, s) for n, s, _ in host.whys]
    sup.on_exit("worker-1", 0)
    assert "worker-1" not in sup.procs and "world1" in sup.worlds  # gone; world1 untouched
    assert host.of("broken") == []


def test_a_start_its_agent_was_still_making_is_awaited_never_made_twice():
    """The head died between asking worker-1's start and its pid (a zygote's fork):
    its agent reports it with no pid; the new head starts nothing and takes the pid
    its agent tells next."""
    found = {**FOUND, "worker-1": Found(None, 1, 0, True, {"world2": 1})}
    sup, host = adopted(found)
    assert host.of("spawn") == []  # one copy of worker-1, the one under way
    assert sup.processes.awaits_pid("worker-1")
    sup.on_spawned("worker-1", 777, start=Start.WARM)
    assert sup.procs["worker-1"].worker.pid == 777
    joined(sup)
    assert all(r.state is P.RUNNING for r in sup.procs.values())
    assert Found.read({"pid": None, "incarnation": 2}) == Found(None, 2)
