"""A warm bring-up of many processes: the supervisor answers and stops meanwhile."""

import contextlib
import json
import signal
import sys

import psutil
import pytest

from mwrun.schema import RunState as R
from tests.helpers import BIN, ROOT, leftovers, wait_gone
from tests.integration.jobs import cli, launch, wait_for

pytestmark = pytest.mark.timeout(180)
MANY = 64  # forks of at least 0.5 s each (tests/bin/slowfork.py): a bring-up of 32 s


def write(tmp_path, count: int) -> str:
    """COUNT sleepers forked from a zygote whose every fork is slow, a world each."""
    script = tmp_path / "sleeper.py"  # a script: a warm start (python -c starts cold)
    script.write_text("import time\ntime.sleep(600)\n")
    sleeper = json.dumps([sys.executable, str(script)])
    lines = ["version: 1", "name: burst", "processes:", "  p:", f"    replicas: {count}",
             f"    cmd: {sleeper}", f"    cwd: {ROOT}", "    preload: [tests.bin.slowfork]",
             f"    env: {{PYTHONPATH: {ROOT}}}", "worlds:"]
    lines += [f"  w{i}: {{members: [p-{i}]}}" for i in range(count)]
    path = tmp_path / "burst.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def started(home, run: str) -> int:
    """How many processes the run's status document shows with a pid."""
    try:
        doc = json.loads((home / "runs" / run / "state.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(1 for p in doc["processes"] if p["pid"] is not None)


@pytest.mark.parametrize("stop", ["mwrun stop", "Ctrl-C"])
def test_status_and_stop_are_answered_during_a_warm_bring_up(procs, home, tmp_path, stop):
    assert (BIN / "slowfork.py").exists()
    job = launch(procs, home, write(tmp_path, MANY), "--run-id", "burst")
    # The forks are under way (the loop that makes them also writes the document).
    wait_for(lambda: started(home, "burst") > 0, 60, "the first warm start")
    asked = cli(home, "status", "burst", "--json")
    assert asked.returncode == 0, asked.stderr
    doc = json.loads(asked.stdout)
    assert doc["state"] in (R.STARTING.value, R.RUNNING.value)
    # Answered during the bring-up, not after it: some forks are still to come (they
    # take 32 s at least; a blocked loop answered only once every one was made).
    pids = [p["pid"] for p in doc["processes"]]
    assert None in pids and any(pids), pids
    if stop == "Ctrl-C":
        job.signal(signal.SIGINT)
    else:
        stopped = cli(home, "stop", "burst")
        assert stopped.returncode == 0, stopped.stderr
    job.wait(90)
    wait_gone(home)  # nothing of the job runs: no process, no zygote, no late fork


def test_a_head_killed_during_a_warm_bring_up_is_adopted_with_each_process_started_once(
        procs, home, tmp_path):
    """The head SIGKILLed while its agent forks 24 processes one by one (half a second
    each): the new head waits for the starts under way (the agent reports them
    without a pid) and every process ends up running once, none restarted."""
    from tests.integration.test_adopt import adopt, head_killed

    count = 24
    path = write(tmp_path, count)
    with open(path, "a") as topo:
        topo.write("head_grace: 600\nhead_restart: false\n")
    job = launch(procs, home, path, "--run-id", "burst")
    # The stores' keeper runs (started cold beside the slow zygote), forks are under way.
    wait_for(lambda: "the stores of" in (home / "runs" / "burst" / "keeper.log").read_text()
             if (home / "runs" / "burst" / "keeper.log").exists() else False, 60, "the keeper")
    wait_for(lambda: started(home, "burst") > 0, 60, "the first warm start")
    assert started(home, "burst") < count  # (a bring-up of 12 s at least)
    head_killed(job, home)
    head = adopt(procs, home)
    # (A sleeper never joins its world: it is "starting" for good, with its pid.)
    doc = wait_for(lambda: (d := json.loads(cli(home, "status", "burst", "--json").stdout))
                   and d.get("epoch") == 2 and all(p["pid"] and p["state"] == "starting"
                                                   for p in d["processes"]) and d,
                   120, "every process started under the new head")
    assert sum(p["restarts"] for p in doc["processes"]) == 0
    pids = sorted(p["pid"] for p in doc["processes"])
    assert sorted(sleepers(home)) == pids  # each once: none started twice
    assert cli(home, "stop", "burst").returncode == 0
    assert head.wait(60) == 0
    wait_gone(home)


def sleepers(home) -> list[int]:
    """The pids of the run's processes that run the sleeper (zygotes run none)."""
    found = []
    for proc in leftovers(home):
        with contextlib.suppress(psutil.Error):
            if any("sleeper.py" in part for part in proc.cmdline()):
                found.append(proc.pid)
    return found
