"""mwrun drill --scale, its pure parts: the schedule with scale operations, the check
of --scale against the run, whom a fault may hit while the membership moves, the
count a scale operation asks, the ledger of failed calls and breaks outside the
faulted worlds, and the summary; then the live loop against a fake head."""

import json

import pytest

from mwrun.cli import drill as d
from mwrun.cli import drillscale as ds
from mwrun.cli import drillview
from mwrun.cli.drilling import Drill
from mwrun.errors import UsageError
from mwrun.records import Ledger, build
from mwrun.records import drills as rd

WORKER = ds.Scaling("worker", 1, 4)


def serve_doc(workers=(0, 1), state="healthy", failures=None, breaks=None, ports=None,
              draining=(), desired=None, ages=None):
    """A frontend and its workers, one world pair-I each (examples/serving)."""
    failures, breaks, ports, ages = failures or {}, breaks or {}, ports or {}, ages or {}
    pairs = [f"pair-{i}" for i in workers]
    procs = [{"name": "frontend", "pid": 100, "state": "running", "replica_of": None,
              "worlds": {p: 0 for p in pairs},
              "traffic": {p: {"failures": failures.get(("frontend", p), 0),
                              "last_call_age_s": ages.get(p, 0.1)} for p in pairs}}]
    procs += [{"name": f"worker-{i}", "pid": 200 + i, "replica_of": "worker",
               "state": "draining" if i in draining else "running",
               "worlds": {f"pair-{i}": 1},
               "traffic": {f"pair-{i}": {"failures": failures.get((f"worker-{i}",
                                                                    f"pair-{i}"), 0)}}}
              for i in workers]
    worlds = [{"name": p, "members": ["frontend", f"worker-{i}"], "generation": 0,
               "state": "draining" if i in draining else (state if isinstance(state, str)
                                                          else state.get(p, "healthy")),
               "breaks": breaks.get(p, 0), "port": ports.get(p, 30000 + i)}
              for i, p in zip(workers, pairs, strict=True)]
    return {"run_id": "serve", "processes": procs, "worlds": worlds,
            "scale": {"worker": {"desired": len(workers) if desired is None
                                 else desired, "current": len(workers), "min": 1, "max": 4,
                                 "draining": [f"worker-{i}" for i in draining]}}}


# -- the schedule -----------------------------------------------------------------------

def test_the_schedule_mixes_faults_and_scale_operations_half_and_half():
    one = list(d.schedule(5, 10.0, 6000.0, {}, [WORKER]))
    assert one == list(d.schedule(5, 10.0, 6000.0, {}, [WORKER]))  # one seed, one schedule
    assert one != list(d.schedule(6, 10.0, 6000.0, {}, [WORKER]))
    moves = [s for s in one if isinstance(s, ds.Move)]
    faults = [s for s in one if isinstance(s, rd.Shot)]
    assert 0.4 < len(moves) / len(one) < 0.6  # MIX of about 600 events
    assert [s.at for s in one] == sorted(s.at for s in one)
    assert 8.0 < one[-1].at / len(one) < 12.0  # the one Poisson process, mean --every
    assert {(m.process, m.low, m.high) for m in moves} == {("worker", 1, 4)}
    assert all(0 <= s.draw < 1 for s in one)
    assert {(f.world, f.process, f.rank) for f in faults} == {("", "", -1)}  # chosen when due


def test_several_scaled_processes_share_the_scale_operations():
    other = ds.Scaling("helper", 2, 3)
    moves = [s for s in d.schedule(1, 1.0, 2000.0, {}, [WORKER, other])
             if isinstance(s, ds.Move)]
    assert {m.process for m in moves} == {"worker", "helper"}
    assert all((m.low, m.high) == ((1, 4) if m.process == "worker" else (2, 3))
               for m in moves)


def test_without_scale_the_schedule_is_as_before():
    hit = {"world1": [("worker-0", 1)]}
    shots = list(d.schedule(7, 10.0, 600.0, hit))
    assert shots == list(d.schedule(7, 10.0, 600.0, hit, []))
    assert all(isinstance(s, rd.Shot) and s.world == "world1" for s in shots)


# -- --scale against the run ------------------------------------------------------------

def test_scale_options_are_read_and_held_against_the_run():
    assert ds.parse_scales(["worker:1-8", "helper:0-2"]) == [
        ds.Scaling("worker", 1, 8), ds.Scaling("helper", 0, 2)]
    for bad, says in (("worker", "--scale takes PROCESS:MIN-MAX"),
                      ("worker:1", "--scale takes PROCESS:MIN-MAX"),
                      ("worker:a-3", "--scale takes PROCESS:MIN-MAX"),
                      (":1-3", "--scale takes PROCESS:MIN-MAX"),
                      ("worker:3-3", "MIN must be less than MAX")):
        with pytest.raises(UsageError, match=says):
            ds.parse_scales([bad])
    with pytest.raises(UsageError, match="--scale names worker twice"):
        ds.parse_scales(["worker:1-2", "worker:2-3"])

    doc = serve_doc()
    ds.check_scales(doc, [WORKER])
    ds.check_scales(doc, [ds.Scaling("worker", 2, 3)])
    for scale, says in ((ds.Scaling("worker", 1, 8), r"--scale worker:1-8: worker scales"
                         r" within 1-4 \(its scale: in the topology\)"),
                        (ds.Scaling("worker", 0, 2), "worker scales within 1-4"),
                        (ds.Scaling("frontend", 1, 2), "frontend has no 'scale:' in its"
                         " topology; the run's scaled processes: worker \\(1-4\\)"),
                        (ds.Scaling("nobody", 1, 2), "nobody is no process of the run")):
        with pytest.raises(UsageError, match=says):
            ds.check_scales(doc, [scale])


# -- whom a fault may hit, what count a scale operation asks ------------------------------

def test_the_leader_is_never_hit_even_when_it_is_in_one_world():
    doc = serve_doc(workers=(0,))
    assert ds.leaders(doc) == {"frontend"}
    assert d.targets(doc, None) == {"pair-0": [("worker-0", 1)]}
    assert ds.live_targets(doc, None) == {"pair-0": [("worker-0", 1)]}


def test_a_fault_picks_only_a_healthy_world_and_a_member_no_one_is_moving():
    doc = serve_doc(workers=(0, 1, 2, 3), draining=(3,),
                    state={"pair-1": "broken", "pair-2": "healthy"})
    assert ds.live_targets(doc, None) == {"pair-0": [("worker-0", 1)],
                                         "pair-2": [("worker-2", 1)]}
    assert ds.live_targets(doc, None, busy={"worker-2"}) == {"pair-0": [("worker-0", 1)]}
    assert ds.live_targets(doc, None, down={"pair-0"}) == {"pair-2": [("worker-2", 1)]}
    assert ds.live_targets(doc, ["pair-2", "pair-3"]) == {"pair-2": [("worker-2", 1)]}
    assert ds.live_targets(doc, None, busy={"worker-0", "worker-2"}) == {}

    hit = ds.live_targets(doc, None)
    assert ds.choose(0.2, hit) == ("pair-0", "worker-0", 1)
    assert ds.choose(0.7, hit)[0] == ds.choose(0.999999, hit)[0] == "pair-2"
    assert ds.choose(0.2, {}) is None
    two = {"w": [("a", 1), ("b", 2)]}  # what is left of the draw picks the member
    assert ds.choose(0.25, two)[1] == "a" and ds.choose(0.75, two)[1] == "b"


def test_a_scale_operation_never_asks_the_count_there_is_nor_retires_one_that_is_down():
    ordered = ["worker-0", "worker-1", "worker-2"]
    assert ds.replicas(serve_doc(workers=(2, 0, 1, 3), draining=(3,)), "worker") == ordered
    assert [ds.pick_count(x / 10, 1, 4, 3, ordered, set()) for x in range(10)] == \
        [1, 1, 1, 1, 2, 2, 2, 4, 4, 4]
    # worker-1 is down from a fault: a scale-down may retire worker-2 only
    assert {ds.pick_count(x / 10, 1, 4, 3, ordered, {"worker-1"}) for x in range(10)} == {2, 4}
    assert ds.pick_count(0.5, 1, 3, 3, ordered, {"worker-2"}) is None  # nothing left
    assert ds.not_ready(serve_doc(workers=(0, 1, 2), state={"pair-1": "forming"}),
                       ordered) == {"worker-1"}
    doc = serve_doc(workers=(0, 1))
    doc["processes"][1]["state"] = "restarting"
    assert ds.not_ready(doc, ["worker-0", "worker-1", "worker-9"]) == {"worker-0", "worker-9"}


# -- the ledger: failed calls and breaks outside the faulted worlds ----------------------

def test_the_ledger_counts_failed_calls_and_breaks_of_the_worlds_not_faulted():
    ledger = Ledger()
    # before the drill: 3 failed calls in pair-0 and a break of pair-1, not the drill's
    ledger.see(serve_doc(failures={("frontend", "pair-0"): 3}, breaks={"pair-1": 1}), 10.0)
    assert ledger.fault("pair-0") == 0
    ledger.see(serve_doc(failures={("frontend", "pair-0"): 9, ("worker-0", "pair-0"): 2},
                         breaks={"pair-0": 1, "pair-1": 1}), 11.0)
    assert ledger.result() == {"looks": 2, "worlds": 1, "faulted_worlds": 1,
                               "failed_calls": 0, "breaks": 0, "where": []}
    # pair-1 fails two calls and breaks: not the drill's doing
    ledger.see(serve_doc(failures={("frontend", "pair-1"): 2}, breaks={"pair-1": 2}), 12.0)
    found = ledger.result()
    assert (found["failed_calls"], found["breaks"]) == (2, 1)
    assert found["where"] == ["pair-1: 2 failed call(s), 1 break(s)"]


def test_a_world_made_again_is_another_world_to_the_ledger():
    ledger = Ledger()
    ledger.see(serve_doc(workers=(0, 1)), 10.0)
    ledger.fault("pair-1")  # then pair-1 is removed (a scale-down) ...
    ledger.see(serve_doc(workers=(0,)), 11.0)
    # ... and made again (a scale-up): a new store, the frontend's count from 0 again
    ledger.see(serve_doc(workers=(0, 1), ports={"pair-1": 40001},
                         failures={("frontend", "pair-1"): 1}), 12.0)
    assert [(x.world, x.number, x.faulted) for x in ledger.lives] == [
        ("pair-0", 0, False), ("pair-1", 0, True), ("pair-1", 1, False)]
    found = ledger.result()
    assert found["failed_calls"] == 1 and found["where"][0].startswith(
        "pair-1 (made again at ")
    # the frontend's entry of the removed pair-1 (3 failed calls, its last call 5 s ago)
    # shows in the new pair-1 until its next beat: none of the new one's
    ledger = Ledger()
    ledger.see(serve_doc(failures={("frontend", "pair-1"): 3}), 10.0)
    ledger.fault("pair-1")
    ledger.see(serve_doc(workers=(0,)), 11.0)
    ledger.see(serve_doc(ports={"pair-1": 40001}, failures={("frontend", "pair-1"): 3},
                         ages={"pair-1": 5.0}), 12.0)
    assert ledger.result()["failed_calls"] == 0
    ledger.see(serve_doc(ports={"pair-1": 40001}), 13.0)  # the new one's count, from 0
    ledger.see(serve_doc(ports={"pair-1": 40001}, failures={("frontend", "pair-1"): 1}), 14.0)
    assert ledger.result()["failed_calls"] == 1
    # made again between two looks: the same port cannot tell, fewer breaks can
    ledger = Ledger()
    ledger.see(serve_doc(breaks={"pair-1": 2}), 10.0)
    ledger.fault("pair-1")
    ledger.see(serve_doc(breaks={"pair-1": 0}), 11.0)
    assert [x.faulted for x in ledger.lives if x.world == "pair-1"] == [True, False]


def test_a_members_count_that_goes_back_keeps_what_it_had_counted():
    ledger = Ledger()
    ledger.see(serve_doc(failures={("frontend", "pair-0"): 1}), 10.0)
    ledger.see(serve_doc(failures={("frontend", "pair-0"): 3}), 11.0)
    ledger.see(serve_doc(failures={("frontend", "pair-0"): 1}), 12.0)  # a new World object
    assert ledger.result()["failed_calls"] == 2 + 1
    # a member first seen after the first look began during the drill: all of it counts
    doc = serve_doc(failures={("worker-0", "pair-0"): 4})
    doc["processes"][1]["pid"] = 999  # restarted
    ledger.see(doc, 13.0)
    assert ledger.result()["failed_calls"] == 3 + 4
    assert Ledger().result()["failed_calls"] is None  # never read: not known


# -- the summary ------------------------------------------------------------------------

T0 = 1795000000.0


def history(end=30.0):
    """pair-0 and pair-1 at 10 calls/s from t=0; at 15 pair-1 is removed and pair-2
    added (a scale operation), which runs at 10 calls/s from 16."""
    worlds = {"pair-0": ["frontend", "worker-0"], "pair-1": ["frontend", "worker-1"]}
    records = [{"t": T0, "event": "start", "run_id": "serve", "name": "serve",
                "worlds": worlds},
               {"t": T0, "event": "form", "world": "pair-0", "generation": 0},
               {"t": T0, "event": "form", "world": "pair-1", "generation": 0},
               {"t": T0 + 15.0, "event": "drain", "world": "pair-1", "generation": 0,
                "seconds": 3.0},
               {"t": T0 + 15.01, "event": "remove", "world": "pair-1", "reason": "drained"},
               {"t": T0 + 15.02, "event": "add", "world": "pair-2",
                "members": ["frontend", "worker-2"]},
               {"t": T0 + 15.5, "event": "form", "world": "pair-2", "generation": 0}]
    t = 1.0
    while t <= end:
        calls = {"pair-0": [10 * t, T0 + t], "pair-1": [10 * min(t, 15.0), T0 + t]}
        if t >= 16:
            calls["pair-2"] = [10 * (t - 16), T0 + t]
        records.append({"t": T0 + t, "rates": {}, "calls": calls})
        t += 1.0
    return sorted(records, key=lambda r: r["t"])


def op(name, frm, to, changes, state="done"):
    return {"op": name, "process": "worker", "asked": T0 + 14.0, "from": frm, "to": to,
            "state": state, "error": None, "changes": changes}


def change(process, kind, took, outcome="done", error=None):
    last = "told" if kind == "add" else "exited"
    return {"process": process, "change": kind, "outcome": outcome, "error": error,
            "phases": {"requested": T0 + 14.0, last: None if took is None
                       else T0 + 14.0 + took}}


OPS = [op("drill-a-1", 2, 1, [change("worker-1", "remove", 0.06)]),
       op("drill-a-2", 1, 3, [change("worker-1", "add", 0.3), change("worker-2", "add", 0.5)]),
       op("drill-a-3", 3, 2, [change("worker-2", "remove", 0.08)])]
QUIET = {"looks": 20, "worlds": 3, "faulted_worlds": 0, "failed_calls": 0, "breaks": 0,
         "where": []}


def test_the_summary_of_a_scale_drill():
    tl = build(history(), [], "serve")
    window = rd.Window(T0 + 10.0, T0 + 25.0, {"pair-0": (T0 + 2, T0 + 10),
                                             "pair-1": (T0 + 2, T0 + 10)})
    record = rd.summarize(tl, [], window, {"every": 2.0, "for": 15.0, "scales": ["worker:1-4"]},
                         ops=OPS, watch=QUIET, skipped_ops=["12:00:00 worker: why"])
    scale = record["scale"]
    assert (scale["count"], scale["done"], scale["failed"]) == (3, 3, [])
    assert scale["add"] == {"count": 2, "median": pytest.approx(0.4), "max": pytest.approx(0.5)}
    assert scale["remove"] == {"count": 2, "median": pytest.approx(0.07),
                               "max": pytest.approx(0.08)}
    assert scale["skipped"] == ["12:00:00 worker: why"]
    # the worlds whose membership changed: no fault-free pace of their own, left out
    assert record["pace_left_out"] == {"pair-1": "removed during the drill",
                                       "pair-2": "appeared during the drill"}
    assert record["worlds"]["pair-2"]["kept"] is None
    assert record["worlds"]["pair-1"]["pace"] is None
    assert record["worlds"]["pair-0"]["kept"] == pytest.approx(1.0)
    assert rd.problems(record) == [] and rd.exit_status(record) == 0
    text = "\n".join(drillview.lines(record))
    assert "drill: 0 fault(s) (SIGKILL) and 3 scale operation(s) in 15 s" in text
    assert "scale: 3 operation(s), 3 done, 0 not done" in text
    assert "2 replica(s) added: requested -> told median 400 ms, max 500 ms" in text
    assert "2 replica(s) retired: requested -> exited median 70 ms, max 80 ms" in text
    assert "drill-a-2 worker 1 -> 3: done" in text
    assert "worker-2 add: told +500 ms" in text
    assert "pair-2: no faults (appeared during the drill: no pace kept)" in text
    assert "pace left out for 2 world(s) whose membership changed during the drill" in text
    assert "outside the faulted worlds (3 world(s) the drill did not fault): 0 failed" \
           " call(s), 0 break(s)" in text
    assert "skipped: 12:00:00 worker: why" in text
    brief = "\n".join(drillview.lines(record, brief=True))
    assert "scale: 3 operation(s)" in brief and "drill-a-2" not in brief
    assert json.loads(json.dumps(record)) == record  # it goes into the history as is


def test_a_scale_operation_not_done_or_a_failure_outside_fails_the_drill():
    tl = build(history(), [], "serve")
    window = rd.Window(T0 + 10.0, T0 + 25.0, {})
    bad = [*OPS, op("drill-a-4", 2, 3, [change("worker-2", "add", None, "failed",
                                               "exited before it formed")], "failed"),
           op("drill-a-5", 2, 4, [], "refused") | {"error": "the job is stopping"}]
    record = rd.summarize(tl, [], window, {}, ops=bad, watch=QUIET)
    assert record["scale"]["done"] == 3 and len(record["scale"]["failed"]) == 2
    [failed, refused] = rd.problems(record)
    assert failed.startswith("scale operation not done: drill-a-4 worker=3 asked at ")
    assert failed.endswith(": failed; worker-2 add failed (exited before it formed)")
    assert refused.endswith(": refused (the job is stopping)")
    assert rd.exit_status(record) == 1

    calls = {**QUIET, "failed_calls": 2, "breaks": 1,
             "where": ["pair-0: 2 failed call(s), 1 break(s)"]}
    record = rd.summarize(tl, [], window, {}, ops=OPS, watch=calls)
    assert rd.problems(record) == [
        "2 call(s) failed in worlds the drill did not fault: pair-0: 2 failed call(s),"
        " 1 break(s)",
        "1 break(s) of worlds the drill did not fault: pair-0: 2 failed call(s), 1 break(s)"]
    assert rd.exit_status(record) == 1
    assert any(line.startswith("  2 call(s) failed in worlds") for line in drillview.lines(record))


def test_an_older_drill_record_still_reads():
    tl = build(history(), [], "serve")
    record = rd.summarize(tl, [], rd.Window(T0 + 10.0, T0 + 25.0, {}), {})
    for key in ("scale", "outside", "pace_left_out"):
        record.pop(key, None)
    assert drillview.lines(record)[0].startswith("drill: 0 fault(s) (SIGKILL) in 15 s")
    assert rd.exit_status(record) == 0


# -- the live loop, against a fake head -----------------------------------------------

class FakeHead:
    """Answers the drill as the head would: its status; a scale operation that runs
    for OP_POLLS looks before it is done; kills recorded."""

    OP_POLLS = 3

    def __init__(self, clock):
        self.clock = clock
        self.asked = []
        self.workers = [0, 1]
        self.polls = 0

    def ask(self, control, message):
        self.asked.append(message)
        verb = message["verb"]
        if verb == "status":
            return {"ok": True, "status": serve_doc(workers=tuple(self.workers))}
        if verb == "kill_world":
            return {"ok": True, "signalled": []}
        if verb == "scale":
            assert message["changes"] == ["worker=3"]
            self.workers.append(2)  # the new replica's world shows healthy at once
            return self._op(message["op"], "running")
        if verb == "op":
            self.polls += 1
            return self._op(message["op"], "done" if self.polls >= self.OP_POLLS
                            else "running")
        return {"ok": True}

    def _op(self, name, state):
        told = self.clock() if state == "done" else None
        return {"ok": True, "op": name, "state": state, "changes": [
            {"process": "worker-2", "change": "add", "outcome": "done" if told else None,
             "error": None, "phases": {"requested": T0 + 10.0, "started": None,
                                       "formed": told, "told": told, "first_call": None}}]}


def test_the_loop_asks_a_scale_operation_and_goes_on_while_it_runs(tmp_path):
    (tmp_path / "history.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in history(end=14.0)
                if r.get("event") not in ("drain", "remove", "add")))
    now = [T0 + 10.0]
    head = FakeHead(lambda: now[0])

    def sleep(seconds):
        now[0] += seconds

    shots = [ds.Move(0.5, "worker", 1, 3, 0.99),  # counts 1 and 3 (not 2): 3
             rd.Shot(0.55, "", "", -1, 0.99)]  # the last world: pair-2, whose worker is busy
    said = []
    record, code = Drill("serve", "sock", shots, {"every": 1.0, "for": 2.0, "signal": "KILL",
                                                  "seed": 1, "targets": None},
                         say=said.append, tty=False, clock=lambda: now[0], sleep=sleep,
                         ask=head.ask, run_dir=tmp_path, recover_wait=1.0,
                         scales=[ds.Scaling("worker", 1, 3)], op_prefix="drill-t").run()
    verbs = [m["verb"] for m in head.asked if m["verb"] != "status"]
    assert verbs[:2] == ["scale", "kill_world"]  # the fault went while the op ran
    assert verbs[2:-1] == ["op"] * FakeHead.OP_POLLS and verbs[-1] == "drill"
    assert head.asked[[m["verb"] for m in head.asked].index("scale")]["op"] == "drill-t-1"
    [kill] = [m for m in head.asked if m["verb"] == "kill_world"]
    assert (kill["world"], kill["rank"]) == ("pair-1", 1)  # not worker-2: being added
    [done] = record["scale"]["ops"]
    assert done["state"] == "done" and (done["from"], done["to"]) == (2, 3)
    assert done["changes"][0]["phases"]["told"] is not None
    assert record["outside"]["failed_calls"] == 0 and record["outside"]["looks"] > 1
    assert record["scales"] == ["worker:1-3"]
    text = "".join(said)
    assert "about 1 fault(s) and 1 scale operation(s) over 2 s" in text
    assert "drill-t-1 worker 2 -> 3: done" in text
    # the history's counts never cover the drill (they end before it): not recovered
    assert code == 1 and record["not_recovered"]


def test_a_malformed_scale_is_bad_usage_before_any_run_is_looked_for(tmp_path):
    from click.testing import CliRunner

    from mwrun.cli.commands import main

    result = CliRunner().invoke(main, ["drill", "--every", "1", "--for", "5", "--scale",
                                       "worker:2-1"], env={"MWRUN_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "MIN must be less than MAX" in result.output
    assert result.output.count("\n") == 1
