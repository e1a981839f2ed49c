"""A head that dies leaves the job serving for ``head_grace`` (DESIGN, "A head that can
die"): the agent of its machine keeps every process, the keeper every store, so every
world keeps working; ``status`` says the head is away, commands that need it say so at
once; no head by the end of the grace, and everything is gone, the run's record saying
why. Real processes, real stores, a real SIGKILL."""

import json
import signal
import sys

import psutil
import pytest

from mwrun.schema import HeadState
from mwrun.schema import RunState as R
from tests.helpers import BIN, leftovers, wait_gone
from tests.integration import testbed
from tests.integration.jobs import (
    cli,
    count,
    healthy,
    launch,
    status,
    ticker_job,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.timeout(180)
GRACE = 15  # seconds: ample for the looks below on a loaded machine, short for the suite
# Where nothing is looked at before the grace runs out (the looks are made under a
# grace of 600 s, then a stop: two suites at once on two cores took over 15 s for them).
SHORT_GRACE = 4


def test_a_killed_head_leaves_the_job_serving_and_mwrun_stop_ends_it_at_once(
        procs, home, tmp_path):
    """Looked at while the head is away (a grace nothing here runs out: only the stop
    ends it), then stopped by hand."""
    path, out = ticker_job(tmp_path, 600)
    job = launch(procs, home, path)
    doc = healthy(home)
    pids = {p["name"]: p["pid"] for p in doc["processes"]}
    wait_for(lambda: count(out) > 0, 60, "the first count")
    # state.json, the head's last word while it is away, is written behind (at most
    # every quarter second): the head dies once it says what status said.
    saved = home / "runs" / doc["run_id"] / "state.json"
    wait_for(lambda: {p["name"]: p["pid"] for p in json.loads(saved.read_text())["processes"]}
             == pids, 30, "state.json to name both pids")
    job.signal(signal.SIGKILL)
    job.wait(30)

    # Headless: the same processes, and the world still carries their counts.
    seen = count(out)
    wait_for(lambda: count(out) > seen + 10, 10, "counts after the head died")
    assert all(psutil.pid_exists(pid) for pid in pids.values())
    away = wait_status(home, lambda d: (d.get("head") or {}).get("state") == HeadState.AWAY,
                       "the head away")
    assert away["state"] == R.RUNNING, away
    assert away["head"]["why"] == "its link closed" and away["head"]["grace_s"] == 600
    assert {p["name"]: p["pid"] for p in away["processes"]} == pids, away["processes"]
    shown = cli(home, "status")
    assert shown.returncode == 0 and "head: away for" in shown.stdout, shown.stdout
    refused = cli(home, "kill-world", "w", env={"MWRUN_HEAD_WAIT": "0"})  # (not waited for)
    assert refused.returncode != 0 and "head is away (its link closed" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert all(psutil.pid_exists(pid) for pid in pids.values())  # that touched nothing
    assert len(leftovers(home)) >= 4  # its agent, zygote, keeper, the pair: all going on

    stopped = cli(home, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "every process of" in stopped.stdout and "on this machine has ended" in stopped.stdout
    wait_gone(home)  # the keeper too: no head would ever close it
    after = status(home)
    assert after["state"] == R.LOST and "was told to end (SIGTERM" in after["lost"]


def test_no_head_within_head_grace_and_nothing_of_the_job_is_left(procs, home, tmp_path):
    path, out = ticker_job(tmp_path, SHORT_GRACE)
    job = launch(procs, home, path)
    healthy(home)
    run_dir = next((home / "runs").iterdir())
    wait_for(lambda: count(out) > 0, 60, "the first count")
    job.signal(signal.SIGKILL)
    job.wait(30)
    wait_gone(home, timeout=SHORT_GRACE + 30)
    after = status(home)
    assert after["state"] == R.LOST and "head" not in after
    assert after["lost"] == (f"no head came back within head_grace ({SHORT_GRACE}s) after"
                             " its link closed: every process stopped"), after["lost"]
    note = json.loads((run_dir / "head-away.json").read_text())
    assert note["stopped"] >= note["since"] + SHORT_GRACE - 1


def test_without_head_grace_a_killed_head_ends_everything_at_once(procs, home, tmp_path):
    path, out = ticker_job(tmp_path, 0)
    job = launch(procs, home, path)
    wait_for(lambda: count(out) > 0, 120, "the first count")
    run_dir = next((home / "runs").iterdir())
    job.signal(signal.SIGKILL)
    job.wait(30)
    wait_gone(home)
    assert status(home)["state"] == R.LOST and not (run_dir / "head-away.json").exists()
    assert not leftovers(home)


@pytest.mark.skipif(testbed.missing() is not None, reason=testbed.missing() or "")
def test_over_ssh_a_remote_member_goes_on_headless_and_ends_with_the_grace(
        procs, home, tmp_path):
    """The agent of an ssh host outlives the head's ssh session for the grace too: the
    world between the head's machine and the node keeps carrying counts; then both
    sides are gone, the node left clean."""
    with testbed.node(tmp_path) as n1:
        out = tmp_path / "count"
        cmd = f"[{sys.executable}, {BIN / 'pair.py'}, --interval, 0.05, --out, {out}]"
        path = tmp_path / "ticks.yaml"
        path.write_text(
            f"version: 1\nname: ticks\nhead_grace: {GRACE}\nhead_restart: false\n"
            f"hosts:\n"
            f"  head: {{addr: {n1.head_addr}}}\n"
            f"  node1: {{addr: {n1.addr}, ssh: '{n1.ssh}',"
            f" ssh_options: {json.dumps(n1.ssh_options())}}}\n"
            f"processes:\n  a: {{cmd: {cmd}, host: head}}\n  b: {{cmd: {cmd}, host: node1}}\n"
            f"worlds:\n  w: {{members: [a, b]}}\n")
        job = launch(procs, home, path)
        wait_for(lambda: count(out) > 0, 120, "the first count")
        doc = status(home)
        remote_pid = next(p["pid"] for p in doc["processes"] if p["name"] == "b")
        job.signal(signal.SIGKILL)
        job.wait(30)
        seen = count(out)
        wait_for(lambda: count(out) > seen + 10, 10, "counts across hosts, headless")
        assert psutil.pid_exists(remote_pid) and n1.leftovers()
        wait_gone(home, timeout=GRACE + 30)
        wait_for(lambda: not n1.leftovers(), 30, "a clean node")


def test_a_member_that_exits_while_the_head_is_away_breaks_its_worlds_all_the_same(
        procs, home, tmp_path):
    """Its agent breaks them in their stores: a peer that only watches the world (no
    collective could tell it) hears why, as it would from a head."""
    cmd = f"{sys.executable} {BIN / 'watchful.py'}"
    path = tmp_path / "watch.yaml"
    path.write_text(f"version: 1\nname: watch\nhead_grace: 600\nhead_restart: false\n"
                    f"processes:\n"
                    f"  a: {{cmd: {cmd} --out {tmp_path / 'a'}}}\n"
                    f"  b: {{cmd: {cmd} --out {tmp_path / 'b'}}}\n"
                    f"worlds:\n  w: {{members: [a, b]}}\n")
    job = launch(procs, home, path)
    doc = healthy(home)
    pids = {p["name"]: p["pid"] for p in doc["processes"]}
    job.signal(signal.SIGKILL)
    job.wait(30)
    wait_for(lambda: (status(home).get("head") or {}).get("state") == HeadState.AWAY, 30,
             "the head away")
    psutil.Process(pids["b"]).kill()
    said = wait_for(lambda: (tmp_path / "a").exists() and (tmp_path / "a").read_text(), 30,
                    "a to hear that b was killed")
    assert said.split(" ", 1)[1] == "b was killed by SIGKILL"
    assert cli(home, "stop").returncode == 0
    wait_gone(home)
