"""mwrun drill's pure parts: who may be hit, the schedule, and the summary's numbers
from hand-written history records; the live loop with a fake supervisor."""

import itertools
import json

import pytest
from click.testing import CliRunner

from mwrun.cli import drill as d
from mwrun.cli import drillview
from mwrun.cli.commands import main
from mwrun.cli.drilling import Drill
from mwrun.errors import UsageError
from mwrun.records import build
from mwrun.records import drills as rd
from tests.unit.test_pace import FIRST_CALL, KILL, PACE, history

DOC = {"run_id": "r", "worlds": [
    {"name": "world1", "members": ["leader", "worker-0"]},
    {"name": "world2", "members": ["leader", "worker-1", "worker-2"]},
    {"name": "inner", "members": ["leader", "worker-1"]}],
    "processes": [{"name": "leader", "worlds": {"world1": 0, "world2": 0, "inner": 0}},
                  {"name": "worker-0", "worlds": {"world1": 1}},
                  {"name": "worker-1", "worlds": {"world2": 1, "inner": 1}},
                  {"name": "worker-2", "worlds": {"world2": 2}}]}


def test_only_members_that_belong_to_no_other_world_are_hit():
    assert d.targets(DOC, None) == {"world1": [("worker-0", 1)], "world2": [("worker-2", 2)]}
    assert d.targets(DOC, ["world2"]) == {"world2": [("worker-2", 2)]}
    with pytest.raises(UsageError, match="run r has no world 'nope'; it has: world1, world2"):
        d.targets(DOC, ["nope"])
    with pytest.raises(UsageError, match="every member of world inner is also in another"):
        d.targets(DOC, ["world1", "inner"])


def test_a_seed_makes_the_schedule_repeatable():
    hit = d.targets(DOC, None)
    one = list(d.schedule(7, 10.0, 600.0, hit))
    assert one == list(d.schedule(7, 10.0, 600.0, hit))
    assert one != list(d.schedule(8, 10.0, 600.0, hit))
    assert all(0 < s.at < 600.0 for s in one) and [s.at for s in one] == sorted(s.at for s in one)
    assert {(s.world, s.process, s.rank) for s in one} == {("world1", "worker-0", 1),
                                                           ("world2", "worker-2", 2)}
    gaps = [b.at - a.at for a, b in itertools.pairwise(one)]
    assert 5.0 < sum(gaps) / len(gaps) < 15.0  # exponential, mean 10 s (60 draws)
    assert len({round(g) for g in gaps}) > 5  # not on a beat


def sent_at_kill():
    return [rd.Sent(rd.Shot(4.5, "world1", "worker-0", 1), KILL - 0.01)]


def test_the_summary_of_a_drill_from_its_history():
    tl = build(history(with_phases=True), [], "r")
    window = rd.Window(6.0, 21.0, {"world1": (1.0, 6.0), "world2": (1.0, 6.0)})
    record = rd.summarize(tl, sent_at_kill(), window, {"every": 10.0, "for": 15.0})
    w1, w2 = record["worlds"]["world1"], record["worlds"]["world2"]
    assert w1["faults"] == 1 and w2["faults"] == 0
    assert w1["downtime_median"] == w1["downtime_max"] == pytest.approx(FIRST_CALL - KILL)
    assert w1["fault_free_pace"] == pytest.approx(PACE)
    assert w1["kept"] == pytest.approx((15.0 - (FIRST_CALL - KILL)) / 15.0, abs=1e-3)
    assert w2["kept"] == pytest.approx(1.0) and record["kept_others"] == pytest.approx(1.0)
    assert record["kept_faulted"] == w1["kept"]
    [fault] = w1["list"]
    assert fault["recovered"] and fault["phases"]["first_call"] == FIRST_CALL
    assert record["not_recovered"] == [] and rd.exit_status(record) == 0
    text = "\n".join(drillview.lines(record))
    assert "world1: 1 fault(s), down median 2.10 s max 2.10 s; kept 86.0 % of its pace" in text
    assert "world2: no faults; kept 100.0 % of its pace" in text
    assert json.loads(json.dumps(record)) == record  # it goes into the history as is


def test_without_fault_records_the_phases_are_what_the_history_has():
    tl = build(history(), [], "r")
    record = rd.summarize(tl, sent_at_kill(), rd.Window(6.0, 21.0, {}), {})
    [fault] = record["worlds"]["world1"]["list"]
    assert fault["phases"] == {"t_fault": KILL, "exit_seen": None, "survivors_told": None,
                               "restarted": 11.0, "reformed": 12.5, "first_call": None}
    assert record["worlds"]["world1"]["kept"] is None  # no fault-free pace measured


def test_a_fault_that_never_recovered_is_named_and_fails_the_drill():
    records = [r for r in history(with_phases=True) if r.get("event") not in ("form", "fault")
               or r.get("t") < 1.0]
    tl = build(records, [], "r")
    late = rd.Sent(rd.Shot(20.0, "world2", "worker-1", 1), 22.0)  # world2 never broke
    record = rd.summarize(tl, [*sent_at_kill(), late], rd.Window(6.0, 25.0, {}), {})
    assert len(record["not_recovered"]) == 2 and rd.exit_status(record) == 1
    assert record["not_recovered"][0].startswith("world1: worker-0 signalled at ")
    assert record["not_recovered"][1].endswith(": never broke")


def test_the_fault_free_pace_comes_from_the_window_before_the_drill():
    tl = build(history(), [], "r")
    assert rd.baseline(tl, "world1", 9.0) == (0.7, 9.0)  # from its first count
    assert rd.baseline(tl, "world1", 11.0) is None  # down then
    assert rd.baseline(tl, "world1", 4.0) is None  # not BASELINE_MIN of it yet


class FakeRun:
    """A run folder whose history grows as the drill sends faults: each kill writes
    the records of a fault that recovers."""

    def __init__(self, path, doc=None):
        self.path = path
        self.asked = []
        self.doc = doc or {**DOC, "worlds": [{**w, "state": "healthy", "breaks": 0,
                                               "generation": 0, "port": 1 + i}
                                              for i, w in enumerate(DOC["worlds"])]}

    def ask(self, control, message):
        self.asked.append(message)
        if message["verb"] == "status":
            return {"ok": True, "status": self.doc}
        return {"ok": True, "signalled": []}


@pytest.mark.parametrize("tty", [False, True])
def test_ctrl_c_ends_the_drill_with_the_summary_so_far(tmp_path, tty):
    (tmp_path / "history.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in history(end=9.0)))
    run = FakeRun(tmp_path)
    clock = iter([9.0, 9.0, 9.0, 9.2, 9.4])

    def sleep(_):
        raise KeyboardInterrupt

    said = []
    drill = Drill("r", "sock", [rd.Shot(5.0, "world1", "worker-0", 1)],
                  {"every": 5.0, "for": 10.0, "signal": "KILL", "seed": 1, "targets": None},
                  say=said.append, tty=tty, clock=lambda: next(clock, 10.0),
                  sleep=sleep, ask=run.ask, run_dir=tmp_path)
    record, code = drill.run()
    assert record["interrupted"] and code == 0
    # no fault sent, the job untouched (its status read)
    assert [m["verb"] for m in run.asked if m["verb"] != "status"] == ["drill"]
    assert any(line.startswith("drill: 0 fault(s) (SIGKILL)") for line in said)
    assert any(line.startswith("drill: fault-free pace (calls/s, over up to 60 s before the"
                               " drill): world1 10.00, world2 10.00; about 2 fault(s)")
               for line in said)
    shown = [i for i, line in enumerate(said) if line.startswith("\rdrill ")]
    if tty:  # the progress line in place, ended before the summary
        assert shown and said[shown[-1] + 1] == "\n"
    else:
        assert not shown and all(line.endswith("\n") for line in said)


def test_bad_usage_is_one_line_and_exit_2(tmp_path):
    env = {"MWRUN_HOME": str(tmp_path)}
    for args, says in ((["--every", "0", "--for", "5"], "--every must be a number of seconds"
                        " more than 0, not '0'"),
                       (["--every", "1", "--for", "nan"], "--for must be a number"),
                       (["--every", "x", "--for", "5"], "--every must be a number"),
                       (["--every", "1", "--for", "5", "--signal", "HUP"],
                        "--signal can be KILL, TERM, SEGV, STOP, SLOW, not HUP"),
                       (["--every", "1", "--for", "5"], "no live run")):
        result = CliRunner().invoke(main, ["drill", *args], env=env)
        assert result.exit_code == 2, result.output
        assert result.output.count("\n") == 1 and says in result.output


def test_a_fault_on_a_world_still_down_joins_that_outage():
    tl = build(history(with_phases=True), [], "r")
    again = rd.Sent(rd.Shot(6.0, "world1", "worker-0", 1), 11.5)  # the restarted one, again
    record = rd.summarize(tl, [*sent_at_kill(), again], rd.Window(6.0, 21.0, {}), {})
    w1 = record["worlds"]["world1"]
    assert w1["faults"] == 2 and [f["again"] for f in w1["list"]] == [False, True]
    assert w1["downtime_median"] == w1["downtime_max"] == pytest.approx(FIRST_CALL - KILL)
    assert "(hit again while down: the same outage)" in "\n".join(drillview.lines(record))


def test_two_faults_a_moment_apart_are_two_outages():
    second = FIRST_CALL + 0.26
    records = [
        *history(with_phases=True),
        {"t": second, "event": "signal", "process": "worker-0", "signal": "SIGKILL",
         "why": "drill"},
        {"t": second + 0.01, "event": "break", "world": "world1", "generation": 1,
         "reason": "worker-0 was killed by SIGKILL"},
        {"t": second + 1.2, "event": "form", "world": "world1", "generation": 2}]
    tl = build(sorted(records, key=lambda r: r["t"]), [], "r")
    shots = [*sent_at_kill(), rd.Sent(rd.Shot(6.0, "world1", "worker-0", 1), second - 0.001)]
    record = rd.summarize(tl, shots, rd.Window(6.0, 21.0, {}), {})
    w1 = record["worlds"]["world1"]
    assert [f["downtime"] for f in w1["list"]] == [pytest.approx(FIRST_CALL - KILL),
                                                  pytest.approx(1.2, abs=1e-3)]
    assert w1["downtime_max"] == pytest.approx(FIRST_CALL - KILL)
    assert not any(f["again"] for f in w1["list"])


def test_each_fault_sent_is_joined_on_its_signals_fault_id():
    """A restart killed again, a second kill while down, and a STOP whose break comes
    11 s later: each shot is the fault its own signal record names, never the nearest."""
    from tests.unit.test_history import fault_records

    records = fault_records()
    records.append({"t": 27.0, "event": "form", "world": "world1", "generation": 4,
                    "fault": 2})
    tl = build(records, [], "r")
    shots = [rd.Sent(rd.Shot(t, "world1", "worker-0", 1), t - 0.001) for t in (10.0, 10.8, 15.0)]
    record = rd.summarize(tl, shots, rd.Window(9.0, 28.0, {}), {})
    w1 = record["worlds"]["world1"]
    assert [f["again"] for f in w1["list"]] == [False, True, False]
    assert [f["recovered"] for f in w1["list"]] == [True, True, True]
    assert [f["downtime"] for f in w1["list"]] == [pytest.approx(2.0), pytest.approx(2.0),
                                                  pytest.approx(12.0)]
    assert w1["list"][0]["phases"]["first_call"] == 12.0
    assert record["not_recovered"] == [] and rd.exit_status(record) == 0
