"""A membership that changes while the job runs, in the supervisor's decisions: scripted
events and a fake clock (as tests/unit/test_supervisor.py), revisions made by the real
membership (mwrun/membership/)."""

import signal

from mwrun.head.decide import events as ev
from mwrun.head.decide.events import Why
from mwrun.head.decide.reshaping import LEAVE_WAIT
from mwrun.head.decide.supervisor import TICK, Supervisor
from mwrun.head.observe.scaleops import Ops
from mwrun.membership.requests import parse_change
from mwrun.membership.revision import Membership
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W
from tests.unit.test_supervisor import FakeHost

SERVE = """\
timeout: 10
processes:
  frontend: {cmd: x, restart: on-failure}
  worker:
    cmd: y
    replicas: 2
    scale: {min: 1, max: 4}
    drain_timeout: 5
    restart: on-failure
worlds:
  pair:
    per: worker
    members: [frontend, worker]
  all:
    members: [frontend, worker]
"""


class ElasticHost(FakeHost):
    """The fake host, with what elastic jobs ask of it."""

    def __init__(self):
        super().__init__()
        self.told = []  # (process, message) sent down to a library

    def tell(self, process, message):
        self.told.append((process, message))

    def add_world(self, plan, incarnations):
        self.calls.append(("add", plan.name, tuple(plan.members), tuple(incarnations)))

    def resize(self, world, generation, incarnations, members, reason):
        self.calls.append(("resize", world, generation, tuple(members), reason))

    def remove(self, world, generation, reason):
        self.calls.append(("remove", world, generation, reason))


def make(text=SERVE, book=None):
    topo = parse(text, "t.yaml")
    inv = {"localhost": HostInventory(True, (0, 1), ())}
    ports = iter(range(40000, 41000))
    plan = place(topo, inv, lambda a, t: next(ports))
    host = ElasticHost()
    ops = Ops(host.events.append, host.wall, book=book)
    sup = Supervisor(plan, host, ev.Events((host.hear, ops)), grace=3.0)
    sup.start()
    membership = Membership(topo, plan, inv, None, lambda a, t: next(ports))
    return sup, host, membership, ops


def revise(sup, membership, ops, *changes, drain=()):
    rev = membership.drain(list(drain), "op") if drain else \
        membership.scale([parse_change(c) for c in changes], "op")
    ops.begin("op", "test", rev, {n: list(sup.procs[n].plan.worlds) for n in rev.retired})
    membership.adopt(rev)
    sup.revise(rev)
    return rev


def join(sup, *names):
    for name in names or list(sup.procs):
        rec = sup.procs[name]
        sup.members.on_hello(name, rec.worker.pid, 1.0)
        for world in rec.plan.worlds:
            if world in sup.worlds:
                sup.members.on_world_event(name, rec.worker.pid, world,
                                           sup.worlds[world].generation, "ready")


def kinds(host, *types):
    return [e for e in host.events if isinstance(e, types)]


def test_a_new_replica_starts_in_its_own_new_world_and_the_bare_world_is_resized():
    sup, host, m, ops = make()
    join(sup)
    revise(sup, m, ops, "worker=+1")
    assert host.of("spawn")[-1] == ("worker-2", {"pair-2": 0, "all": 1}, 0)
    assert ("add", "pair-2", ("frontend", "worker-2"), (1, 1)) in host.calls
    all_ = sup.worlds["all"]
    assert (all_.state, all_.generation, all_.plan.size) == (W.FORMING, 1, 4)
    assert all_.admitted == [1, 1, 1, 1]  # the new replica's first start is admitted
    assert [c[1:3] for c in host.calls if c[0] == "resize"] == [("all", 0)]
    # Only the frontend is told: worker-0 and worker-1 learn of the resize in the store.
    assert [(p, m["verb"], m["world"], m["spec"]["rank"]) for p, m in host.told] == \
        [("frontend", "add", "pair-2", 0)]
    assert sup.procs["frontend"].plan.worlds == {"pair-0": 0, "pair-1": 0, "all": 0,
                                                  "pair-2": 0}
    join(sup)
    assert all(w.state is W.HEALTHY for w in sup.worlds.values())
    assert sup.procs["worker-2"].state is P.RUNNING
    assert not kinds(host, ev.WorldBroken)  # growing breaks nothing: no fault
    change = ops.get("op").changes[0]
    assert change.phases[next(iter(change.phases))] is not None


def test_a_retired_replica_drains_its_worlds_then_is_stopped_and_forgotten():
    sup, host, m, ops = make()
    join(sup)
    revise(sup, m, ops, drain=["worker-1"])
    assert sup.procs["worker-1"].state is P.DRAINING
    assert sup.worlds["pair-1"].state is W.DRAINING
    assert sup.worlds["all"].state is W.DRAINING
    drains = sorted((p, msg["world"]) for p, msg in host.told if msg["verb"] == "drain")
    assert drains == [("frontend", "all"), ("frontend", "pair-1"), ("worker-0", "all"),
                      ("worker-1", "all"), ("worker-1", "pair-1")]
    # The frontend lets pair-1 go: it closes for good and leaves the job.
    fe = sup.procs["frontend"]
    sup.members.on_world_event("frontend", fe.worker.pid, "pair-1", 0, "released")
    assert "pair-1" not in sup.worlds
    assert ("remove", "pair-1", 0, "drained: frontend released it") in host.calls
    assert not [w for w in host.whys if w[0] == "worker-1"]  # still in all: not yet
    # all waits for its drain_timeout, then re-forms without worker-1.
    host.t += 5.0 + TICK
    sup.on_tick()
    assert sup.worlds["all"].plan.members == ("frontend", "worker-0")
    assert sup.worlds["all"].generation == 1
    assert not [w for w in host.whys if w[0] == "worker-1"]  # it may end by itself first
    host.t += LEAVE_WAIT
    sup.on_tick()
    assert ("worker-1", signal.SIGTERM, Why.RETIRE) in host.whys
    sup.on_exit("worker-1", -signal.SIGTERM)
    assert "worker-1" not in sup.procs
    assert kinds(host, ev.Gone) == [ev.Gone("worker-1")]
    assert not kinds(host, ev.WorldBroken)  # removal is a drain, never a fault
    assert [c[0] for c in host.of("spawn")].count("worker-1") == 1  # never restarted
    assert ops.get("op").state.value == "done"
    exited = kinds(host, ev.Exited)[-1]
    assert exited.state is P.EXITED and "retired" in exited.why


def test_a_retired_replica_that_outlives_its_grace_is_killed():
    sup, host, m, ops = make()
    join(sup)
    revise(sup, m, ops, drain=["worker-1"])
    host.t += 5.0 + TICK
    sup.on_tick()  # drains over
    host.t += LEAVE_WAIT
    sup.on_tick()  # it did not end by itself: SIGTERM
    assert ("worker-1", signal.SIGKILL, Why.RETIRE) not in host.whys
    host.t += 3.0 + TICK
    sup.on_tick()
    assert ("worker-1", signal.SIGKILL, Why.RETIRE) in host.whys


def test_a_member_that_ends_during_a_drain_ends_it_without_a_break():
    sup, host, m, ops = make()
    join(sup)
    revise(sup, m, ops, drain=["worker-1"])
    sup.on_exit("worker-0", -9)  # a crash of a member that stays
    assert sup.worlds["all"].plan.members == ("frontend", "worker-0")
    assert sup.worlds["all"].state is W.FORMING
    assert sup.worlds["all"].admitted == [1, 2]  # worker-0's restart is admitted
    assert sup.procs["worker-0"].state is P.RESTARTING
    assert not [e for e in kinds(host, ev.WorldBroken) if e.world == "all"]


def test_a_replica_waiting_for_its_restart_is_retired_at_once():
    sup, host, m, ops = make()
    join(sup)
    sup.on_exit("worker-1", 3)
    assert sup.procs["worker-1"].state is P.RESTARTING
    revise(sup, m, ops, drain=["worker-1"])
    assert "worker-1" not in sup.procs
    host.t += 10
    sup.on_tick()
    assert [c[0] for c in host.of("spawn")].count("worker-1") == 1


def test_growing_a_world_while_another_member_drains_ends_that_drain():
    sup, _, m, ops = make()
    join(sup)
    revise(sup, m, ops, drain=["worker-1"])
    revise(sup, m, ops, "worker=+1")  # worker-2: all must re-form now, without worker-1
    assert sup.worlds["all"].plan.members == ("frontend", "worker-0", "worker-2")
    assert sup.worlds["pair-1"].state is W.DRAINING  # its own world still drains
    assert "all" not in sup.procs["worker-1"].plan.worlds


def test_a_stop_during_a_drain_ends_the_run_cleanly():
    sup, _, m, ops = make()
    join(sup)
    revise(sup, m, ops, drain=["worker-1"])
    sup.request_stop("Ctrl-C")
    for name in list(sup.procs):
        sup.on_exit(name, -signal.SIGTERM)
    assert sup.state is R.FINISHED and sup.exit_code == 0


def test_an_addition_drained_before_its_first_call_keeps_its_record():
    sup, host, m, ops = make()
    join(sup)
    revise(sup, m, ops, "worker=+1")
    join(sup)
    ops.added("pair-2", "frontend", host.wall())  # told: done; its record waits for a first call
    assert ops.get("op").changes[0].done
    revise(sup, m, ops, drain=["worker-2"])
    records = [e for e in host.events if isinstance(e, dict) and e.get("process") == "worker-2"]
    assert [(r["change"], r["outcome"]) for r in records] == [("add", "done")]
    assert records[0]["phases"]["first_call"] is None
