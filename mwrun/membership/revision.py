"""The desired membership of a running job, and each change to it as a plan revision.

``Membership`` holds which replicas each scaled process should have, the plan that
makes them (the launch plan, revised), and what placement handed out. A request
(requests.py) becomes a ``Revision``: the whole plan after it, the processes it starts
and retires, and what each world it touches must do (``Action``). Nothing is applied
here: the head applies a revision (head/elastic.py) and then ``adopt``s it, and says
when a retired replica is ``gone`` (its GPUs and CPUs are free again).

A revision costs what it touches: only the templates that name the scaled process are
made again, only the processes in the worlds that change get a new plan, and
placement takes from the pools it keeps (a job of a thousand processes pays for one
new replica what a job of ten does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from mwrun.membership import requests
from mwrun.membership.placing import Placer
from mwrun.membership.requests import Change, Refused
from mwrun.plan import stored, templates
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import Plan, ProcessPlan, WorldPlan
from mwrun.plan.topology import Topology

PortChooser = Callable[[str, set[int]], int]


class Action(str, Enum):
    """What a world must do for a revision."""

    FORM = "form"  # a new world: its store is made, its members join generation 0
    RESIZE = "resize"  # a member joins: re-form at once at the next generation
    DRAIN = "drain"  # members leave: drain, then re-form without them
    REMOVE = "remove"  # its replica is retired: drain, then close for good


@dataclass(frozen=True)
class Revision:
    number: int
    op: str
    plan: Plan  # the whole plan once it is applied
    indices: dict[str, tuple[int, ...]]  # scaled entry -> its replicas' indices
    started: tuple[str, ...]  # processes it adds
    retired: tuple[str, ...]  # processes it retires (drained, then stopped)
    changed: tuple[str, ...] = ()  # processes that stay, with new plans (their worlds)
    worlds: dict[str, Action] = field(default_factory=dict)
    # world draining -> seconds its calls stay usable (its retired members' drain_timeout)
    drains: dict[str, float] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.started or self.retired or self.worlds)

    def record(self) -> dict:
        """What the run folder keeps of it (schema.REVISIONS): the command line reads
        the plan as launched and every revision since."""
        return {"revision": self.number, "op": self.op,
                "replicas": {n: list(i) for n, i in self.indices.items()},
                "started": {n: _public(self.plan.processes[n]) for n in self.started},
                "retired": list(self.retired),
                "worlds": {w: {"action": a.value, **({"members": list(
                    self.plan.worlds[w].members), "port": self.plan.worlds[w].port}
                    if w in self.plan.worlds else {})} for w, a in self.worlds.items()},
                # Whole: what a head that takes the run over lays on the plan (replay.py).
                "plans": {"processes": {n: stored.dump_process(self.plan.processes[n])
                                        for n in (*self.started, *self.changed)},
                          "worlds": {w: stored.dump_world(self.plan.worlds[w])
                                     for w in self.worlds if w in self.plan.worlds}}}


def _public(proc: ProcessPlan) -> dict:
    return {"host": proc.host, "gpus": list(proc.gpus),
            "cpus": None if proc.cpus is None else list(proc.cpus),
            "worlds": dict(proc.worlds), "start": proc.start, "why_cold": proc.why_cold}


class Membership:
    def __init__(self, topology: Topology, plan: Plan, inventory: dict[str, HostInventory],
                 python: str | None, choose_port: PortChooser,
                 replicas: Mapping[str, tuple[int, ...]] | None = None, number: int = 0):
        """``plan``: the launch plan, or (a head that takes a run over, replay.py) the
        plan as revised, with each scaled process's ``replicas`` and the revision
        ``number`` it is at."""
        self.topology, self.plan = topology, plan
        self.desired = {n: tuple(range(s.replicas or 0)) for n, s in topology.scaled.items()}
        self.desired.update(replicas or {})
        self.every = templates.launch_indices(topology.specs)  # fixed entries too
        self.every.update(replicas or {})
        self.retiring: dict[str, ProcessPlan] = {}  # retired, not gone yet: still holding
        self.placer = Placer(topology, plan, inventory, python, choose_port)
        self.uses = {n: [t for t in topology.templates.values() if n in t.refs]
                     for n in topology.specs}
        self.made_of: dict[str, set[str]] = {}  # template -> the worlds it made, now
        for world in plan.worlds.values():
            self.made_of.setdefault(world.template, set()).add(world.name)
        self.number = number

    def replicas(self, process: str) -> tuple[int, ...]:
        return self.desired[process]

    # -- requests ------------------------------------------------------------------------

    def scale(self, changes: Iterable[Change], op: str) -> Revision:
        """The revision that moves each named process to its count (Refused, whole,
        when one cannot be met)."""
        indices: dict[str, tuple[int, ...]] = {}
        for change in changes:
            spec = requests.scaled(self.topology.specs, change.process)
            if change.process in indices:
                raise Refused(f"{change.process} is named twice in one request")
            now = self.desired[spec.name]
            target = requests.bounded(spec, change, len(now))
            taken = [self._index(n) for n in self.retiring if self._entry(n) == spec.name]
            if target >= len(now):  # (``now`` is sorted: the highest go first)
                new = tuple(sorted((*now, *requests.added(now, target - len(now), taken))))
            else:
                new = now[:target]
            indices[spec.name] = new
        return self._revise(indices, op)

    def drain(self, names: Iterable[str], op: str) -> Revision:
        """The revision that retires these replicas."""
        indices: dict[str, tuple[int, ...]] = {}
        names = list(names)
        for at, name in enumerate(names):
            spec, index = requests.replica(self.topology.specs, name)
            if name in names[:at]:  # else the second would read "not running": untrue
                raise Refused(f"replica {name} is named twice in one request")
            now = indices.get(spec.name, self.desired[spec.name])
            if index not in now:
                state = "is being retired already" if name in self.retiring else "is not running"
                raise Refused(f"replica {name} {state}; {spec.name} has"
                              f" {_names(spec.name, self.desired[spec.name])}")
            assert spec.scale is not None  # requests.replica checked it
            if len(now) - 1 < spec.scale.min:
                raise Refused(f"drain {name}: {spec.name} would have {len(now) - 1}"
                              f" replicas; its scale is {spec.scale.min}-{spec.scale.max}")
            indices[spec.name] = tuple(i for i in now if i != index)
        return self._revise(indices, op)

    def adopt(self, revision: Revision) -> None:
        """The head applied ``revision``: it is the membership now."""
        for name in revision.retired:
            self.retiring[name] = self.plan.processes[name]
        for name, action in revision.worlds.items():
            world = revision.plan.worlds.get(name) or self.plan.worlds[name]
            made = self.made_of.setdefault(world.template, set())
            if action is Action.REMOVE:
                made.discard(name)
            else:
                made.add(name)
        self.plan = revision.plan
        self.desired.update(revision.indices)
        self.every.update(revision.indices)
        self.number = revision.number

    def gone(self, name: str) -> None:
        """A retired replica has exited: what it held is free."""
        proc = self.retiring.pop(name, None)
        if proc is not None:
            self.placer.release(name, proc.host)

    # -- the revision --------------------------------------------------------------------

    def _revise(self, indices: dict[str, tuple[int, ...]], op: str) -> Revision:
        old = self.plan
        every = {**self.every, **indices}
        started, retired = [], []
        moved: dict[str, tuple[list[int], list[int]]] = {}  # entry -> (added, retired)
        for entry, new in indices.items():
            moved[entry] = _difference(self.desired[entry], new)
            started += [f"{entry}-{i}" for i in moved[entry][0]]
            retired += [f"{entry}-{i}" for i in moved[entry][1]]
        made, was = self._worlds_of(indices, moved, every)
        actions = {w: Action.FORM for w in made if w not in was}
        actions.update({w: Action.REMOVE for w in was if w not in made})
        for name in set(made) & set(was):
            gained = set(made[name].members) - set(was[name].members)
            if made[name].members != was[name].members:
                actions[name] = Action.RESIZE if gained else Action.DRAIN
        # Copies (at C speed) and then what changed: a revision costs what it touches.
        processes = dict(old.processes)
        for name in retired:
            del processes[name]
        processes.update(self.placer.processes(started, made))
        worlds = dict(old.worlds)
        for name in [w for w, a in actions.items() if a is Action.REMOVE]:
            del worlds[name]
        for name in actions:
            if name in made:
                worlds[name] = self.placer.world(made[name], old.worlds.get(name), processes)
        changed = self._members(processes, worlds, actions, started)
        plan = Plan(old.name, old.source, old.store_host, processes, worlds)
        drains = {w: min(self._drain_timeout(m) for m in old.worlds[w].members
                         if m in retired)
                  for w, a in actions.items() if a in (Action.DRAIN, Action.REMOVE)}
        return Revision(self.number + 1, op, plan, indices, tuple(started), tuple(retired),
                        tuple(n for n in changed if n not in started), actions, drains)

    def _worlds_of(self, indices: dict[str, tuple[int, ...]],
                   moved: dict[str, tuple[list[int], list[int]]], every) -> tuple[dict, dict]:
        """The worlds a change of ``indices`` may touch, as they will be (made from
        their templates again) and as they are: a template made per replica of the
        changed process, naming no other changed one bare, only for the replicas
        added or retired; any other template that names a changed process, whole."""
        made: dict[str, templates.World] = {}
        was: dict[str, WorldPlan] = {}
        for t in {t.name: t for e in indices for t in self.uses[e]}.values():
            if t.per in indices and not [r for r in t.refs if r in indices and r != t.per]:
                added, retired = moved[t.per]
                made.update(templates.instances(t, every, added))
                names = [t.instance(i) for i in (*added, *retired)]
            else:
                made.update(templates.expand({t.name: t}, every))
                names = sorted(self.made_of.get(t.name, ()))
            was.update({n: self.plan.worlds[n] for n in names if n in self.plan.worlds})
        return made, was

    def _drain_timeout(self, name: str) -> float:
        scale = self.topology.specs[self._entry(name)].scale
        return scale.drain_timeout if scale is not None else 0.0

    def _members(self, processes, worlds, actions, started) -> list[str]:
        """Each member of a world that changed: its worlds (world -> rank; new worlds
        after the ones it had, so its primary stays) and its local rank. Returns those
        whose plan it replaced."""
        touched = {m for w in actions if w in worlds for m in worlds[w].members} | set(started)
        touched |= {m for w in actions if actions[w] is Action.REMOVE
                    for m in self.plan.worlds[w].members if m in processes}
        changed = []
        for name in sorted(touched):
            proc = processes[name]
            ranks = dict(proc.worlds)
            for w in actions:  # the worlds it leaves, joins, or holds at another rank
                if w not in worlds or name not in worlds[w].members:
                    ranks.pop(w, None)
                else:
                    ranks[w] = worlds[w].members.index(name)
            primary = worlds[next(iter(ranks))] if ranks else None
            local = (proc.local_rank, proc.local_world_size) if primary is None else \
                _local(primary, name, processes)
            if ranks != proc.worlds or local != (proc.local_rank, proc.local_world_size):
                processes[name] = replace(proc, worlds=ranks, local_rank=local[0],
                                          local_world_size=local[1])
                changed.append(name)
        return changed

    def _entry(self, name: str) -> str:
        return name.rsplit("-", 1)[0]

    def _index(self, name: str) -> int:
        return int(name.rsplit("-", 1)[1])


def _difference(before: tuple[int, ...], after: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """(indices added, indices retired) between two sorted tuples: what a request
    changes, found in the few it changes (a scale moves the end; a drain one index)."""
    if len(after) >= len(before) and after[:len(before)] == before:
        return list(after[len(before):]), []
    if len(after) < len(before) and before[:len(after)] == after:
        return [], list(before[len(after):])
    was, now = set(before), set(after)
    return sorted(now - was), sorted(was - now)


def _local(world: WorldPlan, name: str, processes: dict[str, ProcessPlan]) -> tuple[int, int]:
    """A process's place among its primary world's members on its own host."""
    host = processes[name].host
    same = [m for m in world.members if m in processes and processes[m].host == host]
    return same.index(name), len(same)


def _names(entry: str, indices: tuple[int, ...]) -> str:
    return ", ".join(f"{entry}-{i}" for i in indices) or "none"
