"""Scaling across hosts: a replica added on an ssh host (a real sshd in a network
namespace) starts there, warm from that host's zygote, and its world forms with the
frontend on the head; a drained one leaves nothing behind there; a scale while that
host is lost is refused whole."""

from __future__ import annotations

import json
import os
import re
import signal
import sys

import pytest

from tests.helpers import ROOT
from tests.integration import testbed
from tests.integration.jobs import cli, launch, proc_state, status, wait_for, wait_status

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(testbed.missing() is not None,
                                 reason=testbed.missing() or "")]
SERVING = ROOT / "examples" / "serving"


def topology(tmp_path, node: testbed.Node) -> str:
    path = tmp_path / "serve.yaml"
    path.write_text(f"""\
version: 1
name: serve
timeout: 10
hosts:
  head: {{addr: {node.head_addr}}}
  node1: {{addr: {node.addr}, ssh: '{node.ssh}', ssh_options: {json.dumps(node.ssh_options())}}}
processes:
  frontend: {{cmd: [{sys.executable}, {SERVING / 'frontend.py'}], host: head}}
  worker:
    cmd: [{sys.executable}, {SERVING / 'worker.py'}]
    host: node1
    replicas: 1
    scale: {{min: 1, max: 3}}
    drain_timeout: 5
worlds:
  pair:
    per: worker
    members: [frontend, worker]
""")
    return str(path)


def on_node(pid: int, node: testbed.Node) -> bool:
    return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{node.ns}").st_ino


def serving(doc) -> bool:
    return all(w["state"] == "healthy" for w in doc["worlds"]) and \
        all(p["state"] == "running" for p in doc["processes"])


def test_a_replica_added_and_drained_on_an_ssh_host(procs, home, tmp_path):
    with testbed.node(tmp_path) as node:
        job = launch(procs, home, topology(tmp_path, node))
        job.expect(lambda line: "every world formed" in str(line), 120)
        done = cli(home, "scale", "worker=2")
        assert done.returncode == 0, done.stderr
        doc = wait_status(home, serving, "the new worker serving")
        added = proc_state(doc, "worker-1")
        assert added["host"] == "node1" and on_node(added["pid"], node)
        assert added["start"] == "warm"  # from node1's own zygote
        job.expect(lambda line: str(line).startswith("frontend | pair-1 added"), 60)

        done = cli(home, "drain", "worker-0")
        assert done.returncode == 0, done.stderr
        doc = wait_status(home, lambda d: [p["name"] for p in d["processes"]]
                          == ["frontend", "worker-1"], "worker-0 gone")
        assert not re.search(r"^frontend +\| request", job.output(), re.M)  # none failed

        # A lost host: its agent stopped past the link's silence limit, and its sshd
        # stopped too, so the head cannot reach it again through a new agent before
        # the scale is asked (it would then rightly be granted).
        agent = next(h for h in status(home)["hosts"] if h["name"] == "node1")["agent_pid"]
        os.kill(node.sshd.pid, signal.SIGSTOP)
        os.kill(agent, signal.SIGSTOP)
        try:
            wait_for(lambda: "host node1 lost" in job.output(), timeout=60,
                     what="node1 lost")
            refused = cli(home, "scale", "worker=+1")
            assert refused.returncode == 2, refused.stderr
            assert "host node1, where worker runs, is lost now" in refused.stderr
            assert "nothing was changed" in refused.stderr
            assert status(home)["scale"]["worker"]["desired"] == 1
        finally:
            os.kill(agent, signal.SIGCONT)
            os.kill(node.sshd.pid, signal.SIGCONT)
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) in (0, 1)
        wait_for(lambda: not node.leftovers(), timeout=20, what="a clean node")
