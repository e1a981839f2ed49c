"""The ``processes`` of a topology: each entry read into a ``ProcessSpec``, the blueprint
its processes are made from (one, or a replica per index: ``worker-0``, ``worker-1``...).

An entry with ``replicas`` or ``scale`` is replicated; ``scale: {min, max}`` lets a
running job move its count (``mwrun scale``), and ``drain_timeout`` says how long a
retired replica's worlds stay usable. Every mistake goes to the reader with its
position; nothing here expands replicas (templates.py does, for any count).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from mwrun.plan import preload as _preload
from mwrun.plan import scripts
from mwrun.plan.fields import NAME, NAME_RULE, FieldReader
from mwrun.plan.yamlread import Pos

RESTART_POLICIES = ("never", "on-failure", "always")
# Far beyond any job one supervisor can watch on one machine's file descriptors, and
# small enough that a typo (replicas: 100000) is an error, not a long wait.
MAX_PROCESSES = 4096
DRAIN_TIMEOUT = 30.0  # seconds a retired replica's worlds stay usable at most

_PROCESS_KEYS = ("cmd", "replicas", "scale", "drain_timeout", "host", "gpus", "cpus", "env",
                 "cwd", "restart", "max_restarts", "restart_backoff", "hang_timeout",
                 "preload")
_SCALE_KEYS = ("min", "max")


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
class Scale:
    """How far a running job may move a replicated process's count (``mwrun scale``),
    and how long a retired replica's worlds stay usable (its drain)."""

    min: int
    max: int
    drain_timeout: float = DRAIN_TIMEOUT


@dataclass(frozen=True)
class ProcessSpec:
    """One entry of ``processes``: the blueprint (``base``, named as the entry) and how
    many processes are made of it at launch (``replicas``; None: one, not replicated)."""

    base: Process
    replicas: int | None = None
    scale: Scale | None = None

    @property
    def name(self) -> str:
        return self.base.name

    def replica(self, index: int) -> Process:
        return Process(**{**self.base.__dict__, "name": f"{self.name}-{index}",
                          "replica_of": self.name})

    def made(self, indices: tuple[int, ...] | None = None) -> list[Process]:
        """Its processes: the base alone, or one replica per index (default: launch's)."""
        if self.replicas is None:
            return [self.base]
        return [self.replica(i) for i in (range(self.replicas) if indices is None else indices)]


class ProcessReader:
    """Reads each process entry; ``context`` holds what entries inherit (the top
    level's preload, the hosts) and what the topology checks across them."""

    def __init__(self, r: FieldReader, folder: str, isdir, hosts, preload, has_module,
                 preload_at: dict[str, Pos], isfile=None, local: bool = True):
        self.r, self.folder, self.isdir, self.hosts = r, folder, isdir, hosts
        self.preload, self.has_module, self.preload_at = preload, has_module, preload_at
        self.isfile = isfile  # checks python's scripts (check_script)
        self.local = local  # without hosts, processes run on this machine

    def entry(self, name, key_node, node) -> ProcessSpec | None:
        r = self.r
        what = f"process '{name}'"
        if not NAME.match(name):
            r.error(key_node, f"{what}: {NAME_RULE}")
        spec = r.mapping(node, what)
        if spec is None:
            return None
        r.known_keys(spec, _PROCESS_KEYS, what)
        pos = {"name": r.pos(key_node), **{k: r.pos(v[1]) for k, v in spec.items()}}
        if "cmd" not in spec:
            r.error(node, f"{what}: 'cmd' is missing (the command to run)")
        cwd = os.path.normpath(os.path.join(self.folder, _get(spec, "cwd", r.string,
                                                              f"{what}: cwd") or "."))
        if self.isdir is not None and not self.isdir(cwd):
            r.error(spec["cwd"][1] if "cwd" in spec else key_node,
                    f"{what}: cwd {cwd} is not a folder")
        preload = _get(spec, "preload", r.preload, f"{what}: preload", pos)
        max_restarts = _get(spec, "max_restarts", r.integer, f"{what}: max_restarts",
                            minimum=0)
        backoff = _get(spec, "restart_backoff", r.number, f"{what}: restart_backoff", minimum=0)
        gpus = _get(spec, "gpus", r.gpus, what)
        base = Process(
            name=name, cmd=tuple(_get(spec, "cmd", r.command, what) or ()),
            host=self.host_of(spec, what, key_node) or "",
            gpus=gpus if gpus is not None else (), cpus=_get(spec, "cpus", r.cpus, what),
            env=_get(spec, "env", r.env, what) or {}, cwd=cwd,
            restart=_get(spec, "restart", r.choice, f"{what}: restart", RESTART_POLICIES)
            or "never", max_restarts=3 if max_restarts is None else max_restarts,
            restart_backoff=1.0 if backoff is None else backoff, pos=pos,
            hang_timeout=_get(spec, "hang_timeout", r.number, f"{what}: hang_timeout",
                              positive=True, infinite=True),
            preload=next((p for p in (preload, self.preload) if p is not None),
                         _preload.DEFAULT))
        self.check_preload(base, preload is None)
        self.check_script(base, spec.get("cmd", (None, node))[1], what)
        scale = self.scale(spec, what)
        replicas = _get(spec, "replicas", r.integer, f"{what}: replicas", minimum=1,
                        maximum=MAX_PROCESSES)
        if replicas is None and scale is not None:
            replicas = scale.min  # how many at launch: the least it may run
        elif replicas is not None and scale is not None \
                and not scale.min <= replicas <= scale.max:
            r.error(spec["replicas"][1], f"{what}: replicas {replicas} is outside scale"
                                         f" {scale.min}-{scale.max}")
        if replicas is not None:
            for field_name in ("gpus", "cpus"):
                if isinstance(getattr(base, field_name), tuple) and getattr(base, field_name):
                    r.error(spec[field_name][1], f"{what}: explicit {field_name} cannot be"
                                                 f" shared by {replicas} replicas; give a"
                                                 " count instead")
        return ProcessSpec(base, replicas, scale)

    def scale(self, spec, what) -> Scale | None:
        """``scale: {min, max}`` and ``drain_timeout`` (which only a scaled entry has)."""
        r = self.r
        drain = _get(spec, "drain_timeout", r.number, f"{what}: drain_timeout", positive=True)
        if "scale" not in spec:
            if drain is not None:
                r.error(spec["drain_timeout"][0], f"{what}: drain_timeout needs 'scale:'"
                                                  " (only a scaled process is drained)")
            return None
        node = spec["scale"][1]
        items = r.mapping(node, f"{what}: scale")
        if items is None:
            return None
        r.known_keys(items, _SCALE_KEYS, f"{what}: scale")
        for key in _SCALE_KEYS:
            if key not in items:
                r.error(node, f"{what}: scale needs '{key}' (like scale: {{min: 1, max: 8}})")
        low = _get(items, "min", r.integer, f"{what}: scale min", minimum=1,
                   maximum=MAX_PROCESSES)
        high = _get(items, "max", r.integer, f"{what}: scale max", minimum=1,
                    maximum=MAX_PROCESSES)
        if low is None or high is None:
            return None
        if high < low:
            r.error(items["max"][1], f"{what}: scale max {high} is below min {low}")
            return None
        return Scale(low, high, DRAIN_TIMEOUT if drain is None else drain)

    def check_preload(self, proc: Process, inherited: bool) -> None:
        """Each module written in ``preload`` exists for the python that runs the
        process. Known only where that is this interpreter: on a host of this machine
        with no ``python:`` of its own (a remote host's modules are its own)."""
        host = (self.hosts or {}).get(proc.host)
        if self.has_module and host and not host.remote and not host.python:
            where = self.preload_at if inherited else proc.pos
            for found in _preload.missing(proc.preload, where, self.has_module):
                if found not in self.r.diagnostics:  # a top-level list, once
                    self.r.diagnostics.append(found)

    def check_script(self, proc: Process, node, what: str) -> None:
        """A ``python FILE`` whose FILE is not there: every start would fail alike.
        Known only where the process runs on this machine (scripts.here)."""
        if self.isfile is not None and scripts.here(self.hosts, proc.host, self.local):
            path = scripts.missing(proc.cmd, proc.cwd, self.isfile)
            if path is not None:
                self.r.error(node, f"{what}: cmd: python cannot open {path}: no such file"
                                   f" (its cwd is {proc.cwd})")

    def host_of(self, spec, what, key_node) -> str | None:
        r, hosts = self.r, self.hosts
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


def _get(items, key, read, *args, **kwargs):
    return read(items[key][1], *args, **kwargs) if key in items else None
