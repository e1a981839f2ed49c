"""The topology file (version 1): frozen specs and a pure parser.

``parse(text, source, folder)`` turns YAML text into a ``Topology`` with replicas
expanded and defaults filled in (each entry read by processes.py, each world by
templates.py, which also makes the worlds for any count of replicas), or raises
``TopologyError`` listing every mistake as ``FILE:LINE:COL: message``. ``load(path)``
reads a file and also checks what needs the machine (that each ``cwd`` exists, and
each ``preload`` module on mwrun's python).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from mwrun.errors import TopologyError, UsageError
from mwrun.plan import preload as _preload
from mwrun.plan import processes, templates, timeouts
from mwrun.plan.fields import NAME, NAME_RULE, FieldReader, parse_cpus  # noqa: F401 - parse_cpus is public here
from mwrun.plan.hosts import LAUNCHERS, Host, check_loopbacks, read_hosts
from mwrun.plan.processes import (  # noqa: F401 - public here
    MAX_PROCESSES,
    RESTART_POLICIES,
    Process,
    ProcessSpec,
    Scale,
)
from mwrun.plan.templates import (  # noqa: F401 - public here
    BACKENDS,
    MAX_WORLDS,
    ON_FAILURE,
    Indices,
    World,
    WorldTemplate,
)
from mwrun.plan.timeouts import DEFAULT_TIMEOUT, Setting
from mwrun.plan.yamlread import Pos, compose

_TOP_KEYS = ("version", "name", "backend", "timeout", "hang_timeout", "head_grace",
             "head_restart", "preload",
             "launcher", "hosts", "metrics", "processes", "worlds")


@dataclass(frozen=True)
class Topology:
    name: str
    source: str
    folder: str
    backend: str
    timeout: float
    hosts: dict[str, Host]
    processes: dict[str, Process]  # as launched: every replica made
    worlds: dict[str, World]  # as launched: every world its templates make then
    pos: dict[str, Pos] = field(default_factory=dict, compare=False, repr=False)
    hang_timeout: float | None = None  # None: hang_deadline() of each process's worlds
    launcher: str = "local"  # ssh | slurm | local: how remote hosts get their agent
    specs: dict[str, ProcessSpec] = field(default_factory=dict, compare=False, repr=False)
    templates: dict[str, WorldTemplate] = field(default_factory=dict, compare=False,
                                                repr=False)
    metrics: str | None = None  # HOST:PORT of the head's Prometheus endpoint; None: off
    # Seconds the agents and the stores keep the job going once the head is gone (0:
    # they stop everything at once, as before there was a way back for a head).
    head_grace: float = 0.0
    head_restart: bool = True  # with head_grace: the head's machine starts a new head

    def memberships(self, process: str) -> list[tuple[str, int]]:
        """(world, rank) for every world the process belongs to, primary first."""
        return [(w.name, w.members.index(process))
                for w in self.worlds.values() if process in w.members]

    def hang_deadline(self, process: str) -> float:
        """Seconds without a heartbeat before the process counts as hung: its own
        ``hang_timeout``, else the topology's, else derived (plan/timeouts.py)."""
        return timeouts.hang(self, process).seconds

    @property
    def scaled(self) -> dict[str, ProcessSpec]:
        """The entries a running job may scale, by name."""
        return {n: s for n, s in self.specs.items() if s.scale is not None}

    def with_replicas(self, indices: Indices) -> Topology:
        """This topology as if written for these replicas (entry -> their indices;
        entries not named keep their launch count): the processes and worlds a
        running job has once scaled (membership/revision.py)."""
        every = {**templates.launch_indices(self.specs), **indices}
        procs = {p.name: p for s in self.specs.values()
                 for p in s.made(every.get(s.name) if s.replicas is not None else None)}
        return replace(self, processes=procs, worlds=templates.expand(self.templates, every))


class _Parser:
    def __init__(self, source: str, folder: str, isdir=None, has_module=None, isfile=None):
        self.r = FieldReader(source)
        self.source = source
        self.folder = folder
        self.isdir = isdir
        self.isfile = isfile  # checks the script of each ``python FILE`` run here
        self.has_module = has_module  # checks preload names on this machine's python
        self.made_max: dict[str, int] = {}  # replicated entry -> the most replicas it has

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
        backend = _get(top, "backend", r.choice, "backend", BACKENDS) or "gloo"
        timeout = _get(top, "timeout", r.number, "timeout", positive=True)
        hang_timeout = _get(top, "hang_timeout", r.number, "hang_timeout", positive=True,
                            infinite=True)  # .inf: hang detection off
        head_grace = _get(top, "head_grace", r.number, "head_grace", minimum=0)
        head_restart = _get(top, "head_restart", r.boolean, "head_restart")
        launcher = _get(top, "launcher", r.choice, "launcher", LAUNCHERS)
        hosts = read_hosts(r, top.get("hosts"), self.source, launcher == "slurm")
        if hosts and launcher is None:
            launcher = "ssh" if any(h.ssh for h in hosts.values()) else "local"
        elif hosts and launcher != "ssh" and any(h.ssh for h in hosts.values()):
            r.error(top["launcher"][1], f"launcher: {launcher} with hosts that name 'ssh:';"
                    " use launcher: ssh, or leave 'ssh:' out")
        metrics = _get(top, "metrics", r.metrics, "metrics")
        preload_at: dict[str, Pos] = {}  # where the top level names each module
        preload = _get(top, "preload", r.preload, "preload", preload_at)
        specs = self.processes(top, processes.ProcessReader(
            r, self.folder, self.isdir, hosts, preload, self.has_module, preload_at,
            self.isfile, local=launcher in (None, "local")))
        made = self.made(specs)
        worlds = self.worlds(top, templates.WorldReader(
            r, specs, None if timeout is None else
            Setting(timeout, timeouts.TOP, r.pos(top["timeout"][1])), hang_timeout), backend)
        expanded = None
        if worlds is not None and specs is not None:
            expanded = templates.expand(worlds, templates.launch_indices(specs))
            self.check_membership(specs, worlds)
            if hosts:
                check_loopbacks(r.diagnostics, hosts, specs, worlds)
        if r.diagnostics:
            return None
        return Topology(name=name, source=self.source, folder=self.folder, backend=backend,
                        timeout=timeout or DEFAULT_TIMEOUT, hosts=hosts or {},
                        processes=made or {}, worlds=expanded or {},
                        pos={k: r.pos(v[1]) for k, v in top.items()}, hang_timeout=hang_timeout,
                        launcher=launcher or "local", specs=specs or {},
                        templates=worlds or {}, metrics=metrics, head_grace=head_grace or 0.0,
                        head_restart=head_restart is not False)

    # -- processes ---------------------------------------------------------------------

    def processes(self, top, reader: processes.ProcessReader) -> dict[str, ProcessSpec] | None:
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
        specs: dict[str, ProcessSpec] = {}
        for name, (key_node, node) in items.items():
            found = reader.entry(name, key_node, node)
            if found is not None:
                specs[name] = found
        return specs

    def made(self, specs: dict[str, ProcessSpec] | None) -> dict[str, Process] | None:
        """The processes at launch; every name a scaled entry may ever take is its own
        (worker-0 ... worker-15 for max 16): no other entry may take one."""
        if specs is None:
            return None
        r, count = self.r, 0
        made: dict[str, Process] = {}
        claimed: dict[str, Process] = {}  # every name an entry may ever take
        self.made_max = {n: s.scale.max if s.scale else s.replicas
                         for n, s in specs.items() if s.replicas is not None}
        for spec in specs.values():
            key_node = spec.base.pos["name"]
            count += spec.scale.max if spec.scale else len(spec.made())
            if count > MAX_PROCESSES:
                r.diagnostics.append(key_node.diagnostic(
                    f"process '{spec.name}': more than {MAX_PROCESSES} processes in all"
                    f" (scale max included); at most {MAX_PROCESSES} per topology"))
                break
            every = spec.made(tuple(range(spec.scale.max))) if spec.scale else spec.made()
            for proc in every:
                clash = claimed.get(proc.name)
                if clash is not None:
                    r.diagnostics.append(key_node.diagnostic(
                        f"process '{proc.name}' is defined twice"
                        f" (also at line {clash.pos['name'].line + 1})"))
                claimed.setdefault(proc.name, proc)
            for proc in spec.made():
                made.setdefault(proc.name, proc)
        return made

    # -- worlds ------------------------------------------------------------------------

    def worlds(self, top, reader: templates.WorldReader,
               backend: str) -> dict[str, WorldTemplate] | None:
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
        found = {}
        for name, (key_node, node) in items.items():
            template = reader.entry(name, key_node, node, backend)
            if template is not None:
                found[name] = template
        self.check_names(found)
        return found

    def check_names(self, found: dict[str, WorldTemplate]) -> None:
        """A world made per replica (pair-0, pair-1...) takes every name it may ever
        have: no other world may be written with one."""
        for t in found.values():
            if t.per is None or t.per not in self.made_max:
                continue
            for other in found.values():
                if other is not t and other.name.startswith(f"{t.name}-") and \
                        other.name[len(t.name) + 1:].isdigit() and \
                        int(other.name[len(t.name) + 1:]) < self.made_max[t.per]:
                    self.r.diagnostics.append(other.pos["name"].diagnostic(
                        f"world '{other.name}' is also a name of world '{t.name}'"
                        f" (made per replica of '{t.per}')"))

    def check_membership(self, specs: dict[str, ProcessSpec],
                         worlds: dict[str, WorldTemplate]) -> None:
        named = {ref for t in worlds.values() for ref in t.refs}
        for spec in specs.values():
            if not spec.base.cmd:
                continue
            for proc in spec.made():
                if proc.name not in named and spec.name not in named:
                    what = proc.replica_of or proc.name
                    self.r.diagnostics.append(proc.pos["name"].diagnostic(
                        f"process '{proc.name}' is in no world; add '{what}' to a world's"
                        " members"))




def _get(items, key, read, *args, **kwargs):
    return read(items[key][1], *args, **kwargs) if key in items else None


def parse(text: str, source: str, folder: str = ".", isdir=None,
          has_module=None, isfile=None) -> Topology:
    """Parse topology text; raise TopologyError with every mistake found.

    ``isdir(path)``, when given, checks each process's cwd along with everything else;
    ``has_module(name)`` (with its ``python``) each module named in a ``preload``;
    ``isfile(path)`` the script of each ``python FILE`` that runs on this machine.
    Timeouts written out of order (plan/timeouts.py) are mistakes too.
    """
    root, diagnostics = compose(text, source)
    if diagnostics:
        raise TopologyError(diagnostics)
    parser = _Parser(source, os.path.abspath(folder), isdir, has_module, isfile)
    topology = parser.topology(root)
    if parser.r.diagnostics or topology is None:
        raise TopologyError(parser.r.diagnostics)
    breaches = timeouts.breaches(topology)
    if breaches:
        raise TopologyError(breaches)
    return topology


def load(path: str | os.PathLike) -> Topology:
    """Read and parse a topology file, and check that every cwd exists (and, on this
    machine, every script python is told to run)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
    return parse(text, str(path), str(path.parent), os.path.isdir, _preload.installed,
                 os.path.isfile)
