"""Agents over a real ssh into real sshds, each in a network namespace of its own."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from mwrun.errors import RunError
from mwrun.head.hosts import remote
from mwrun.head.serve.control import request
from mwrun.schema import Phase
from tests.helpers import BIN, assert_gone
from tests.integration import testbed
from tests.integration.jobs import cli, expect, launch, proc_state, status, wait_for, wait_status

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
        assert_gone([hello["pid"]])


def test_every_failing_host_is_named_with_its_reason(tmp_path):
    with testbed.nodes(tmp_path, [True, False]) as (good, dark):
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


def star_topology(tmp_path, head_addr: str, nodes: list[testbed.Node], **worker) -> str:
    hosts = [f"  head: {{addr: {head_addr}}}"]
    for i, node in enumerate(nodes, 1):
        hosts.append(f"  node{i}: {{addr: {node.addr}, ssh: '{node.ssh}',"
                     f" ssh_options: {json.dumps(node.ssh_options())}}}")
    procs = [f"  leader: {{cmd: [{sys.executable}, {BIN / 'hub.py'}], host: head}}"]
    worlds = []
    extra = "".join(f", {k}: {v}" for k, v in worker.items())
    for i in range(1, len(nodes) + 1):
        procs.append(f"  worker-{i}: {{cmd: [{sys.executable}, {BIN / 'spoke.py'}],"
                     f" host: node{i}{extra}}}")
        worlds.append(f"  world{i}: {{members: [leader, worker-{i}]}}")
    path = tmp_path / "ssh.yaml"
    path.write_text("version: 1\nname: sshstar\ntimeout: 10\nhosts:\n" + "\n".join(hosts)
                    + "\nprocesses:\n" + "\n".join(procs) + "\nworlds:\n" + "\n".join(worlds)
                    + "\n")
    return str(path)


def on_node(pid: int, node: testbed.Node) -> bool:
    return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{node.ns}").st_ino


@pytest.mark.slow
def test_a_star_across_two_ssh_hosts_survives_a_remote_kill(procs, home, tmp_path):
    with testbed.nodes(tmp_path, [True, True]) as (n1, n2):
        topology = star_topology(tmp_path, n1.head_addr, [n1, n2], restart="on-failure",
                                 restart_backoff=0.2)
        job = launch(procs, home, topology)
        expect(job, "leader", "recv", world="world1", timeout=60)
        expect(job, "leader", "recv", world="world2", timeout=60)
        doc = status(home)
        hosts = {h["name"]: h for h in doc["hosts"]}
        assert hosts["head"]["state"] == "local"
        assert hosts["node1"]["state"] == hosts["node2"]["state"] == "up"
        w1 = proc_state(doc, "worker-1")
        assert on_node(w1["pid"], n1) and w1["host"] == "node1"
        assert on_node(proc_state(doc, "worker-2")["pid"], n2)
        # Its agent's own socket, in a folder of this run's on that host.
        agent_folder = Path(psutil.Process(w1["pid"]).environ()["MWRUN_CONTROL"]).parent
        assert agent_folder.is_dir()
        killed = cli(home, "kill-world", "world1", check=True).stdout
        assert f"sent SIGKILL to worker-1 (pid {w1['pid']}" in killed
        broken = expect(job, "leader", "broken", world="world1")
        assert broken["reason"] == "worker-1 was killed by SIGKILL"
        expect(job, "leader", "rejoined", world="world1", timeout=60)
        expect(job, "leader", "recv", world="world2")  # the other world never stopped
        doc = status(home)
        assert proc_state(doc, "worker-1")["restarts"] == 1
        assert proc_state(doc, "worker-2")["restarts"] == 0
        assert proc_state(doc, "leader")["restarts"] == 0
        logs = cli(home, "logs", "worker-1", check=True)
        assert logs.returncode == 0
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) == 0
        for node in (n1, n2):  # nothing of the job is left on either host
            wait_for(lambda node=node: not node.leftovers(), timeout=10, what="a clean node")
        assert not agent_folder.exists()  # nor any file of its agent's


def test_a_remote_fault_is_timed_with_its_agents_clock(procs, home, tmp_path):
    """The phases of a remote worker's fault (head/faults.py): its exit as its agent saw
    it (corrected by the offset measured at connect), in order with the head's own."""
    with testbed.nodes(tmp_path, [True]) as (n1,):
        topology = star_topology(tmp_path, n1.head_addr, [n1], restart="on-failure",
                                 restart_backoff=0.2)
        job = launch(procs, home, topology, "--run-id", "remote")
        expect(job, "leader", "recv", world="world1", timeout=60)
        cli(home, "kill-world", "world1", "--rank", "1", check=True)
        doc = wait_status(home, lambda d: (f := d["worlds"][0]["last_fault"]) is not None
                          and not f["open"], "the fault closed by its first call", timeout=60)
        fault = doc["worlds"][0]["last_fault"]
        assert fault["process"] == "worker-1" and fault["signal"] == "SIGKILL"
        cli(home, "stop", "remote", check=True)
        assert job.wait() == 0
    history = [json.loads(line) for line in
               (home / "runs" / "remote" / "history.jsonl").read_text().splitlines()]
    [record] = [r for r in history if r.get("event") == "fault"]
    times = list(record["phases"].values())
    assert list(record["phases"]) == [p.value for p in Phase]
    # In order, each phase at or after its cause (head/observe/faults.py CAUSES, moved
    # there when the agent's corrected clock told it earlier). One order is no clock's
    # error: the leader saw its peer gone and broke the world itself before the
    # agent's word of the exit came, so the exit may be seen after the survivors were
    # told (both follow the kill).
    events = [r.get("event") for r in history]
    order = [p.value for p in Phase]
    if events.index("break") < events.index("exit"):
        order.remove(Phase.EXIT_SEEN.value)
        assert record["phases"]["exit_seen"] >= record["phases"]["t_fault"], record
    ordered = [record["phases"][p] for p in order]
    assert None not in times and ordered == sorted(ordered), record


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["head", "agent"])
def test_sigkill_of_head_or_agent_leaves_no_remote_process(procs, home, tmp_path, victim):
    with testbed.node(tmp_path) as n1:
        topology = star_topology(tmp_path, n1.head_addr, [n1], restart="on-failure",
                                 restart_backoff=0.2)
        job = launch(procs, home, topology)
        expect(job, "leader", "recv", world="world1", timeout=60)
        doc = status(home)
        worker = proc_state(doc, "worker-1")["pid"]
        agent = next(h for h in doc["hosts"] if h["name"] == "node1")["agent_pid"]
        if victim == "head":
            os.kill(doc["supervisor_pid"], signal.SIGKILL)
        else:
            os.kill(agent, signal.SIGKILL)
            broken = expect(job, "leader", "broken", world="world1")
            assert broken["reason"] in ("worker-1 failed: host node1 lost",
                                        "worker-1 was killed by SIGKILL")
        assert_gone([worker], timeout=10)  # (it may end between two looks at it)
        if victim == "head":  # the agent and its ssh session follow the head
            wait_for(lambda: not n1.leftovers(), timeout=10, what="a clean node")
        if victim == "agent":  # the head reaches the host again: the worker restarts
            expect(job, "leader", "rejoined", world="world1", timeout=60)
            doc = wait_status(home, lambda d: proc_state(d, "worker-1")["state"] == "running",
                              "worker-1 to run again")
            assert proc_state(doc, "worker-1")["restarts"] == 1
            host = next(h for h in doc["hosts"] if h["name"] == "node1")
            assert host["state"] == "up" and host["agent_pid"] != agent
            assert "host node1 is reachable again" in job.output()
            cli(home, "stop", check=True)
        job.wait(timeout=60)


def test_a_collective_across_three_hosts_and_ctrl_c_stops_everywhere(procs, home, tmp_path):
    script = BIN.parent.parent / "examples" / "all_reduce" / "m8d.py"
    with testbed.nodes(tmp_path, [True, True]) as (n1, n2):
        opts = json.dumps(n1.ssh_options())
        topology = tmp_path / "collective.yaml"
        topology.write_text(f"""\
version: 1
name: across
timeout: 20
hosts:
  head: {{addr: {n1.head_addr}}}
  node1: {{addr: {n1.addr}, ssh: '{n1.ssh}', ssh_options: {opts}}}
  node2: {{addr: {n2.addr}, ssh: '{n2.ssh}', ssh_options: {json.dumps(n2.ssh_options())}}}
processes:
  rank0: {{cmd: [{sys.executable}, {script}, --steps, '100000', --interval, '0.05'], host: head}}
  rank1: {{cmd: [{sys.executable}, {script}, --steps, '100000', --interval, '0.05'], host: node1}}
  rank2: {{cmd: [{sys.executable}, {script}, --steps, '100000', --interval, '0.05'], host: node2}}
worlds:
  world1: {{members: [rank0, rank1, rank2]}}
""")
        job = launch(procs, home, topology)
        # Every rank, on every host, sees the same sum: 0 + 1 + 2 of each rank's tensor.
        summed = set()

        def all_three(line) -> bool:
            for rank in range(3):
                if line == (f"rank{rank} | rank: {rank} from world1 has all-reduced tensor:"
                            " tensor([33., 33., 33.])"):
                    summed.add(rank)
            return len(summed) == 3

        job.expect(all_three, timeout=90)
        pids = [p["pid"] for p in status(home)["processes"]]
        job.popen.send_signal(signal.SIGINT)  # Ctrl-C on the head
        assert job.wait(timeout=60) == 0
        for node in (n1, n2):
            wait_for(lambda node=node: not node.leftovers(), timeout=10, what="a clean node")
        assert not [p for p in pids if psutil.pid_exists(p) and
                    psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_launch_fails_cleanly_when_a_host_lacks_mwrun(procs, home, tmp_path):
    with testbed.node(tmp_path) as n1:
        topology = star_topology(tmp_path, n1.head_addr, [n1])
        path = Path(topology)
        path.write_text(path.read_text().replace("ssh_options:", "python: /usr/bin/python3,"
                                                 " ssh_options:"))
        result = cli(home, "launch", topology)
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1] == \
            "  host node1: mwrun is not installed for /usr/bin/python3 there"
        assert "Traceback" not in result.stderr
        assert not (home / "runs").exists() or not any((home / "runs").iterdir())
        wait_for(lambda: not n1.leftovers(), timeout=10, what="a clean node")


def test_processes_on_an_ssh_host_fork_warm_from_that_hosts_zygote(procs, home, tmp_path):
    with testbed.node(tmp_path) as n1:
        path = Path(star_topology(tmp_path, n1.head_addr, [n1], restart="on-failure",
                                  restart_backoff=0.2))
        path.write_text(path.read_text().replace("timeout: 10\n",
                                                 "timeout: 10\npreload: [torch]\n"))
        dry = cli(home, "launch", str(path), "--dry-run", check=True).stdout
        assert "cold (its host" not in dry, dry
        job = launch(procs, home, path)
        expect(job, "leader", "recv", world="world1", timeout=90)
        doc = status(home)
        agent = next(h for h in doc["hosts"] if h["name"] == "node1")["agent_pid"]
        worker = proc_state(doc, "worker-1")
        assert worker["start"] == "warm" and on_node(worker["pid"], n1)
        # forked by that host's zygote, and the agent's own child (it is a subreaper)
        assert psutil.Process(worker["pid"]).ppid() == agent
        zygotes = [c for c in psutil.Process(agent).children()
                   if " ".join(c.cmdline()) == "mwrun zygote (preload torch)"]
        assert len(zygotes) == 1 and on_node(zygotes[0].pid, n1)
        assert "host node1: zygote (pid" in job.output()
        cli(home, "kill-world", "world1", "--rank", "1", check=True)
        expect(job, "leader", "rejoined", world="world1", timeout=60)
        doc = wait_status(home, lambda d: proc_state(d, "worker-1")["restarts"] == 1
                          and proc_state(d, "worker-1")["state"] == "running", "a restart")
        assert proc_state(doc, "worker-1")["start"] == "warm"
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) == 0, job.output()
        wait_for(lambda: not n1.leftovers(), timeout=10, what="a clean node")


@pytest.mark.slow
def test_a_stalled_agent_never_stalls_the_head_or_another_host(procs, home, tmp_path):
    """SIGSTOP the agent of a host that runs plain processes (the head asks about them
    every tick): the head keeps answering, the other host's worker is untouched, and
    only the stalled host is lost once it has been silent past the limit."""
    with testbed.nodes(tmp_path, [True, True]) as (n1, n2):
        path = Path(star_topology(tmp_path, n1.head_addr, [n1, n2]))
        text = path.read_text().replace("worlds:\n", "  plain:\n    replicas: 2\n"
                                        "    cmd: [/bin/sleep, '600']\n    host: node1\n"
                                        "worlds:\n", 1)
        path.write_text(text + "  world3: {members: [plain]}\n")
        job = launch(procs, home, path)
        expect(job, "leader", "recv", world="world1", timeout=90)
        expect(job, "leader", "recv", world="world2", timeout=90)
        doc = status(home)
        agent = next(h for h in doc["hosts"] if h["name"] == "node1")["agent_pid"]
        other = proc_state(doc, "worker-2")["pid"]
        control = doc["control"]
        os.kill(agent, signal.SIGSTOP)
        try:
            # Each request gets its answer while the agent is stopped: before the host is
            # declared lost (the head keeps probing its plain processes) and after.
            lost = False
            while not lost:
                reply = request(control, {"verb": "status"}, timeout=5.0)
                hosts = {h["name"]: h["state"] for h in reply["status"]["hosts"]}
                assert hosts["node2"] == "up"
                lost = hosts["node1"] != "up"
            wait_for(lambda: "host node1 lost" in job.output(), timeout=30, what="the loss")
            expect(job, "leader", "recv", world="world2")  # its pace never depended on it
            doc = status(home)
            assert proc_state(doc, "worker-2")["pid"] == other
            assert proc_state(doc, "worker-2")["restarts"] == 0
            assert "host node2 lost" not in job.output()
        finally:
            os.kill(agent, signal.SIGCONT)
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) in (0, 1)
        for node in (n1, n2):
            wait_for(lambda node=node: not node.leftovers(), timeout=20, what="a clean node")


def test_detach_places_remote_processes_with_what_their_host_reports(procs, home, tmp_path):
    """A CPU count on a remote host is placed on the CPUs its agent reports, with
    --detach as without (it once planned with nothing known of the host)."""
    with testbed.node(tmp_path) as n1:
        path = Path(star_topology(tmp_path, n1.head_addr, [n1], cpus=1))
        result = cli(home, "launch", str(path), "--detach")
        assert result.returncode == 0, result.stderr
        run = result.stdout.split()[2]
        doc = wait_status(home, lambda d: proc_state(d, "worker-1")["state"] == "running",
                          "the remote worker to run", run=run, timeout=90)
        assert len(proc_state(doc, "worker-1")["cpus"]) == 1
        cli(home, "stop", run, check=True)
        wait_for(lambda: not n1.leftovers(), timeout=20, what="a clean node")


@pytest.mark.slow
@pytest.mark.timeout(300)  # two crashes, two restarts on an ssh host: minutes when loaded
def test_a_short_agent_stall_during_a_restart_ends_in_a_started_shown_process(
        procs, home, tmp_path):
    """The agent stalls (under the silence limit) just as a restart is due: the start
    stays pending while the link lives, the agent makes it once it wakes, and the head
    shows that very process running, restarts intact (a timer once failed it for good
    while the agent started it anyway, unshown)."""
    with testbed.node(tmp_path) as n1:
        path = Path(star_topology(tmp_path, n1.head_addr, [n1], restart="on-failure",
                                  restart_backoff=6, max_restarts=5))
        path.write_text(path.read_text().replace(
            f"{BIN / 'spoke.py'}]", f"{BIN / 'spoke.py'}, --crash-after, '1',"
                                    " --crash-restarts, '2']"))
        job = launch(procs, home, path)
        wait_for(lambda: list(home.glob("runs/*/state.json")), 60, "the run's folder")
        # Its second crash: the next restart waits the backoff (6 s); stall the agent
        # across that moment, for less than the link's silence limit.
        doc = wait_status(home, lambda d: proc_state(d, "worker-1")["state"] == "restarting"
                          and proc_state(d, "worker-1")["restarts"] == 1,
                          "worker-1 waiting for its second restart", timeout=120)
        agent = next(h for h in doc["hosts"] if h["name"] == "node1")["agent_pid"]
        os.kill(agent, signal.SIGSTOP)
        try:
            wait_for(lambda: "restarting worker-1 (restart 2" in job.output(), timeout=30,
                     what="the restart asked while the agent is stopped")
            assert proc_state(status(home), "worker-1")["state"] == "starting"
        finally:
            os.kill(agent, signal.SIGCONT)
        doc = wait_status(home, lambda d: proc_state(d, "worker-1")["state"] == "running",
                          "worker-1 running again", timeout=60)
        worker = proc_state(doc, "worker-1")
        assert worker["restarts"] == 2 and on_node(worker["pid"], n1)
        assert psutil.Process(worker["pid"]).is_running()
        assert "host node1 lost" not in job.output()
        expect(job, "leader", "recv", world="world1", timeout=60)
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) == 0
        wait_for(lambda: not n1.leftovers(), timeout=20, what="a clean node")


@pytest.mark.slow
def test_a_stalled_host_never_leaves_two_copies_of_a_rank_in_a_generation(
        procs, home, tmp_path):
    """The agent is stopped past the link's silence limit while its worker keeps running
    in a busy world: the host is lost, the world breaks, the rank is started again on a
    new agent. The old copy (its agent frozen, so nobody kills it) tries to rejoin the
    next generation and is refused; when its agent wakes, it finds itself replaced and
    ends what it started. From the leader's side, each generation heard one copy."""
    with testbed.node(tmp_path) as n1:
        path = Path(star_topology(tmp_path, n1.head_addr, [n1], restart="on-failure"))
        path.write_text(path.read_text().replace(
            f"{BIN / 'spoke.py'}]", f"{BIN / 'spoke.py'}, --send-pid, --rejoin,"
                                    " --interval, '0.1']"))
        job = launch(procs, home, path)
        expect(job, "leader", "recv", world="world1", timeout=90)
        doc = status(home)
        old_agent = next(h for h in doc["hosts"] if h["name"] == "node1")["agent_pid"]
        old_worker = proc_state(doc, "worker-1")["pid"]
        os.kill(old_agent, signal.SIGSTOP)
        try:
            wait_for(lambda: "host node1 lost" in job.output(), timeout=40, what="the loss")
            doc = wait_status(home, lambda d: proc_state(d, "worker-1")["state"] == "running"
                              and proc_state(d, "worker-1")["pid"] != old_worker,
                              "worker-1 started again on a new agent", timeout=90)
            new_worker = proc_state(doc, "worker-1")["pid"]
            assert on_node(new_worker, n1)
            expect(job, "leader", "rejoined", world="world1", timeout=60)
            expect(job, "leader", "recv", world="world1", timeout=30)
            # The old copy, refused, has ended by itself while its agent still sleeps.
            wait_for(lambda: gone(old_worker), timeout=30, what="the stale copy ended")
        finally:
            os.kill(old_agent, signal.SIGCONT)
        wait_for(lambda: gone(old_agent), timeout=30, what="the old agent ended")
        heard: dict[int, set[float]] = {}
        for line in job.output().splitlines():
            if line.startswith("leader") and '"recv"' in line and '"world1"' in line:
                said = json.loads(line.split("|", 1)[1])
                heard.setdefault(said["generation"], set()).add(said["value"])
        assert heard[0] == {float(old_worker)}
        assert all(len(pids) == 1 for pids in heard.values()), heard
        assert all(float(old_worker) not in heard[g] for g in heard if g > 0), heard
        assert any(float(new_worker) in pids for pids in heard.values())
        cli(home, "stop", check=True)
        assert job.wait(timeout=60) in (0, 1)
        wait_for(lambda: not n1.leftovers(), timeout=20, what="a clean node")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
