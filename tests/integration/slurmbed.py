"""A real two-node Slurm cluster on this machine, for tests.

Node one is this machine (its end of a veth pair), node two a network namespace with a
hostname of its own. munged, slurmctld and both slurmds run as children of the test
(never forked away, so they can always be stopped); the /etc/hosts line for node two
and every file are removed afterwards, also on failure.

The cluster is made once for the tests that use it one after another (pytest runs them
on one worker: tests/conftest.py groups every module that imports this one, and stops
the cluster after the last of them); each test finds no job and both nodes idle, and a
test that leaves a job or a process on node two fails. Only one cluster runs on this
machine at a time (munge, /etc/hosts and the node names are the machine's): a second
suite waits for the lock.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from tests.integration import testbed

MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
NODE2 = "mwn2"


def missing() -> str | None:
    why = testbed.missing()
    if why:
        return why
    for tool in ("slurmctld", "slurmd", "munged", "srun", "salloc", "sinfo", "scontrol",
                 "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install slurmctld slurmd slurm-client" \
                   " munge)"
    return None


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"slurm test cluster: {what} did not happen in {timeout:.0f} s")
        time.sleep(0.1)


# How long a test waits for the machine's one Slurm cluster: a second suite beside this
# one may hold it for its whole Slurm group (a few tests, each slow under load). Every
# test of the group is given this on top of its own timeout (tests/conftest.py), so the
# wait never counts against the test itself (CI pair 18: 150 s of lock wait against a
# 120 s test timeout).
LOCK_WAIT = 480.0


class _Shared:
    """The cluster kept between tests, with what holds it up."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.folder = Path(tempfile.mkdtemp(prefix="mwrun-slurm-"))
        self.stack.callback(shutil.rmtree, self.folder, ignore_errors=True)
        try:
            self.stack.enter_context(testbed.machine_lock("slurm", timeout=LOCK_WAIT))
            # (a suite of an older checkout makes its cluster without the lock)
            _wait(lambda: not _daemons_running(), "another Slurm test cluster's end", 150)
            self.env, self.n2, self.names, self.daemons = self.stack.enter_context(
                _cluster(self.folder))
        except BaseException:
            self.stack.close()
            raise

    def strays(self) -> list[str]:
        """Processes on node two other than its slurmd, and jobs still in the queue."""
        found = [f"pid {pid} on node two" for pid in self.n2.leftovers()
                 if pid not in {d.pid for d in self.daemons}]
        queue = subprocess.run(["squeue", "-h", "-o", "%i %j"], env=self.env,
                               capture_output=True, text=True, timeout=30).stdout
        return found + [f"job {line}" for line in queue.splitlines()]

    def clear(self) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env,
                       capture_output=True, timeout=30)
        testbed.kill_inside_but(self.n2.ns, {d.pid for d in self.daemons})


_shared: _Shared | None = None


@contextlib.contextmanager
def cluster(tmp: Path | None = None):
    """Yields (environment with SLURM_CONF, node two's testbed.Node, node names). The
    cluster is this worker's (made on first use, kept until close()); ``tmp`` is not
    used and is taken for the callers that pass their test's folder."""
    global _shared
    if _shared is not None and _idle(_shared.env, wait=10.0) is not None:
        close()  # the last test left it unwell: a fresh one
    if _shared is None:
        _shared = _Shared()
    shared = _shared
    try:
        yield dict(shared.env), shared.n2, list(shared.names)
    except BaseException:
        close()  # its failure may have left anything: the next test gets a fresh one
        raise
    # The test passed: look for what it left behind before clearing it (never after).
    deadline = time.monotonic() + 10.0
    while (left := shared.strays()) and time.monotonic() < deadline:
        time.sleep(0.1)
    shared.clear()
    assert not left, f"left behind on the Slurm cluster: {left}"


def close() -> None:
    """Stop this worker's cluster, if it has one."""
    global _shared
    if _shared is not None:
        shared, _shared = _shared, None
        shared.clear()
        shared.stack.close()


atexit.register(close)  # a session cut short stops it too


def _daemons_running() -> list[int]:
    found = []
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in ("munged", "slurmctld", "slurmd"):
            found.append(proc.pid)
    return found


def _idle(env: dict, wait: float) -> list[str] | None:
    """None once both nodes are idle, else the nodes' last states after ``wait``."""
    deadline = time.monotonic() + wait
    while True:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env,
                             capture_output=True, text=True, timeout=30).stdout
        if out.split() == ["idle", "idle"]:
            return None
        if time.monotonic() > deadline:
            return out.split()
        time.sleep(0.1)


@contextlib.contextmanager
def _cluster(tmp: Path):
    """Yields (environment with SLURM_CONF, node two, node names, the daemons)."""
    here = socket.gethostname()
    daemons: list[subprocess.Popen] = []
    hosts_line = None
    with testbed.node(tmp, with_sshd=False) as n2:
        folder = tmp / "slurm"
        try:
            for sub in ("spool/" + here, "spool/" + NODE2, "state"):
                (folder / sub).mkdir(parents=True, exist_ok=True)
            env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
            daemons.append(_munged())
            (folder / "slurm.conf").write_text(f"""\
ClusterName=mwtest
SlurmctldHost={here}({n2.head_addr})
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/%n
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldPidFile={folder}/slurmctld.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd-%n.log
ReturnToService=2
MpiDefault=none
NodeName={here} NodeAddr={n2.head_addr} CPUs={os.cpu_count()} RealMemory=2000
NodeName={NODE2} NodeAddr={n2.addr} CPUs={os.cpu_count()} RealMemory=2000
PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
            hosts_line = f"{n2.addr} {NODE2}  # mwrun test {os.getpid()}\n"
            with open("/etc/hosts", "a") as hosts:
                hosts.write(hosts_line)
            daemons.append(subprocess.Popen(["slurmctld", "-D"], env=env,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            daemons.append(subprocess.Popen(["slurmd", "-D", "-N", here], env=env,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            daemons.append(subprocess.Popen(
                ["nsenter", f"--net=/var/run/netns/{n2.ns}", "unshare", "--uts", "sh", "-c",
                 f"hostname {NODE2}; exec slurmd -D -N {NODE2}"], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

            # slurmd registers within a second or two on a quiet machine; a loaded one
            # (another suite beside this one) has been seen to take over 30 s
            states = _idle(env, wait=120.0)
            if states is not None:
                raise RuntimeError("slurm test cluster: both nodes idle did not happen"
                                   f" in 120 s (sinfo says {states or 'nothing'})")
            yield env, n2, [here, NODE2], daemons
        finally:
            for proc in reversed(daemons):
                _stop(proc)
            if hosts_line is not None:
                text = Path("/etc/hosts").read_text()
                Path("/etc/hosts").write_text(text.replace(hosts_line, ""))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def _munged() -> subprocess.Popen:
    munge = pwd.getpwnam("munge")
    Path("/run/munge").mkdir(exist_ok=True)
    os.chown("/run/munge", munge.pw_uid, munge.pw_gid)
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        key.write_bytes(os.urandom(1024))
        os.chown(key, munge.pw_uid, munge.pw_gid)
        key.chmod(0o400)
    with contextlib.suppress(FileNotFoundError):
        MUNGE_SOCKET.unlink()
    proc = subprocess.Popen(["munged", "--foreground", "--force"], user=munge.pw_uid,
                            group=munge.pw_gid, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _wait(MUNGE_SOCKET.exists, "munged's socket")
    return proc
