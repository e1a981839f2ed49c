"""The topology file (version 1): frozen specs and a pure parser.

``parse(text, source, folder)`` turns YAML text into a ``Topology`` with replicas
expanded and defaults filled in, or raises ``TopologyError`` listing every mistake as
``FILE:LINE:COL: message``. ``load(path)`` reads a file and also checks what needs the
machine (that each ``cwd`` exists, and each ``preload`` module on mwrun's python).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mwrun.errors import TopologyError, UsageError
from mwrun.plan import preload as _preload
from mwrun.plan import timeouts
from mwrun.plan.fields import NAME, NAME_RULE, FieldReader, parse_cpus  # noqa: F401 - parse_cpus is public here
from mwrun.plan.hosts import LAUNCHERS, Host, read_hosts
from mwrun.plan.timeouts import DEFAULT_TIMEOUT, Setting
from mwrun.plan.yamlread import Pos, compose

BACKENDS = ("gloo", "nccl")
RESTART_POLICIES = ("never", "on-failure", "always")
ON_FAILURE = ("isolate", "stop")
# Far beyond any job one supervisor can watch on one machine's file descriptors, and
# small enough that a typo (replicas: 100000) is an error, not a long wait.
MAX_PROCESSES = 4096
MAX_WORLDS = 4096

_TOP_KEYS = ("version", "name", "backend", "timeout", "hang_timeout", "preload", "launcher",
             "hosts", "processes", "worlds")
_PROCESS_KEYS = ("cmd", "replicas", "host", "gpus", "cpus", "env", "cwd", "restart",
                 "max_restarts", "restart_backoff", "hang_timeout", "preload")
_WORLD_KEYS = ("members", "backend", "timeout", "port", "on_failure")


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
    hang_timeout: float | None = None  # None: the topology's, else hang_deadline()
    preload: tuple[str, ...] = ()  # what its zygote imports; (): started the ordinary way

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
    hang_timeout: float | None = None  # None: hang_deadline() of each process's worlds
    launcher: str = "local"  # ssh | slurm | local: how remote hosts get their agent

    def memberships(self, process: str) -> list[tuple[str, int]]:
        """(world, rank) for every world the process belongs to, primary first."""
        return [(w.name, w.members.index(process))
                for w in self.worlds.values() if process in w.members]

    def hang_deadline(self, process: str) -> float:
        """Seconds without a heartbeat before the process counts as hung: its own
        ``hang_timeout``, else the topology's, else derived (plan/timeouts.py)."""
        return timeouts.hang(self, process).seconds


class _Parser:
    def __init__(self, source: str, folder: str, isdir=None, has_module=None):
        self.r = FieldReader(source)
        self.source = source
        self.folder = folder
        self.isdir = isdir
        self.has_module = has_module  # checks preload names on this machine's python
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
            if not NAME.match(name):
                r.error(top["name"][1], f"name '{name}': {NAME_RULE}")
        backend = self._get(top, "backend", r.choice, "backend", BACKENDS) or "gloo"
        timeout = self._get(top, "timeout", r.number, "timeout", positive=True)
        self.timeout = None if timeout is None else \
            Setting(timeout, timeouts.TOP, r.pos(top["timeout"][1]))
        self.hang_timeout = hang_timeout = self._get(top, "hang_timeout", r.number,
                                                     "hang_timeout", positive=True)
        launcher = self._get(top, "launcher", r.choice, "launcher", LAUNCHERS)
        hosts = self.hosts(top.get("hosts"), launcher == "slurm")
        if hosts and launcher is None:
            launcher = "ssh" if any(h.ssh for h in hosts.values()) else "local"
        elif hosts and launcher != "ssh" and any(h.ssh for h in hosts.values()):
            r.error(top["launcher"][1], f"launcher: {launcher} with hosts that name 'ssh:';"
                    " use launcher: ssh, or leave 'ssh:' out")
        self.preload_at: dict[str, Pos] = {}  # where the top level names each module
        self.preload = self._get(top, "preload", r.preload, "preload", self.preload_at)
        processes = self.processes(top, hosts)
        worlds = self.worlds(top, processes, backend)
        if worlds is not None and processes is not None:
            self.check_membership(processes, worlds)
        if r.diagnostics:
            return None
        return Topology(name=name, source=self.source, folder=self.folder, backend=backend,
                        timeout=timeout or DEFAULT_TIMEOUT, hosts=hosts or {},
                        processes=processes or {}, worlds=worlds or {},
                        pos={k: r.pos(v[1]) for k, v in top.items()}, hang_timeout=hang_timeout,
                        launcher=launcher or "local")

    def _get(self, items, key, read, *args, **kwargs):
        return read(items[key][1], *args, **kwargs) if key in items else None

    def hosts(self, entry, slurm: bool = False) -> dict[str, Host] | None:
        return read_hosts(self.r, entry, self.source, slurm)

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
        if not NAME.match(name):
            r.error(key_node, f"{what}: {NAME_RULE}")
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
        hang_timeout = self._get(spec, "hang_timeout", r.number, f"{what}: hang_timeout",
                                 positive=True)
        preload = self._get(spec, "preload", r.preload, f"{what}: preload", pos)
        base = Process(
            name=name, cmd=tuple(cmd or ()), host=host or "", gpus=gpus if gpus is not None else (),
            cpus=cpus, env=env, cwd=cwd,
            restart=restart or "never", max_restarts=3 if max_restarts is None else max_restarts,
            restart_backoff=1.0 if backoff is None else backoff, pos=pos,
            hang_timeout=hang_timeout,
            preload=next((p for p in (preload, self.preload) if p is not None),
                         _preload.DEFAULT))
        self.check_preload(base, preload is None, hosts)
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

    def check_preload(self, proc: Process, inherited: bool, hosts) -> None:
        """Each module written in ``preload`` exists for the python that runs the
        process. Known only where that is this interpreter: on a host of this machine
        with no ``python:`` of its own (a remote host's modules are its own)."""
        host = (hosts or {}).get(proc.host)
        if self.has_module and host and not host.remote and not host.python:
            where = self.preload_at if inherited else proc.pos
            for found in _preload.missing(proc.preload, where, self.has_module):
                if found not in self.r.diagnostics:  # a top-level list, once
                    self.r.diagnostics.append(found)

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

    def worlds(self, top, processes, backend) -> dict[str, World] | None:
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
            world = self.world(name, key_node, node, processes, backend)
            if world is not None:
                worlds[name] = world
        return worlds

    def world(self, name, key_node, node, processes, backend) -> World | None:
        r = self.r
        what = f"world '{name}'"
        if not NAME.match(name):
            r.error(key_node, f"{what}: {NAME_RULE}")
        spec = r.mapping(node, what)
        if spec is None:
            return None
        r.known_keys(spec, _WORLD_KEYS, what)
        pos = {"name": r.pos(key_node), **{k: r.pos(v[1]) for k, v in spec.items()}}
        if "members" not in spec:
            r.error(node, f"{what}: 'members' is missing (the processes in rank order)")
        members = self._get(spec, "members", self.members, what, processes, pos) or []
        world_backend = self._get(spec, "backend", r.choice, f"{what}: backend", BACKENDS)
        own = self._get(spec, "timeout", r.number, f"{what}: timeout", positive=True)
        hangs = [h for m in members if (h := self.explicit_hang(processes, m)) is not None]
        timeout = timeouts.call_timeout(
            None if own is None else Setting(own, timeouts.WORLD), self.timeout, hangs)
        world = World(
            name=name, members=tuple(members), backend=world_backend or backend,
            timeout=timeout.seconds,
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

    def explicit_hang(self, processes, member: str) -> float | None:
        """The hang_timeout written for a member (its own, else the top level's)."""
        own = processes[member].hang_timeout if processes and member in processes else None
        return own if own is not None else self.hang_timeout

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
                close = difflib.get_close_matches(name, [*replicas, *processes], n=1)
                hint = f"; did you mean '{close[0]}'?" if close else \
                    f"; processes are {', '.join(replicas or processes)}"
                r.error(item, f"{what}: unknown process '{name}'{hint}")
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


def parse(text: str, source: str, folder: str = ".", isdir=None,
          has_module=None) -> Topology:
    """Parse topology text; raise TopologyError with every mistake found.

    ``isdir(path)``, when given, checks each process's cwd along with everything else;
    ``has_module(name)`` (with its ``python``) each module named in a ``preload``.
    Timeouts written out of order (plan/timeouts.py) are mistakes too.
    """
    root, diagnostics = compose(text, source)
    if diagnostics:
        raise TopologyError(diagnostics)
    parser = _Parser(source, os.path.abspath(folder), isdir, has_module)
    topology = parser.topology(root)
    if parser.r.diagnostics or topology is None:
        raise TopologyError(parser.r.diagnostics)
    breaches = timeouts.breaches(topology)
    if breaches:
        raise TopologyError(breaches)
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
    return parse(text, str(path), str(path.parent), os.path.isdir, _preload.installed)
