"""What a drill costs the job it measures, against real runs: its faults spend no
restart budget, its SIGTERM to a graceful worker (exit 0) is a fault that recovers,
and a drill the run ends under is still recorded in the history and in report."""

import json
import sys

import pytest

from tests.helpers import BIN, wait_gone
from tests.integration import jobs
from tests.integration.jobs import cli, launch, proc_state, status, wait_for, wait_status

pytestmark = pytest.mark.timeout(150)


def formed(home):
    wait_for(lambda: cli(home, "status").returncode == 0 and status(home)["processes"],
             what="the run to answer")
    wait_status(home, lambda doc: all(w["state"] == "healthy" for w in doc["worlds"]),
                "both worlds formed", timeout=60)


def history(home, run):
    return [json.loads(line) for line in
            (home / "runs" / run / "history.jsonl").read_text().splitlines()]


def test_a_drill_spends_no_restart_budget(procs, home, tmp_path):
    # max_restarts: 1, and about 8 faults over 2 workers: a drill that spent the budget
    # would fail a worker at its second fault, and the drill with it.
    job = launch(procs, home, jobs.write_star(tmp_path, spoke="--interval 0.05",
                                              max_restarts=1), "--run-id", "budget")
    formed(home)
    done = cli(home, "drill", "budget", "--every", "1", "--for", "8", "--seed", "4")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""  # mwrun's library tells the leader of each break: no warning
    doc = wait_status(home, lambda doc: all(p["state"] == "running" for p in doc["processes"]),
                      "every process running again")
    workers = [proc_state(doc, f"worker-{i}") for i in range(2)]
    assert max(p["restarts"] for p in workers) > 1  # more than max_restarts, all a drill's
    assert all(p["restarts_left"] == 1 for p in workers)  # none of it spent
    said = [e for e in history(home, "budget") if e.get("event") == "spawn"
            and e.get("restarts")]
    assert said
    cli(home, "stop", "budget", check=True)
    assert job.wait() == 0
    wait_gone(home)


GRACEFUL = f"""\
import runpy, signal, sys

def leave(*_):  # a graceful worker: SIGTERM ends it with exit 0
    sys.exit(0)

signal.signal(signal.SIGTERM, leave)
sys.argv = [{str(BIN / 'spoke.py')!r}, "--interval", "0.05"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_drills_sigterm_to_a_graceful_worker_is_a_fault_that_recovers(procs, home, tmp_path):
    script = tmp_path / "graceful.py"
    script.write_text(GRACEFUL)
    workers = "".join(f"  worker-{i}:\n    cmd: {sys.executable} {script}\n"
                      "    restart: on-failure\n    restart_backoff: 0.2\n" for i in range(2))
    topology = tmp_path / "graceful.yaml"  # a star: the leader is never hit
    topology.write_text(
        f"version: 1\nname: graceful\ntimeout: 20\nprocesses:\n"
        f"  leader:\n    cmd: {sys.executable} {BIN / 'hub.py'} 1\n{workers}"
        "worlds:\n  world1: {members: [leader, worker-0]}\n"
        "  world2: {members: [leader, worker-1]}\n")
    job = launch(procs, home, topology, "--run-id", "graceful")
    formed(home)
    # Each worker hit twice, 5.9 s apart and more (seed 1): its exit on the first TERM
    # took 2.4 s once while two suites ran, and a second TERM 2.4 s after the first (this
    # seed at --every 2) then found it still exiting and ended it by the signal.
    done = cli(home, "drill", "graceful", "--every", "5", "--for", "12.5", "--seed", "1",
               "--signal", "TERM")
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = [r for r in history(home, "graceful") if r.get("event") == "drill"]
    faults = [f for w in record["worlds"].values() for f in w["list"]]
    assert faults and all(f["recovered"] for f in faults) and record["not_recovered"] == []
    exits = [e for e in history(home, "graceful") if e.get("event") == "exit"
             and e.get("process", "").startswith("worker")]
    assert exits and exits[0]["code"] == 0  # it did exit 0, and was restarted all the same
    assert "exited normally on a drill's signal" in exits[0]["why"]
    cli(home, "stop", "graceful", check=True)
    assert job.wait() == 0
    wait_gone(home)


def test_a_drill_that_outlives_its_run_is_in_the_history_and_report(procs, home, tmp_path):
    job = launch(procs, home, jobs.write_star(tmp_path, spoke="--interval 0.05",
                                              max_restarts=50), "--run-id", "short")
    formed(home)
    drill = procs.start([sys.executable, "-m", "mwrun", "drill", "short", "--every", "2",
                         "--for", "600"], env={"MWRUN_HOME": str(home), "NO_COLOR": "1"})
    wait_for(lambda: any(e.get("event") == "signal" and e.get("why") == "drill"
                         for e in history(home, "short")), timeout=60, what="a drill's fault")
    cli(home, "stop", "short", check=True)
    assert job.wait() == 0
    assert drill.wait(timeout=90) == 1
    assert "drill: run short ended during the drill" in drill.output()
    [record] = [r for r in history(home, "short") if r.get("event") == "drill"]
    assert record["run_ended"] == "run short ended during the drill"
    assert sum(w["faults"] for w in record["worlds"].values()) >= 1
    report = cli(home, "report", "short", "-o", str(tmp_path / "r.png"), check=True).stdout
    assert "run short ended during the drill" in report
    wait_gone(home)
