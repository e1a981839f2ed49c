"""The fault timeline (head/faults.py) is one object that status, the history, report
and drill all read: a world broken twice before it re-formed (a crash loop, a STOP
drill that ends in a hang kill) is one fault with one id everywhere, its phases the
same in each."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import BIN, wait_gone
from tests.integration import jobs
from tests.integration.jobs import cli, launch, wait_for, wait_status, world_state

pytestmark = pytest.mark.timeout(300)

PHASES = ("t_fault", "exit_seen", "survivors_told", "restarted", "reformed", "first_call")
# A restart that dies at once (before it joins), twice: each death breaks world1 again
# before it re-formed. Its third restart runs the spoke.
CRASH_LOOP = f"""\
import os, runpy, sys
if os.environ.get("MWRUN_RESTART_COUNT") in ("1", "2"):
    sys.exit(3)
sys.argv = [{str(BIN / 'spoke.py')!r}, "--interval", "0.05"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def up(procs, home, topology, run):
    job = launch(procs, home, topology, "--run-id", run)
    wait_for(lambda: cli(home, "status", run).returncode == 0, what="the run to answer")
    wait_status(home, lambda d: all(w["state"] == "healthy" and w["calls_per_s"]
                                    for w in d["worlds"]), "both worlds carrying", run=run,
                timeout=120)
    return job


def drill(home, run, *args):
    """``mwrun drill``, given the time its hang kills and recoveries need."""
    return subprocess.run([sys.executable, "-m", "mwrun", "drill", run, "--worlds", "world1",
                           *args], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "MWRUN_HOME": str(home), "NO_COLOR": "1"})


def records(home, run):
    lines = (home / "runs" / run / "history.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "event" in r]


def closed_fault(home, run, fault_id):
    """The status document once world1's last fault is ``fault_id`` and closed."""
    return wait_status(home, lambda d: (f := world_state(d, "world1")["last_fault"])
                       is not None and f["id"] == fault_id and not f["open"],
                       f"fault {fault_id} closed in status", run=run, timeout=60)


def agree(doc, record):
    """status's last_fault says what the history's fault record says."""
    shown = world_state(doc, "world1")["last_fault"]
    assert (shown["id"], shown["process"], shown["signal"], shown["breaks"]) == (
        record["id"], record["process"], record["signal"], record["breaks"])
    at = shown["at"]
    for phase in PHASES:
        assert shown["phases"][phase] == pytest.approx(record["phases"][phase] - at, abs=2e-4)


def stop(home, job, run):
    cli(home, "stop", run, check=True)
    assert job.wait(timeout=60) == 0
    wait_gone(home)


def test_a_crash_loop_is_one_fault_in_drill_report_and_status(procs, home, tmp_path):
    (tmp_path / "crashloop.py").write_text(CRASH_LOOP)
    topology = jobs.write_star(tmp_path, spoke="--interval 0.05", max_restarts=50)
    text = topology.read_text().replace(
        f"{BIN / 'spoke.py'} --interval 0.05", str(tmp_path / "crashloop.py"), 1)
    topology.write_text(text)
    job = up(procs, home, topology, "loop")
    # Two kills of worker-0, 3.0 s and 18.6 s in: the first one's restarts die twice,
    # and its world re-forms and calls before the second (a warm start that exits at
    # once still takes 2-3 s of a machine running two suites: 6.2 s, the gap this
    # seed once had at --every 3, was not always enough).
    done = drill(home, "loop", "--every", "7.5", "--for", "20", "--seed", "36")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "drill: 2 fault(s) (SIGKILL)" in done.stdout and "never broke" not in done.stdout

    history = records(home, "loop")
    faults = [r for r in history if r["event"] == "fault" and r["world"] == "world1"]
    assert [f["breaks"] for f in faults] == [3, 1], faults
    first, second = faults
    assert all(f["phases"][p] is not None for f in faults for p in PHASES), faults
    breaks = [r for r in history if r["event"] == "break" and r["world"] == "world1"]
    assert [b["fault"] for b in breaks] == [first["id"]] * 3 + [second["id"]]
    [summary] = [r for r in history if r["event"] == "drill"]
    shots = summary["worlds"]["world1"]["list"]
    assert [s["phases"] for s in shots] == [f["phases"] for f in faults]
    assert [s["downtime"] for s in shots] == [
        pytest.approx(f["phases"]["first_call"] - f["phases"]["t_fault"], abs=1e-3)
        for f in faults]
    agree(closed_fault(home, "loop", second["id"]), second)

    shown = cli(home, "report", "loop", "-o", str(tmp_path / "r.png"), check=True).stdout
    assert "2 fault(s)" in shown.splitlines()[0]
    assert "broke 3 times" not in shown and "3 times before it re-formed" in shown
    assert "phases: " in shown and "first_call -" not in shown
    stop(home, job, "loop")


def test_a_stop_drill_is_one_fault_from_the_stop_in_drill_report_and_status(
        procs, home, tmp_path):
    topology = jobs.write_star(tmp_path, spoke="--interval 0.05", max_restarts=50)
    # A call times out after 4 s (the leader writes the break), the stopped member is
    # declared hung at 12 s and killed (the world breaks again), then restarted.
    text = topology.read_text().replace("timeout: 20", "timeout: 4").replace(
        "    max_restarts: 50\n", "    max_restarts: 50\n    hang_timeout: 12\n", 1)
    topology.write_text(text)
    job = up(procs, home, topology, "stopped")
    done = drill(home, "stopped", "--signal", "STOP", "--every", "2", "--for", "3",
                 "--seed", "3")  # one fault, 0.5 s in
    assert done.returncode == 0, done.stdout + done.stderr
    assert "drill: 1 fault(s) (SIGSTOP)" in done.stdout

    history = records(home, "stopped")
    [record] = [r for r in history if r["event"] == "fault"]
    [sent] = [r for r in history if r["event"] == "signal" and r["why"] == "drill"]
    assert record["signal"] == "SIGSTOP" and record["process"] == "worker-0"
    assert record["breaks"] == 2 and sent["faults"] == {"world1": record["id"]}
    phases = record["phases"]
    assert phases["t_fault"] == pytest.approx(sent["t"], abs=0.01)
    assert None not in phases.values(), phases
    # The timeout's break told the survivors before the hang kill's exit was seen.
    assert phases["survivors_told"] < phases["exit_seen"] < phases["restarted"]
    [summary] = [r for r in history if r["event"] == "drill"]
    [shot] = summary["worlds"]["world1"]["list"]
    assert shot["phases"] == phases and shot["recovered"]
    assert shot["downtime"] == pytest.approx(phases["first_call"] - phases["t_fault"],
                                             abs=1e-3)
    agree(closed_fault(home, "stopped", record["id"]), record)

    shown = cli(home, "report", "stopped", "-o", str(tmp_path / "r.png"), check=True).stdout
    assert "killed (SIGSTOP to worker-0)" in shown and "2 times before it re-formed" in shown
    assert " -," not in shown.partition("phases: ")[2].splitlines()[0]
    stop(home, job, "stopped")
