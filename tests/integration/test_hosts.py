"""Several hosts on one machine: a host in a network namespace of its own, reached over
a veth pair, as a second machine would be over its network."""

import os
import shutil
import signal
import sys

import pytest

from tests.helpers import BIN
from tests.integration import testbed
from tests.integration.jobs import cli, expect, launch, proc_state, status

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                 reason="network namespaces need root and iproute2")]


@pytest.fixture
def node(tmp_path):
    """A namespace 'node' linked to this one: (namespace, our address, its address)."""
    with testbed.node(tmp_path, with_sshd=False) as made:
        yield made.ns, made.head_addr, made.addr


@pytest.mark.slow
def test_a_world_across_a_network_namespace(procs, home, tmp_path, node):
    ns, head, remote = node
    topology = tmp_path / "hosts.yaml"
    topology.write_text(f"""\
version: 1
name: hosts
hosts:
  head: {{addr: {head}}}
  node1: {{addr: {remote}, netns: {ns}}}
processes:
  leader: {{cmd: [{sys.executable}, {BIN / 'hub.py'}], host: head}}
  worker-0: {{cmd: [{sys.executable}, {BIN / 'spoke.py'}], host: head}}
  worker-1:
    cmd: [{sys.executable}, {BIN / 'spoke.py'}]
    host: node1
    restart: on-failure
    restart_backoff: 0.2
worlds:
  world1: {{members: [leader, worker-0]}}
  world2: {{members: [leader, worker-1]}}
""")
    plan = cli(home, "launch", str(topology), "--dry-run", check=True).stdout
    assert f"stores on head ({head}, 127.0.0.1)" in plan and f"MWRUN_HOST_ADDR={remote}" in plan
    # world2 reaches into the namespace: its store is on the head's address; world1
    # stays on this machine: its store listens on loopback only.
    assert [line.split()[3].rsplit(":", 1)[0] for line in plan.splitlines()
            if line.startswith(("world1 ", "world2 "))] == ["127.0.0.1", head]
    job = launch(procs, home, topology)
    expect(job, "leader", "recv", world="world2")
    doc = status(home)
    pid = proc_state(doc, "worker-1")["pid"]
    their_net = os.stat(f"/proc/{pid}/ns/net").st_ino
    assert their_net != os.stat("/proc/self/ns/net").st_ino  # really on the other "host"
    assert their_net == os.stat(f"/run/netns/{ns}").st_ino
    cli(home, "kill-world", "world2", check=True)
    broken = expect(job, "leader", "broken", world="world2")
    assert broken["reason"] == "worker-1 was killed by SIGKILL"
    expect(job, "leader", "recv", world="world1")
    expect(job, "leader", "rejoined", world="world2", generation=1)
    expect(job, "leader", "recv", world="world2", generation=1)
    job.signal(signal.SIGINT)
    assert job.wait() == 0


def test_a_host_that_is_not_this_machine_is_refused_at_launch(home, tmp_path):
    topology = tmp_path / "far.yaml"
    topology.write_text(f"""\
version: 1
hosts:
  here: {{addr: 127.0.0.1}}
  far: {{addr: 192.0.2.10, cpus: 4}}
processes:
  a: {{cmd: [{sys.executable}, -c, pass], host: here}}
  b: {{cmd: [{sys.executable}, -c, pass], host: far}}
worlds:
  w: {{members: [a, b]}}
""")
    assert cli(home, "validate", str(topology)).returncode == 0  # it plans fine
    result = cli(home, "launch", str(topology))
    assert result.returncode == 2
    column = topology.read_text().splitlines()[6].index("host: far") + len("host: ") + 1
    assert result.stderr.startswith(f"{topology}:7:{column}: process 'b': host 'far' is not"
                                    " this machine")
    assert not (home / "runs").exists() or not list((home / "runs").iterdir())
