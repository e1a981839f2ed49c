"""A new head takes back a run that was scaled and drained since its launch (``mwrun
adopt``; DESIGN, "A head that can die"): the plan as the revisions left it, every
replica with its pid, every world of theirs healthy, and the next scale goes on from
there; a drain the dead head had under way is finished by the new one (its replica
stopped, its world closed), never left running. configs/serve.yaml, real processes."""

import contextlib
import json
from pathlib import Path

import psutil
import pytest

from mwrun.schema import RunState as R
from tests.helpers import leftovers, wait_gone
from tests.integration.jobs import cli, launch, status, wait_for, wait_status
from tests.integration.test_adopt import adopt, head_killed
from tests.integration.test_readme_scale import config_copy, healthy, workers

pytestmark = pytest.mark.timeout(300)


def serving(procs, home, tmp_path, hang_timeout=30):
    """configs/serve.yaml with a grace for its head, launched and serving: its job."""
    path = Path(config_copy(tmp_path, "serve.yaml"))
    text = path.read_text().replace("hang_timeout: 30", f"hang_timeout: {hang_timeout}")
    path.write_text(text + "head_grace: 600\nhead_restart: false\n")
    job = launch(procs, home, path)
    wait_for(lambda: list((home / "runs").glob("*/state.json")), 120, "the run")
    wait_status(home, healthy, "the frontend and both workers serving", timeout=120)
    return job


def pids_of(doc) -> dict:
    return {p["name"]: p["pid"] for p in doc["processes"]}


def of_run(home, script: str) -> list[int]:
    """The pids of every process of the run that runs ``script`` (its zygotes run
    none): one per replica, or a rank runs twice."""
    found = []
    for proc in leftovers(home):
        with contextlib.suppress(psutil.Error):  # (one that ended meanwhile)
            if any(script in part for part in proc.cmdline()):
                found.append(proc.pid)
    return found


def saved(home) -> dict:
    [path] = (home / "runs").glob("*/state.json")
    return json.loads(path.read_text())


def test_a_run_scaled_and_drained_is_adopted_as_it_is_and_scales_on(procs, home, tmp_path):
    job = serving(procs, home, tmp_path)
    for command in (["scale", "worker=+2"], ["drain", "worker-1"]):
        done = cli(home, *command)
        assert done.returncode == 0, done.stderr
    doc = wait_status(home, lambda d: workers(d) == ["worker-0", "worker-2", "worker-3"]
                      and healthy(d), "three workers serving", timeout=120)
    pids = pids_of(doc)
    wait_for(lambda: pids_of(saved(home)) == pids, 30, "state.json")  # (written behind)
    head_killed(job, home)

    head = adopt(procs, home)
    doc = wait_status(home, lambda d: d.get("epoch") == 2 and healthy(d) and "head" not in d,
                      "the run adopted", timeout=120)
    assert pids_of(doc) == pids  # nothing restarted, the drained worker not back
    assert sorted(w["name"] for w in doc["worlds"]) == ["pair-0", "pair-2", "pair-3"]
    assert all(w["breaks"] == 0 for w in doc["worlds"])
    assert doc["scale"]["worker"]["desired"] == 3
    head.expect(lambda line: "adopted (head epoch 2): 4 of 4 processes found running"
                in line)

    # The new head goes on from the revisions: the lowest free index, the next number.
    grown = cli(home, "scale", "worker=+1")
    assert grown.returncode == 0, grown.stderr
    doc = wait_status(home, lambda d: "worker-1" in workers(d) and healthy(d),
                      "worker-1 back, under the new head", timeout=120)
    assert {n: p for n, p in pids_of(doc).items() if n != "worker-1"} == pids
    [run_dir] = (home / "runs").glob("*/")
    numbers = [json.loads(line)["revision"] for line in
               (run_dir / "revisions.jsonl").read_text().splitlines()]
    assert numbers == [1, 2, 3]
    assert cli(home, "stop").returncode == 0
    assert head.wait(60) == 0
    assert status(home)["state"] == R.FINISHED
    assert not [line for line in head.lines if "failed (" in line and " 0 failed" not in line]
    wait_gone(home)


def test_a_drain_under_way_when_the_head_dies_is_finished_by_the_new_head(
        procs, home, tmp_path):
    """The frontend is stopped (SIGSTOP), so it cannot let worker-1's world go: the
    drain waits, and the head is killed meanwhile. The new head finds worker-1 running
    though retired: it closes pair-1, stops worker-1, and the op is over."""
    job = serving(procs, home, tmp_path, hang_timeout=600)  # (the frontend stopped a while)
    doc = status(home)
    pids = pids_of(doc)
    frontend = psutil.Process(pids["frontend"])
    frontend.suspend()
    try:
        asked = cli(home, "drain", "worker-1", "--op", "shrink", "--no-wait")
        assert asked.returncode == 0, asked.stderr
        wait_status(home, lambda d: any(w["name"] == "pair-1" and w["state"] == "draining"
                                        for w in d["worlds"]), "pair-1 draining", timeout=60)
        head_killed(job, home)
    finally:
        frontend.resume()
    assert psutil.pid_exists(pids["worker-1"])  # the drain was under way

    head = adopt(procs, home)
    doc = wait_status(home, lambda d: d.get("epoch") == 2 and healthy(d) and "head" not in d
                      and workers(d) == ["worker-0"], "worker-1 gone", timeout=120)
    assert sorted(w["name"] for w in doc["worlds"]) == ["pair-0"]
    assert {n: p for n, p in pids_of(doc).items()} == {
        "frontend": pids["frontend"], "worker-0": pids["worker-0"]}
    wait_for(lambda: not psutil.pid_exists(pids["worker-1"]), 60, "worker-1 ended")
    head.expect(lambda line: "shrink (drain worker-1) was under way when the head died:"
                " done, as the new head found the job" in line)
    head.expect(lambda line: "pair-1 closed: shrink was draining it when the head that"
                " asked for it died" in line)
    # Asked again by its id, the operation says how it ended, and changes nothing.
    again = cli(home, "drain", "worker-1", "--op", "shrink")
    assert again.returncode == 0 and "failed" not in again.stdout + again.stderr, \
        again.stdout + again.stderr
    assert cli(home, "stop").returncode == 0
    assert head.wait(60) == 0
    wait_gone(home)


def test_a_damaged_run_folder_is_refused_untouched_and_a_half_written_revision_orphans_none(
        procs, home, tmp_path):
    """plan.json cut short: adopt refuses, saying which file, and nothing of the job is
    touched. revisions.jsonl's last line cut short (a head killed while writing it):
    the replica that revision started is in no plan the new head can read, so it is
    killed, said by name, never left running unsupervised."""
    job = serving(procs, home, tmp_path)
    grown = cli(home, "scale", "worker=+1")
    assert grown.returncode == 0, grown.stderr
    doc = wait_status(home, lambda d: "worker-2" in workers(d) and healthy(d), "worker-2",
                      timeout=120)
    pids = pids_of(doc)
    wait_for(lambda: pids_of(saved(home)) == pids, 30, "state.json")
    head_killed(job, home)
    [run_dir] = (home / "runs").glob("*/")
    plan = (run_dir / "plan.json").read_text()
    (run_dir / "plan.json").write_text(plan[:len(plan) // 2])
    refused = cli(home, "adopt")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "plan.json cannot be read" in refused.stderr and "touched nothing" in \
        refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert all(psutil.pid_exists(pid) for pid in pids.values())
    assert (status(home).get("head") or {}).get("state") == "away"

    (run_dir / "plan.json").write_text(plan)
    line = (run_dir / "revisions.jsonl").read_text()
    (run_dir / "revisions.jsonl").write_text(line[:len(line) // 2])  # no newline: cut
    head = adopt(procs, home)
    doc = wait_status(home, lambda d: d.get("epoch") == 2 and healthy(d) and "head" not in d,
                      "adopted", timeout=120)
    assert workers(doc) == ["worker-0", "worker-1"]
    assert pids_of(doc) == {n: p for n, p in pids.items() if n != "worker-2"}
    wait_for(lambda: not psutil.pid_exists(pids["worker-2"]), 60, "worker-2 killed")
    head.expect(lambda line: f"worker-2 (pid {pids['worker-2']}) runs, but no revision of"
                " this run names it" in line)
    assert cli(home, "stop").returncode == 0
    assert head.wait(60) == 0
    wait_gone(home)


def test_a_scale_up_under_way_when_the_head_dies_ends_with_one_copy_of_each_replica(
        procs, home, tmp_path):
    """The head SIGKILLed right after it took ``scale worker=+2`` (on a loaded machine
    it may have finished it first): whether the new workers were started, being
    started, or not yet, the new head ends with each of them running once, and the
    operation has ended."""
    job = serving(procs, home, tmp_path)
    asked = cli(home, "scale", "worker=+2", "--op", "grow", "--no-wait")
    assert asked.returncode == 0, asked.stderr
    head_killed(job, home)
    head = adopt(procs, home)
    doc = wait_status(home, lambda d: d.get("epoch") == 2 and healthy(d) and "head" not in d
                      and len(workers(d)) == 4, "four workers", timeout=120)
    assert sorted(of_run(home, "worker.py")) == sorted(
        p["pid"] for p in doc["processes"] if p["name"].startswith("worker-"))
    # Whether the kill came before its end (written down by the new head, as it found
    # the job) or after it: asked again by its id, it has ended and changes nothing.
    again = cli(home, "scale", "worker=+2", "--op", "grow")
    assert again.returncode in (0, 1) and "nothing more was changed" in again.stdout \
        + again.stderr, again.stdout + again.stderr
    assert workers(status(home)) == workers(doc)
    assert cli(home, "stop").returncode == 0
    assert head.wait(60) == 0
    wait_gone(home)
