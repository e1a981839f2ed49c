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

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum

from mwrun.membership import requests
from mwrun.membership.requests import Change, Refused
from mwrun.plan import templates, timeouts
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import Plan, Pools, ProcessPlan, WorldPlan, process_plan, store_addr_for
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
                    if w in self.plan.worlds else {})} for w, a in self.worlds.items()}}


def _public(proc: ProcessPlan) -> dict:
    return {"host": proc.host, "gpus": list(proc.gpus),
            "cpus": None if proc.cpus is None else list(proc.cpus),
            "worlds": dict(proc.worlds), "start": proc.start}


class Membership:
    def __init__(self, topology: Topology, plan: Plan, inventory: dict[str, HostInventory],
                 python: str | None, choose_port: PortChooser):
        self.topology, self.plan, self.python = topology, plan, python
        self.choose_port = choose_port
        self.desired = {n: tuple(range(s.replicas or 0)) for n, s in topology.scaled.items()}
        self.every = templates.launch_indices(topology.specs)  # fixed entries too
        self.retiring: dict[str, ProcessPlan] = {}  # retired, not gone yet: still holding
        self.pools = Pools(inventory)
        for proc in plan.processes.values():
            self.pools.hold(proc)
        self.uses = {n: [t for t in topology.templates.values() if n in t.refs]
                     for n in topology.specs}
        self.number = 0

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
            if target >= len(now):
                new = (*now, *requests.added(now, target - len(now), taken))
            else:
                gone = set(requests.removed(now, len(now) - target))
                new = tuple(i for i in now if i not in gone)
            indices[spec.name] = tuple(sorted(new))
        return self._revise(indices, op)

    def drain(self, names: Iterable[str], op: str) -> Revision:
        """The revision that retires these replicas."""
        indices: dict[str, tuple[int, ...]] = {}
        for name in names:
            spec, index = requests.replica(self.topology.specs, name)
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
        self.plan = revision.plan
        self.desired.update(revision.indices)
        self.every.update(revision.indices)
        self.number = revision.number

    def gone(self, name: str) -> None:
        """A retired replica has exited: what it held is free."""
        proc = self.retiring.pop(name, None)
        if proc is not None:
            self.pools.release(name, proc.host)

    # -- the revision --------------------------------------------------------------------

    def _revise(self, indices: dict[str, tuple[int, ...]], op: str) -> Revision:
        old = self.plan
        every = {**self.every, **indices}
        started, retired = [], []
        for entry, new in indices.items():
            before = set(self.desired[entry])
            started += [f"{entry}-{i}" for i in new if i not in before]
            retired += [f"{entry}-{i}" for i in sorted(before - set(new))]
        touched = {t.name: t for e in indices for t in self.uses[e]}
        made = templates.expand(touched, every)
        was = {w: p for w, p in old.worlds.items() if p.template in touched}
        actions = {w: Action.FORM for w in made if w not in was}
        actions.update({w: Action.REMOVE for w in was if w not in made})
        for name in set(made) & set(was):
            gained = set(made[name].members) - set(was[name].members)
            if made[name].members != was[name].members:
                actions[name] = Action.RESIZE if gained else Action.DRAIN
        processes = {n: p for n, p in old.processes.items() if n not in retired}
        processes.update(self._place(started, every, made))
        worlds = {n: w for n, w in old.worlds.items() if actions.get(n) is not Action.REMOVE}
        for name in actions:
            if name in made:
                worlds[name] = self._world(made[name], old.worlds.get(name), processes)
        changed = self._members(processes, worlds, actions, started)
        plan = Plan(old.name, old.source, old.store_host, processes, worlds)
        drains = {w: min(self._drain_timeout(m) for m in old.worlds[w].members
                         if m in retired)
                  for w, a in actions.items() if a in (Action.DRAIN, Action.REMOVE)}
        return Revision(self.number + 1, op, plan, indices, tuple(started), tuple(retired),
                        tuple(n for n in changed if n not in started), actions, drains)

    def _drain_timeout(self, name: str) -> float:
        scale = self.topology.specs[self._entry(name)].scale
        return scale.drain_timeout if scale is not None else 0.0

    def _place(self, started: list[str], every, made) -> dict[str, ProcessPlan]:
        """Plans for the new replicas, their GPUs and CPUs taken (all or none)."""
        errors: list = []
        placed = {}
        for name in started:
            entry = self._entry(name)
            proc = self.topology.specs[entry].replica(self._index(name))
            got = self.pools.take(proc, errors)
            worlds = {w.name: w.members.index(name) for w in made.values() if name in w.members}
            view = replace(self.topology, processes={name: proc})
            hang = timeouts.hang(view, name, [w.timeout for w in made.values()
                                              if name in w.members]).seconds
            placed[name] = process_plan(view, proc, got, worlds, (0, 1), self.python, hang)
        if errors:
            for name in placed:
                self.pools.release(name, placed[name].host)
            raise Refused("cannot place every new replica: " + "; ".join(
                d.message for d in errors))
        return placed

    def _world(self, world: templates.World, old: WorldPlan | None,
               processes: dict[str, ProcessPlan]) -> WorldPlan:
        hangs = [processes[m].hang_timeout for m in world.members]
        rejoin = timeouts.world_rejoin(hangs).seconds
        rejoin_s = None if math.isinf(rejoin) else rejoin
        if old is not None:
            return replace(old, members=world.members, rejoin=rejoin_s)
        addr = store_addr_for(self.topology, [processes[m].host for m in world.members],
                              self.plan.store_host)
        taken = {w.port for w in self.plan.worlds.values()}
        port = self.choose_port(addr, taken)
        return WorldPlan(world.name, world.members, world.backend, world.timeout, addr, port,
                         True, world.on_failure, rejoin_s, world.template)

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
            ranks = {w: r for w, r in proc.worlds.items()
                     if w in worlds and actions.get(w) is not Action.REMOVE}
            ranks.update({w: worlds[w].members.index(name) for w in actions
                          if w in worlds and name in worlds[w].members})
            gone = [w for w in proc.worlds if actions.get(w) is Action.REMOVE]
            primary = worlds[next(iter(ranks))] if ranks else None
            local = (proc.local_rank, proc.local_world_size) if primary is None else \
                _local(primary, name, processes)
            if ranks != proc.worlds or gone or local != (proc.local_rank,
                                                         proc.local_world_size):
                processes[name] = replace(proc, worlds=ranks, local_rank=local[0],
                                          local_world_size=local[1])
                changed.append(name)
        return changed

    def _entry(self, name: str) -> str:
        return name.rsplit("-", 1)[0]

    def _index(self, name: str) -> int:
        return int(name.rsplit("-", 1)[1])


def _local(world: WorldPlan, name: str, processes: dict[str, ProcessPlan]) -> tuple[int, int]:
    """A process's place among its primary world's members on its own host."""
    host = processes[name].host
    same = [m for m in world.members if m in processes and processes[m].host == host]
    return same.index(name), len(same)


def _names(entry: str, indices: tuple[int, ...]) -> str:
    return ", ".join(f"{entry}-{i}" for i in indices) or "none"
