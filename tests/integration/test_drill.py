"""mwrun drill against a real run: faults at random times, every one recovered, the
summary in the run's history and in report."""

import json
import sys

import pytest

from mwrun.cli import drill as d
from tests.helpers import BIN, wait_gone
from tests.integration import jobs, slurmbed, testbed
from tests.integration.jobs import cli, expect, launch, status, wait_for, wait_status
from tests.integration.test_slurm import job_processes
from tests.integration.test_ssh import star_topology

pytestmark = pytest.mark.timeout(120)

SEED, EVERY, FOR = 3, 2.0, 6.0


def write_star(tmp_path):
    """A leader and 2 spokes at 20 messages a second; restarts enough for any drill."""
    return jobs.write_star(tmp_path, spoke="--interval 0.05", max_restarts=50)


def drilled(home, run, *extra):
    """Run a short drill; check what every drill must: exit 0, every fault recovered,
    one drill record in the history that says the same."""
    done = cli(home, "drill", run, "--every", str(EVERY), "--for", str(FOR),
               "--seed", str(SEED), *extra)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    history = (home / "runs" / run / "history.jsonl").read_text().splitlines()
    [record] = [r for r in map(json.loads, history) if r.get("event") == "drill"]
    faults = [f for w in record["worlds"].values() for f in w["list"]]
    hit = {w: [("own member", 1)] for w in record["targets"] or record["worlds"]}
    planned = list(d.schedule(SEED, EVERY, FOR, hit))
    assert len(faults) + len(record["skipped"]) == len(planned) > 0
    assert faults and all(f["recovered"] for f in faults) and record["not_recovered"] == []
    assert all(f["phases"]["t_fault"] <= f["phases"]["reformed"] for f in faults)
    assert f"drill: {len(faults)} fault(s) (SIGKILL) in {FOR:.0f} s" in done.stdout
    return record, done.stdout


def test_a_drill_on_the_star_recovers_every_fault_and_is_recorded(procs, home, tmp_path):
    job = launch(procs, home, write_star(tmp_path), "--run-id", "drill")
    wait_for(lambda: cli(home, "status").returncode == 0 and status(home)["processes"],
             what="the run to answer")
    wait_status(home, lambda doc: all(w["state"] == "healthy" for w in doc["worlds"]),
                "both worlds formed", timeout=60)
    record, _ = drilled(home, "drill")
    assert record["seed"] == SEED and record["signal"] == "KILL"
    faulted = [w for w in record["worlds"].values() if w["faults"]]
    assert all(w["downtime_max"] is not None and w["kept"] is not None for w in faulted)
    report = cli(home, "report", "drill", "-o", str(tmp_path / "r.png"), check=True).stdout
    assert "drill: " in report and "pace kept: faulted worlds" in report
    cli(home, "stop", "drill", check=True)
    assert job.wait() == 0
    wait_gone(home)


@pytest.mark.skipif(testbed.missing() is not None, reason=testbed.missing() or "")
def test_a_drill_across_two_ssh_hosts(procs, home, tmp_path):
    with testbed.nodes(tmp_path, [True, True]) as (n1, n2):
        topology = star_topology(tmp_path, n1.head_addr, [n1, n2], restart="on-failure",
                                 restart_backoff=0.2, max_restarts=50, preload="[torch]")
        job = launch(procs, home, topology, "--run-id", "ssh")
        expect(job, "leader", "recv", world="world1", timeout=60)
        expect(job, "leader", "recv", world="world2", timeout=60)
        record, _ = drilled(home, "ssh")
        assert {f["process"] for w in record["worlds"].values() for f in w["list"]} <= {
            "worker-1", "worker-2"}
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) == 0
        for node in (n1, n2):
            wait_for(lambda node=node: not node.leftovers(), timeout=10, what="a clean node")


SLURM = f"""\
version: 1
name: slurmstar
timeout: 20
launcher: slurm
preload: [torch]
hosts:
  first: {{}}
  second: {{}}
processes:
  leader: {{cmd: [{sys.executable}, {BIN / 'hub.py'}], host: first}}
  worker: {{cmd: [{sys.executable}, {BIN / 'spoke.py'}, --interval, '0.05'], host: second,
           restart: on-failure, restart_backoff: 0.2, max_restarts: 50}}
  near: {{cmd: [{sys.executable}, {BIN / 'spoke.py'}, --interval, '0.05'], host: first}}
worlds:
  world1: {{members: [leader, worker]}}
  world2: {{members: [leader, near]}}  # the leader is shared: only the others are hit
"""


@pytest.mark.skipif(slurmbed.missing() is not None, reason=slurmbed.missing() or "")
def test_a_drill_on_a_slurm_job(procs, tmp_path):
    topology = tmp_path / "slurm.yaml"
    topology.write_text(SLURM)
    home = tmp_path / "home"
    with slurmbed.cluster(tmp_path) as (env, n2, _nodes):
        job = procs.start(["salloc", "-N2", sys.executable, "-m", "mwrun", "launch",
                           str(topology), "--run-id", "slurm"],
                          env={**env, "MWRUN_HOME": str(home), "NO_COLOR": "1"})
        expect(job, "leader", "recv", world="world1", timeout=90)
        record, _ = drilled(home, "slurm", "--worlds", "world1")
        assert record["worlds"]["world1"]["faults"] > 0
        assert record["worlds"]["world2"]["faults"] == 0
        assert record["kept_others"] is not None
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) == 0, job.output()
        wait_for(lambda: not job_processes(n2), timeout=10, what="a clean node two")
