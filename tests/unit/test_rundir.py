"""Run folders as they are found: damaged, foreign, finished, or made in the same second."""

import json
import os
import pathlib
import signal

import pytest
from click.testing import CliRunner

from mwrun.cli.commands import main
from mwrun.head.observe import rundir


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MWRUN_HOME", str(tmp_path))
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path / "runs"


def finished(run_id: str, started_at: float) -> dict:
    return {"run_id": run_id, "name": "star", "state": "finished", "supervisor_pid": 1,
            "started_at": started_at, "control": "/nowhere.sock", "exit_code": 0,
            "processes": [{"name": "leader", "host": "localhost", "pid": None,
                           "state": "exited", "exit_code": 0, "restarts": 0,
                           "worlds": {"w": 0}, "started_at": started_at}],
            "worlds": [{"name": "w", "state": "closed", "generation": 0, "breaks": 0,
                        "backend": "gloo", "port": 29501, "members": ["leader"]}]}


def put(runs, run_id: str, state) -> None:
    folder = runs / run_id
    (folder / "logs").mkdir(parents=True)
    text = state if isinstance(state, str) else json.dumps(state)
    (folder / "state.json").write_text(text)
    (folder / "logs" / "leader.log").write_text("hello from leader\n")


def cli(*args):
    return CliRunner().invoke(main, list(args))


BAD = {"a list": "[]", "truncated": json.dumps(finished("x", 5.0))[:70],
       "negative pid": json.dumps({**finished("x", 5.0), "supervisor_pid": -7}),
       "missing key": json.dumps({k: v for k, v in finished("x", 5.0).items()
                                  if k != "processes"}),
       "bad process": json.dumps({**finished("x", 5.0), "processes": [{"pid": -1}]})}


@pytest.mark.parametrize("damage", list(BAD))
@pytest.mark.parametrize("command", [["status", "bad"], ["status", "bad", "--json"],
                                     ["stop", "bad"], ["logs", "leader", "bad"],
                                     ["kill-world", "w", "bad"]])
def test_a_damaged_state_is_one_line_for_every_command(runs, damage, command):
    put(runs, "bad", BAD[damage])
    result = cli(*command)
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1
    assert result.output.startswith("Error: run 'bad': its state.json is damaged")
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize("damage", list(BAD))
def test_plain_status_skips_and_names_a_damaged_run(runs, damage):
    put(runs, "good", finished("good", 1.0))
    put(runs, "bad", BAD[damage])
    result = cli("status")
    assert result.exit_code == 0, result.output
    assert "mwrun: skipped: run 'bad': its state.json is damaged" in result.output
    assert "run good (star): finished" in result.output


def test_plain_status_and_logs_mean_the_newest_run_live_or_not(runs):
    put(runs, "older", finished("older", 1.0))
    put(runs, "newer", finished("newer", 2.0))
    result = cli("status")
    assert result.exit_code == 0, result.output
    assert "run newer (star): finished" in result.output
    logs = cli("logs", "leader")
    assert (logs.exit_code, logs.output) == (0, "hello from leader\n")
    stop = cli("stop")  # stop and kill-world still want a live run
    assert stop.exit_code == 1 and "no live run" in stop.output


def test_a_run_folder_that_never_got_a_state_does_not_claim_to_be_starting(runs):
    (runs / "empty" / "logs").mkdir(parents=True)
    result = cli("status", "empty")
    assert result.exit_code == 1
    assert "never started" in result.output and "still starting" not in result.output


def test_another_users_run_is_a_one_line_permission_error(runs, monkeypatch):
    put(runs, "theirs", finished("theirs", 1.0))
    state = runs / "theirs" / "state.json"
    if os.getuid() == 0:  # root reads every folder: be refused as another user would be
        read_text = pathlib.Path.read_text

        def refuse(path, *args, **kwargs):
            if path == state:
                raise PermissionError(13, "Permission denied", str(path))
            return read_text(path, *args, **kwargs)

        monkeypatch.setattr(pathlib.Path, "read_text", refuse)
    else:
        state.parent.chmod(0o000)
    try:
        result = cli("status", "theirs")
    finally:
        state.parent.chmod(0o700)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: run 'theirs': cannot read")
    assert "Permission denied" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_runs_made_in_the_same_second_get_their_own_ids(runs, monkeypatch):
    monkeypatch.setattr(rundir.time, "time", lambda: 1795000000.0)
    first, second, third = (rundir.create(None, "star") for _ in range(3))
    assert first.name == rundir.new_run_id("star")
    assert [second.name, third.name] == [f"{first.name}-2", f"{first.name}-3"]
    # As written (read back, a run's started_at, faked here, older than its live
    # supervisor would make the run lost: mwrun.runs.load_state).
    assert json.loads((third / "state.json").read_text())["state"] == "starting"
    with pytest.raises(Exception, match="exists already"):
        rundir.create(first.name, "star")


def test_a_run_that_ended_before_starting_anything_says_failed_not_starting(runs):
    path = rundir.create(None, "star")
    rundir.end_unstarted(path, 130)
    doc = json.loads((path / "state.json").read_text())
    assert (doc["state"], doc["exit_code"], doc["processes"]) == ("failed", 130, [])
    shown = CliRunner().invoke(main, ["status", path.name])
    assert "it ended before it started any process" in shown.output, shown.output
    # a supervisor that ran has said its own last word: that stays
    rundir.write_json(path / "state.json", finished(path.name, doc["started_at"]))
    rundir.end_unstarted(path, 1)
    assert json.loads((path / "state.json").read_text())["state"] == "finished"


def test_a_ctrl_c_just_after_the_folder_is_made_leaves_a_run_that_says_it_failed(runs,
                                                                                monkeypatch):
    """The folder is the reservation: a Ctrl-C right after its mkdir once left a folder
    with no state ("it never started", owned by no one). It is held back until the
    state is written, then raised, and the run says it failed with 130."""
    reserve = rundir._reserve

    def interrupted(run_id, name):
        path = reserve(run_id, name)
        os.kill(os.getpid(), signal.SIGINT)  # lands here, after the mkdir
        return path

    monkeypatch.setattr(rundir, "_reserve", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rundir.create("cut", "star")
    state = json.loads((runs / "cut" / "state.json").read_text())
    assert (state["state"], state["exit_code"]) == ("failed", 130), state


def test_agents_notes_where_a_new_head_finds_each_agent_and_under_slurm_its_node(tmp_path):
    rundir.note_agent(tmp_path, "a", {"control": "/s/a.sock", "pid": 7})
    rundir.note_agent(tmp_path, "b", {"control": "/s/b.sock", "pid": 8, "node": "n2",
                                      "jobid": "41", "inventory": {}})
    told = json.loads((tmp_path / "agents.json").read_text())
    assert told == {"a": {"control": "/s/a.sock", "pid": 7},
                    "b": {"control": "/s/b.sock", "pid": 8, "node": "n2", "jobid": "41"}}
