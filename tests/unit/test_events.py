"""The supervisor tells what it does as typed events, each where it makes the change:
who was signalled and why, what ended and how, which world broke, formed or closed.
The history is written from them (the same records the old snapshot diff found), and
state.json is rewritten only when an event says something changed."""

import json
import signal
from collections import Counter

import pytest

from mwrun.head.decide import events as ev
from mwrun.head.decide.events import Why
from mwrun.head.observe import document
from mwrun.head.observe.document import SAVE_GAP, USAGE_EVERY, USAGE_SHARE, Usage, Writer
from mwrun.head.observe.history import History
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W
from tests.unit.test_supervisor import HANGS, STAR, FakeHost, join_all, make, run_for


def since(host, mark):
    """The events emitted after ``mark`` (an index into host.events), Said left out."""
    return [e for e in host.events[mark:] if not isinstance(e, ev.Said)]


def said(host, mark=0):
    return [e.text for e in host.events[mark:] if isinstance(e, ev.Said)]


def test_start_and_forming_are_told():
    sup, host = make()
    assert since(host, 0) == [ev.Spawned("leader", 1001, 0), ev.Spawned("worker-0", 1002, 0),
                              ev.Spawned("worker-1", 1003, 0), ev.Running()]
    mark = len(host.events)
    join_all(sup)
    assert [e for e in since(host, mark) if isinstance(e, ev.WorldFormed)] == [
        ev.WorldFormed("world1", 0), ev.WorldFormed("world2", 0)]
    assert sorted(e.process for e in since(host, mark) if isinstance(e, ev.ProcessChanged)
                  and e.state is P.RUNNING) == ["leader", "worker-0", "worker-1"]


def test_a_slow_member_drill_tells_one_member_to_be_late_and_breaks_nothing(tmp_path):
    sup, host = make()
    join_all(sup)
    history = History(tmp_path, {"run_id": "r"})
    mark = len(host.events)
    hit = sup.drills.make_late("world1", None, 0.02, 30.0)  # its own member: worker-0
    assert hit == {"process": "worker-0", "pid": 1002, "rank": 1}
    assert host.told == [("worker-0", {"verb": "late", "world": "world1", "delay": 0.02,
                                       "for": 30.0})]
    assert since(host, mark) == [ev.MadeLate("worker-0", "world1", 0.02, 30.0)]
    assert said(host, mark) == ["kill-world world1: worker-0 made 20 ms late to every call"
                                " for 30s"]
    assert host.whys == [] and sup.worlds["world1"].state is W.HEALTHY
    history(since(host, mark)[0])
    history.close()
    [_, late] = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text()
                 .splitlines()]
    assert {k: v for k, v in late.items() if k != "t"} == {
        "event": "late", "process": "worker-0", "world": "world1", "delay_s": 0.02,
        "for_s": 30.0}
    sup.drills.make_late("world1", 0, 0.5, 1.0)  # a rank named: the leader, shared or not
    assert host.told[-1][0] == "leader"
    sup.on_exit("worker-0", -9)
    with pytest.raises(ValueError, match="worker-0 of world1 is not running"):
        sup.drills.make_late("world1", None, 0.02, 30.0)


def test_a_drill_kill_is_told_as_a_drill_then_the_exit_break_restart_and_re_form():
    sup, host = make()
    join_all(sup)
    mark = len(host.events)
    sup.drills.kill_world("world1", None, signal.SIGKILL)
    assert host.whys == [("worker-0", signal.SIGKILL, Why.DRILL)]  # the host is told why
    assert since(host, mark) == [ev.Signalled("worker-0", signal.SIGKILL, Why.DRILL)]
    assert said(host, mark) == ["kill-world world1: SIGKILL to worker-0 (pid 1002)"]
    mark = len(host.events)
    sup.on_exit("worker-0", -9)
    assert since(host, mark) == [
        ev.Exited("worker-0", 1002, -9, P.RESTARTING,
                  "worker-0 was killed by SIGKILL; restart after a drill's fault (none of"
                  " max_restarts: 2 spent) at once"),
        ev.WorldBroken("world1", 0, "worker-0 was killed by SIGKILL")]
    mark = len(host.events)
    sup.on_tick()
    assert since(host, mark) == [
        ev.Spawned("worker-0", 1004, 1),
        ev.WorldChanged("world1", W.FORMING, "worker-0 was killed by SIGKILL")]  # it is back
    assert said(host, mark) == [
        "restarting worker-0 (restart 1, after a drill's fault: none of max_restarts spent)"]
    mark = len(host.events)
    for name in ("worker-0", "leader"):
        sup.members.on_world_event(name, sup.procs[name].worker.pid, "world1", 1, "ready")
    rec = sup.procs["worker-0"]
    assert since(host, mark) == [ev.ProcessChanged("worker-0", P.RUNNING, rec.why),
                                 ev.WorldFormed("world1", 1)]


def test_a_hang_is_told_before_its_kill_and_the_kill_says_hang():
    sup, host = make(HANGS)
    join_all(sup)
    host.status["worker-0"] = "stopped"
    mark = len(host.events)
    run_for(sup, host, 10.0, beating=("leader", "worker-1"))
    assert since(host, mark) == [
        ev.ProcessChanged("worker-0", P.UNRESPONSIVE, "worker-0 is unresponsive (stopped)"),
        ev.Hung("worker-0", "stopped, no heartbeat for 10s"),
        ev.Signalled("worker-0", signal.SIGKILL, Why.HANG)]
    assert host.whys == [("worker-0", signal.SIGKILL, Why.HANG)]


def test_a_stop_is_told_with_its_reason_and_every_signal_says_stop():
    sup, host = make(grace=5.0)
    join_all(sup)
    mark = len(host.events)
    sup.request_stop("Ctrl-C")
    told = since(host, mark)
    assert told[0] == ev.Stopping("Ctrl-C")
    assert told[1:] == [ev.Signalled(name, sig, Why.STOP)
                        for name in ("leader", "worker-0", "worker-1")
                        for sig in (signal.SIGTERM, signal.SIGCONT)]
    sup.on_exit("leader", 0)
    sup.on_exit("worker-0", -15)
    mark = len(host.events)
    host.t += 5.0
    sup.on_tick()
    assert since(host, mark) == [ev.Signalled("worker-1", signal.SIGKILL, Why.STOP)]
    mark = len(host.events)
    sup.on_exit("worker-1", -9)
    assert since(host, mark) == [
        ev.Exited("worker-1", 1003, -9, P.STOPPED, "worker-1 was killed by SIGKILL"),
        ev.WorldClosed("world1", None), ev.WorldClosed("world2", None),
        ev.RunEnded(R.FINISHED)]
    assert {w for _, _, w in host.whys} == {Why.STOP}


def test_a_member_reported_break_and_the_re_form():
    sup, host = make()
    join_all(sup)
    mark = len(host.events)
    leader = sup.procs["leader"]
    sup.members.on_world_event("leader", leader.worker.pid,
                               "world2", 0, "broken", "rank 0: timed out")
    assert since(host, mark) == [
        ev.WorldBroken("world2", 0, "rank 0: timed out"),
        ev.WorldChanged("world2", W.FORMING, "rank 0: timed out")]  # everyone is alive
    mark = len(host.events)
    for name in ("leader", "worker-1"):
        sup.members.on_world_event(name, sup.procs[name].worker.pid, "world2", 1, "ready")
    assert since(host, mark) == [ev.WorldFormed("world2", 1)]


def test_a_plain_world_mwrun_cannot_read_is_told_once_not_every_tick():
    sup, host = make()
    mark = len(host.events)
    for _ in range(5):
        sup.plain.on_store_seen("world2", None)
        host.t += 0.5
        sup.on_tick()
    assert since(host, mark) == [ev.WorldChanged("world2", W.FORMING, sup.worlds["world2"].opaque)]


def test_the_tally_of_states_follows_every_move():
    sup, host = make(grace=1.0)
    join_all(sup)
    sup.on_exit("worker-0", -9)
    sup.on_exit("worker-1", 3)
    host.t += 0.5
    sup.on_tick()
    sup.request_stop("Ctrl-C")
    sup.on_exit("leader", -15)
    host.t += 20.0
    sup.on_tick()
    sup.on_tick()
    assert +sup.processes.tally == Counter(r.state for r in sup.procs.values())


# -- the history from events, against the snapshot diff it replaces ------------------------

def _snapshot(sup) -> dict:
    return {"run": sup.state,
            "procs": {n: (r.state, r.worker.pid, r.restarts) for n, r in sup.procs.items()},
            "worlds": {n: (w.state, w.generation, w.breaks) for n, w in sup.worlds.items()}}


def _diff(before, now, sup) -> list[dict]:
    """The old history (head/history.py before events): records found by comparing
    the supervisor's records after each step. Kept here as the reference."""
    if before is None:
        before = {"run": R.STARTING, "procs": {n: (None, None, 0) for n in now["procs"]},
                  "worlds": {n: (W.FORMING, 0, 0) for n in now["worlds"]}}
    out = []
    for name, (state, pid, _) in now["procs"].items():
        old_state, old_pid, _ = before["procs"][name]
        rec = sup.procs[name]
        if state is P.HUNG and old_state is not P.HUNG:
            out.append({"event": "hang", "process": name, "why": rec.worker.hung})
        if old_pid is not None and (pid != old_pid or not state.alive):
            out.append({"event": "exit", "process": name, "pid": old_pid,
                        "code": rec.worker.exit_code, "state": state.value, "why": rec.why})
    for name, (_, _, breaks) in now["worlds"].items():
        _, old_generation, old_breaks = before["worlds"][name]
        if breaks > old_breaks:
            out.append({"event": "break", "world": name, "generation": old_generation,
                        "reason": sup.worlds[name].reason})
    if now["run"] is R.STOPPING and before["run"] is not R.STOPPING:
        out.append({"event": "stop"})
    for name, (_, pid, restarts) in now["procs"].items():
        if pid is not None and pid != before["procs"][name][1]:
            out.append({"event": "spawn", "process": name, "pid": pid, "restarts": restarts})
    for name, (state, generation, _) in now["worlds"].items():
        old_state, old_generation, _ = before["worlds"][name]
        if state is W.HEALTHY and (old_state is not W.HEALTHY or generation != old_generation):
            out.append({"event": "form", "world": name, "generation": generation})
        elif state is W.CLOSED and old_state is not W.CLOSED:
            out.append({"event": "close", "world": name, "reason": sup.worlds[name].reason})
    if now["run"].final and before["run"] is not now["run"]:
        out.append({"event": "end", "state": now["run"].value})
    return out


def _both(tmp_path, text, script) -> tuple[list[dict], list[dict]]:
    """(records written from events, records the snapshot diff finds after each step),
    signals left out of both (the diff never found those: the loop wrote them)."""
    host = FakeHost()
    history = History(tmp_path, {"run_id": "r", "name": "n", "worlds": {}}, lambda: 0.0)
    sup, _ = make(text, host=host, subscribers=(history,))
    diffed, seen = [], [None]

    def step():
        now = _snapshot(sup)
        diffed.extend(_diff(seen[0], now, sup))
        seen[0] = now

    step()
    script(sup, host, step)
    history.close()
    written = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    written = [{k: v for k, v in r.items() if k != "t"} for r in written[1:]
               if r["event"] != "signal"]
    return written, diffed


def _drill_and_stop(sup, host, step):
    join_all(sup)
    step()
    sup.drills.kill_world("world1", None, signal.SIGKILL)
    step()
    sup.on_exit("worker-0", -9)
    step()
    host.t += 1
    sup.on_tick()
    step()
    for name in ("worker-0", "leader"):
        sup.members.on_world_event(name, sup.procs[name].worker.pid, "world1", 1, "ready")
        step()
    sup.request_stop("Ctrl-C")
    step()
    for name in sup.procs:
        sup.on_exit(name, -15)
        step()


def _hang(sup, host, step):
    join_all(sup)
    step()
    host.status["worker-0"] = "stopped"
    for _ in range(20):
        run_for(sup, host, 0.5, beating=("leader", "worker-1"))
        step()
    sup.on_exit("worker-0", -9)
    step()


def _gives_up(sup, host, step):
    join_all(sup)
    step()
    sup.request_stop("Ctrl-C")
    step()
    for name in ("leader", "worker-0"):
        sup.on_exit(name, -15)
        step()
    host.t += 5
    sup.on_tick()
    step()
    host.t += 10
    sup.on_tick()
    step()


def _member_break_then_closes(sup, host, step):
    join_all(sup)
    step()
    leader = sup.procs["leader"]
    sup.members.on_world_event("leader", leader.worker.pid,
                               "world2", 0, "broken", "rank 0: timed out")
    step()
    for name in ("leader", "worker-1"):
        sup.members.on_world_event(name, sup.procs[name].worker.pid, "world2", 1, "ready")
        step()
    sup.on_exit("worker-0", -9)
    step()
    sup.on_exit("leader", 0)
    step()
    host.t += 2
    sup.on_tick()
    step()
    sup.on_exit("worker-1", 0)
    step()


def test_the_history_from_events_is_what_the_snapshot_diff_found(tmp_path):
    for i, (text, script) in enumerate([(STAR, _drill_and_stop), (HANGS, _hang),
                                        (STAR, _gives_up), (STAR, _member_break_then_closes)]):
        (tmp_path / str(i)).mkdir()
        written, diffed = _both(tmp_path / str(i), text, script)
        assert written == diffed, script.__name__


def test_where_the_diff_saw_only_the_last_word_the_events_tell_each(tmp_path):
    """The diff read records after a whole step; where a step changed one twice it
    wrote the last value. Events carry the value of their moment."""
    on_stop = STAR.replace("world2: {members: [leader, worker-1]}",
                           "world2: {members: [leader, worker-1], on_failure: stop}")

    def fails(sup, host, step):
        join_all(sup)
        step()
        sup.on_exit("worker-1", 2)
        step()

    written, diffed = _both(tmp_path, on_stop, fails)
    # Its exit (restart decided), then the stop that cancelled the restart: the diff
    # saw only the cancelled restart, as if it had been the exit's why.
    assert written[5:8] == [
        {"event": "exit", "process": "worker-1", "pid": 1003, "code": 2,
         "state": "restarting", "why": "worker-1 exited with code 2; restart 1 of 2 at once"},
        {"event": "break", "world": "world2", "generation": 0,
         "reason": "worker-1 exited with code 2"},
        {"event": "stop"}]
    assert diffed[5]["why"] == "its restart was cancelled by the stop"


def test_state_json_is_not_rewritten_by_heartbeats_that_change_nothing(tmp_path):
    clock = [1000.0]
    built = []
    writer = Writer(tmp_path / "state.json", lambda: built.append(clock[0]) or {"n": len(built)},
                    lambda: (), clock=lambda: clock[0])
    host = FakeHost()
    sup, _ = make(host=host, subscribers=(writer,))
    join_all(sup)
    writer.save()
    assert len(built) == 1 and json.loads((tmp_path / "state.json").read_text()) == {"n": 1}
    for _ in range(20):
        host.t += 0.5
        clock[0] += 0.5
        for name, rec in sup.procs.items():
            sup.members.on_heartbeat(name, rec.worker.pid)
        sup.on_tick()
        writer.save()
    assert len(built) == 1
    sup.on_exit("worker-0", -9)
    writer.save()
    assert len(built) == 2  # a change, long after the last write: at once
    sup.on_tick()  # the restart, a moment later: held back, written behind
    writer.save()
    assert len(built) == 2 and writer.due == clock[0] + SAVE_GAP
    clock[0] += SAVE_GAP
    writer.save()
    assert len(built) == 3 and writer.due is None
    writer.save(force=True)  # nothing changed: even the final save writes nothing
    assert len(built) == 3


def test_what_no_event_tells_still_rewrites_state_json(tmp_path):
    outside, clock = [("up",)], [1000.0]
    built = []
    writer = Writer(tmp_path / "state.json", lambda: built.append(1) or {}, lambda: outside[0],
                    clock=lambda: clock[0])
    writer.save()
    clock[0] += 1.0
    writer.save()
    assert len(built) == 1
    outside[0] = ("lost",)  # a host's state, a usage reading: not the supervisor's
    writer.save()
    assert len(built) == 2


def test_the_usage_readings_follow_what_a_whole_rewrite_of_state_json_took(tmp_path,
                                                                          monkeypatch):
    """The readings' period is set by the whole rewrite (the probes sent while building,
    the build, the write), not by the build alone: a job of many hosts reads usage as
    seldom as keeps that rewrite under USAGE_SHARE of a core."""
    clock = [1000.0]
    usage = Usage(lambda name: (1.0, 2048), lambda: None)

    def build() -> dict:
        clock[0] += 0.004  # the build, probes and all
        return {}

    writer = Writer(tmp_path / "state.json", build, lambda: (), clock=lambda: clock[0],
                    spent=usage.cost)
    writer.save()
    assert usage.every == USAGE_EVERY  # a quick rewrite: the readings every USAGE_EVERY
    written = []

    def slow_write(path, doc) -> None:
        clock[0] += 0.016  # a large document's write, on a slow disk
        written.append(doc)

    monkeypatch.setattr(document.rundir, "write_json", slow_write)
    writer.dirty = True
    clock[0] += 1.0
    writer.save()
    assert written == [{}]
    assert usage.every == pytest.approx(0.020 / USAGE_SHARE)  # build and write, both
