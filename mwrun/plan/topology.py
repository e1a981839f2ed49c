"""The topology file (version 1): frozen specs and a pure parser.

``parse(text, source, folder)`` turns YAML text into a ``Topology`` with replicas
expanded and defaults filled in, or raises ``TopologyError`` listing every mistake as
``FILE:LINE:COL: message``. ``load(path)`` reads a file and also checks what needs the
file system (that each ``cwd`` exists).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mwrun.errors import TopologyError, UsageError
from mwrun.plan.fields import FieldReader, parse_cpus  # noqa: F401 - parse_cpus is public here
from mwrun.plan.yamlread import Pos, compose

BACKENDS = ("gloo", "nccl")
RESTART_POLICIES = ("never", "on-failure", "always")
ON_FAILURE = ("isolate", "stop")
DEFAULT_TIMEOUT = 30.0
DEFAULT_HOSTS_ADDR = "127.0.0.1"
# Far beyond any job one supervisor can watch on one machine's file descriptors, and
# small enough that a typo (replicas: 100000) is an error, not a long wait.
MAX_PROCESSES = 4096
MAX_WORLDS = 4096

_TOP_KEYS = ("version", "name", "backend", "timeout", "hosts", "processes", "worlds")
_HOST_KEYS = ("addr", "gpus", "cpus", "netns")
_PROCESS_KEYS = ("cmd", "replicas", "host", "gpus", "cpus", "env", "cwd", "restart",
                 "max_restarts", "restart_backoff")
_WORLD_KEYS = ("members", "backend", "timeout", "port", "on_failure")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_NAME_RULE = "a name starts with a letter or '_' and holds only letters, digits, '_', '.', '-'"


@dataclass(frozen=True)
class Host:
    name: str
    addr: str
    gpus: int | None  # stated count; None: detect on this machine, 0 elsewhere
    cpus: int | None  # stated count; None: detect on this machine, unknown elsewhere
    netns: str | None  # a network namespace of this machine the host lives in
    pos: Pos = field(compare=False, repr=False)


@dataclass(frozen=True)
class Process:
    name: str
    cmd: tuple[str, ...]
    host: str
    gpus: tuple[int, ...] | int  # explicit indices, or a count to assign
    cpus: tuple[int, ...] | int | None  # explicit CPUs, a count, or None (not pinned)
    env: dict[str, str]
    cwd: str
    restart: str
    max_restarts: int
    restart_backoff: float
    replica_of: str | None = None
    pos: dict[str, Pos] = field(default_factory=dict, compare=False, repr=False)

    @property
    def wants_gpus(self) -> bool:
        return bool(self.gpus)


@dataclass(frozen=True)
class World:
    name: str
    members: tuple[str, ...]  # rank i is members[i]
    backend: str
    timeout: float
    port: int | None  # None: a free port chosen at launch
    on_failure: str
    pos: dict[str, Pos] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Topology:
    name: str
    source: str
    folder: str
    backend: str
    timeout: float
    hosts: dict[str, Host]
    processes: dict[str, Process]
    worlds: dict[str, World]
    pos: dict[str, Pos] = field(default_factory=dict, compare=False, repr=False)

    def memberships(self, process: str) -> list[tuple[str, int]]:
        """(world, rank) for every world the process belongs to, primary first."""
        return [(w.name, w.members.index(process))
                for w in self.worlds.values() if process in w.members]


class _Parser:
    def __init__(self, source: str, folder: str, isdir=None):
        self.r = FieldReader(source)
        self.source = source
        self.folder = folder
        self.isdir = isdir
        self.replicas: dict[str, list[str]] = {}  # replicated name -> its processes

    # -- top level ---------------------------------------------------------------------

    def topology(self, root: yaml.Node | None) -> Topology | None:
        r = self.r
        if root is None:
            r.diagnostics.append(Pos(self.source, 0, 0).diagnostic(
                "the file is empty; a topology needs at least 'processes' and 'worlds'"))
            return None
        top = r.mapping(root, "topology")
        if top is None:
            return None
        r.known_keys(top, _TOP_KEYS, "topology")
        if "version" in top:
            version = r.integer(top["version"][1], "version")
            if version is not None and version != 1:
                r.error(top["version"][1], f"version {version} is not supported; use version: 1")
        name = Path(self.source).stem
        if "name" in top:
            name = r.string(top["name"][1], "name") or name
            if not _NAME.match(name):
                r.error(top["name"][1], f"name '{name}': {_NAME_RULE}")
        backend = self._get(top, "backend", r.choice, "backend", BACKENDS) or "gloo"
        timeout = self._get(top, "timeout", r.number, "timeout", positive=True) or DEFAULT_TIMEOUT
        hosts = self.hosts(top.get("hosts"))
        processes = self.processes(top, hosts)
        worlds = self.worlds(top, processes, backend, timeout)
        if worlds is not None and processes is not None:
            self.check_membership(processes, worlds)
        if r.diagnostics:
            return None
        return Topology(name=name, source=self.source, folder=self.folder, backend=backend,
                        timeout=timeout, hosts=hosts or {}, processes=processes or {},
                        worlds=worlds or {}, pos={k: r.pos(v[1]) for k, v in top.items()})

    def _get(self, items, key, read, *args, **kwargs):
        return read(items[key][1], *args, **kwargs) if key in items else None

    # -- hosts -------------------------------------------------------------------------

    def hosts(self, entry) -> dict[str, Host] | None:
        r = self.r
        if entry is None:
            pos = Pos(self.source, 0, 0)
            return {"localhost": Host("localhost", DEFAULT_HOSTS_ADDR, None, None, None, pos)}
        items = r.mapping(entry[1], "hosts")
        if items is None:
            return None
        if not items:
            r.error(entry[1], "hosts is empty; leave it out to run on localhost only")
        hosts = {}
        for name, (key_node, node) in items.items():
            what = f"host '{name}'"
            if not _NAME.match(name):
                r.error(key_node, f"{what}: {_NAME_RULE}")
            spec = r.mapping(node, what)
            if spec is None:
                continue
            r.known_keys(spec, _HOST_KEYS, what)
            if "addr" not in spec:
                r.error(node, f"{what}: 'addr' is missing (an IP address or host name)")
            addr = self._get(spec, "addr", r.string, f"{what}: addr")
            gpus = self._get(spec, "gpus", r.integer, f"{what}: gpus", minimum=0)
            cpus = self._get(spec, "cpus", r.integer, f"{what}: cpus", minimum=1)
            netns = self._get(spec, "netns", r.string, f"{what}: netns")
            hosts[name] = Host(name, addr or "", gpus, cpus, netns, r.pos(key_node))
        return hosts

    # -- processes ---------------------------------------------------------------------

    def processes(self, top, hosts) -> dict[str, Process] | None:
        r = self.r
        if "processes" not in top:
            r.diagnostics.append(Pos(self.source, 0, 0).diagnostic(
                "'processes' is missing: name at least one process and its cmd"))
            return None
        items = r.mapping(top["processes"][1], "processes")
        if items is None:
            return None
        if not items:
            r.error(top["processes"][1], "processes is empty: name at least one process")
        expanded: dict[str, Process] = {}
        for name, (key_node, node) in items.items():
            found = self.process(name, key_node, node, hosts)
            if len(expanded) + len(found) > MAX_PROCESSES:
                r.error(key_node, f"process '{name}': more than {MAX_PROCESSES} processes"
                                  f" in all; at most {MAX_PROCESSES} per topology")
                break
            for proc in found:
                clash = expanded.get(proc.name)
                if clash is not None:
                    r.error(key_node, f"process '{proc.name}' is defined twice"
                                      f" (also at line {clash.pos['name'].line + 1})")
                expanded.setdefault(proc.name, proc)
        return expanded

    def process(self, name, key_node, node, hosts) -> list[Process]:
        r = self.r
        what = f"process '{name}'"
        if not _NAME.match(name):
            r.error(key_node, f"{what}: {_NAME_RULE}")
        spec = r.mapping(node, what)
        if spec is None:
            return []
        r.known_keys(spec, _PROCESS_KEYS, what)
        pos = {"name": r.pos(key_node), **{k: r.pos(v[1]) for k, v in spec.items()}}
        if "cmd" not in spec:
            r.error(node, f"{what}: 'cmd' is missing (the command to run)")
        cmd = self._get(spec, "cmd", self.r.command, what)
        host = self.host_of(spec, hosts, what, key_node)
        gpus = self._get(spec, "gpus", self.r.gpus, what)
        cpus = self._get(spec, "cpus", self.r.cpus, what)
        env = self._get(spec, "env", self.r.env, what) or {}
        cwd = self._get(spec, "cwd", r.string, f"{what}: cwd")
        restart = self._get(spec, "restart", r.choice, f"{what}: restart", RESTART_POLICIES)
        max_restarts = self._get(spec, "max_restarts", r.integer, f"{what}: max_restarts",
                                 minimum=0)
        backoff = self._get(spec, "restart_backoff", r.number, f"{what}: restart_backoff",
                            minimum=0)
        replicas = self._get(spec, "replicas", r.integer, f"{what}: replicas", minimum=1,
                             maximum=MAX_PROCESSES)
        cwd = os.path.normpath(os.path.join(self.folder, cwd or "."))
        if self.isdir is not None and not self.isdir(cwd):
            r.error(spec["cwd"][1] if "cwd" in spec else key_node,
                    f"{what}: cwd {cwd} is not a folder")
        base = Process(
            name=name, cmd=tuple(cmd or ()), host=host or "", gpus=gpus if gpus is not None else (),
            cpus=cpus, env=env, cwd=cwd,
            restart=restart or "never", max_restarts=3 if max_restarts is None else max_restarts,
            restart_backoff=1.0 if backoff is None else backoff, pos=pos)
        if replicas is None:
            return [base]
        explicit = [k for k in ("gpus", "cpus") if isinstance(getattr(base, k), tuple)
                    and getattr(base, k)]
        for field_name in explicit:
            r.error(spec[field_name][1], f"{what}: explicit {field_name} cannot be shared by"
                                         f" {replicas} replicas; give a count instead")
        expanded = [Process(**{**base.__dict__, "name": f"{name}-{i}", "replica_of": name})
                    for i in range(replicas)]
        self.replicas[name] = [p.name for p in expanded]
        return expanded

    def host_of(self, spec, hosts, what, key_node) -> str | None:
        r = self.r
        if "host" not in spec:
            if hosts is not None and len(hosts) > 1:
                r.error(key_node, f"{what}: 'host' is missing; there are several hosts"
                                         f" ({', '.join(hosts)})")
                return None
            return next(iter(hosts)) if hosts else None
        node = spec["host"][1]
        host = r.string(node, f"{what}: host")
        if host is not None and hosts is not None and host not in hosts:
            r.error(node, f"{what}: unknown host '{host}'; hosts are {', '.join(hosts)}")
        return host

    # -- worlds ------------------------------------------------------------------------

    def worlds(self, top, processes, backend, timeout) -> dict[str, World] | None:
        r = self.r
        if "worlds" not in top:
            r.diagnostics.append(Pos(self.source, 0, 0).diagnostic(
                "'worlds' is missing: every process must belong to at least one world"))
            return None
        items = r.mapping(top["worlds"][1], "worlds")
        if items is None:
            return None
        if not items:
            r.error(top["worlds"][1], "worlds is empty: name at least one world")
        if len(items) > MAX_WORLDS:
            r.error(top["worlds"][1], f"worlds: {len(items)} worlds; at most {MAX_WORLDS}"
                                      " per topology")
            return None
        worlds = {}
        for name, (key_node, node) in items.items():
            world = self.world(name, key_node, node, processes, backend, timeout)
            if world is not None:
                worlds[name] = world
        return worlds

    def world(self, name, key_node, node, processes, backend, timeout) -> World | None:
        r = self.r
        what = f"world '{name}'"
        if not _NAME.match(name):
            r.error(key_node, f"{what}: {_NAME_RULE}")
        spec = r.mapping(node, what)
        if spec is None:
            return None
        r.known_keys(spec, _WORLD_KEYS, what)
        pos = {"name": r.pos(key_node), **{k: r.pos(v[1]) for k, v in spec.items()}}
        if "members" not in spec:
            r.error(node, f"{what}: 'members' is missing (the processes in rank order)")
        members = self._get(spec, "members", self.members, what, processes, pos) or []
        world_backend = self._get(spec, "backend", r.choice, f"{what}: backend", BACKENDS)
        world = World(
            name=name, members=tuple(members), backend=world_backend or backend,
            timeout=self._get(spec, "timeout", r.number, f"{what}: timeout", positive=True)
            or timeout,
            port=self._get(spec, "port", r.integer, f"{what}: port", minimum=1, maximum=65535),
            on_failure=self._get(spec, "on_failure", r.choice, f"{what}: on_failure", ON_FAILURE)
            or "isolate", pos=pos)
        if world.backend == "nccl" and processes:
            for rank, member in enumerate(world.members):
                if member in processes and not processes[member].wants_gpus:
                    at = pos.get(f"member:{rank}", pos["name"])
                    r.diagnostics.append(at.diagnostic(
                        f"{what}: uses nccl but member '{member}' has no GPU pinned;"
                        " give it 'gpus:' or use backend: gloo"))
        return world

    def members(self, node, what, processes, pos) -> list[str] | None:
        r = self.r
        items = r.sequence(node, f"{what}: members")
        if items is None:
            return None
        if not items:
            r.error(node, f"{what}: members is empty")
        replicas = self.replicas
        members: list[str] = []
        seen: set[str] = set()
        for item in items:
            name = r.string(item, f"{what}: member")
            if name is None:
                continue
            if processes is not None and name not in processes and name not in replicas:
                r.error(item, f"{what}: unknown process '{name}'")
                continue
            for member in replicas.get(name, [name]):
                if member in seen:
                    r.error(item, f"{what}: '{member}' is a member twice")
                    continue
                pos[f"member:{len(members)}"] = r.pos(item)
                members.append(member)
                seen.add(member)
        return members

    def check_membership(self, processes, worlds) -> None:
        used = {m for w in worlds.values() for m in w.members}
        for proc in processes.values():
            if proc.name not in used and proc.cmd:
                what = proc.replica_of or proc.name
                self.r.diagnostics.append(proc.pos["name"].diagnostic(
                    f"process '{proc.name}' is in no world; add '{what}' to a world's members"))


def parse(text: str, source: str, folder: str = ".", isdir=None) -> Topology:
    """Parse topology text; raise TopologyError with every mistake found.

    ``isdir(path)``, when given, checks each process's cwd along with everything else.
    """
    root, diagnostics = compose(text, source)
    if diagnostics:
        raise TopologyError(diagnostics)
    parser = _Parser(source, os.path.abspath(folder), isdir)
    topology = parser.topology(root)
    if parser.r.diagnostics or topology is None:
        raise TopologyError(parser.r.diagnostics)
    return topology


def load(path: str | os.PathLike) -> Topology:
    """Read and parse a topology file, and check that every cwd exists."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    return parse(text, str(path), str(path.parent), os.path.isdir)
