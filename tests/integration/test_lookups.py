"""No DNS lookup while a world forms (mwrun/lookups.py): a real job traced by strace,
every process of it, sends nothing to a nameserver while its worlds form, break and
form again, and while a world made for a new replica forms (mwrun scale).

torch's store reverse-resolves every connection's peer (``::ffff:127.0.0.1``, which
/etc/hosts does not answer), so without ``lookups.numeric_only()`` a job sends its
nameserver a PTR query per store connection, and the test fails. Each of its three
calls is needed by a process of this job: the head's (its stores, and the client each
store connects to itself), the library's (worker-1 starts cold: nothing inherited),
the zygote's (the plain torch.distributed ranks, warm, never import mwrun).

And what torch prints of a store connection's peers, in a process whose connections
mwrun made numeric, is the truth: 127.0.0.1 and the store's port, as plain torch prints
them (until 2026-11 mwrun set torch's own switch, whose messages named addresses of its
stack frame: ``[::f065:7837:ff7f:0]:3292`` for a store at 127.0.0.1)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.helpers import BIN, ROOT
from tests.integration.jobs import cli, proc_state, wait_for, wait_status, world_state, write_star

pytestmark = pytest.mark.timeout(240)

STRACE = ["strace", "-f", "--seccomp-bpf", "-e", "trace=connect,sendto,sendmsg"]
DNS = re.compile(r"sin6?_port=htons\(53\)")


def strace_usable() -> str | None:
    """Why strace cannot trace a job here, or None."""
    if shutil.which("strace") is None:
        return "strace is not installed"
    probe = subprocess.run([*STRACE, "-o", "/dev/null", sys.executable, "-c", "pass"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return f"strace cannot trace here: {probe.stderr.strip()[-200:]}"
    return None


def store_connections(trace: str, ports: set[int]) -> int:
    """How many connections were made to one of the stores' ports."""
    return sum(1 for line in trace.splitlines()
               if (port := re.search(r"connect\(.*sin6?_port=htons\((\d+)\)", line))
               and int(port[1]) in ports)


def wrote_its_store(trace: str, pid: int) -> bool:
    """Whether the trace shows process ``pid``'s main thread writing its world's store
    (strace names a thread by its own id: the store connects in other threads)."""
    return any(line.startswith(f"{pid} ") and "/mwrun/g" in line
               for line in trace.splitlines())


def test_no_process_of_a_job_asks_a_nameserver_while_its_worlds_form(procs, home, tmp_path):
    reason = strace_usable()
    if reason:
        pytest.skip(reason)
    topology = write_star(tmp_path, workers=2)
    gate = tmp_path / "gate"
    gate.write_text("")  # the plain ranks go at once
    text = topology.read_text().replace("  worker-1:\n", "  worker-1:\n    preload: false\n")
    text = text.replace("worlds:\n", f"  rank:\n    replicas: 2\n    cmd: {sys.executable}"
                        f" {BIN / 'plain.py'} --gate {gate}\nworlds:\n")
    text = text.replace("worlds:\n", f"  extra:\n    replicas: 1\n    scale: {{min: 1, max: 2}}\n"
                        f"    cmd: {sys.executable} {BIN / 'trainer.py'}\nworlds:\n")
    topology.write_text(text + "  plain: {members: [rank]}\n"
                        "  solo: {per: extra, members: [extra]}\n")
    trace = tmp_path / "strace.out"
    job = procs.start([*STRACE, "-o", str(trace), sys.executable, "-m", "mwrun", "launch",
                       str(topology), "--run-id", "lookups"],
                      env={"MWRUN_HOME": str(home), "NO_COLOR": "1"})
    wait_for(lambda: cli(home, "status").returncode == 0, 60, "the run to answer")
    doc = wait_status(home, lambda d: all(w["state"] == "healthy" for w in d["worlds"]),
                      "every world healthy", timeout=120)
    first = proc_state(doc, "worker-0")["pid"]
    cli(home, "kill-world", "world1", check=True)
    doc = wait_status(home, lambda d: world_state(d, "world1")["state"] == "healthy"
                      and world_state(d, "world1")["generation"] >= 1
                      and world_state(d, "world2")["state"] == "healthy",
                      "world1 formed again", timeout=90)
    again = proc_state(doc, "worker-0")["pid"]
    assert again != first
    cli(home, "scale", "extra=2", check=True)  # a new store, a new replica joining it
    doc = wait_status(home, lambda d: world_state(d, "solo-1")["state"] == "healthy"
                      if any(w["name"] == "solo-1" for w in d["worlds"]) else False,
                      "the new replica's world formed", timeout=90)
    cli(home, "stop", "lookups", check=True)
    assert job.wait(timeout=90) == 0
    text = trace.read_text()

    # The trace saw the worlds form: many store connections; the first worker-0 and the
    # one started after the kill (warm children of the zygote) both traced.
    assert store_connections(text, {w["port"] for w in doc["worlds"]}) >= 8
    assert wrote_its_store(text, first) and wrote_its_store(text, again)
    asked = [line for line in text.splitlines() if DNS.search(line)]
    assert asked == [], "\n".join(asked[:10])


# torch's log line for a client's connection (socket.cpp, at TORCH_CPP_LOG_LEVEL=INFO):
# the store's address, then the socket's own and its peer's.
CONNECTED = re.compile(r"connected to (\S+) on SocketImpl\(fd=\d+, addr=(\S+), remote=(\S+)\)")
LOOPBACK = re.compile(r"(?:\[::ffff:127\.0\.0\.1\]|127\.0\.0\.1):(\d+)")


def test_torch_names_a_store_connections_true_peers_once_its_lookups_are_numeric():
    code = """if True:
        import datetime
        import torch.distributed as dist
        from mwrun import lookups
        from tests.helpers import store_server

        assert lookups.numeric_only() is None
        server, port = store_server()
        client = dist.TCPStore("127.0.0.1", port, is_master=False,
                               timeout=datetime.timedelta(seconds=30))
        client.set("k", "v")
        assert server.get("k") == b"v"
        print("store port", port, flush=True)
    """
    env = {**os.environ, "TORCH_CPP_LOG_LEVEL": "INFO", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    port = int(re.search(r"store port (\d+)", done.stdout)[1])
    lines = CONNECTED.findall(done.stderr)
    assert lines, done.stderr[-2000:]  # the store's own client, and ours
    for store, local, remote in lines:
        named = [LOOPBACK.fullmatch(address) for address in (store, local, remote)]
        assert all(named), (store, local, remote)
        assert int(named[0][1]) == int(named[2][1]) == port, (store, local, remote)
        assert 0 < int(named[1][1]) < 65536 and int(named[1][1]) != port
