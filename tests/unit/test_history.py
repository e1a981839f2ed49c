"""The run's history: a record per event the supervisor emits, bounded in size, and
read back as a timeline with each fault's downtime."""

import json
import signal

import pytest

from mwrun.cli.summaryview import summary
from mwrun.errors import RunError
from mwrun.head.decide import events as ev
from mwrun.head.observe.faults import Faults
from mwrun.head.observe.history import Counted, History
from mwrun.records import Tally, build, load, mean_rate, tally
from tests.unit.test_supervisor import FakeHost, join_all, make


class Clock:
    def __init__(self, host):
        self.host = host

    def __call__(self):
        return 1_800_000_000.0 + self.host.t


def record_drill(tmp_path):
    """A scripted drill on a fake host: kill worker-0, it restarts, world1 re-forms."""
    host = FakeHost()
    history = History(tmp_path, {"run_id": "r", "name": "star", "worlds": {
        "world1": ["leader", "worker-0"], "world2": ["leader", "worker-1"]}}, Clock(host))
    box = {}
    faults = Faults({"leader": ["world1", "world2"], "worker-0": ["world1"],
                     "worker-1": ["world2"]},
                    {"world1": ["leader", "worker-0"], "world2": ["leader", "worker-1"]},
                    lambda w: box["sup"].worlds[w].generation, history.fault, Clock(host))
    history.tags = faults.tags  # as the loop wires them: the faults hear each event first
    sup, _ = make(host=host, subscribers=(faults, history))
    box["sup"] = sup
    join_all(sup)
    for _ in range(5):
        host.t += 1.0
        history.sample({"world1": [10.0, 40.0], "world2": [10.0, 40.0]})
    sup.drills.kill_world("world1", None, signal.SIGKILL)
    host.t += 0.01
    sup.on_exit("worker-0", -9)
    host.t += 1.0
    history.sample({"world1": [1.0, 4.0], "world2": [10.0, 40.0]})
    sup.on_tick()  # the backoff of 1 s is over: restart
    host.t += 0.5
    for name in ("worker-0", "leader"):
        sup.members.on_world_event(name, sup.procs[name].worker.pid, "world1", 1, "ready")
    for _ in range(5):
        host.t += 1.0
        history.sample({"world1": [10.0, 40.0], "world2": [10.0, 40.0]})
    history.close()
    return sup, host


def test_a_drill_is_recorded_in_order(tmp_path):
    record_drill(tmp_path)
    records = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    events = [(r["event"], r.get("process") or r.get("world")) for r in records if "event" in r]
    assert events[:6] == [("start", None), ("spawn", "leader"), ("spawn", "worker-0"),
                          ("spawn", "worker-1"), ("form", "world1"), ("form", "world2")]
    assert events[6:] == [("signal", "worker-0"), ("exit", "worker-0"), ("break", "world1"),
                          ("spawn", "worker-0"), ("form", "world1")]
    exit_, broke, spawn, form = [r for r in records if "event" in r][7:]
    assert exit_["code"] == -9 and broke["reason"] == "worker-0 was killed by SIGKILL"
    assert spawn["restarts"] == 1 and form["generation"] == 1


def test_the_timeline_measures_downtime_from_the_kill_to_the_re_form(tmp_path):
    record_drill(tmp_path)
    tl = build(*load(tmp_path, "r"), "r")
    [fault] = tl.faults
    assert fault.world == "world1" and fault.killed == "SIGKILL to worker-0"
    assert fault.downtime(tl.last) == pytest.approx(1.51)
    assert fault.restart - fault.kill == pytest.approx(1.01)
    assert mean_rate(tl, "world2", fault.start, fault.end) == pytest.approx((10.0, 40.0))
    text = "\n".join(summary(tl))
    assert "world1: 1 break(s), down 1.51 s in all" in text
    assert "re-formed +1.51 s: down 1.51 s" in text
    assert "meanwhile world2: 10.0 calls/s (40B/s) before, 10.0 calls/s (40B/s) during" \
           " (kept its pace)" in text
    assert "world2: no breaks; 10.0 calls/s (40B/s) on average" in text


def test_each_record_of_a_fault_carries_its_id(tmp_path):
    record_drill(tmp_path)
    records = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text()
               .splitlines()]
    tagged = [(r["event"], r.get("fault") or r.get("faults")) for r in records
              if "fault" in r or "faults" in r]
    assert tagged == [("signal", {"world1": 1}), ("exit", {"world1": 1}), ("break", 1),
                      ("spawn", {"world1": 1}), ("form", 1)]


def fault_records(first_call=True):
    """world1: a drill's kill (fault 1) whose restart dies twice before the re-form
    (three breaks), hit again while down; its fault record written long after the
    breaks; then a STOP 3 s later whose world breaks 11 s after it (a timeout)."""
    worlds = {"world1": ["leader", "worker-0"], "world2": ["leader", "worker-1"]}
    one, two = {"world1": 1}, {"world1": 2}
    phases = {"t_fault": 10.0, "exit_seen": 10.01, "survivors_told": 10.02,
              "restarted": 10.3, "reformed": 11.9, "first_call": 12.0}
    records = [
        {"t": 0.0, "event": "start", "run_id": "r", "name": "n", "worlds": worlds},
        {"t": 0.0, "event": "form", "world": "world1", "generation": 0},
        {"t": 0.0, "event": "form", "world": "world2", "generation": 0},
        {"t": 10.0, "event": "signal", "process": "worker-0", "signal": "SIGKILL",
         "why": "drill", "faults": one},
        {"t": 10.01, "event": "exit", "process": "worker-0", "faults": one},
        {"t": 10.02, "event": "break", "world": "world1", "generation": 0, "reason": "a",
         "fault": 1},
        {"t": 10.3, "event": "spawn", "process": "worker-0", "restarts": 1, "faults": one},
        {"t": 10.5, "event": "break", "world": "world1", "generation": 1, "reason": "b",
         "fault": 1},
        {"t": 10.8, "event": "signal", "process": "worker-0", "signal": "SIGKILL",
         "why": "drill", "faults": one},
        {"t": 11.0, "event": "break", "world": "world1", "generation": 2, "reason": "c",
         "fault": 1},
        {"t": 11.9, "event": "form", "world": "world1", "generation": 3, "fault": 1},
        {"t": 15.0, "event": "signal", "process": "worker-0", "signal": "SIGSTOP",
         "why": "drill", "faults": two},
        {"t": 26.0, "event": "break", "world": "world1", "generation": 3, "reason": "d",
         "fault": 2}]
    if first_call:
        records.insert(-2, {"t": 14.0, "event": "fault", "id": 1, "world": "world1",
                            "generation": 0, "process": "worker-0", "signal": "SIGKILL",
                            "cause": "a", "breaks": 3, "phases": phases})
    return records


def test_the_timeline_joins_each_fault_on_its_id():
    tl = build(fault_records(), [], "r")
    first, second = tl.faults
    assert (first.id, first.breaks, first.reason, first.end) == (1, 3, "a", 11.9)
    assert first.phases["first_call"] == 12.0  # its record, however late it came
    assert first.start == 10.0 and first.back == 12.0 and first.restart == 10.3
    assert (second.id, second.breaks, second.start, second.broke) == (2, 1, 15.0, 26.0)
    assert second.back is None and second.killed == "SIGSTOP to worker-0"
    text = "\n".join(summary(tl))
    assert "world1: 4 break(s)" in text and "3 times before it re-formed" in text


def test_a_fault_signalled_but_not_broken_yet_is_down_from_its_signal():
    records = fault_records()[:-1]  # the STOP sent; its world not broken yet
    tl = build(records, [], "r")
    fault = tl.faults[-1]
    assert fault.broke is None and fault.start == 15.0 and fault.back is None
    assert "killed (SIGSTOP to worker-0), not broken yet" in "\n".join(summary(tl))


def test_the_history_stays_within_its_bound(tmp_path):
    history = History(tmp_path, {"run_id": "r", "name": "n", "worlds": {"w": ["a"]}},
                      limit=4096)
    for i in range(500):
        history.sample({"w": [float(i), 4.0 * i]})
    history.close()
    current, rotated = tmp_path / "history.jsonl", tmp_path / "history.1.jsonl"
    assert current.stat().st_size <= 4096 and rotated.stat().st_size <= 4096
    head = json.loads(current.read_text().splitlines()[0])
    assert head["event"] == "start" and head["continued"] and head["worlds"] == {"w": ["a"]}
    tl = build(*load(tmp_path, "r"), "r")
    assert tl.samples["w"][-1][1] == 499.0


def test_a_history_cut_short_is_read_up_to_the_cut(tmp_path):
    record_drill(tmp_path)
    path = tmp_path / "history.jsonl"
    path.write_text(path.read_text()[:-25])  # the supervisor died mid-line
    records, notes = load(tmp_path, "r")
    assert notes == ["history.jsonl ends in a line cut short; it was left out"]
    assert build(records, notes, "r").faults[0].end is not None


def test_a_history_without_its_start_or_at_all_is_a_clear_error(tmp_path):
    with pytest.raises(RunError, match="run r has no history"):
        load(tmp_path, "r")
    (tmp_path / "history.jsonl").write_text('{"t": 1.0, "rates": {"w": [1, 2]}}\n{"t": 2')
    with pytest.raises(RunError, match="has no start record"):
        build(*load(tmp_path, "r"), "r")


def test_many_unbroken_worlds_share_one_summary_line():
    worlds = {f"w{i}": ["leader", f"worker-{i}"] for i in range(6)}
    records = [{"t": 0.0, "event": "start", "run_id": "r", "name": "n", "worlds": worlds}]
    records += [{"t": float(t), "rates": {w: [float(i + 1), 8.0] for i, w in enumerate(worlds)}}
                for t in range(1, 6)]
    assert summary(build(records, [], "r"))[1:] == [
        "6 worlds: no breaks; 1.0 to 6.0 calls/s on average"]


def test_an_unresponsive_process_is_no_exit_in_the_history(tmp_path):
    """Unresponsive is a live state: its history says nothing ended (it once wrote a
    fake exit for every late heartbeat)."""
    host = FakeHost()
    history = History(tmp_path, {"run_id": "r", "name": "star", "worlds": {}}, Clock(host))
    sup, _ = make(host=host, subscribers=(history,))
    join_all(sup)
    for _ in range(8):  # 4 s in ticks, past two beat intervals: its beats are late
        host.t += 0.5
        sup.on_tick()
        for name in ("leader", "worker-1"):
            sup.members.on_heartbeat(name, sup.procs[name].worker.pid)
    assert sup.procs["worker-0"].state.value == "unresponsive"
    sup.members.on_heartbeat("worker-0", sup.procs["worker-0"].worker.pid)
    history.close()
    records = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r for r in records if r.get("event") == "exit"] == []


def test_the_finish_lines_count_is_reports_over_the_same_records(tmp_path):
    """A retired replica's restart and its removed world's break stay counted: the head
    folds each record it writes (Counted), report the records it reads back, with one
    function (records.Tally)."""
    history = History(tmp_path, {"run_id": "r", "name": "serve",
                                 "worlds": {"pair-0": ["frontend", "worker-0"]}})
    counted = Tally()
    events = [ev.Spawned("worker-0", 10, 0), ev.WorldBroken("pair-0", 0, "worker-0 killed"),
              ev.Spawned("worker-0", 11, 1), ev.WorldFormed("pair-0", 1),
              ev.WorldRemoved("pair-0", "drained"),  # the replica retired: gone from the job
              ev.WorldAdded("pair-0", ("frontend", "worker-0")), ev.Spawned("worker-0", 12, 0)]
    for event in events:
        history(event)
        Counted(counted)(event)
    history.close()
    assert counted == Tally(restarts=1, breaks=1)
    assert tally(load(tmp_path, "r")[0]) == counted
