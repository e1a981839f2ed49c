"""Post-mortem bundles, the pure parts and the head's part on fakes: the culprit line
for each kind of evidence, py-spy's output and failures read, a bundle opened on a
hang and on a break, completed by its members' answers or its deadline, written with
its files; a hung member's kill held back until its capture is over."""

from __future__ import annotations

import json
import signal
from types import SimpleNamespace

from mwrun.head.decide import events as ev
from mwrun.head.decide.supervisor import Supervisor
from mwrun.head.postmortem import culprit
from mwrun.head.postmortem.capture import Postmortems
from mwrun.head.postmortem.culprit import Seen
from mwrun.head.postmortem.stacks import Stacks
from mwrun.host import spy
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse
from mwrun.schema import ProcessState as P
from tests.unit.test_supervisor import HANGS, FakeHost, join_all, run_for

# -- the culprit line ------------------------------------------------------------------


def test_a_hung_member_outside_the_call_the_others_wait_in_is_named():
    seen = [Seen("a", "all_reduce", 31.04), Seen("b"), Seen("c", "all_reduce", 30.9)]
    assert culprit.line("world1", 3, seen, "b", "stopped, no heartbeat for 30s") == \
        "world1 g3: b never entered all_reduce; the others waited in it for 31.0s" \
        " (stopped, no heartbeat for 30s)"


def test_the_flight_recorders_number_of_the_call_the_others_wait_in():
    def recorder(*entries):
        return {"entries": [{"process_group": [group, ""], "collective_seq_id": seq,
                             "is_p2p": False, "retired": retired, "state": "scheduled"}
                            for group, seq, retired in entries]}

    dump = recorder(("w-g2", 811, True), ("w-g3", 812, False), ("v-g0", 5, False))
    assert culprit.flight_seq(dump, "w-g3") == 812  # the newest not finished, its world's
    assert culprit.flight_seq(dump, "w-g2") is None  # finished: it waits in none
    assert culprit.flight_seq({"off": "not set"}, "w-g3") is None
    assert culprit.flight_seq(None, "w-g3") is None
    waiting = [Seen("a", "all_reduce", 31.0, seq=812), Seen("c", "all_reduce", 30.0, seq=812)]
    assert culprit.line("w", 3, [*waiting, Seen("b")], "b", "x") == \
        "w g3: b never entered all_reduce #812; the others waited in it for 31.0s (x)"
    assert culprit.line("w", 3, [*waiting, Seen("b", "all_reduce", seq=811)], "b", "x") == \
        "w g3: b was in all_reduce #811 while the others waited in all_reduce #812" \
        " for 31.0s (x)"
    apart = [Seen("a", "all_reduce", 1.0, seq=812), Seen("c", "all_reduce", 1.0, seq=813)]
    assert "never entered all_reduce;" in culprit.line("w", 3, [*apart, Seen("b")], "b", "x")


def test_a_hung_member_in_another_call_or_the_same_or_unread():
    others = [Seen("a", "all_reduce", 5.0)]
    assert culprit.line("w", 0, [*others, Seen("b", "broadcast")], "b", "x") == \
        "w g0: b was in broadcast while the others waited in all_reduce for 5.0s (x)"
    assert culprit.line("w", 0, [*others, Seen("b", "all_reduce")], "b", "x") == \
        "w g0: b hung inside all_reduce with the others, who waited in it for 5.0s (x)"
    unread = Seen("b", known=False, why_unknown="py-spy is not installed")
    assert culprit.line("w", 0, [*others, unread], "b", "x") == \
        "w g0: b hung (x); its stacks could not be read (py-spy is not installed);" \
        " the others waited in all_reduce for 5.0s"
    assert culprit.line("w", 0, [Seen("a"), Seen("b")], "b", "x") == \
        "w g0: b hung in no call of this world (x); the others were in no call of this world"


def test_a_member_hung_after_its_world_broke_points_at_the_breaks_bundle():
    """The world's timeout is below hang_timeout, so the others' call times out first:
    by the hang the world is broken and they wait in rejoin; the break's bundle, one
    generation back, is where the calls are."""
    seen = [Seen("a", "rejoin", 2.1), Seen("b", "all_reduce"), Seen("c", "rejoin", 1.9)]
    assert culprit.line("world1", 1, seen, "b", "stopped") == \
        "world1 g1: b never came back to re-form the world; the others waited for it in" \
        " rejoin for 2.1s (stopped); g0's bundle says what broke the world"
    unread = Seen("b", known=False, why_unknown="gone")
    assert culprit.line("w", 0, [Seen("a", "rejoin", 1.0), unread], "b", "x") == \
        "w g0: b never came back to re-form the world; the others waited for it in" \
        " rejoin for 1.0s (x)"


def test_a_break_names_the_member_unresponsive_or_outside_the_call_that_timed_out():
    why = "rank 0: its all_reduce timed out after 1.4s waiting for a peer (the world's timeout)"
    late = [Seen("a", "rejoin", 0.1), Seen("b", state=P.UNRESPONSIVE.value)]
    assert culprit.line("w", 0, late, None, why) == \
        f"w g0: b was unresponsive when the world broke: {why}"
    asleep = [Seen("a", "rejoin", 0.1), Seen("b"), Seen("c", "rejoin", 0.1)]
    assert culprit.line("w", 0, asleep, None, why) == \
        f"w g0: b never entered all_reduce; then it broke: {why}"
    # the rank that timed out is back in its own code by the capture: still not a suspect
    back = [Seen("a"), Seen("b"), Seen("c", "all_reduce", 1.2)]
    assert culprit.line("w", 0, back, None, why) == \
        f"w g0: b never entered all_reduce; then it broke: {why}"
    exited = [Seen("a", "all_reduce", 2.0), Seen("b", known=False, why_unknown="not running")]
    assert culprit.line("w", 0, exited, None, "b exited with code 1") == \
        "w g0: broke: b exited with code 1; the survivors were in all_reduce"


def test_the_call_is_read_from_the_library_or_else_from_frames_seen_outside():
    threads = [{"call": {"world": "w2", "call": "recv", "for_s": 1.0}},
               {"call": {"world": "w1", "call": "barrier", "for_s": 2.5}}]
    assert culprit.call_in(threads, "w1") == ("barrier", 2.5)
    assert culprit.call_in(threads, "w9") == (None, None)
    outside = [{"stack": [["/x/app.py", 3, "<module>", ""],
                          ["/site/mwrun/worlds/world.py", 130, "World.all_reduce", ""],
                          ["/site/mwrun/worlds/calls.py", 50, "Calls._run", ""]]}]
    assert culprit.call_in_frames(outside) == "all_reduce"
    assert culprit.call_in_frames([{"stack": [["/x/app.py", 3, "World.rejoin", ""]]}]) is None


# -- py-spy, read --------------------------------------------------------------------------

DUMP = [{"pid": 7, "thread_id": 140, "thread_name": "MainThread", "os_thread_id": 7,
         "active": False, "owns_gil": True,
         "frames": [{"name": "sleep", "filename": "/x/app.py", "line": 9},
                    {"name": "<module>", "filename": "/x/app.py", "line": 20}]},
        {"pid": 7, "thread_id": 141, "thread_name": "mwrun-heartbeat", "os_thread_id": 8,
         "active": False, "owns_gil": False, "frames": []}]


def test_py_spys_dump_reads_as_the_librarys_own_innermost_last():
    main, beat = spy.threads(json.dumps(DUMP))
    assert (main["id"], main["name"], main["main"], main["gil"]) == (140, "MainThread", True, True)
    assert main["stack"] == [["/x/app.py", 20, "<module>", ""], ["/x/app.py", 9, "sleep", ""]]
    assert (beat["main"], beat["stack"]) == (False, [])


def test_why_py_spy_read_nothing_is_said():
    assert "no ptrace permission" in spy.reason("Error: Permission denied (os error 13)", 7, True)
    assert spy.reason("anything", 7, False) == "process 7 had gone before py-spy could read it"
    assert spy.find({spy.ENV: "none"}) == (None, f"out-of-process capture is off ({spy.ENV}=none)")
    assert spy.find({spy.ENV: "/nonexistent/py-spy"})[1] == \
        f"{spy.ENV}=/nonexistent/py-spy is not an executable"
    assert spy.command("/bin/py-spy", 7, False) == \
        ["/bin/py-spy", "dump", "--pid", "7", "--json", "--nonblocking"]


# -- the head's part, on a supervisor of a fake host ----------------------------------------


class Here:
    """The members' hosts' agents, reading stacks from outside (host/spy.py): what
    each was asked; their answers go to ``told`` (the bundles' ``outside_told``)."""

    def __init__(self):
        self.asked: list[tuple] = []
        self.told = None

    def capture(self, name, key, pid, native, within):
        self.asked.append((key, pid, native))
        return None


def supervised(tmp_path, capture_wait=2.0):
    """A supervisor of a fake host (HANGS: world1 leader+worker-0, world2 leader+worker-1)
    whose events the bundles hear; its members joined."""
    told, records = [], []
    host = FakeHost()
    asks = Stacks(lambda p, m: told.append((p, m)), host.now)
    here = Here()
    pm = Postmortems(tmp_path, asks, lambda: sup, lambda: here, records.append,
                     host.now, host.wall)
    here.told = pm.outside_told
    plan = place(parse(HANGS, "t.yaml"), {"localhost": HostInventory(True, (0, 1), ())},
                 lambda a, t: 40000)
    sup = Supervisor(plan, host, ev.Events((host.hear, pm)), grace=5.0,
                     capture_wait=capture_wait)
    sup.start()
    join_all(sup)
    return SimpleNamespace(sup=sup, host=host, pm=pm, asks=asks, spies=here,
                           told=told, records=records)


def test_a_hang_opens_a_bundle_whose_kill_waits_for_every_answer(tmp_path):
    j = supervised(tmp_path)
    sup, host, pm, asks, spies, told, records = \
        j.sup, j.host, j.pm, j.asks, j.spies, j.told, j.records
    host.status["worker-0"] = "stopped"
    run_for(sup, host, 10.0, beating=("leader", "worker-1"))
    assert sup.procs["worker-0"].state is P.HUNG
    assert ("worker-0", signal.SIGKILL) not in host.of("signal")  # captured first
    assert sorted(p for p, _ in told) == ["leader", "worker-0"]  # world1's members asked
    assert {(k.split("/")[1], native) for k, _, native in spies.asked} == \
        {("leader", False), ("worker-0", True)}  # native frames only of the hung one
    assert pm.step() == []  # nobody answered yet
    rid = told[0][1]["id"]
    assert all(order["flight"] is True for _, order in told)  # the Flight Recorder too
    leader = sup.procs["leader"]
    recorder = {"pg_status": {}, "dropped": 0, "entries": [  # its recv #7 not finished
        {"process_group": ["world1-g0", ""], "is_p2p": True, "p2p_seq_id": n,
         "collective_seq_id": 0, "retired": n < 7, "state": "scheduled"} for n in (6, 7)]}
    # thread 2: py-spy's reading of it below (matched by thread id) gets its call
    asks.told(rid, "leader", leader.worker.pid, [{"id": 2, "name": "MainThread", "main": True,
                                           "stack": [["/x/hub.py", 5, "serve", ""]],
                                           "call": {"world": "world1", "call": "recv",
                                                    "for_s": 9.0}}], None, recorder)
    for key, pid, _ in spies.asked:
        spies.told(key, pid, {"threads": [{"id": 2, "name": "MainThread", "main": True,
                                           "stack": [["/x/spoke.py", 3, "<module>", ""]]}],
                              "error": None, "by": "py-spy"})
    assert pm.step() == ["worker-0"]  # complete: its kill may go now
    sup.beats.kill_hung("worker-0")
    assert ("worker-0", signal.SIGKILL) in host.of("signal")
    folder = tmp_path / "postmortem" / "world1-g0"
    doc = json.loads((folder / "bundle.json").read_text())
    assert doc["hung"] == "worker-0" and \
        doc["culprit"].startswith("world1 g0: worker-0 never entered recv #7;"), doc
    shown = {m["process"]: m for m in doc["members"]}
    assert shown["leader"]["flight_recorder"] == \
        {"path": "flight_recorder/leader.json", "entries": 2, "dropped": 0}
    assert json.loads((folder / "flight_recorder" / "leader.json").read_text()) == recorder
    assert "flight_recorder" not in shown["leader"]["inside"]  # once, in its own file
    assert "flight_recorder" in asks.asks[rid].members["leader"].told  # never changed
    assert "flight_recorder" not in shown["worker-0"]  # its library did not answer
    assert (folder / "stacks.txt").read_text().startswith(doc["culprit"] + "\n")
    assert records[-1]["event"] == "postmortem" and records[-1]["path"] == str(folder)
    sup.on_exit("worker-0", -9)  # the break that follows opens no second bundle
    assert pm.open == {}
    pm.fault({"world": "world1", "generation": 0, "id": 1})
    assert json.loads((folder / "fault.json").read_text())["id"] == 1


def test_a_capture_nobody_answers_ends_at_its_deadline_and_the_kill_goes(tmp_path):
    j = supervised(tmp_path)
    sup, host, pm = j.sup, j.host, j.pm
    host.status["worker-0"] = "stopped"
    run_for(sup, host, 10.0, beating=("leader", "worker-1"))
    assert ("worker-0", signal.SIGKILL) not in host.of("signal")
    run_for(sup, host, 2.0, beating=("leader", "worker-1"))
    assert ("worker-0", signal.SIGKILL) in host.of("signal")  # the supervisor's own deadline
    host.t += 0.1
    assert pm.step() == ["worker-0"]  # written as it stood, each silence said
    doc = json.loads((tmp_path / "postmortem" / "world1-g0" / "bundle.json").read_text())
    assert all(not m["answered"] and m["reason"] for m in doc["members"])


def test_a_break_bundle_never_holds_a_kill(tmp_path):
    j = supervised(tmp_path)
    host, pm = j.host, j.pm
    pm(ev.WorldBroken("world2", 0, "worker-1 exited with code 1"))
    assert list(pm.open) == [("world2", 0)]
    host.t += 5
    assert pm.step() == []
    assert (tmp_path / "postmortem" / "world2-g0" / "bundle.json").exists()


def test_a_breaks_members_are_read_from_outside_only_when_their_library_is_slow(tmp_path):
    j = supervised(tmp_path)
    j.pm(ev.WorldBroken("world1", 0, "a call timed out"))
    assert j.spies.asked == []  # the libraries first: py-spy beside a recovery slows it
    rid = j.told[-1][1]["id"]
    leader = j.sup.procs["leader"]
    j.asks.told(rid, "leader", leader.worker.pid, [])
    j.host.t += 0.6
    assert j.pm.step() == []
    assert [k.split("/")[1] for k, _, _ in j.spies.asked] == ["worker-0"]  # it never answered


def test_a_hang_with_no_world_to_capture_holds_no_kill(tmp_path):
    j = supervised(tmp_path)
    j.pm(ev.Hung("gone-by-now", "no heartbeat for 10s"))  # in no world of the job
    assert j.pm.open == {} and j.pm.step() == ["gone-by-now"]
    assert j.pm.step() == []
