"""The run's history: a record per event the supervisor emits, bounded in size, and
read back as a timeline with each fault's downtime."""

import json
import signal

import pytest

from mwrun.cli.timeline import build, load, mean_rate, summary
from mwrun.errors import RunError
from mwrun.head.history import History
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
    sup, _ = make(host=host, subscribers=(history,))
    join_all(sup)
    for _ in range(5):
        host.t += 1.0
        history.sample({"world1": [10.0, 40.0], "world2": [10.0, 40.0]})
    sup.kill_world("world1", None, signal.SIGKILL)
    host.t += 0.01
    sup.on_exit("worker-0", -9)
    host.t += 1.0
    history.sample({"world1": [1.0, 4.0], "world2": [10.0, 40.0]})
    sup.on_tick()  # the backoff of 1 s is over: restart
    host.t += 0.5
    for name in ("worker-0", "leader"):
        sup.members.on_world_event(name, sup.procs[name].pid, "world1", 1, "ready")
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
            sup.members.on_heartbeat(name, sup.procs[name].pid)
    assert sup.procs["worker-0"].state.value == "unresponsive"
    sup.members.on_heartbeat("worker-0", sup.procs["worker-0"].pid)
    history.close()
    records = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r for r in records if r.get("event") == "exit"] == []
