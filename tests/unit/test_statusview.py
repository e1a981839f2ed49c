"""mwrun status's table of worlds: traffic columns, and --watch frames."""

import json

import pytest
from click.testing import CliRunner

from mwrun.cli.commands import main
from mwrun.cli.statusview import in_place, render
from mwrun.errors import RunError

WORLD = {"name": "world1", "backend": "gloo", "size": 2, "members": ["leader", "worker-0"],
         "generation": 1, "state": "healthy", "breaks": 1, "port": 29501, "reason": None,
         "calls_per_s": 812.5, "bytes_per_s": 3328000.0, "last_call_age_s": 0.012,
         "failures": 0, "healthy_for_s": 75.0}
DOC = {"run_id": "r", "name": "star", "state": "running", "supervisor_pid": 1,
       "started_at": 100.0, "processes": [], "worlds": [
           WORLD, {**WORLD, "name": "world2", "state": "forming", "calls_per_s": None,
                   "bytes_per_s": None, "last_call_age_s": None, "healthy_for_s": None}]}


def test_the_worlds_table_shows_traffic_and_healthy_time():
    lines = render(DOC, live=True, now=200.0).splitlines()
    header = next(line for line in lines if line.startswith("WORLD"))
    assert header.split()[:8] == ["WORLD", "STATE", "GENERATION", "BREAKS", "CALLS/S", "MB/S",
                                  "LAST", "CALL"]
    assert next(line for line in lines if line.startswith("world1")).split()[:9] == \
        ["world1", "healthy", "1", "1", "812.5", "3.33", "12ms", "ago", "1m15s"]
    assert next(line for line in lines if line.startswith("world2")).split()[:8] == \
        ["world2", "forming", "1", "1", "-", "-", "-", "-"]
    # a finished run's last word claims no rates
    assert "812.5" not in render({**DOC, "state": "finished"}, live=False, now=200.0)


PROC = {"name": "leader", "host": "localhost", "pid": 7, "state": "running", "exit_code": None,
        "restarts": 0, "worlds": {"world1": 0}, "started_at": 150.0, "cpu_percent": 1.0,
        "rss_bytes": 2**20, "nccl": None}


def test_the_nccl_column_shows_only_where_a_process_runs_nccl():
    plain = render({**DOC, "processes": [PROC]}, live=True, now=200.0)
    assert "NCCL" not in plain.split("\n\n")[1]
    gpu = render({**DOC, "processes": [PROC, {**PROC, "name": "gpu", "nccl": "2.21.5"}]},
                 live=True, now=200.0)
    table = gpu.split("\n\n")[1].splitlines()
    assert table[0].split()[-1] == "NCCL"
    assert table[1].split()[-1] == "-" and table[2].split()[-1] == "2.21.5"


def test_watch_draws_over_the_last_frame_on_a_terminal_and_plain_lines_when_piped(tmp_path):
    frame = in_place("a\nbb", first=False)
    assert frame == "\033[Ha\033[K\nbb\033[K\n\033[J"
    assert in_place("a", first=True).startswith("\033[2J\033[H")
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({**DOC, "state": "finished", "exit_code": 0}))
    result = CliRunner().invoke(main, ["status", "r", "--watch"],
                                env={"MWRUN_HOME": str(tmp_path)})
    assert result.exit_code == 0 and "\033" not in result.output
    assert result.output.startswith("run r (star): finished")


def test_the_last_fault_of_each_world_shows_its_phases_after_the_first_known():
    fault = {"generation": 0, "process": "worker-0", "signal": "SIGKILL", "open": False,
             "cause": "worker-0 was killed by SIGKILL", "at": 150.0,
             "phases": {"t_fault": 0.0, "exit_seen": 0.0012, "survivors_told": 0.003,
                        "restarted": 0.051, "reformed": 0.062, "first_call": 1.5}}
    lost = {**fault, "process": "worker-1", "signal": None, "open": True,
            "phases": {**fault["phases"], "t_fault": None, "exit_seen": 0.0,
                       "reformed": None, "first_call": None}}
    doc = {**DOC, "worlds": [{**WORLD, "last_fault": fault},
                             {**WORLD, "name": "world2", "last_fault": lost},
                             {**WORLD, "name": "world3", "last_fault": None}]}
    text = render(doc, live=True, now=200.0)
    assert "  world1 generation 0 (worker-0, SIGKILL): exit_seen +1 ms, survivors_told" \
        " +3 ms, restarted +51 ms, reformed +62 ms, first_call +1.50 s" in text
    assert "  world2 generation 0 (worker-1) (open): t_fault -, exit_seen +0 ms," \
        " survivors_told +3 ms, restarted +51 ms, reformed -, first_call -" in text
    assert "world3 generation" not in text
    assert "last fault" not in render(DOC, live=True, now=200.0)


def test_status_says_why_processes_started_cold_once_per_reason():
    procs = [{**PROC, "name": "a", "start": "warm"}, {**PROC, "name": "b", "start": "cold"},
             {**PROC, "name": "c", "start": "cold"}, {**PROC, "name": "d", "start": "cold"}]
    cold = {"start": "cold", "why_cold": "preload: false"}
    plan = {"processes": {"a": {"start": "warm"}, "b": cold, "c": cold,
                          "d": {"start": "warm"}}}  # planned warm: its zygote failed
    text = render({**DOC, "processes": procs}, live=True, now=200.0, plan=plan)
    assert text.split("\n\n")[3].splitlines() == [
        "started cold (preload: false): b, c",
        "started cold (its zygote could not start it; see the run's events): d"]
    assert "started cold" not in render({**DOC, "processes": procs[:1]}, live=True,
                                        now=200.0, plan=plan)


def test_status_shows_each_scaled_process_and_the_worlds_draining():
    doc = {**DOC, "revision": 2, "scale": {"worker": {
        "desired": 3, "current": 3, "min": 1, "max": 8, "draining": ["worker-4"]}},
        "worlds": [{**WORLD, "name": "pair-4", "state": "draining", "drain_left_s": 7.5}]}
    text = render(doc, live=True, now=200.0)
    assert "scaled processes:\n  worker: 3 desired, 3 running (scale 1-8); draining:" \
        " worker-4\n  plan revision 2 (mwrun scale, mwrun drain)" in text
    assert next(line for line in text.splitlines() if line.startswith("pair-4")).split()[:3] \
        == ["pair-4", "draining", "7.5s"]
    assert "scaled processes" not in render(DOC, live=True, now=200.0)


def test_a_replica_added_while_the_run_runs_is_planned_in_its_revision(tmp_path):
    from mwrun import runs

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "plan.json").write_text(json.dumps({"processes": {"worker-0": {"start": "warm"}}}))
    (run / "revisions.jsonl").write_text(
        json.dumps({"revision": 1, "started": {"worker-1": {"start": "cold (preload: false)"}}})
        + "\n" + '{"revision": 2, "star')  # cut short while it is written
    env = {"MWRUN_HOME": str(tmp_path)}
    import os
    old = os.environ.get("MWRUN_HOME")
    os.environ.update(env)
    try:
        plan = runs.plan_now(runs.read_plan("r"), runs.read_revisions("r"))
    finally:
        os.environ.pop("MWRUN_HOME") if old is None else os.environ.update({"MWRUN_HOME": old})
    assert plan["processes"] == {"worker-0": {"start": "warm"},
                                 "worker-1": {"start": "cold (preload: false)"}}


def test_a_run_whose_head_is_away_says_so_and_until_when_and_commands_refuse():
    from mwrun import runs

    away = runs.away(DOC, {"since": 170.0, "grace": 60.0, "why": "its link closed"})
    assert runs.is_away(away) and not runs.is_away(DOC)
    head = render(away, live=False, now=200.0).split("\n\n")[0]
    assert "head: away for 30s (its link closed)" in head
    assert "everything stops in 30s (head_grace)" in head
    refused = runs.away_error("r", away)
    assert refused is not None and runs.away_error("r", DOC) is None
    assert str(refused).startswith("run r's head is away (its link closed, ")


def test_a_command_waits_a_while_for_a_new_head_then_says_why_not(monkeypatch):
    """runs.until_head: a run whose head is away is waited for, saying so, until a new
    head has it (head_restart, mwrun adopt), or refused with why after the limit."""
    from mwrun import runs

    away = runs.away(DOC, {"since": 170.0, "grace": 60.0, "why": "its link closed"})
    clock = [0.0]
    looks = []

    def read_state(run_id):
        looks.append(clock[0])
        return back if clock[0] >= 0.5 else away
    back = {**DOC, "supervisor_pid": 4242}
    monkeypatch.setattr(runs, "read_state", read_state)
    monkeypatch.setattr(runs, "is_live", lambda state: "head" not in state)
    said = []
    state = runs.until_head("r", away, said.append, clock=lambda: clock[0],
                            sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    assert state is back and len(looks) == 5
    assert said == ["run r's head is away (its link closed); waiting up to 10s for a new"
                    " head (head_restart, or mwrun adopt r)",
                    "run r has a head again (pid 4242)"]
    assert runs.until_head("r", DOC, said.append) is DOC  # a head: nothing waited for
    monkeypatch.setattr(runs, "read_state", lambda run_id: away)
    clock[0] = 0.0
    with pytest.raises(RunError, match="run r's head is away \\(its link closed"):
        runs.until_head("r", away, said.append, clock=lambda: clock[0],
                        sleep=lambda s: clock.__setitem__(0, clock[0] + s), limit=1.0)


def test_mwrun_head_wait_sets_how_long_a_command_waits_for_a_new_head(monkeypatch):
    from mwrun import runs

    away = runs.away(DOC, {"since": 170.0, "grace": 60.0, "why": "its link closed"})
    monkeypatch.setattr(runs, "read_state", lambda run_id: away)
    slept = []
    monkeypatch.setenv("MWRUN_HEAD_WAIT", "0")
    with pytest.raises(RunError, match="head is away"):
        runs.until_head("r", away, sleep=slept.append)
    assert slept == []  # refused at once
    monkeypatch.setenv("MWRUN_HEAD_WAIT", "soon")
    assert runs.head_wait() == runs.HEAD_WAIT
