"""Hosts on this machine for tests: network namespaces, each with a real sshd.

A node is a network namespace linked to this one by a veth pair on a bridge (a /24 of
10.232, our own; the nodes of one test share it), with an sshd of its own listening on
the node's address and accepting one key made for the test. Everything made here
(namespaces, links, daemons, keys) is removed when the context ends, also on failure.

Test beds are made side by side (parallel workers, another suite on the same machine):
each takes a /24 that no link of this machine has, under a lock of the whole machine,
and names its links and namespaces after it, so no two beds ever share either.

A bridge alone (``bridge``, no namespace on it) gives this machine an address of our
own beside loopback: bench/scale.py's simulated job puts its head there. This module
needs the standard library and psutil only (benches import it, never pytest).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

SSHD = "/usr/sbin/sshd"


def missing_link() -> str | None:
    """Why a bridge of our own (``bridge``) cannot be made here, or None."""
    if os.geteuid() != 0:
        return "a link of our own needs root"
    if shutil.which("ip") is None:
        return "ip is not installed (apt-get install iproute2)"
    return None


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


@dataclass(frozen=True)
class Bridge:
    """A bridge of this machine on 10.232.N.0/24 (``number`` is N), this machine's end
    of it at 10.232.N.1."""

    number: int

    @property
    def name(self) -> str:
        return f"mwt{self.number}"

    @property
    def subnet(self) -> str:
        return f"10.232.{self.number}"

    @property
    def head_addr(self) -> str:
        return f"{self.subnet}.1"


@contextlib.contextmanager
def bridge():
    """A bridge on a free /24 of 10.232 with 10.232.N.1 on it, up; removed when the
    context ends, also on failure (after the caller's own ``finally``, which removes
    what it put on it)."""
    with machine_lock("testbed", timeout=60):
        made = Bridge(_free_subnet())
        _ip("link", "add", made.name, "type", "bridge")
        try:
            _ip("addr", "add", f"{made.head_addr}/24", "dev", made.name)  # taken: seen by the next
        except BaseException:
            subprocess.run(["ip", "link", "del", made.name], capture_output=True, timeout=30)
            raise
    try:
        _ip("link", "set", made.name, "up")
        yield made
    finally:
        subprocess.run(["ip", "link", "del", made.name], capture_output=True, timeout=30)


def links_with(addr: str) -> list[str]:
    """The links of this machine that have ``addr`` (a leak check: none once the bridge
    that had it is gone)."""
    shown = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True,
                           timeout=30, check=True).stdout
    return sorted({line.split()[1] for line in shown.splitlines()
                   if f" {addr}/" in line})


@contextlib.contextmanager
def nodes(tmp: Path, sshd: list[bool]):
    """A namespace host per entry (with an sshd where True), all on one bridge of this
    machine, so they reach each other and this machine as hosts on one switch would."""
    made: list[Node] = []
    with bridge() as link:
        try:
            for i, wants_sshd in enumerate(sshd):
                ns = f"{link.name}n{i}"
                outside, inside_end = f"{ns}a", f"{ns}b"
                _ip("netns", "add", ns)
                made.append(Node(ns, link.head_addr, f"{link.subnet}.{i + 2}"))
                _ip("link", "add", outside, "type", "veth", "peer", "name", inside_end)
                _ip("link", "set", outside, "master", link.name)
                _ip("link", "set", outside, "up")
                _ip("link", "set", inside_end, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{link.subnet}.{i + 2}/24", "dev", inside_end)
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
                subprocess.run(["ip", "netns", "del", host.ns], capture_output=True,
                               timeout=30)


@contextlib.contextmanager
def machine_lock(name: str, timeout: float):
    """Held by one test of this whole machine at a time (every worker, every suite):
    for what the machine has only one of."""
    with open(f"/tmp/mwrun-test-{name}.lock", "a") as held:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {name} lock was held for {timeout:.0f} s"
                                       " by another test of this machine") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def _free_subnet() -> int:
    """A number N such that 10.232.N.0/24 is on no link of this machine and no link or
    namespace of ours is named after it (one a killed run left behind)."""
    addrs = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                           text=True, timeout=30, check=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           timeout=30, check=True).stdout
    taken = {int(n) for n in re.findall(r"inet 10\.232\.(\d+)\.", addrs)}
    taken |= {int(n) for n in re.findall(r"\bmwt(\d+)", links)}
    with contextlib.suppress(OSError):
        taken |= {int(n) for name in os.listdir("/run/netns")
                  for n in re.findall(r"^mwt(\d+)n", name)}
    free = [n for n in range(1, 250) if n not in taken]
    if not free:
        raise RuntimeError("every 10.232.N.0/24 is taken on this machine")
    return random.choice(free)


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
    kill_inside_but(ns, set())


def kill_inside_but(ns: str, spared: set[int]) -> None:
    """Kill every process of ``ns`` but the ``spared`` ones, and wait for them to go."""
    for pid in set(inside(ns)) - spared:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    deadline = time.monotonic() + 5
    while set(inside(ns)) - spared and time.monotonic() < deadline:
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
