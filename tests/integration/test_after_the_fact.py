"""A run looked at after it ended, or cut short: plain status and logs find it, an
interrupted launch says so, and the output of a fresh install is clean."""

import signal
import sys

import pytest

from tests.helpers import wait_gone
from tests.integration.jobs import cli, launch, status, wait_for

pytestmark = pytest.mark.timeout(120)

SAY = "import torch, os; print('hello from', os.environ['MWRUN_PROCESS'], flush=True)"


def write_pair(tmp_path):
    path = tmp_path / "pair.yaml"
    path.write_text(f"version: 1\nname: pair\nprocesses:\n"
                    f"  a: {{cmd: [{sys.executable}, -c, \"{SAY}\"]}}\n"
                    f"  b: {{cmd: [{sys.executable}, -c, \"{SAY}\"]}}\n"
                    "worlds:\n  w: {members: [a, b]}\n")
    return path


def test_a_finished_run_is_what_plain_status_and_logs_show(procs, home, tmp_path):
    job = launch(procs, home, write_pair(tmp_path))
    assert job.wait() == 0, job.output()
    assert "NumPy" not in job.output()  # torch's warning when numpy is missing
    shown = cli(home, "status")
    assert shown.returncode == 0, shown.stderr
    assert "(pair): finished" in shown.stdout
    events = shown.stdout.split("last events:\n")[1].splitlines()
    assert "finished after" in events[-1]  # the newest event, shown last
    stamps = [line.split()[0] for line in events]
    assert stamps == sorted(stamps)
    logs = cli(home, "logs", "b")
    assert (logs.returncode, logs.stdout) == (0, "hello from b\n"), logs.stderr
    wait_gone(home)


def test_ctrl_c_in_the_first_seconds_leaves_a_run_that_says_it_ended(procs, home, tmp_path):
    job = launch(procs, home, write_pair(tmp_path))
    runs = home / "runs"
    wait_for(lambda: runs.is_dir() and any(runs.iterdir()), 60, "the run folder")
    job.signal(signal.SIGINT)
    job.wait()
    shown = cli(home, "status")  # answers (cli's own timeout): never waits for a start
    assert shown.returncode == 0, shown.stderr
    assert "still starting" not in shown.stdout + shown.stderr
    assert "ended before it started" in shown.stdout or "finished" in shown.stdout, \
        shown.stdout
    doc = status(home)  # the document says it too: never "starting" once it has ended
    assert doc["state"] in ("failed", "finished"), (doc, job.output())
    if not doc["processes"]:
        assert (doc["state"], doc["exit_code"]) == ("failed", 130), doc
    wait_gone(home)
