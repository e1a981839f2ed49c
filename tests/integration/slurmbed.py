"""A real two-node Slurm cluster on this machine, for tests.

Node one is this machine (its end of a veth pair), node two a network namespace with a
hostname of its own. munged, slurmctld and both slurmds run as children of the test
(never forked away, so they can always be stopped); the /etc/hosts line for node two
and every file are removed afterwards, also on failure.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path

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


@contextlib.contextmanager
def cluster(tmp: Path):
    """Yields (environment with SLURM_CONF, node two's testbed.Node, node names)."""
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

            def idle() -> bool:
                out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env,
                                     capture_output=True, text=True, timeout=30).stdout
                return out.split() == ["idle", "idle"]

            _wait(idle, "both nodes idle")
            yield env, n2, [here, NODE2]
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
