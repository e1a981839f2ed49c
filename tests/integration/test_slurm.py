"""The same star under ``launcher: slurm``, from inside ``salloc`` on a real two-node
Slurm cluster (slurmctld, two slurmds, munge), node two in a network namespace."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import BIN
from tests.integration import slurmbed
from tests.integration.jobs import cli, expect, proc_state, status, wait_for, wait_status

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(slurmbed.missing() is not None,
                                 reason=slurmbed.missing() or "")]

TOPOLOGY = f"""\
version: 1
name: slurmstar
timeout: 20
launcher: slurm
hosts:
  first: {{}}
  second: {{}}
processes:
  leader: {{cmd: [{sys.executable}, {BIN / 'hub.py'}], host: first}}
  worker: {{cmd: [{sys.executable}, {BIN / 'spoke.py'}, --count, '20', --interval, '0.01'],
           host: second}}
worlds:
  world1: {{members: [leader, worker]}}
"""


def job_processes(node) -> list[str]:
    """The node's processes that belong to the job (its slurmd does not)."""
    found = []
    for pid in node.leftovers():
        with contextlib.suppress(psutil.Error):
            line = " ".join(psutil.Process(pid).cmdline())
            if "mwrun" in line or str(BIN) in line:
                found.append(line)
    return found


@pytest.mark.slow
def test_a_job_across_the_allocations_nodes(tmp_path):
    topology = tmp_path / "slurm.yaml"
    topology.write_text(TOPOLOGY)
    with slurmbed.cluster(tmp_path) as (env, n2, _nodes):
        env = {**env, "MWRUN_HOME": str(tmp_path / "home"), "NO_COLOR": "1"}
        run = subprocess.run(["salloc", "-N2", sys.executable, "-m", "mwrun", "launch",
                              str(topology)], env=env, capture_output=True, text=True,
                             timeout=150)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out
        assert '"event": "recv", "world": "world1", "value": 19.0' in out
        assert "worker   | " in out or "worker" in out
        assert not job_processes(n2), job_processes(n2)  # nothing of the job on node two
        outside = subprocess.run([sys.executable, "-m", "mwrun", "launch", str(topology)],
                                 env={k: v for k, v in env.items()
                                      if not k.startswith("SLURM_")}, capture_output=True,
                                 text=True, timeout=60)
        assert outside.returncode == 2
        assert "launcher: slurm needs a Slurm allocation" in outside.stderr
        too_many = subprocess.run(["salloc", "-N1", sys.executable, "-m", "mwrun", "launch",
                                   str(topology)], env=env, capture_output=True, text=True,
                                  timeout=60)
        assert too_many.returncode == 2, too_many.stderr
        assert "2 hosts, but the allocation has 1 node" in too_many.stderr


@pytest.mark.slow
def test_a_lost_agent_is_started_again_by_a_new_srun_and_its_process_restarts(
        procs, tmp_path):
    topology = tmp_path / "slurm.yaml"
    topology.write_text(TOPOLOGY.replace("--count, '20'", "--count, '0'")
                        .replace("host: second}", "host: second, restart: on-failure,"
                                                  " restart_backoff: 0.2}"))
    home = tmp_path / "home"
    with slurmbed.cluster(tmp_path) as (env, n2, _nodes):
        job = procs.start(["salloc", "-N2", sys.executable, "-m", "mwrun", "launch",
                           str(topology)], env={**env, "MWRUN_HOME": str(home),
                                                "NO_COLOR": "1"})
        expect(job, "leader", "recv", world="world1", timeout=90)
        # the worker's library answers ``mwrun stacks`` through the agent srun started
        answer = json.loads(cli(home, "stacks", "worker", "--json", check=True).stdout)
        (worker_seen,) = answer["members"]
        assert worker_seen["host"] == "second" and worker_seen["answered"], worker_seen
        doc = status(home)
        agent = next(h for h in doc["hosts"] if h["name"] == "second")["agent_pid"]
        worker = proc_state(doc, "worker")["pid"]
        os.kill(agent, signal.SIGKILL)
        broken = expect(job, "leader", "broken", world="world1")
        assert broken["reason"] in ("worker failed: host second lost",
                                    "worker was killed by SIGKILL")
        wait_for(lambda: not psutil.pid_exists(worker), timeout=10, what="the worker gone")
        expect(job, "leader", "rejoined", world="world1", timeout=90)
        # the break's bundle: the leader read, the worker on the lost host said why not
        (run,) = os.listdir(home / "runs")
        folder = wait_for(lambda: next((Path(r["path"]) for r in map(
            json.loads, (home / "runs" / run / "history.jsonl").read_text().splitlines())
            if r.get("event") == "postmortem" and r.get("world") == "world1"), None),
            timeout=60, what="world1's bundle")
        members = {m["process"]: m for m in
                   json.loads((folder / "bundle.json").read_text())["members"]}
        assert members["leader"]["answered"], members["leader"]
        assert not members["worker"]["answered"] and members["worker"]["reason"], \
            members["worker"]
        doc = wait_status(home, lambda d: proc_state(d, "worker")["state"] == "running",
                          "the worker to run again")
        assert proc_state(doc, "worker")["restarts"] == 1
        host = next(h for h in doc["hosts"] if h["name"] == "second")
        assert host["state"] == "up" and host["agent_pid"] not in (None, agent)
        assert "host second is reachable again" in job.output()
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) == 0, job.output()
        wait_for(lambda: not job_processes(n2), timeout=10, what="a clean node two")


@pytest.mark.slow
def test_a_replica_added_and_drained_on_a_slurm_node(procs, tmp_path):
    """``mwrun scale`` under Slurm: the new replica starts on its node through that
    node's agent (srun's), its world forms with the frontend on the first node; a drain
    leaves nothing of it on node two."""
    serving = BIN.parents[1] / "examples" / "serving"
    topology = tmp_path / "serve.yaml"
    topology.write_text(f"""\
version: 1
name: slurmserve
timeout: 20
launcher: slurm
hosts:
  first: {{}}
  second: {{}}
processes:
  frontend: {{cmd: [{sys.executable}, {serving / 'frontend.py'}], host: first}}
  worker:
    cmd: [{sys.executable}, {serving / 'worker.py'}]
    host: second
    replicas: 1
    scale: {{min: 1, max: 2}}
    drain_timeout: 5
worlds:
  pair:
    per: worker
    members: [frontend, worker]
""")
    home = tmp_path / "home"
    with slurmbed.cluster(tmp_path) as (env, n2, _nodes):
        job = procs.start(["salloc", "-N2", sys.executable, "-m", "mwrun", "launch",
                           str(topology)], env={**env, "MWRUN_HOME": str(home),
                                                "NO_COLOR": "1"})
        job.expect(lambda line: "every world formed" in str(line), 120)
        done = cli(home, "scale", "worker=2")
        assert done.returncode == 0, done.stderr
        doc = wait_status(home, lambda d: all(w["state"] == "healthy" for w in d["worlds"])
                          and len(d["worlds"]) == 2, "pair-1 formed")
        assert proc_state(doc, "worker-1")["host"] == "second"
        job.expect(lambda line: str(line).startswith("frontend | pair-1 added"), 60)
        pid = proc_state(doc, "worker-1")["pid"]
        assert psutil.pid_exists(pid)  # node two is a namespace of this machine
        done = cli(home, "drain", "worker-1")
        assert done.returncode == 0, done.stderr
        assert "worker-1     remove  draining" in done.stdout, done.stdout
        wait_for(lambda: not psutil.pid_exists(pid), timeout=30, what="worker-1 gone")
        assert [p["name"] for p in status(home)["processes"]] == ["frontend", "worker-0"]
        assert not [line for line in job.lines
                    if re.match(r"frontend +\| request", line)]  # none failed
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) == 0, job.output()
        wait_for(lambda: not job_processes(n2), timeout=10, what="a clean node two")


@pytest.mark.slow
def test_a_new_head_adopts_a_slurm_run_from_outside_its_allocation(procs, tmp_path):
    """The head SIGKILLed under Slurm: srun's agents keep the job going (its srun is
    nobody's child now), the agent of the head's machine says the head is away, and
    ``mwrun adopt``, run outside the allocation, finds every agent again with an srun
    in the same job (AGENTS notes node and job): every pid kept, the worker that died
    meanwhile restarted; a host lost after that is reached again in the same job."""
    topology = tmp_path / "slurm.yaml"
    topology.write_text(TOPOLOGY.replace("timeout: 20\n", "timeout: 20\nhead_grace: 120\n")
                        .replace("--count, '20'", "--count, '0'")
                        .replace("host: second}", "host: second, restart: on-failure,"
                                                  " restart_backoff: 0.2}"))
    home = tmp_path / "home"
    with slurmbed.cluster(tmp_path) as (env, n2, _nodes):
        base = {**env, "MWRUN_HOME": str(home), "NO_COLOR": "1"}
        # The allocation outlives its head: the shell goes on once the head is killed,
        # until the test is done with it.
        done = tmp_path / "done"
        alloc = procs.start(["salloc", "-N2", "sh", "-c", f"{sys.executable} -m mwrun"
                             f" launch {topology}; until [ -e {done} ]; do sleep 0.2; done"],
                            env=base)
        try:
            expect(alloc, "leader", "recv", world="world1", timeout=90)
            doc = status(home)
            run = doc["run_id"]
            pids = {p["name"]: p["pid"] for p in doc["processes"]}
            agents = json.loads((home / "runs" / run / "agents.json").read_text())
            assert sorted(agents) == ["first", "second"], agents
            assert all(e.get("node") and e.get("jobid") for e in agents.values()), agents
            os.kill(doc["supervisor_pid"], signal.SIGKILL)
            wait_for(lambda: (status(home).get("head") or {}).get("state") == "away", 30,
                     "the head away, said by its machine's agent")
            os.kill(pids["worker"], signal.SIGKILL)  # headless: restarted by the new head
            outside = {k: v for k, v in base.items()
                       if not k.startswith("SLURM_") or k == "SLURM_CONF"}
            head = procs.start([sys.executable, "-m", "mwrun", "adopt", run], env=outside)
            doc = wait_status(home, lambda d: d.get("epoch") == 2 and "head" not in d
                              and proc_state(d, "worker")["state"] == "running"
                              and d["worlds"][0]["state"] == "healthy",
                              "adopted, the worker back", timeout=120)
            assert proc_state(doc, "leader")["pid"] == pids["leader"]
            assert proc_state(doc, "worker")["restarts"] == 1
            head.expect(lambda line: "adopted (head epoch 2)" in str(line), 30)
            # A host lost now: its agent started again by an srun in the same job.
            agent = next(h for h in doc["hosts"] if h["name"] == "second")["agent_pid"]
            os.kill(agent, signal.SIGKILL)
            wait_status(home, lambda d: proc_state(d, "worker")["restarts"] == 2
                        and proc_state(d, "worker")["state"] == "running"
                        and next(h for h in d["hosts"] if h["name"] == "second")["state"] == "up",
                        "host second reached again", timeout=120)
            assert "host second is reachable again" in head.output()
            cli(home, "stop", check=True)
            assert head.wait(timeout=60) == 0, head.output()
        finally:
            done.touch()  # (the shell ends, and its allocation with it)
        assert alloc.wait(timeout=60) == 0, alloc.output()
        wait_for(lambda: not job_processes(n2), timeout=10, what="a clean node two")
