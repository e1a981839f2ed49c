"""``mwrun drill --head``: the run's head SIGKILLed as one of the drill's faults, a new
head (head_restart) taking the run back each time, and the job not noticing: every
fault recovered, nothing failed outside the faulted worlds, the kill and how long the
run was headless in the drill's record. Real processes, a real SIGKILL."""

import json

import pytest

from tests.helpers import wait_gone
from tests.integration.jobs import cli, count, healthy, launch, status, ticker_job, wait_for

pytestmark = pytest.mark.timeout(240)


def test_a_drill_that_kills_the_head_too_keeps_the_job_and_says_how_long(
        procs, home, tmp_path):
    path, out = ticker_job(tmp_path, grace=60, restart=True)
    launch(procs, home, path)
    first = healthy(home)
    wait_for(lambda: count(out) > 0, 60, "the first count")
    # seed 8: one head kill, 7.7 s in (drillhead.schedule), among faults every 3 s
    done = cli(home, "drill", "--every", "3", "--for", "16", "--head", "5", "--seed", "8")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "head: killed 1 time(s); a new head had the run" in done.stdout, done.stdout
    run_dir = home / "runs" / first["run_id"]
    [record] = [r for r in map(json.loads, (run_dir / "history.jsonl").read_text()
                               .splitlines()) if r.get("event") == "drill"]
    [kill] = record["head"]["list"]
    assert kill["pid"] == first["supervisor_pid"] and kill["epoch"] == 1
    assert kill["new_epoch"] == 2 and kill["back"] is not None
    assert record["not_recovered"] == [] and record["head"]["not_back"] == 0
    now = status(home)
    assert now["epoch"] == 2 and now["supervisor_pid"] != first["supervisor_pid"]
    seen = count(out)
    wait_for(lambda: count(out) > seen + 10, 30, "counts under the new head")
    assert cli(home, "stop").returncode == 0
    wait_gone(home)


def test_a_run_without_head_grace_refuses_head_kills_and_is_untouched(procs, home, tmp_path):
    path, _ = ticker_job(tmp_path, grace=0)
    launch(procs, home, path)
    first = healthy(home)
    done = cli(home, "drill", "--every", "3", "--for", "5", "--head", "5")
    assert done.returncode == 2 and "has no head_grace: killing its head would end the job" \
        in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert status(home)["supervisor_pid"] == first["supervisor_pid"]
    assert cli(home, "stop").returncode == 0
    wait_gone(home)
