"""What the command line says of a run when its head died, when a stop is asked twice
and when more than one run is live: never a false word, and never a guess that ends
the wrong job."""

import json
import os
import signal
import sys

import psutil
import pytest

from mwrun.schema import ProcessState as P
from mwrun.schema import RunState as R
from mwrun.schema import WorldState as W
from tests.helpers import assert_gone
from tests.integration.jobs import cli, launch, status, wait_for, wait_status, write_star

pytestmark = pytest.mark.timeout(180)

SLEEPER = f"[{sys.executable}, -c, 'import time; time.sleep(600)']"


def write_sleepers(tmp_path, name="nap", grace_script=None):
    """Two plain scripts in one world; ``grace_script`` replaces their command."""
    cmd = grace_script or SLEEPER
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"version: 1\nname: {name}\npreload: false\nprocesses:\n"
                    f"  a: {{cmd: {cmd}}}\n  b: {{cmd: {cmd}}}\n"
                    "worlds:\n  w: {members: [a, b]}\n")
    return path


def started(home, run):
    wait_for(lambda: (home / "runs" / run / "state.json").exists(), 60, f"run {run}")


def running(home, run):
    started(home, run)
    # A plain script never joins its world through the library: it stays STARTING.
    return wait_status(home, lambda d: all(p["state"] in (P.STARTING, P.RUNNING) and p["pid"]
                                           for p in d["processes"]),
                       "every process started", run=run, timeout=90)


def watchdog_of(agent: int) -> psutil.Process:
    return next(c for c in psutil.Process(agent).children()
                if "mwrun.host.watchdog" in " ".join(c.cmdline()))


def test_a_run_whose_head_died_reads_lost_and_stop_says_so(procs, home, tmp_path):
    job = launch(procs, home, write_star(tmp_path, workers=1), "--run-id", "star")
    started(home, "star")
    doc = wait_status(home, lambda d: all(w["state"] == W.HEALTHY for w in d["worlds"])
                      and all(p["state"] == P.RUNNING for p in d["processes"]),
                      "a healthy star", timeout=90)
    os.kill(doc["supervisor_pid"], signal.SIGKILL)
    job.wait()
    doc = status(home)
    assert doc["state"] == R.LOST, doc
    assert str(doc["supervisor_pid"]) in doc["lost"]
    assert not [p for p in doc["processes"] if p["state"] == P.RUNNING], doc["processes"]
    assert not [w for w in doc["worlds"] if w["state"] == W.HEALTHY], doc["worlds"]
    shown = cli(home, "status")
    assert "star (star): lost" in shown.stdout and "is gone" in shown.stdout, shown.stdout
    stopped = cli(home, "stop", "star")
    assert stopped.returncode == 0, stopped.stderr
    assert "run star is lost: its head (supervisor pid" in stopped.stdout, stopped.stdout
    assert "it is running" not in stopped.stdout + stopped.stderr


def test_stop_ends_what_a_dead_head_left_running_and_names_it(procs, home, tmp_path):
    job = launch(procs, home, write_sleepers(tmp_path), "--run-id", "nap")
    doc = running(home, "nap")
    pids = {p["name"]: p["pid"] for p in doc["processes"]}
    saved = home / "runs" / "nap" / "state.json"  # what is left to read once the head dies
    wait_for(lambda: {p["name"]: p["pid"] for p in json.loads(saved.read_text())["processes"]}
             == pids, 30, "the pids in state.json")
    # This machine's agent held still (so that neither it nor the head acts on the
    # other's end), its orphan guard killed, then the head and the agent: what they
    # started is left running (a head and an agent killed outright).
    (agent,) = [h["agent_pid"] for h in doc["hosts"]]
    os.kill(agent, signal.SIGSTOP)
    watchdog_of(agent).kill()
    os.kill(doc["supervisor_pid"], signal.SIGKILL)
    os.kill(agent, signal.SIGKILL)
    job.wait()
    doc = status(home)
    assert doc["state"] == R.LOST
    assert {p["name"]: (p["state"], p.get("left_behind")) for p in doc["processes"]} == \
        {"a": (P.UNRESPONSIVE, True), "b": (P.UNRESPONSIVE, True)}, doc["processes"]
    assert "still running on this machine, unsupervised: a, b" in cli(home, "status").stdout
    stopped = cli(home, "stop", "nap")
    assert stopped.returncode == 0, stopped.stderr
    assert (f"killed (SIGKILL) what it left running on this machine: a (pid {pids['a']}),"
            f" b (pid {pids['b']})") in stopped.stdout, stopped.stdout
    assert_gone(pids.values())
    again = cli(home, "stop", "nap")
    assert "none of its processes is left" in again.stdout, again.stdout


def saver(go) -> str:
    """A process that takes its time to save on SIGTERM (a checkpoint): it saves once
    the file ``go`` exists (the test says when, however slow the machine), then says
    so; it says "armed" once its handler is set (a SIGTERM before that ends it)."""
    return (f"[{sys.executable}, -c, 'import os, signal, sys, time;"
            " signal.signal(signal.SIGTERM, lambda *a: ("
            f"[time.sleep(0.05) for _ in iter(lambda: os.path.exists(\"{go}\"), True)],"
            " print(\"saved\", flush=True), sys.exit(0)));"
            " print(\"armed\", flush=True); time.sleep(600)']")


def armed(job) -> None:
    """Until both processes have said "armed", in whatever order."""
    seen: set[str] = set()

    def both(line) -> bool:
        who, _, text = str(line).partition(" | ")
        if text.strip() == "armed":
            seen.add(who.strip())
        return seen >= {"a", "b"}

    job.expect(both, 90)


def test_a_second_stop_says_the_run_is_stopping_and_only_force_kills(procs, home, tmp_path):
    go = tmp_path / "save-now"
    job = launch(procs, home, write_sleepers(tmp_path, grace_script=saver(go)), "--run-id",
                 "nap", "--grace", "120")
    running(home, "nap")
    armed(job)
    first = cli(home, "stop", "nap", "--no-wait")
    assert first.returncode == 0 and "stopping nap" in first.stdout, first.stderr
    second = cli(home, "stop", "nap", "--no-wait")
    assert second.returncode == 0, second.stderr
    assert "run nap is already stopping (" in second.stdout, second.stdout
    assert "of its grace left, then SIGKILL); nothing more was sent" in second.stdout
    assert "--force" in second.stdout
    go.touch()  # they save only now: the second stop came while both were saving
    assert job.wait(timeout=60) == 0  # both saved: the second stop cut no grace
    assert job.output().count("saved") == 2, job.output()


def test_stop_force_kills_at_once_and_says_so(procs, home, tmp_path):
    # never told to save: only the SIGKILL of --force ends them
    job = launch(procs, home, write_sleepers(tmp_path, grace_script=saver(tmp_path / "never")),
                 "--run-id",
                 "nap", "--grace", "120")
    running(home, "nap")
    armed(job)
    assert cli(home, "stop", "nap", "--no-wait").returncode == 0
    forced = cli(home, "stop", "nap", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "SIGKILL to every process of nap now (--force)" in forced.stdout, forced.stdout
    job.wait(timeout=60)
    assert "saved" not in job.output()


@pytest.mark.parametrize("verb", [["stop"], ["kill-world", "w"]])
def test_with_two_live_runs_stop_and_kill_world_name_none_they_refuse(procs, home,
                                                                      tmp_path, verb):
    first = launch(procs, home, write_sleepers(tmp_path, "one"), "--run-id", "one")
    running(home, "one")
    second = launch(procs, home, write_sleepers(tmp_path, "two"), "--run-id", "two")
    running(home, "two")
    refused = cli(home, *verb)
    assert refused.returncode == 1, refused.stdout
    assert "2 runs are live and none was named" in refused.stderr, refused.stderr
    assert "  one (running" in refused.stderr and "  two (running" in refused.stderr
    for run in ("one", "two"):  # neither was touched
        assert all(p["state"] in (P.STARTING, P.RUNNING) and p["restarts"] == 0
                   for p in status(home, run)["processes"])
    for run, job in (("one", first), ("two", second)):
        cli(home, "stop", run, check=True)
        wait_for(lambda j=job: j.popen.poll() is not None, 60, f"{run} to end")
