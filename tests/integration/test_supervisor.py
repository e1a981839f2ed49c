"""mwrun launch on real processes: failures, restarts, hangs, stops, and the CLI around it."""

import json
import os
import signal
import sys
import time

import pytest

from tests.helpers import BIN, ROOT, leftovers, wait_gone
from tests.integration.jobs import (
    cli,
    expect,
    launch,
    proc_state,
    status,
    wait_for,
    wait_status,
    world_state,
)

pytestmark = pytest.mark.timeout(120)


def write_star(tmp_path, spoke0="", spoke1="", restart0="never", max_restarts=3,
               backoff=0.2, timeout=10, extra_world1="", top="", extra0=""):
    text = f"""\
version: 1
name: star
timeout: {timeout}
{top}processes:
  leader:
    cmd: [{sys.executable}, {BIN / 'hub.py'}]
  worker-0:
    cmd: {sys.executable} {BIN / 'spoke.py'} {spoke0}
    restart: {restart0}
    max_restarts: {max_restarts}
    restart_backoff: {backoff}
{extra0}  worker-1:
    cmd: {sys.executable} {BIN / 'spoke.py'} {spoke1}
worlds:
  world1: {{members: [leader, worker-0]{extra_world1}}}
  world2: {{members: [leader, worker-1]}}
"""
    path = tmp_path / "star.yaml"
    path.write_text(text)
    return path


def test_crash_is_isolated_to_its_world(procs, home, tmp_path):
    topology = write_star(tmp_path, spoke0="--crash-after 1.5", spoke1="--count 0")
    job = launch(procs, home, topology)
    expect(job, "leader", "recv", world="world1")
    broken = expect(job, "leader", "broken", world="world1")
    assert broken["reason"] == "worker-0 exited with code 3"
    over = expect(job, "leader", "over", world="world1")
    assert over["reason"].startswith("worker-0 exited with code 3")
    expect(job, "leader", "recv", world="world2")  # world2 carries on
    doc = status(home)
    assert proc_state(doc, "worker-0")["state"] == "failed"
    assert proc_state(doc, "worker-0")["exit_code"] == 3
    assert world_state(doc, "world1")["state"] == "closed"
    assert world_state(doc, "world2")["state"] == "healthy"
    assert proc_state(doc, "worker-1")["restarts"] == 0
    job.signal(signal.SIGINT)
    assert job.wait() == 1  # a process failed during the run
    wait_gone(home)


def test_crash_restarts_only_that_process_and_the_world_reforms(procs, home, tmp_path):
    topology = write_star(tmp_path, spoke0="--crash-after 1.0", restart0="on-failure")
    job = launch(procs, home, topology)
    expect(job, "leader", "broken", world="world1")
    rejoined = expect(job, "leader", "rejoined", world="world1")
    assert rejoined["generation"] == 1
    expect(job, "leader", "recv", world="world1", generation=1)
    doc = wait_status(home, lambda d: world_state(d, "world1")["state"] == "healthy",
                      "world1 healthy again")
    assert world_state(doc, "world1")["generation"] == 1
    assert world_state(doc, "world1")["breaks"] == 1
    assert world_state(doc, "world2")["state"] == "healthy"
    assert world_state(doc, "world2")["generation"] == 0
    assert [proc_state(doc, n)["restarts"] for n in ("leader", "worker-0", "worker-1")] == \
        [0, 1, 0]
    job.signal(signal.SIGTERM)
    assert job.wait() == 0
    wait_gone(home)


def test_a_stopped_process_is_declared_hung_killed_and_restarted(procs, home, tmp_path):
    # A short hang deadline for the process stopped alone: the others keep the default.
    # Its world's calls time out below it (the timeout chain); world2's stay long, so
    # that a busy machine (a heartbeat thread not run for seconds) breaks nothing else.
    topology = write_star(tmp_path, restart0="on-failure", timeout=30,
                          extra0="    hang_timeout: 2\n", extra_world1=", timeout: 1.5")
    job = launch(procs, home, topology)
    expect(job, "leader", "recv", world="world1")
    result = cli(home, "kill-world", "world1", "--signal", "STOP", check=True)
    assert "sent SIGSTOP to worker-0" in result.stdout
    broken = expect(job, "leader", "broken", world="world1", timeout=20)
    assert "hung" in broken["reason"] or "timed out" in broken["reason"]
    expect(job, "leader", "rejoined", world="world1", timeout=20)
    assert "worker-0 hung: stopped, no heartbeat for 2s; capturing stacks for at most 2s," \
        " then killing it" in job.output()
    out = job.output()  # shown unresponsive first: stopped (or, on a starved machine,
    # its beats already late when the STOP came)
    assert out.index("worker-0 is unresponsive (") < out.index("worker-0 hung: ")
    doc = status(home)
    assert proc_state(doc, "worker-0")["restarts"] == 1
    job.signal(signal.SIGINT)
    assert job.wait() == 0
    wait_gone(home)


def test_a_stopped_library_process_is_unresponsive_at_once_and_running_once_continued(
        procs, home, tmp_path):
    # A long hang_timeout: the process must show unresponsive long before any verdict.
    topology = write_star(tmp_path, top="hang_timeout: 60\n")
    job = launch(procs, home, topology)
    expect(job, "leader", "recv", world="world1")
    cli(home, "kill-world", "world1", "--signal", "STOP", check=True)
    doc = wait_status(home, lambda d: proc_state(d, "worker-0")["state"] == "unresponsive",
                      "worker-0 unresponsive")
    # stopped, as /proc shows (or late already, on a machine that starved its beats)
    assert "worker-0 is unresponsive (" in job.output()
    assert proc_state(doc, "leader")["state"] == "running"
    os.kill(proc_state(doc, "worker-0")["pid"], signal.SIGCONT)
    doc = wait_status(home, lambda d: proc_state(d, "worker-0")["state"] == "running",
                      "worker-0 running again")
    assert proc_state(doc, "worker-0")["restarts"] == 0  # never judged hung
    job.signal(signal.SIGINT)
    assert job.wait() == 0
    wait_gone(home)


@pytest.mark.slow
def test_a_supervisor_stopped_past_the_hang_deadline_kills_nobody(procs, home, tmp_path):
    # What is tested is the supervisor's heartbeat deadline, 5 s (a shorter one would
    # take a heartbeat thread starved on a busy machine for a hang); the calls' own
    # timeout stays below it (the timeout chain) but as long as it may, so that a
    # loaded machine breaks no world.
    topology = write_star(tmp_path, timeout=4.5, top="hang_timeout: 5\n")
    job = launch(procs, home, topology)
    expect(job, "leader", "recv", world="world1")
    expect(job, "leader", "recv", world="world2")
    job.signal(signal.SIGSTOP)  # a debugger, a swap storm, a paused VM
    time.sleep(9.0)  # the stall itself: past the deadline and the grace (5 s + 3 s)
    job.signal(signal.SIGCONT)
    job.expect(lambda line: "the supervisor itself was not running for" in str(line))
    # Had it counted the stall, it would kill at its first turn; had it not confirmed,
    # within a deadline and a grace (5 s + 3 s) of awake time. Watch past both.
    time.sleep(9.0)
    doc = status(home)
    assert "hung" not in job.output()
    assert [(p["state"], p["restarts"]) for p in doc["processes"]] == [("running", 0)] * 3
    assert [(w["state"], w["generation"], w["breaks"]) for w in doc["worlds"]] == \
        [("healthy", 0, 0)] * 2
    job.signal(signal.SIGINT)
    assert job.wait() == 0
    wait_gone(home)


@pytest.mark.slow
def test_restart_budget_exhausted_fails_the_job(procs, home, tmp_path):
    topology = write_star(tmp_path, spoke0="--crash-after 0.2 --crash-restarts 99",
                          spoke1="--count 40", restart0="on-failure", max_restarts=2,
                          backoff=0.1)
    job = launch(procs, home, topology)
    over = expect(job, "leader", "over", world="world1", timeout=60)
    assert "no restarts left (max_restarts: 2)" in over["reason"]
    expect(job, "leader", "done", timeout=60)  # world2 ran to its end meanwhile
    assert job.wait() == 1
    doc = status(home, json.loads((home / "runs").iterdir().__next__().joinpath(
        "state.json").read_text())["run_id"])
    assert doc["state"] == "failed" and doc["exit_code"] == 1
    assert proc_state(doc, "worker-0")["restarts"] == 2
    wait_gone(home)


def test_killing_the_supervisor_leaves_no_orphans(procs, home, tmp_path):
    topology = write_star(tmp_path)
    job = launch(procs, home, topology)
    expect(job, "leader", "recv", world="world2")
    children = [p for p in leftovers(home) if p.pid != job.pid]
    assert len(children) >= 4  # three processes and the watchdog
    job.signal(signal.SIGKILL)
    wait_gone(home, timeout=30.0)  # at once on a quiet machine (its watchdog)


def test_ctrl_c_stops_everything_cleanly(procs, home, tmp_path):
    topology = write_star(tmp_path)
    job = launch(procs, home, topology)
    expect(job, "leader", "recv", world="world1")
    job.signal(signal.SIGINT)
    assert job.wait() == 0
    assert "SIGINT received: stopping every process" in job.output()
    wait_gone(home)
    [run] = list((home / "runs").iterdir())
    doc = json.loads((run / "state.json").read_text())
    assert doc["state"] == "finished"
    assert {p["state"] for p in doc["processes"]} <= {"stopped", "exited"}


def test_a_torchrun_style_script_runs_unchanged(procs, home):
    job = launch(procs, home, ROOT / "configs" / "single_world.yaml")
    assert job.wait(timeout=90) == 0, job.output()
    out = job.output()
    assert "Rank 0 received tensor tensor([2.]) from 2 (step 19)" in out
    assert "rank-1 | Rank 1 sent tensor to rank 0" in out
    wait_gone(home)


def test_status_kill_world_stop_and_logs_through_the_cli(procs, home, tmp_path):
    topology = write_star(tmp_path, restart0="on-failure")
    started = cli(home, "launch", str(topology), "--detach", "--run-id", "drill", check=True)
    assert "started run drill in the background" in started.stdout
    leader_log = home / "runs" / "drill" / "logs" / "leader.log"

    def received(world):  # the members' real join: the leader's first receive there
        text = leader_log.read_text() if leader_log.exists() else ""
        return f'"event": "recv", "world": "{world}"' in text

    wait_for(lambda: received("world1") and received("world2"), 60,
             "the leader's first receive in each world")
    doc = wait_status(home, lambda d: all(w["state"] == "healthy" for w in d["worlds"]),
                      "healthy worlds", run="drill")
    pid0 = proc_state(doc, "worker-0")["pid"]
    shown = cli(home, "status", check=True).stdout
    assert "run drill (star): running" in shown and "world1  healthy" in shown
    killed = cli(home, "kill-world", "world1", check=True).stdout
    assert f"sent SIGKILL to worker-0 (pid {pid0}, rank 1 of world1)" in killed
    doc = wait_status(home, lambda d: world_state(d, "world1")["generation"] == 1
                      and world_state(d, "world1")["state"] == "healthy", "world1 re-formed")
    assert proc_state(doc, "worker-0")["pid"] != pid0
    assert proc_state(doc, "leader")["restarts"] == 0
    log = cli(home, "logs", "leader", check=True).stdout
    assert '"event": "rejoined", "world": "world1", "generation": 1' in log, log
    follower = procs.start([sys.executable, "-m", "mwrun", "logs", "leader", "drill", "-f"],
                           env={"MWRUN_HOME": str(home)})
    count = len(follower.lines)
    follower.expect(lambda line: isinstance(line, dict) and line.get("event") == "recv")
    follower.expect(lambda line: isinstance(line, dict) and line.get("event") == "recv")
    assert len(follower.lines) > count  # it printed what was there, and goes on
    stopped = cli(home, "stop", "drill", check=True).stdout
    assert "run drill finished" in stopped
    assert follower.wait(timeout=10) == 0  # -f ends with the run
    wait_gone(home)
    assert cli(home, "logs", "worker-0", "drill", "-f").returncode == 0  # ends: run is over


def test_run_time_mistakes_get_clear_errors(procs, home, tmp_path):
    assert cli(home, "status").stderr == \
        f"Error: no run; none at all under {home / 'runs'}\n"
    topology = write_star(tmp_path)
    job = launch(procs, home, topology, "--run-id", "twice")
    expect(job, "leader", "recv", world="world1")
    again = cli(home, "launch", str(topology), "--run-id", "twice")
    assert again.returncode == 2 and "run 'twice' exists already" in again.stderr
    bad = cli(home, "kill-world", "nope")
    assert bad.returncode == 1
    assert bad.stderr == "Error: no world named 'nope'; worlds: world1, world2\n"
    rank = cli(home, "kill-world", "world1", "--rank", "7")
    assert rank.stderr == "Error: world world1 has ranks 0..1, not 7\n"
    signame = cli(home, "kill-world", "world1", "--signal", "BOGUS")
    assert signame.returncode == 2 and "unknown signal 'BOGUS'" in signame.stderr
    logs = cli(home, "logs", "ghost")
    assert logs.stderr.startswith("Error: run twice has no process 'ghost'; it has: leader")
    unknown = cli(home, "status", "never-was")
    assert unknown.stderr.startswith("Error: no run 'never-was'")
    job.signal(signal.SIGKILL)  # a dead supervisor: its socket answers no more
    wait_gone(home)
    dead = cli(home, "stop", "twice")  # a lost run: stop ends what it left, here nothing
    assert dead.returncode == 0, dead.stderr
    assert dead.stdout.startswith("run twice is lost: ") and "nothing to stop" in dead.stdout
    shown = cli(home, "status", "twice")
    assert "is gone without ending the run" in shown.stdout and ": lost," in shown.stdout
    for result in (again, bad, rank, logs, unknown, dead, shown):
        assert "Traceback" not in result.stderr


def test_a_member_that_finishes_closes_its_world_for_the_others(procs, home, tmp_path):
    topology = write_star(tmp_path, spoke0="--count 20")
    job = launch(procs, home, topology)
    broken = expect(job, "leader", "broken", world="world1")
    assert broken["reason"] == "rank 1 left the world (it closed it)"
    over = expect(job, "leader", "over", world="world1")
    assert over["reason"] == "worker-0 exited normally and will not restart"
    expect(job, "leader", "recv", world="world2")  # world2 goes on
    doc = status(home)
    assert world_state(doc, "world1") | {"state": "closed", "breaks": 0} == \
        world_state(doc, "world1")
    job.signal(signal.SIGINT)
    assert job.wait() == 0
    assert "could not connect" not in job.output()


def test_a_member_that_finishes_before_its_world_forms_ends_it_and_breaks_nothing(
        procs, home, tmp_path):
    topology = tmp_path / "early.yaml"
    send_recv = ROOT / "examples" / "send_recv"
    topology.write_text(f"""\
version: 1
name: early
processes:
  leader: {{cmd: {sys.executable} {send_recv / 'leader.py'}}}
  worker-0: {{cmd: [{sys.executable}, -c, "print('done already')"]}}
  worker-1: {{cmd: {sys.executable} {send_recv / 'worker.py'} --steps 3 --interval 0.05}}
worlds:
  world1: {{members: [leader, worker-0]}}
  world2: {{members: [leader, worker-1]}}
""")
    job = launch(procs, home, topology)
    assert job.wait(timeout=90) == 0, job.output()
    out = job.output()
    # the leader and the run's summary agree: the world ended, nothing broke
    assert "leader   | world1 ended: worker-0 exited normally and will not restart" in out
    assert "world1 broke" not in out
    assert "finished after" in out and ": 0 restarts, 0 world breaks" in out
    assert "mwrun    | run early-" in out and ": 3 processes in 2 worlds;" in out
    wait_gone(home)


def test_a_process_that_cannot_start_is_said_once_plainly_and_not_retried(procs, home,
                                                                         tmp_path):
    """worker-0's first start fails before it says hello (a module that is not there:
    validate cannot see that): the console says why once, in its own words, status says
    the same, and it is not retried (before: restarted up to max_restarts, each time
    breaking the leader's world, and 'exited with code 1' said nothing of why). The
    leader's init ends with that one line, not mwrun's frames."""
    topology = tmp_path / "cannot.yaml"
    send_recv = ROOT / "examples" / "send_recv"
    topology.write_text(f"""\
version: 1
name: cannot
processes:
  leader: {{cmd: {sys.executable} {send_recv / 'leader.py'}}}
  worker:
    replicas: 1
    cmd: [{sys.executable}, -c, "import no_such_module_here"]
    restart: on-failure
    max_restarts: 3
worlds:
  world1: {{members: [leader, worker-0]}}
""")
    job = launch(procs, home, topology)
    assert job.wait(timeout=90) == 1, job.output()
    out = job.output()
    why = ("worker-0 could not start: ModuleNotFoundError: No module named"
           " 'no_such_module_here'; a command that cannot start is not retried")
    assert out.count(f"mwrun    | {why}\n") == 1, out
    assert "restarting worker-0" not in out and "restart 1 of 3" not in out.split(why)[0]
    assert out.count("worker-0 | ModuleNotFoundError") == 1  # it ran once
    assert "mwrun/worlds/forming.py" not in out, out  # the leader's traceback is short
    doc = status(home)
    worker = proc_state(doc, "worker-0")
    assert worker["state"] == "failed" and worker["restarts"] == 0, worker
    assert why in json.dumps(worker), worker
    wait_gone(home)
