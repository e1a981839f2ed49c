"""Hosts on this machine for tests: network namespaces, each with a real sshd.

A node is a network namespace linked to this one by a veth pair on a bridge (a /24 of
10.232, our own; the nodes of one test share it), with an sshd of its own listening on
the node's address and accepting one key made for the test. Everything made here
(namespaces, links, daemons, keys) is removed when the context ends, also on failure.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

SSHD = "/usr/sbin/sshd"


def missing() -> str | None:
    """Why nodes cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nsenter", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 openssh-client)"
    if not os.path.exists(SSHD):
        return "sshd is not installed (apt-get install openssh-server)"
    return None


def _ip(*args) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Node:
    ns: str
    head_addr: str  # this machine's end of the link
    addr: str  # the node's address
    port: int = 2222
    key: Path | None = None
    sshd: subprocess.Popen | None = None

    @property
    def ssh(self) -> str:
        return f"root@{self.addr}:{self.port}"

    def leftovers(self) -> list[int]:
        """Processes in the node but its sshd listener: a leak once a job has ended."""
        return [pid for pid in inside(self.ns) if self.sshd is None or pid != self.sshd.pid]

    def ssh_options(self) -> list[str]:
        return ["-i", str(self.key), "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]


@contextlib.contextmanager
def node(tmp: Path, with_sshd: bool = True):
    """One namespace host; with_sshd=False leaves it without sshd (unreachable)."""
    with nodes(tmp, [with_sshd]) as made:
        yield made[0]


@contextlib.contextmanager
def nodes(tmp: Path, sshd: list[bool]):
    """A namespace host per entry (with an sshd where True), all on one bridge of this
    machine, so they reach each other and this machine as hosts on one switch would."""
    tag = f"{os.getpid() % 1000}{random.randrange(1000)}"
    subnet = f"10.232.{random.randrange(1, 250)}"
    bridge = f"mwb{tag}"
    made: list[Node] = []
    _ip("link", "add", bridge, "type", "bridge")
    try:
        _ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i, wants_sshd in enumerate(sshd):
            ns, outside, inside_end = f"mws{tag}{i}", f"mws{tag}{i}a", f"mws{tag}{i}b"
            _ip("netns", "add", ns)
            made.append(Node(ns, f"{subnet}.1", f"{subnet}.{i + 2}"))
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside_end)
            _ip("link", "set", outside, "master", bridge)
            _ip("link", "set", outside, "up")
            _ip("link", "set", inside_end, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{subnet}.{i + 2}/24", "dev", inside_end)
            _ip("-n", ns, "link", "set", inside_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if wants_sshd:
                _start_sshd(made[-1], tmp / ns)
        yield made
    finally:
        for host in made:
            if host.sshd is not None:
                host.sshd.terminate()
                try:
                    host.sshd.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    host.sshd.kill()
                    host.sshd.wait()
            kill_inside(host.ns)  # sshd's per-connection children outlive its listener
            subprocess.run(["ip", "netns", "del", host.ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)


def inside(ns: str) -> list[int]:
    """Every process whose network namespace is ``ns``."""
    try:
        target = os.stat(f"/run/netns/{ns}").st_ino
    except OSError:
        return []
    found = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{pid}/ns/net").st_ino == target:
                found.append(pid)
    return found


def kill_inside(ns: str) -> None:
    for pid in inside(ns):
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    deadline = time.monotonic() + 5
    while inside(ns) and time.monotonic() < deadline:
        time.sleep(0.05)


def _start_sshd(made: Node, folder: Path) -> None:
    folder.mkdir(parents=True)
    for key in ("hostkey", "userkey"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key)],
                       check=True, capture_output=True, timeout=30)
    (folder / "authorized_keys").write_text((folder / "userkey.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)
    (folder / "sshd_config").write_text(f"""\
Port {made.port}
ListenAddress {made.addr}
HostKey {folder}/hostkey
AuthorizedKeysFile {folder}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UseDNS no
UsePAM no
PidFile {folder}/sshd.pid
""")
    made.key = folder / "userkey"
    # -D: stays our child, so the test can always stop it.
    made.sshd = subprocess.Popen(
        ["nsenter", f"--net=/var/run/netns/{made.ns}", SSHD, "-D", "-f",
         str(folder / "sshd_config"), "-E", str(folder / "sshd.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        with contextlib.suppress(OSError), socket.create_connection((made.addr, made.port), 1):
            return
        if made.sshd.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"sshd did not start: {(folder / 'sshd.log').read_text()}")
        time.sleep(0.05)
