"""Stacks and post-mortem bundles across hosts (a real sshd in a network namespace):
a member on an ssh host answers ``mwrun stacks`` through its host's agent, its stacks
are in the bundle of a break; and a host lost during a capture gives what it had: the
bundle is written at its deadline, naming the member that could not answer."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from mwrun.host import spy
from mwrun.schema import WorldState
from tests.helpers import BIN
from tests.integration import testbed
from tests.integration.jobs import cli, launch, status, wait_for, wait_status

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(testbed.missing() is not None,
                                 reason=testbed.missing() or "")]


def topology(tmp_path: Path, node: testbed.Node) -> Path:
    path = tmp_path / "pm.yaml"
    stuck = f"[{sys.executable}, {BIN / 'stuck.py'}]"
    path.write_text(f"""\
version: 1
name: pmh
hang_timeout: 6
hosts:
  head: {{addr: {node.head_addr}}}
  node1: {{addr: {node.addr}, ssh: '{node.ssh}', ssh_options: {json.dumps(node.ssh_options())}}}
processes:
  a: {{cmd: {stuck}, host: head, restart: on-failure, max_restarts: 5}}
  b: {{cmd: {stuck}, host: node1, restart: on-failure, max_restarts: 5}}
worlds:
  world1: {{members: [a, b]}}
""")
    return path


def bundles(home: Path) -> list[dict]:
    lines = (home / "runs" / "pmh" / "history.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("event") == "postmortem"]


def member(folder: str, name: str) -> dict:
    doc = json.loads((Path(folder) / "bundle.json").read_text())
    return next(m for m in doc["members"] if m["process"] == name)


def healthy(home):
    return wait_status(home, lambda d: all(w["state"] == WorldState.HEALTHY
                                           for w in d["worlds"]), "world1 healthy",
                       run="pmh", timeout=120)


@pytest.mark.slow
def test_a_remote_member_is_captured_through_its_agent_and_a_lost_host_gives_what_it_had(
        procs, home, tmp_path):
    with testbed.node(tmp_path) as node:
        job = launch(procs, home, topology(tmp_path, node), "--run-id", "pmh")
        wait_for(lambda: (home / "runs" / "pmh" / "state.json").exists(), 60, "the run folder")
        healthy(home)
        answer = json.loads(cli(home, "stacks", "pmh", "b", "--json", check=True).stdout)
        b = answer["members"][0]
        assert b["host"] == "node1" and b["answered"], b
        assert any("stuck.py" in f[0] for t in b["threads"] for f in t["stack"])

        # b stopped on node1: declared hung, read from outside by node1's agent.
        cli(home, "kill-world", "world1", "pmh", "--rank", "1", "--signal", "STOP", check=True)
        hang = wait_for(lambda: next((r for r in bundles(home) if r["hung"] == "b"), None),
                        60, "b's hang bundle")
        remote = member(hang["path"], "b")
        if spy.find()[0] is not None:  # py-spy, run by node1's agent
            assert remote["by"] == "py-spy" and remote["outside"]["threads"], remote
            assert any("stuck.py" in f[0] for t in remote["threads"] for f in t["stack"])
        else:
            assert not remote["answered"] and "py-spy is not installed" in remote["reason"]
        assert member(hang["path"], "a")["inside"] is not None  # a's library answered
        healthy(home)

        # node1's agent (and sshd: no new agent) stopped, then a break: b cannot answer.
        agent = next(h for h in status(home, "pmh")["hosts"] if h["name"] == "node1")["agent_pid"]
        before = len(bundles(home))
        os.kill(node.sshd.pid, signal.SIGSTOP)
        os.kill(agent, signal.SIGSTOP)
        try:
            cli(home, "kill-world", "world1", "pmh", "--rank", "0", "--signal", "KILL",
                check=True)
            # The kill's bundle, by its culprit: a bundle of the hang's own break may
            # still be written after ``before`` was counted (its capture ran on).
            lost = wait_for(lambda: next((r for r in bundles(home)[before:]
                                          if "a was killed" in r["culprit"]), None),
                            60, "the break's bundle")
            silent = member(lost["path"], "b")
            assert not silent["answered"] and "did not answer" in silent["reason"], silent
            assert member(lost["path"], "a")["reasons"]  # a itself was not running
        finally:
            os.kill(agent, signal.SIGCONT)
            os.kill(node.sshd.pid, signal.SIGCONT)
        cli(home, "stop", "pmh", check=True)
        job.wait(timeout=60)
        wait_for(lambda: not node.leftovers(), timeout=20, what="a clean node")
