"""Elastic jobs in the plan: scaled processes and world templates in the topology
(``scale``, ``per``, ``drain_timeout``), and each change to a running job's
membership as a plan revision (mwrun/membership/). Pure: no process, no socket."""

import textwrap

import pytest

from mwrun.errors import TopologyError
from mwrun.membership.requests import Refused, parse_change
from mwrun.membership.revision import Action, Membership
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse

SERVE = """\
version: 1
processes:
  frontend: {cmd: python serve.py}
  worker:
    cmd: python worker.py
    replicas: 2
    scale: {min: 1, max: 4}
    drain_timeout: 5
    cpus: 1
worlds:
  pair:
    per: worker
    members: [frontend, worker]
  all:
    members: [frontend, worker]
"""


def problems(text: str) -> list[str]:
    with pytest.raises(TopologyError) as info:
        parse(textwrap.dedent(text), "t.yaml", "/base")
    return [str(d) for d in info.value.diagnostics]


def one_problem(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


def test_a_per_world_is_one_world_per_replica_and_a_bare_name_is_every_replica():
    topo = parse(SERVE, "t.yaml", "/base")
    assert list(topo.processes) == ["frontend", "worker-0", "worker-1"]
    assert {n: w.members for n, w in topo.worlds.items()} == {
        "pair-0": ("frontend", "worker-0"), "pair-1": ("frontend", "worker-1"),
        "all": ("frontend", "worker-0", "worker-1")}
    assert topo.worlds["pair-1"].template == "pair"
    spec = topo.scaled["worker"]
    assert (spec.scale.min, spec.scale.max, spec.scale.drain_timeout) == (1, 4, 5.0)


def test_replicas_default_to_the_least_a_scaled_process_may_run():
    topo = parse(SERVE.replace("    replicas: 2\n", "").replace("min: 1", "min: 3"),
                 "t.yaml", "/base")
    assert [p for p in topo.processes if p.startswith("worker")] == \
        ["worker-0", "worker-1", "worker-2"]
    assert topo.scaled["worker"].scale.drain_timeout == 5.0


def test_the_same_templates_make_the_worlds_of_any_count():
    topo = parse(SERVE, "t.yaml", "/base").with_replicas({"worker": (0, 2, 3)})
    assert list(topo.processes) == ["frontend", "worker-0", "worker-2", "worker-3"]
    assert topo.worlds["all"].members == ("frontend", "worker-0", "worker-2", "worker-3")
    assert sorted(topo.worlds) == ["all", "pair-0", "pair-2", "pair-3"]


@pytest.mark.parametrize(("change", "expected"), [
    ("scale: {min: 3, max: 4}", "t.yaml:6:15: process 'worker': replicas 2 is outside scale 3-4"),
    ("scale: {min: 3, max: 2}", "t.yaml:7:26: process 'worker': scale max 2 is below min 3"),
    ("scale: {min: 0, max: 2}", "t.yaml:7:18: process 'worker': scale min must be at least 1"),
    ("scale: {min: 1}", "t.yaml:7:12: process 'worker': scale needs 'max'"),
    ("scale: {min: 1, max: 2, most: 3}", "t.yaml:7:29: process 'worker': scale: unknown key"),
    ("scale: 4", "t.yaml:7:12: process 'worker': scale must be a mapping"),
])
def test_scale_mistakes_are_positioned(change, expected):
    assert one_problem(SERVE.replace("scale: {min: 1, max: 4}", change)).startswith(expected)


def test_drain_timeout_needs_scale():
    text = SERVE.replace("    scale: {min: 1, max: 4}\n", "")
    assert one_problem(text).startswith(
        "t.yaml:7:5: process 'worker': drain_timeout needs 'scale:'")


def test_one_replica_of_a_scaled_process_cannot_be_named():
    text = SERVE + "  w0:\n    members: [frontend, worker-0]\n"
    assert one_problem(text).startswith(
        "t.yaml:17:25: world 'w0': 'worker-0' is one replica of 'worker', which is scaled")


@pytest.mark.parametrize(("world", "expected"), [
    ("  p2:\n    per: frontend\n    members: [frontend]\n",
     "world 'p2': per 'frontend' must name a replicated process"),
    ("  p2:\n    per: worker\n    members: [frontend]\n",
     "world 'p2': per 'worker': 'worker' must be among its members"),
    ("  p2:\n    per: worker\n    port: 29500\n    members: [frontend, worker]\n",
     "world 'p2': a world made per replica cannot share one port"),
    ("  pair-3:\n    members: [frontend]\n",
     "world 'pair-3' is also a name of world 'pair' (made per replica of 'worker')"),
])
def test_per_mistakes(world, expected):
    assert expected in one_problem(SERVE + world)


def test_every_name_a_scaled_process_may_take_is_its_own():
    text = SERVE.replace("  frontend: {cmd: python serve.py}\n",
                         "  frontend: {cmd: python serve.py}\n  worker-3: {cmd: x}\n")
    text += "  extra:\n    members: [worker-3]\n"
    assert "process 'worker-3' is defined twice" in one_problem(text)


def membership(text=SERVE, cpus=(0, 1, 2, 3, 4)):
    topo = parse(text, "t.yaml", "/base")
    inv = {"localhost": HostInventory(True, cpus, ())}
    ports = iter(range(41000, 42000))
    plan = place(topo, inv, lambda addr, taken: next(ports), "/usr/bin/python3")
    return Membership(topo, plan, inv, "/usr/bin/python3", lambda addr, taken: next(ports))


def test_scaling_up_makes_new_replicas_their_worlds_and_resizes_the_bare_ones():
    m = membership()
    rev = m.scale([parse_change("worker=4")], "op-1")
    assert rev.started == ("worker-2", "worker-3") and rev.retired == ()
    assert rev.worlds == {"pair-2": Action.FORM, "pair-3": Action.FORM, "all": Action.RESIZE}
    plan = rev.plan
    assert plan.worlds["all"].members == ("frontend", "worker-0", "worker-1", "worker-2",
                                          "worker-3")
    assert plan.worlds["all"].port == m.plan.worlds["all"].port  # its store stays
    assert plan.processes["worker-2"].worlds == {"pair-2": 1, "all": 3}
    assert next(iter(plan.processes["frontend"].worlds)) == "pair-0"  # its primary stays
    assert plan.processes["worker-2"].cpus == (2,)  # what was free
    assert rev.changed == ("frontend",)  # the others keep their worlds and ranks
    assert m.plan.worlds.keys() == {"pair-0", "pair-1", "all"}  # nothing applied yet
    m.adopt(rev)
    assert m.replicas("worker") == (0, 1, 2, 3)


def test_scaling_down_drains_the_highest_and_their_indices_wait_until_they_are_gone():
    m = membership()
    m.adopt(m.scale([parse_change("worker=4")], "op-1"))
    rev = m.scale([parse_change("worker=-2")], "op-2")
    assert rev.retired == ("worker-2", "worker-3")
    assert rev.worlds == {"pair-2": Action.REMOVE, "pair-3": Action.REMOVE,
                          "all": Action.DRAIN}
    assert rev.drains == {"pair-2": 5.0, "pair-3": 5.0, "all": 5.0}
    m.adopt(rev)
    grown = m.scale([parse_change("worker=+1")], "op-3")
    assert grown.started == ("worker-4",)  # worker-2 is still draining
    m.gone("worker-2")
    assert m.scale([parse_change("worker=+1")], "op-4").started == ("worker-2",)


def test_a_drain_names_its_replica():
    m = membership()
    rev = m.drain(["worker-0"], "op-1")
    assert rev.retired == ("worker-0",)
    assert rev.plan.worlds["all"].members == ("frontend", "worker-1")
    assert rev.plan.processes["worker-1"].worlds == {"pair-1": 1, "all": 1}


@pytest.mark.parametrize(("ask", "expected"), [
    (lambda m: m.scale([parse_change("worker=5")], "x"), "its scale is 1-4"),
    (lambda m: m.scale([parse_change("worker=-2")], "x"), "its scale is 1-4"),
    (lambda m: m.scale([parse_change("frontend=2")], "x"), "has no 'scale:'"),
    (lambda m: m.scale([parse_change("worker-1=2")], "x"), "names one replica"),
    (lambda m: m.scale([parse_change("nobody=2")], "x"), "no process 'nobody'"),
    (lambda m: m.drain(["worker-7"], "x"), "replica worker-7 is not running"),
    (lambda m: m.drain(["frontend"], "x"), "'frontend' is not a replica of a scaled"),
    (lambda m: m.drain(["nobody-1"], "x"), "no replica 'nobody-1'"),
    (lambda m: m.drain(["worker"], "x"), "names a process, not one replica"),
    (lambda m: m.drain(["worker-0", "worker-1"], "x"), "would have 0 replicas"),
    (lambda m: m.drain(["worker-1", "worker-1"], "x"),
     "^replica worker-1 is named twice in one request$"),
])
def test_a_request_that_cannot_be_met_is_refused_whole(ask, expected):
    m = membership()
    with pytest.raises(Refused, match=expected):
        ask(m)
    assert m.replicas("worker") == (0, 1)


def test_placement_refuses_what_no_host_has_room_for():
    m = membership(cpus=(0, 1, 2))  # the frontend is not pinned: room for one more worker
    with pytest.raises(Refused, match="asks for 1 CPUs but host 'localhost' has 0 free"):
        m.scale([parse_change("worker=4")], "x")
    m.scale([parse_change("worker=3")], "y")  # what a refusal took is free again


@pytest.mark.parametrize("text", ["worker", "worker=", "worker=x", "=3", "worker==3"])
def test_a_change_is_written_process_equals_count(text):
    with pytest.raises(Refused, match="PROCESS=N"):
        parse_change(text)


def test_a_revision_is_recorded_for_the_run_folder():
    m = membership()
    record = m.scale([parse_change("worker=+1")], "op-1").record()
    assert record["revision"] == 1 and record["op"] == "op-1"
    assert record["replicas"] == {"worker": [0, 1, 2]}
    assert record["started"]["worker-2"]["worlds"] == {"pair-2": 1, "all": 3}
    assert record["worlds"]["pair-2"]["action"] == "form"
