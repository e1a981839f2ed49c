"""The ``worlds`` of a topology as templates, and the worlds they make for any count of
replicas (at launch, and each time a running job is scaled).

A world's ``members`` name processes: one process, one replica (``worker-0``), or a
replicated process bare (``worker``: all its replicas, in index order; a world that
names a scaled process bare is *resized* with it). ``per: worker`` makes one world per
replica of ``worker``: ``pair-0``, ``pair-1``..., in which the bare name ``worker`` is
that one replica. ``expand`` is the one place worlds are made from templates, so a
job scaled at run time has exactly the worlds a topology written for that count would.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mwrun.plan import timeouts
from mwrun.plan.fields import NAME, NAME_RULE, FieldReader
from mwrun.plan.processes import ProcessSpec
from mwrun.plan.timeouts import Setting
from mwrun.plan.yamlread import Pos

BACKENDS = ("gloo", "nccl")
ON_FAILURE = ("isolate", "stop")
MAX_WORLDS = 4096
_WORLD_KEYS = ("members", "per", "backend", "timeout", "port", "on_failure")


@dataclass(frozen=True)
class World:
    name: str
    members: tuple[str, ...]  # rank i is members[i]
    backend: str
    timeout: float
    port: int | None  # None: a free port chosen at launch
    on_failure: str
    pos: dict[str, Pos] = field(default_factory=dict, compare=False, repr=False)
    template: str = ""  # the ``worlds`` entry it was made from ("" : itself)


@dataclass(frozen=True)
class WorldTemplate:
    """One entry of ``worlds``: members as written (``refs``), and ``per``: the
    replicated process it is made once per replica of (None: one world)."""

    name: str
    refs: tuple[str, ...]
    backend: str
    timeout: float
    port: int | None
    on_failure: str
    per: str | None = None
    pos: dict[str, Pos] = field(default_factory=dict, compare=False, repr=False)

    def instance(self, index: int | None) -> str:
        return self.name if index is None else f"{self.name}-{index}"


Indices = Mapping[str, tuple[int, ...]]  # replicated entry -> the indices of its replicas


def launch_indices(specs: Mapping[str, ProcessSpec]) -> dict[str, tuple[int, ...]]:
    return {n: tuple(range(s.replicas)) for n, s in specs.items() if s.replicas is not None}


def members(template: WorldTemplate, indices: Indices, index: int | None = None) -> list[str]:
    """The processes of one world the template makes, in rank order (``index``: the
    replica of ``per`` it is made for)."""
    found: list[str] = []
    for ref in template.refs:
        if ref == template.per:
            found.append(f"{ref}-{index}")
        elif ref in indices:
            found.extend(f"{ref}-{i}" for i in indices[ref])
        else:
            found.append(ref)
    return found


def expand(templates: Mapping[str, WorldTemplate], indices: Indices) -> dict[str, World]:
    """Every world the templates make for these replicas (a world with no member, its
    only member's replicas all gone, is not made)."""
    worlds = {}
    for t in templates.values():
        worlds.update(instances(t, indices, indices.get(t.per, ()) if t.per else (None,)))
    return worlds


def instances(t: WorldTemplate, indices: Indices,
              which: Iterable[int | None]) -> dict[str, World]:
    """The worlds a template makes for the replicas ``which`` of its ``per`` (None: the
    one world of a template without ``per``): a scale that adds or retires a replica
    makes only its worlds again, not every world of the template."""
    worlds = {}
    for index in which:
        found = members(t, indices, index)
        if found:
            worlds[t.instance(index)] = World(
                t.instance(index), tuple(found), t.backend, t.timeout, t.port,
                t.on_failure, _positions(t, found, indices, index), t.name)
    return worlds


def _positions(t: WorldTemplate, found: list[str], indices: Indices,
               index: int | None) -> dict[str, Pos]:
    """Each member's position (``member:RANK``) is where its name is written."""
    pos = {k: v for k, v in t.pos.items() if not k.startswith("ref:")}
    rank = 0
    for i, ref in enumerate(t.refs):
        many = len(indices[ref]) if ref in indices and ref != t.per else 1
        for _ in range(many):
            if rank < len(found) and f"ref:{i}" in t.pos:
                pos[f"member:{rank}"] = t.pos[f"ref:{i}"]
            rank += 1
    return pos


class WorldReader:
    """Reads each world entry into a template, checking its members against the
    process entries (``specs``)."""

    def __init__(self, r: FieldReader, specs: Mapping[str, ProcessSpec] | None,
                 top_timeout: Setting | None, top_hang: float | None):
        self.r, self.specs = r, specs
        self.top_timeout, self.top_hang = top_timeout, top_hang
        # every process name the entries make at their largest: worker-0 ... worker-15
        self.names = {} if specs is None else {
            p.name: s for s in specs.values()
            for p in s.made(tuple(range(s.scale.max)) if s.scale else None)}

    def entry(self, name, key_node, node, backend) -> WorldTemplate | None:
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
        refs = _get(spec, "members", self.refs, what, pos) or []
        per = _get(spec, "per", self.per, what, refs)
        own = _get(spec, "timeout", r.number, f"{what}: timeout", positive=True)
        hangs = [h for ref in refs if (h := self.explicit_hang(ref)) is not None]
        timeout = timeouts.call_timeout(
            None if own is None else Setting(own, timeouts.WORLD), self.top_timeout, hangs)
        port = _get(spec, "port", r.integer, f"{what}: port", minimum=1, maximum=65535)
        if port is not None and per is not None:
            r.error(spec["port"][1], f"{what}: a world made per replica cannot share one"
                                     " port; leave 'port' out (each gets a free one)")
        template = WorldTemplate(
            name, tuple(refs), _get(spec, "backend", r.choice, f"{what}: backend", BACKENDS)
            or backend, timeout.seconds, port,
            _get(spec, "on_failure", r.choice, f"{what}: on_failure", ON_FAILURE) or "isolate",
            per, pos)
        self.check_gpus(template, what)
        return template

    def _spec(self, ref: str) -> ProcessSpec | None:
        if self.specs is None:
            return None
        return self.specs.get(ref) or self.names.get(ref)

    def explicit_hang(self, ref: str) -> float | None:
        """The hang_timeout written for a member (its own, else the top level's)."""
        spec = self._spec(ref)
        own = spec.base.hang_timeout if spec is not None else None
        return own if own is not None else self.top_hang

    def check_gpus(self, t: WorldTemplate, what: str) -> None:
        if t.backend != "nccl" or self.specs is None:
            return
        for i, ref in enumerate(t.refs):
            spec = self._spec(ref)
            if spec is not None and not spec.base.wants_gpus:
                at = t.pos.get(f"ref:{i}", t.pos["name"])
                self.r.diagnostics.append(at.diagnostic(
                    f"{what}: uses nccl but member '{ref}' has no GPU pinned;"
                    " give it 'gpus:' or use backend: gloo"))

    def refs(self, node, what, pos) -> list[str] | None:
        r, specs = self.r, self.specs
        items = r.sequence(node, f"{what}: members")
        if items is None:
            return None
        if not items:
            r.error(node, f"{what}: members is empty")
        refs: list[str] = []
        seen: set[str] = set()  # the processes named so far, bare names expanded
        for item in items:
            name = r.string(item, f"{what}: member")
            if name is None:
                continue
            spec = self._spec(name)
            if specs is not None and spec is None:
                replicated = [n for n, s in specs.items() if s.replicas is not None]
                close = difflib.get_close_matches(
                    name, [*replicated, *(p.name for s in specs.values() for p in s.made())],
                    n=1)
                hint = f"; did you mean '{close[0]}'?" if close else \
                    f"; processes are {', '.join(replicated or specs)}"
                r.error(item, f"{what}: unknown process '{name}'{hint}")
                continue
            if spec is not None and spec.scale is not None and name != spec.name:
                r.error(item, f"{what}: '{name}' is one replica of '{spec.name}', which is"
                              f" scaled while the job runs; name '{spec.name}' (all its"
                              f" replicas) or make the world 'per: {spec.name}'")
                continue
            named = {name} if spec is None or spec.scale is not None or name != spec.name \
                else {p.name for p in spec.made()}
            if named & seen:
                r.error(item, f"{what}: '{min(named & seen)}' is a member twice")
                continue
            seen |= named
            pos[f"ref:{len(refs)}"] = r.pos(item)
            refs.append(name)
        return refs

    def per(self, node, what, refs) -> str | None:
        name = self.r.string(node, f"{what}: per")
        if name is None or self.specs is None:
            return name
        spec = self.specs.get(name)
        if spec is None or spec.replicas is None:
            self.r.error(node, f"{what}: per '{name}' must name a replicated process"
                               " (one with 'replicas:' or 'scale:')")
            return None
        if name not in refs:
            self.r.error(node, f"{what}: per '{name}': '{name}' must be among its members"
                               " (there it is that one replica)")
            return None
        return name


def _get(items, key, read, *args, **kwargs):
    return read(items[key][1], *args, **kwargs) if key in items else None
