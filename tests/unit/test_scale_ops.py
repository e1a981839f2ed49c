"""Scale operations at their edges: an op id is kept for the life of the run (in the
run folder, bounded in memory), and a replica's first call, which comes after its
operation is done, is shown where it is known (mwrun scale, a drill's summary)."""

import json

from mwrun.cli import drillview
from mwrun.cli.scaling import phases_line
from mwrun.head.observe.opbook import OpBook
from mwrun.head.observe.scaleops import KEEP, Ops
from mwrun.records import build
from mwrun.records import drills as rd
from mwrun.schema import OPS
from tests.unit.test_drill_scale import QUIET, T0, change, history, op
from tests.unit.test_reshaping import join, make, revise


def test_an_op_id_is_known_however_many_operations_came_after(tmp_path):
    book = OpBook(tmp_path / OPS)
    written = []
    ops = Ops(written.append, lambda: T0, book=book)
    _, _, membership, _ = make()
    ops.begin("grow-1", "scale worker=2", membership.scale([], "grow-1"), {})
    for i in range(3 * KEEP):  # no-op requests count as operations too
        ops.begin(f"again-{i}", "scale worker=2", membership.scale([], f"again-{i}"), {})
    assert len(ops.ops) == KEEP  # memory holds the recent ones only
    assert ops.get("grow-1") is None
    assert ops.view("grow-1") == {"op": "grow-1", "request": "scale worker=2", "at": T0,
                                  "revision": 1, "state": "done", "changes": []}
    assert ops.view("never") is None
    # a new head reading the same run folder knows it too
    assert Ops(written.append, lambda: T0, book=OpBook(tmp_path / OPS)).view("grow-1") \
        is not None
    # a line cut short (a full disk) is skipped, never taken for the operation
    [path] = [p for p in (tmp_path / OPS).iterdir() if "grow-1" in p.read_text()]
    with open(path, "a") as out:
        out.write('{"op": "grow-1", "state": "runn')
    assert book.find("grow-1")["state"] == "done"


def test_an_operation_under_way_is_never_forgotten(tmp_path):
    sup, _, membership, ops = make(book=OpBook(tmp_path / OPS))
    join(sup)
    revise(sup, membership, ops, "worker=+1")  # under way: its replica has not joined
    for i in range(KEEP + 1):
        ops.begin(f"noop-{i}", "scale", membership.scale([], f"noop-{i}"), {})
    assert ops.get("op") is not None and ops.view("op")["state"] == "running"


def test_a_done_addition_says_the_head_still_waits_for_its_first_call():
    sup, host, membership, ops = make()
    join(sup)
    revise(sup, membership, ops, "worker=+1")
    join(sup)
    ops.added("pair-2", "frontend", host.wall())  # told: done
    [shown] = ops.view("op")["changes"]
    assert shown["outcome"] == "done" and shown["awaits_first_call"]
    assert phases_line(shown).endswith("first_call pending")
    host.t += 0.25
    ops.first_call("pair-2", host.wall())
    [shown] = ops.view("op")["changes"]
    assert not shown["awaits_first_call"]
    assert phases_line(shown).endswith("first_call +250 ms")
    [record] = [e for e in host.events if isinstance(e, dict) and e.get("process") == "worker-2"]
    assert "awaits_first_call" not in record  # the history's record is as it was


def test_a_first_call_the_head_gave_up_on_reads_as_none():
    shown = {"process": "worker-2", "change": "add", "outcome": "done", "error": None,
             "awaits_first_call": False,
             "phases": {"requested": 1.0, "started": 1.1, "formed": 1.2, "told": 1.3,
                        "first_call": None}}
    assert phases_line(shown).endswith("told +300 ms, first_call -")


def test_a_drill_summary_takes_the_first_call_the_history_recorded_later():
    """The drill keeps each operation as the head last answered it: done, before the
    new replica's first call was known; the history's scale record has it."""
    added = change("worker-2", "add", 0.5)
    added["phases"].update(started=T0 + 14.1, formed=T0 + 14.2, first_call=None)
    added["awaits_first_call"] = True
    ops = [op("drill-a-1", 1, 2, [added])]
    records = [*history(), {"t": T0 + 14.7, "event": "scale", "op": "drill-a-1",
                            "process": "worker-2", "change": "add", "outcome": "done",
                            "error": None, "phases": {**added["phases"],
                                                      "first_call": T0 + 14.6}}]
    tl = build(sorted(records, key=lambda r: r["t"]), [], "serve")
    window = rd.Window(T0 + 10.0, T0 + 25.0, {})
    record = rd.summarize(tl, [], window, {"every": 2.0, "for": 15.0}, ops=ops, watch=QUIET)
    [shown] = record["scale"]["ops"][0]["changes"]
    assert shown["phases"]["first_call"] == T0 + 14.6 and not shown["awaits_first_call"]
    assert "worker-2 add: started +100 ms, formed +200 ms, told +500 ms, first_call" \
           " +600 ms" in "\n".join(drillview.lines(record))
    assert json.loads(json.dumps(record)) == record


def test_an_operation_whose_first_call_is_awaited_keeps_it_however_many_came_after(tmp_path):
    book = OpBook(tmp_path / OPS)
    sup, host, membership, ops = make(book=book)
    join(sup)
    revise(sup, membership, ops, "worker=+1")
    join(sup)
    ops.added("pair-2", "frontend", host.wall())  # done: its first call still to come
    for i in range(KEEP + 1):
        ops.begin(f"noop-{i}", "scale", membership.scale([], f"noop-{i}"), {})
    host.t += 0.5
    ops.first_call("pair-2", host.wall())
    for found in (ops.view("op"), book.find("op")):
        [shown] = found["changes"]
        assert shown["phases"]["first_call"] is not None and not shown["awaits_first_call"]
