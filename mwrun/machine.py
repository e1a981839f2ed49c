"""What this machine has: CPUs, GPUs, addresses. Read without importing torch.

Shared by planning (the head's own machine, ``plan.inventory``) and by an agent, which
reports these facts of its host to the head before anything is planned onto it.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket

import psutil


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


def facts() -> dict:
    """This host as an agent reports it: usable CPUs, GPU ids, addresses."""
    return {"cpus": list(local_cpus()), "gpus": list(local_gpus()),
            "addrs": sorted(local_addresses()), "hostname": socket.gethostname()}
