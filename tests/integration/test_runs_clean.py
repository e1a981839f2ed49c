"""``mwrun runs`` and ``mwrun clean`` on real runs: two that finished and one that is
live; what is listed, what a dry run names and leaves, what ``--keep`` and
``--older-than`` remove, and that neither a live run nor one whose state cannot be
read (nor a lost run whose processes still run) is ever removed."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from mwrun import runs
from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from tests.integration.jobs import cli, launch, wait_for, wait_status

pytestmark = pytest.mark.timeout(180)
QUICK = json.dumps([sys.executable, "-c", "pass"])
IDLE = json.dumps([sys.executable, "-c", "import time; time.sleep(600)"])


def job(tmp_path, name: str, cmd: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"version: 1\nname: {name}\nprocesses:\n  a: {{cmd: {cmd}}}\n"
                    f"  b: {{cmd: {cmd}}}\nworlds:\n  w: {{members: [a, b]}}\n")
    return path


def listed(home) -> dict[str, dict]:
    return {r["run_id"]: r for r in json.loads(cli(home, "runs", "--json", check=True).stdout)}


def test_runs_lists_them_and_clean_removes_only_finished_ones(procs, home, tmp_path):
    quick = job(tmp_path, "quick", QUICK)
    for run in ("old", "new"):
        cli(home, "launch", str(quick), "--run-id", run, check=True)
    live = launch(procs, home, job(tmp_path, "idle", IDLE), "--run-id", "live")
    wait_for(lambda: (home / "runs" / "live" / "state.json").exists(), 60, "the live run")
    wait_status(home, lambda d: d["state"] == R.RUNNING and all(p["pid"] for p in d["processes"]),
                "the idle run's processes", run="live")
    broken = home / "runs" / "broken"  # a damaged one: nobody can tell whether it is live
    broken.mkdir()
    (broken / "state.json").write_text("{")

    found = listed(home)
    assert {r: found[r]["state"] for r in found} == {
        "old": R.FINISHED, "new": R.FINISHED, "live": R.RUNNING, "broken": None}
    assert found["live"]["live"] and not found["old"]["live"]
    assert found["old"]["exit_code"] == 0 and found["old"]["bytes"] > 0
    assert found["old"]["duration_s"] >= 0 and found["broken"]["problem"]
    table = cli(home, "runs", check=True).stdout
    assert table.splitlines()[0].split() == ["RUN", "NAME", "STATE", "STARTED", "DURATION",
                                             "EXIT", "SIZE"]
    assert "retention: mwrun clean keeps the newest 20 finished runs" in table

    dry = cli(home, "clean", "--keep", "0", "--dry-run", check=True)
    assert "would remove old (finished," in dry.stdout and "would remove new" in dry.stdout
    assert "nothing was removed (--dry-run)" in dry.stdout
    assert "would remove live" not in dry.stdout and "would remove broken" not in dry.stdout
    assert "kept broken: its state.json is damaged" in dry.stderr
    assert set(listed(home)) == {"old", "new", "live", "broken"}  # nothing removed

    kept = cli(home, "clean", "--keep", "1", check=True)
    assert "removed old (finished," in kept.stdout and "freed" in kept.stdout
    assert not (home / "runs" / "old").exists()
    assert set(listed(home)) == {"new", "live", "broken"}

    # --older-than: from when a run ended (its head's last word)
    past = time.time() - 2 * 86400
    os.utime(home / "runs" / "new" / "state.json", (past, past))
    assert "nothing to clean" in cli(home, "clean", "--older-than", "3d", check=True).stdout
    aged = cli(home, "clean", "--older-than", "1d", check=True)
    assert "removed new (finished," in aged.stdout and "ended 2d ago" in aged.stdout
    assert set(listed(home)) == {"live", "broken"}

    assert "nothing to clean" in cli(home, "clean", "--keep", "0", check=True).stdout
    assert set(listed(home)) == {"live", "broken"}  # never the live one, nor the unreadable
    cli(home, "stop", "live", check=True)
    assert live.wait() == 0


def test_a_bad_age_is_a_clear_error(home):
    for age in ("7x", "soon", "-1d"):
        result = cli(home, "clean", "--older-than", age)
        assert result.returncode == 2, result
        assert f"Invalid value for '--older-than': '{age}' is not an age" in result.stderr
        assert "Traceback" not in result.stderr


def test_a_lost_run_whose_processes_still_run_is_kept(tmp_path, monkeypatch):
    """Its head is gone, a process it started is not (this test's process stands in
    for it): ``clean`` keeps it and says how to end it."""
    monkeypatch.setenv("MWRUN_HOME", str(tmp_path))
    folder = runs.run_path("orphaned")
    folder.mkdir(parents=True)
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    me = {"name": "a", "host": "localhost", "pid": os.getpid(), "state": P.RUNNING.value,
          "exit_code": None, "restarts": 0, "worlds": {}, "started_at": time.time()}
    (folder / "state.json").write_text(json.dumps({
        "run_id": "orphaned", "name": "x", "state": R.RUNNING.value, "supervisor_pid": dead,
        "started_at": time.time(), "processes": [me], "worlds": []}))
    state = runs.load_state("orphaned")
    assert state["state"] == R.LOST
    assert "still run unsupervised (a); mwrun stop orphaned ends them" in runs.held(state)
    result = cli(tmp_path, "clean", "--keep", "0", check=True)
    assert "kept orphaned: 1 of its processes still run unsupervised" in result.stderr
    assert folder.exists()
    me["pid"] = dead  # gone too now: nothing of the run runs
    (folder / "state.json").write_text(json.dumps({
        **json.loads((folder / "state.json").read_text()), "processes": [me]}))
    assert "removed orphaned (lost," in cli(tmp_path, "clean", "--keep", "0", check=True).stdout
    assert not folder.exists()
