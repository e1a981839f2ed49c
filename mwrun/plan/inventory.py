"""What each host of a topology offers: CPUs, GPUs, and whether it is this machine.

This is the only impure part of planning: it reads this machine (CPU affinity, the
NVIDIA driver's device list, interface addresses) without importing torch, so that
``mwrun validate`` stays fast. Placement itself is a pure function of its result.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass

import psutil

from mwrun.plan.topology import Host, Topology


@dataclass(frozen=True)
class HostInventory:
    """What placement may hand out on one host."""

    local: bool  # on this machine: mwrun can start processes there
    cpus: tuple[int, ...] | None  # usable CPU numbers; None when not known
    gpus: tuple[str, ...]  # device ids, in the order topology indices count them


def local_addresses() -> set[str]:
    addrs = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family in (socket.AF_INET, socket.AF_INET6):
                addrs.add(entry.address.split("%")[0])
    return addrs


def is_local_addr(addr: str, local: set[str]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        try:
            ip = ipaddress.ip_address(socket.gethostbyname(addr))
        except (OSError, ValueError):
            return False
    return ip.is_loopback or str(ip) in local


def local_gpus(environ=os.environ) -> tuple[str, ...]:
    """This machine's GPU ids, honouring a CUDA_VISIBLE_DEVICES mwrun runs under."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return tuple(v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1")
    try:
        count = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        try:
            count = sum(1 for d in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", d))
        except OSError:
            count = 0
    return tuple(str(i) for i in range(count))


def local_cpus() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def host_inventory(host: Host, local: set[str]) -> HostInventory:
    here = host.netns is not None or is_local_addr(host.addr, local)
    if here:
        cpus = local_cpus()
        gpus = local_gpus()
        # A stated count narrows what this machine has (e.g. to share it between hosts).
        if host.cpus is not None:
            cpus = cpus[: host.cpus]
        if host.gpus is not None:
            gpus = gpus[: host.gpus]
        return HostInventory(True, cpus, gpus)
    cpus = tuple(range(host.cpus)) if host.cpus is not None else None
    return HostInventory(False, cpus, tuple(str(i) for i in range(host.gpus or 0)))


def inventory(topology: Topology) -> dict[str, HostInventory]:
    local = local_addresses()
    return {name: host_inventory(host, local) for name, host in topology.hosts.items()}
