"""Placement: topology + host inventory -> a plan per process and per world.

Pure: the host inventory and the way free ports are found are passed in, so every
rule (exclusive GPUs and CPUs, ports that never clash, where the stores live) is
tested without touching the machine. Mistakes are reported like parse errors, at the
position of the node that asked for the impossible.
"""

from __future__ import annotations

import ipaddress
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

from mwrun.errors import Diagnostic, TopologyError
from mwrun.plan import preload, timeouts
from mwrun.plan.inventory import HostInventory
from mwrun.plan.topology import Process, Topology
from mwrun.plan.yamlread import Pos
from mwrun.schema import Start


@dataclass(frozen=True)
class ProcessPlan:
    name: str
    host: str
    addr: str  # the host's address, which the process's own sockets use
    netns: str | None
    cmd: tuple[str, ...]
    cwd: str
    env: dict[str, str]  # the user's variables only; see environment.py for the rest
    gpus: tuple[str, ...]  # device ids -> CUDA_VISIBLE_DEVICES
    cpus: tuple[int, ...] | None  # CPU affinity; None: not pinned
    worlds: dict[str, int]  # world -> rank, primary world first
    local_rank: int  # within the primary world, among members on the same host
    local_world_size: int
    restart: str
    max_restarts: int
    restart_backoff: float
    replica_of: str | None = None
    hang_timeout: float = 60.0  # seconds without a heartbeat before it counts as hung
    preload: tuple[str, ...] = ()  # what its zygote imports; (): started the ordinary way
    start: Start = Start.COLD  # how it is planned to start
    why_cold: str | None = None  # for people, where it starts cold: why ("preload: false")
    # How its host's zygote runs it (preload.target), decided here once: None, cold.
    warm: tuple[str, str, tuple[str, ...]] | None = None

    @property
    def primary(self) -> str:
        return next(iter(self.worlds))


@dataclass(frozen=True)
class WorldPlan:
    name: str
    members: tuple[str, ...]
    backend: str
    timeout: float
    addr: str  # where the supervisor hosts the world's store
    port: int
    port_auto: bool  # chosen at launch rather than written in the topology
    on_failure: str
    # How long a member's rejoin() waits by default (plan/timeouts.py); None: no deadline.
    rejoin: float | None = None
    template: str = ""  # the topology's world it was made from (templates.py)

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass(frozen=True)
class Plan:
    name: str
    source: str
    store_host: str  # the host the supervisor (and every world's store) runs on
    processes: dict[str, ProcessPlan]
    worlds: dict[str, WorldPlan]
    metrics: str | None = None  # HOST:PORT where the head serves Prometheus metrics


PortChooser = Callable[[str, set[int]], int]
PortCheck = Callable[[str, int], "str | None"]


class _Pool:
    """Exclusive resources of one kind (CPUs or GPUs) on one host."""

    def __init__(self, kind: str, host: str, items: tuple | None):
        self.kind, self.host, self.items = kind, host, items
        self.owner: dict = {}
        self.index = {item: slot for slot, item in enumerate(items or ())}
        self.cursor = 0  # counts take the lowest free slots: none below it is free

    def take_explicit(self, proc: Process, wanted: tuple, at: Pos, errors: list) -> tuple:
        label = "GPU" if self.kind == "gpus" else "CPU"
        taken = []
        for index in wanted:
            slot = self._slot(index)
            if slot is None:
                errors.append(at.diagnostic(
                    f"process '{proc.name}': {label} {index} is beyond host '{self.host}',"
                    f" which has {self._describe()}"))
            elif slot in self.owner:
                errors.append(at.diagnostic(
                    f"process '{proc.name}': {label} {index} on host '{self.host}' is"
                    f" already given to '{self.owner[slot]}'"))
            else:
                self.owner[slot] = proc.name
                taken.append(index if self.items is None else self.items[slot])
        return tuple(taken)

    def take_count(self, proc: Process, count: int, at: Pos, errors: list) -> tuple:
        label = "GPUs" if self.kind == "gpus" else "CPUs"
        if self.items is None:
            errors.append(at.diagnostic(
                f"process '{proc.name}': cannot assign {count} {label} on host '{self.host}'"
                f" without knowing how many it has; state 'cpus: N' under the host"))
            return ()
        free: list[int] = []  # slots
        slot = self.cursor
        while len(free) < count and slot < len(self.items):
            if slot not in self.owner:
                free.append(slot)
            slot += 1
        if len(free) < count:
            left = len(free) + sum(1 for s in range(slot, len(self.items)) if s not in self.owner)
            errors.append(at.diagnostic(
                f"process '{proc.name}': asks for {count} {label} but host '{self.host}' has"
                f" {left} free (of {len(self.items)})"))
            return ()
        for index in free:
            self.owner[index] = proc.name
        self.cursor = slot
        return tuple(self.items[i] for i in free)

    def hold(self, items: tuple, owner: str) -> None:
        """What a plan already gave ``owner`` (device ids, CPU numbers) stays its own."""
        for item in items:
            slot = self.index.get(item) if self.kind == "cpus" else \
                next((i for i, v in enumerate(self.items or ()) if v == item), None)
            if slot is not None:
                self.owner[slot] = owner

    def release(self, owner: str) -> None:
        for slot in [s for s, o in self.owner.items() if o == owner]:
            del self.owner[slot]
        self.cursor = 0  # a slot below the cursor may be free now

    def _slot(self, index: int):
        """Position of a requested GPU index or CPU number in the host's list, if any."""
        if self.items is None:  # a host of unknown size: trust the number as given
            return ("unchecked", index)
        if self.kind == "cpus":
            return self.index.get(index)
        return index if index < len(self.items) else None

    def _describe(self) -> str:
        if self.kind == "gpus":
            return f"{len(self.items)} GPU(s)" if self.items else "no GPU"
        return f"CPUs {_ranges(self.items)}"


class Pools:
    """What placement has handed out on every host, kept while a job runs: new
    replicas take what is free, a retired one's GPUs and CPUs are free once it exits."""

    def __init__(self, inventory: dict[str, HostInventory]):
        self.gpus = {h: _Pool("gpus", h, inv.gpus) for h, inv in inventory.items()}
        self.cpus = {h: _Pool("cpus", h, inv.cpus) for h, inv in inventory.items()}

    def hold(self, proc: ProcessPlan) -> None:
        self.gpus[proc.host].hold(proc.gpus, proc.name)
        self.cpus[proc.host].hold(proc.cpus or (), proc.name)

    def release(self, name: str, host: str) -> None:
        self.gpus[host].release(name)
        self.cpus[host].release(name)

    def take(self, proc: Process, errors: list) -> dict:
        """A new process's GPUs and CPUs (counts; a replica names none explicitly)."""
        got: dict = {"gpus": (), "cpus": None}
        for kind, pools in (("gpus", self.gpus), ("cpus", self.cpus)):
            wanted = getattr(proc, kind)
            at = proc.pos.get(kind, proc.pos["name"])
            if isinstance(wanted, tuple) and wanted:
                got[kind] = pools[proc.host].take_explicit(proc, wanted, at, errors)
            elif isinstance(wanted, int) and wanted:
                got[kind] = pools[proc.host].take_count(proc, wanted, at, errors)
        return got


def _ranges(numbers) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(numbers):
        if run and n != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(n)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out) or "none"


format_cpus = _ranges


def _store_host(topology: Topology, inventory: dict[str, HostInventory],
                here: bool) -> str | None:
    """The supervisor hosts every store: on the first host that is this machine itself.

    A plan that starts nothing (validate, --dry-run) may be made elsewhere: with no host
    of this machine, it is planned as if launched on the first host mwrun reaches
    without an agent (else the first host).
    """
    for name, host in topology.hosts.items():
        if inventory[name].local and host.netns is None:
            return name
    if here:
        return None
    return next((n for n, h in topology.hosts.items() if not h.remote and h.netns is None),
                next(iter(topology.hosts), None))


def place(topology: Topology, inventory: dict[str, HostInventory],
          choose_port: PortChooser, python: str | None = None, *, here: bool = True,
          port_in_use: PortCheck | None = None) -> Plan:
    """Plan every process and world; ``python`` replaces a bare ``python``/``python3``.

    A bare ``python`` in a cmd means the interpreter mwrun itself runs on (as torchrun
    does), so a job launched from a virtualenv without activating it still finds its
    packages. ``here``: the plan is for a launch on this machine, so the stores must be
    on one of its hosts. ``port_in_use(addr, port)`` says why a port written in the
    topology cannot be had (None when it is free), checked only on this machine.
    """
    errors: list[Diagnostic] = []
    store_host = _store_host(topology, inventory, here)
    if store_host is None:
        errors.append(topology.pos.get("hosts", Pos(topology.source, 0, 0)).diagnostic(
            "none of the hosts is this machine; mwrun runs the worlds' stores where it is"
            " launched, so one host must have an address of this machine"))
        raise TopologyError(errors)
    gpu_pools = {h: _Pool("gpus", h, inv.gpus) for h, inv in inventory.items()}
    cpu_pools = {h: _Pool("cpus", h, inv.cpus) for h, inv in inventory.items()}
    resources: dict[str, dict[str, tuple | None]] = {}  # process -> gpus and cpus it got
    # Explicit requests first, so a count never takes a device someone named.
    for explicit in (True, False):
        for proc in topology.processes.values():
            got = resources.setdefault(proc.name, {"gpus": (), "cpus": None})
            for kind, pools in (("gpus", gpu_pools), ("cpus", cpu_pools)):
                wanted = getattr(proc, kind)
                at = proc.pos.get(kind, proc.pos["name"])
                if explicit and isinstance(wanted, tuple) and wanted:
                    got[kind] = pools[proc.host].take_explicit(proc, wanted, at, errors)
                elif not explicit and isinstance(wanted, int) and wanted:
                    got[kind] = pools[proc.host].take_count(proc, wanted, at, errors)
    check = port_in_use if inventory[store_host].local else None
    found = timeouts.clocks(topology)
    worlds = _place_worlds(topology, store_host, choose_port, check, errors, found.rejoins)
    if errors:
        raise TopologyError(errors)
    memberships, local = _memberships(topology)
    processes = {name: process_plan(topology, proc, resources[name], memberships[name],
                                    local[name], python, found.hangs[name].seconds)
                 for name, proc in topology.processes.items()}
    return Plan(topology.name, topology.source, store_host, processes, worlds,
                topology.metrics)


def store_addr(topology: Topology, world, store_host: str) -> str:
    """Where a world's store listens: on loopback when every member runs on the store's
    own host (no other machine needs it, so none can reach it), else on that host's
    address. Network namespaces are other hosts: they have loopbacks of their own."""
    return store_addr_for(topology, [topology.processes[m].host for m in world.members
                                     if m in topology.processes], store_host)


def store_addr_for(topology: Topology, hosts: list[str], store_host: str) -> str:
    """store_addr for a world whose members run on ``hosts``."""
    addr = topology.hosts[store_host].addr
    if any(host != store_host for host in hosts):
        return addr
    try:
        return addr if ipaddress.ip_address(addr).is_loopback else "127.0.0.1"
    except ValueError:  # a host name
        return "127.0.0.1"


def _place_worlds(topology, store_host, choose_port, port_in_use, errors,
                  rejoins) -> dict[str, WorldPlan]:
    explicit: dict[int, str] = {}
    for world in topology.worlds.values():
        if world.port is None:
            continue
        if world.port in explicit:
            errors.append(world.pos["port"].diagnostic(
                f"world '{world.name}': port {world.port} is already the port of world"
                f" '{explicit[world.port]}'"))
            continue
        explicit[world.port] = world.name
        addr = store_addr(topology, world, store_host)
        why = port_in_use(addr, world.port) if port_in_use else None
        if why:
            errors.append(world.pos["port"].diagnostic(
                f"world '{world.name}': port {world.port} on {addr} is not free ({why})"))
    taken = set(explicit)
    worlds = {}
    failed = None
    for world in topology.worlds.values():
        port = world.port
        addr = store_addr(topology, world, store_host)
        if port is None and failed is None:
            try:
                port = choose_port(addr, taken)
            except OSError as exc:  # no free port left, or no file descriptor to look
                failed = world
                errors.append(world.pos["name"].diagnostic(
                    f"world '{world.name}': cannot get a free port on {addr}:"
                    f" {exc.strerror or exc}; give the worlds fewer or explicit ports"))
            else:
                taken.add(port)
        worlds[world.name] = WorldPlan(
            world.name, world.members, world.backend, world.timeout, addr, port or 0,
            world.port is None, world.on_failure,
            None if math.isinf(rejoins[world.name].seconds) else rejoins[world.name].seconds,
            world.template)
    return worlds


def _memberships(topology) -> tuple[dict[str, dict[str, int]], dict[str, tuple[int, int]]]:
    """In one pass over the worlds: each process's worlds (world -> rank, primary
    first), and its (local rank, local world size) among its primary world's members
    on its host."""
    memberships: dict[str, dict[str, int]] = {name: {} for name in topology.processes}
    for world in topology.worlds.values():
        for rank, member in enumerate(world.members):
            memberships[member][world.name] = rank
    local: dict[str, tuple[int, int]] = {}
    for world in topology.worlds.values():
        on_host: dict[str, int] = {}  # host -> members of this world seen there so far
        position = {}
        for member in world.members:
            host = topology.processes[member].host
            position[member] = on_host.get(host, 0)
            on_host[host] = position[member] + 1
        for member in world.members:
            if next(iter(memberships[member])) == world.name:
                local[member] = (position[member], on_host[topology.processes[member].host])
    return memberships, local


def process_plan(topology, proc: Process, got, memberships, local, python,
                 hang_timeout: float) -> ProcessPlan:
    """One process's plan: its resources ``got`` (Pools.take), its worlds (world ->
    rank, primary first) and ``local`` (its local rank and local world size)."""
    host = topology.hosts[proc.host]
    cmd = proc.cmd
    if (python or host.python) and cmd[0] in ("python", "python3"):
        cmd = (host.python or python, *cmd[1:])  # a remote host's own interpreter
    # A remote host's agent forks from its own zygote, on that host's interpreter.
    runs_on = (host.python or python) if host.remote else python
    # Here, paths are compared as files (VENV/bin/python is mwrun's VENV/bin/python3);
    # a remote host's files cannot be looked at, so there its names must match.
    same = operator.eq if host.remote else preload.same_interpreter
    why_cold = preload.why_cold(cmd, runs_on, proc.preload, host.netns, same) if python \
        else "no python"
    return ProcessPlan(
        name=proc.name, host=proc.host, addr=host.addr, netns=host.netns, cmd=cmd,
        cwd=proc.cwd, env=dict(proc.env), gpus=tuple(str(g) for g in got["gpus"]),
        cpus=got["cpus"], worlds=memberships, local_rank=local[0], local_world_size=local[1],
        restart=proc.restart, max_restarts=proc.max_restarts,
        restart_backoff=proc.restart_backoff, replica_of=proc.replica_of,
        hang_timeout=hang_timeout,
        preload=() if why_cold else proc.preload,
        start=Start.COLD if why_cold else Start.WARM, why_cold=why_cold or None,
        warm=None if why_cold else _warm_target(cmd, runs_on, same))


def _warm_target(cmd, python, same) -> tuple[str, str, tuple[str, ...]] | None:
    how = preload.target(cmd, python, same)
    return None if how is None else (how[0], how[1], tuple(how[2]))
