"""Agents over a real ssh into real sshds, each in a network namespace of its own."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from mwrun.errors import RunError
from mwrun.head import remote
from tests.integration import testbed

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(testbed.missing() is not None,
                                 reason=testbed.missing() or "")]


def link_to(node: testbed.Node, tmp_path, python: str = sys.executable,
            options: list[str] | None = None, name: str = "n1") -> remote.AgentLink:
    argv = remote.ssh_argv(node.ssh, tuple(options or node.ssh_options()), python, name,
                           str(tmp_path / f"{name}.sock"))
    return remote.AgentLink(name, argv, python)


def test_an_agent_comes_up_over_ssh_inside_the_node(tmp_path):
    with testbed.node(tmp_path) as node:
        link = link_to(node, tmp_path)
        try:
            remote.connect_all([link])
            assert link.state == "up"
            hello = link.hello
            assert hello["host"] == "n1"
            assert node.addr in hello["inventory"]["addrs"]
            agent_net = os.stat(f"/proc/{hello['pid']}/ns/net").st_ino
            assert agent_net == os.stat(f"/run/netns/{node.ns}").st_ino
        finally:
            link.close()
        assert not psutil.pid_exists(hello["pid"]) or \
            psutil.Process(hello["pid"]).status() == psutil.STATUS_ZOMBIE


def test_every_failing_host_is_named_with_its_reason(tmp_path):
    with testbed.node(tmp_path) as good, testbed.node(tmp_path, with_sshd=False) as dark:
        links = [
            link_to(dark, tmp_path, options=["-o", "ConnectTimeout=3"], name="dark"),
            link_to(good, tmp_path, options=["-o", "StrictHostKeyChecking=no",
                                             "-o", "UserKnownHostsFile=/dev/null",
                                             "-o", "IdentitiesOnly=yes", "-i", "/dev/null"],
                    name="nokey"),
            link_to(good, tmp_path, python="/nonexistent/python", name="nopython"),
            link_to(good, tmp_path, python="/usr/bin/python3", name="nomwrun"),
            link_to(good, tmp_path, name="fine"),
        ]
        with pytest.raises(RunError) as caught:
            remote.connect_all(links, timeout=60)
        said = str(caught.value)
        assert "nothing was started" in said
        assert "host dark: unreachable over ssh" in said
        assert "host nokey: ssh refused authentication" in said
        assert "host nopython: no /nonexistent/python there" in said
        assert "host nomwrun: " in said and "/usr/bin/python3" in said
        assert "host fine" not in said
        for link in links:  # nothing left running, the good host's agent included
            assert link.popen.poll() is not None
