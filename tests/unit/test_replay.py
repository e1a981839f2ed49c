"""The plan as it is now, rebuilt by a new head from the launch plan and the revision
records a run folder keeps (membership/replay.py): the very plan the head that wrote
them had (GPUs, CPUs, ports, every world's members), after rotation too, and a
Membership made from it goes on exactly as the old one would. Pure: real revisions
from a real Membership, no process."""

import json

import pytest

from mwrun.errors import RunError
from mwrun.head.observe.revisions import RevisionLog
from mwrun.membership import replay
from mwrun.membership.requests import parse_change
from mwrun.membership.revision import Membership
from mwrun.plan import stored
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
from mwrun.runs import revisions_in
from mwrun.schema import PLAN, REVISIONS
from tests.unit.test_elastic_plan import SERVE


def made(ports):
    topo = parse(SERVE, "t.yaml", "/base")
    inv = {"localhost": HostInventory(True, (0, 1, 2, 3, 4), ())}
    plan = place(topo, inv, lambda addr, taken: next(ports), "/usr/bin/python3")
    return topo, inv, plan


def steps(m: Membership) -> list[dict]:
    """Grow, drain one, shrink, grow again (an index used again): each applied."""
    records = []
    for n, ask in enumerate((lambda op: m.scale([parse_change("worker=4")], op),
                             lambda op: m.drain(["worker-1"], op),
                             lambda op: m.scale([parse_change("worker=-1")], op),
                             lambda op: m.scale([parse_change("worker=+1")], op))):
        revision = ask(f"op-{n + 1}")
        m.adopt(revision)
        for name in revision.retired:
            m.gone(name)
        records.append(json.loads(json.dumps(revision.record())))  # as the file holds it
    return records


def test_the_revisions_laid_over_the_launch_plan_are_the_plan_as_it_is():
    ports = iter(range(41000, 42000))
    topo, inv, launch = made(ports)
    m = Membership(topo, launch, inv, "/usr/bin/python3", lambda addr, taken: next(ports))
    records = steps(m)
    now = replay.revised(launch, records)
    assert now.plan == m.plan  # processes and worlds, field by field
    assert list(now.plan.processes) == list(m.plan.processes)  # in the live plan's order
    assert list(now.plan.worlds) == list(m.plan.worlds)
    assert now.replicas == {"worker": m.replicas("worker")} and now.number == 4
    # worker-1, drained, came back (the lowest free index); worker-3 did not
    assert {n: op for n, (_, op) in now.retired.items()} == {"worker-3": "op-3"}
    assert set(now.removed) == {"pair-3"}  # (pair-1 was removed, then formed again)
    assert now.ops == ("op-1", "op-2", "op-3", "op-4")

    # A Membership made from it takes the next request as the old one does.
    again = Membership(topo, now.plan, inv, "/usr/bin/python3",
                       lambda addr, taken: 43000, now.replicas, now.number)
    mine = m.scale([parse_change("worker=+1")], "op-5")
    theirs = again.scale([parse_change("worker=+1")], "op-5")
    assert (theirs.number, theirs.started, theirs.worlds) == (mine.number, mine.started,
                                                              mine.worlds)
    assert theirs.plan.processes == mine.plan.processes  # the same CPUs taken


def test_after_rotation_the_newest_file_alone_gives_the_same_plan(tmp_path):
    ports = iter(range(41000, 42000))
    topo, inv, launch = made(ports)
    (tmp_path / PLAN).write_text(json.dumps(stored.dump(launch)))
    m = Membership(topo, launch, inv, "/usr/bin/python3", lambda addr, taken: next(ports))
    log = RevisionLog(tmp_path, limit=1)  # every revision rotates the one before away
    records = steps(m)
    for record in records:
        log.keep(record)
    newest = [json.loads(line) for line in (tmp_path / REVISIONS).read_text().splitlines()]
    assert newest[0]["summary"] and len(newest) == 2  # rotated: the summary, the last
    assert replay.revised(launch, newest).plan == m.plan
    assert replay.revised(launch, revisions_in(tmp_path)).plan == m.plan  # both files


def test_records_that_cannot_rebuild_the_plan_are_refused_saying_which():
    ports = iter(range(41000, 42000))
    topo, inv, launch = made(ports)
    m = Membership(topo, launch, inv, "/usr/bin/python3", lambda addr, taken: next(ports))
    records = steps(m)
    old = {k: v for k, v in records[1].items() if k != "plans"}
    with pytest.raises(RunError, match="revision 2 does not hold its whole plans"):
        replay.revised(launch, [records[0], old])
    bad = json.loads(json.dumps(records[0]))
    bad["plans"]["processes"]["worker-2"]["cpus"] = "all"
    with pytest.raises(RunError, match=r"revision 1, process worker-2\.cpus: 'all' is not"):
        replay.revised(launch, [bad])
    assert replay.revised(launch, []).plan == launch
