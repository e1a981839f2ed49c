"""What each host of a topology offers: CPUs, GPUs, and whether it is this machine.

This is the only impure part of planning: it reads this machine (CPU affinity, the
NVIDIA driver's device list, interface addresses) without importing torch, so that
``mwrun validate`` stays fast. Placement itself is a pure function of its result.
"""

from __future__ import annotations

from dataclasses import dataclass

from mwrun.machine import is_local_addr, local_addresses, local_cpus, local_gpus
from mwrun.plan.topology import Host, Topology


@dataclass(frozen=True)
class HostInventory:
    """What placement may hand out on one host."""

    local: bool  # on this machine: mwrun can start processes there
    cpus: tuple[int, ...] | None  # usable CPU numbers; None when not known
    gpus: tuple[str, ...]  # device ids, in the order topology indices count them


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
    stated = tuple(range(host.cpus)) if host.cpus is not None else None
    return HostInventory(False, stated, tuple(str(i) for i in range(host.gpus or 0)))


def inventory(topology: Topology) -> dict[str, HostInventory]:
    local = local_addresses()
    return {name: host_inventory(host, local) for name, host in topology.hosts.items()}
