"""docs/status.rst, the status document's reference, against the document itself: every
field the head's real document builder (head/observe/document.py) writes, at every
level, is a row of the page's table for that level, and every row is a field it writes;
every state of schema.py's enums is a row of its table. Built from the real supervisor,
fault timeline, bundles, scale view and traffic on a fake host (as the supervisor's
unit tests drive them), so a field added to the document fails here until it is
documented."""

from __future__ import annotations

import re

from mwrun import runs
from mwrun.head.decide import events as ev
from mwrun.head.decide.supervisor import Supervisor
from mwrun.head.observe.document import Facts, Status, Usage
from mwrun.head.observe.faults import Faults
from mwrun.head.observe.scaleops import Ops
from mwrun.head.observe.traffic import Traffic
from mwrun.head.postmortem.capture import Postmortems
from mwrun.head.postmortem.stacks import Stacks
from mwrun.head.serve.elastic import Elastic
from mwrun.membership.revision import Membership
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
from mwrun.schema import HostState, Phase, ProcessState, RunState, Start, WorldState
from tests.helpers import ROOT
from tests.unit.test_postmortem import Here
from tests.unit.test_reshaping import SERVE, ElasticHost, join

PAGE = ROOT / "docs" / "status.rst"


def built(tmp_path) -> dict:
    """A status document of a scaled job (SERVE) whose members beat with traffic, and
    whose world ``pair-0`` broke (a fault, its bundle written)."""
    topo = parse(SERVE, "t.yaml")
    inventory = {"localhost": HostInventory(True, (0, 1), ())}
    ports = iter(range(40000, 41000))
    plan = place(topo, inventory, lambda a, t: next(ports))
    host, box = ElasticHost(), {}
    faults = Faults({n: list(p.worlds) for n, p in plan.processes.items()},
                    {n: list(w.members) for n, w in plan.worlds.items()},
                    lambda w: box["sup"].worlds[w].generation, lambda record: None, host.wall)
    ops = Ops(lambda record: None, host.wall)
    asks = Stacks(lambda process, message: None, host.now)
    bundles = Postmortems(tmp_path, asks, lambda: box["sup"], lambda: Here(),
                          lambda record: None, host.now, host.wall)
    sup = box["sup"] = Supervisor(plan, host, ev.Events((host.hear, faults, ops, bundles)),
                                  grace=3.0)
    sup.start()
    join(sup)
    traffic = Traffic()
    for name, rec in sup.procs.items():
        traffic.beat(name, rec.worker.pid, host.t, {w: (10, 1000, 0, 0.1)
                                                    for w in rec.plan.worlds}, host.t)
    sup.on_exit("worker-0", -9)
    host.t += 5
    bundles.step()  # the break's bundle, written at its deadline
    membership = Membership(topo, plan, inventory, None, lambda a, t: next(ports))
    status = Status(Facts("serve-1", host.wall(), "topology.yaml", "control.sock"), sup,
                    membership, Usage(lambda name: (1.0, 2048), lambda: None),
                    traffic, faults, ops, bundles,
                    Elastic(membership, sup, ops, lambda h: True, tmp_path), None,
                    [("localhost", "127.0.0.1")])
    return status.build()


def fields(doc: dict) -> dict[str, set[str]]:
    """Each level of the document (a table of the page) -> the fields found there."""
    found: dict[str, set[str]] = {}

    def add(level: str, items: list[dict]) -> None:
        for item in items:
            found.setdefault(level, set()).update(item)

    add("The run", [doc])
    add("processes[]", doc["processes"])
    add("processes[].traffic[WORLD]", [t for p in doc["processes"] for t in p["traffic"].values()])
    add("worlds[]", doc["worlds"])
    add("worlds[].last_fault", [w["last_fault"] for w in doc["worlds"] if w["last_fault"]])
    add("worlds[].last_fault.phases",
        [w["last_fault"]["phases"] for w in doc["worlds"] if w["last_fault"]])
    add("worlds[].postmortem", [w["postmortem"] for w in doc["worlds"] if w["postmortem"]])
    add("hosts[]", doc["hosts"])
    add("head", [doc["head"]] if "head" in doc else [])
    add("scale[PROCESS]", list(doc["scale"].values()))
    return found


def tables() -> dict[str, list[str]]:
    """The page's sections, by title, each with the first column (````name````) of its
    table rows."""
    found: dict[str, list[str]] = {}
    lines = PAGE.read_text().splitlines()
    title = None
    for line, under in zip(lines, [*lines[1:], ""], strict=True):
        if under and set(under) <= set("=-~^") and len(under) >= len(line) > 0 \
                and not set(line) <= set("=-~^ "):
            title = line.strip().replace("``", "")
            found[title] = []
        elif title is not None and (row := re.match(r"``([^`]+)``\s{2,}", line)):
            found[title].append(row.group(1))
    return found


def test_every_field_of_the_document_is_in_the_reference_and_every_row_is_a_field(tmp_path):
    doc = built(tmp_path)
    lost = runs.lost(doc, left=lambda proc: True)  # what a reader makes of a dead head's
    away = runs.away(doc, {"since": 1.0, "grace": 30.0, "why": "its link closed"})
    adopting = runs.adopting(away, 2, 4242, 2.0)
    written = fields(doc)
    for read in (lost, away, adopting):
        for level, keys in fields(read).items():
            written.setdefault(level, set()).update(keys)
    documented = tables()
    for level, keys in written.items():
        assert level in documented, f"docs/status.rst has no section {level!r}"
        rows = documented[level]
        assert sorted(set(rows)) == sorted(rows), f"{level}: a field twice"
        assert set(rows) == keys, (level, "undocumented:", keys - set(rows),
                                   "not in the document:", set(rows) - keys)


def test_every_state_and_phase_is_in_the_reference():
    documented = tables()
    for title, enum in (("Process states", ProcessState), ("World states", WorldState),
                        ("Run states", RunState), ("Host states", HostState),
                        ("How a process started", Start)):
        assert sorted(documented[title]) == sorted(s.value for s in enum), title
    assert documented["worlds[].last_fault.phases"] == [p.value for p in Phase]  # in order

