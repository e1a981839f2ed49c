"""The plan as it is now, from the plan the run was launched with and the revisions its
folder keeps (``revisions.jsonl``, its summary first once rotated): the desired state
a head that takes a running job over starts from (``mwrun adopt``, DESIGN "A head
that can die").

Each revision record carries the whole plan of every process it started or changed
and of every world it formed or changed (``Revision.record``, ``plans``); laid over the
launch plan in order, retired processes and removed worlds taken out, they give the
plan exactly as the head that wrote them had it: the same GPUs and CPUs, the same
stores' ports. Nothing is placed again. Pure: records in, a ``Revised`` out, or a
RunError that says which record cannot be read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mwrun.errors import RunError
from mwrun.membership.revision import Action
from mwrun.plan import stored
from mwrun.plan.placement import Plan, ProcessPlan, WorldPlan


@dataclass(frozen=True)
class Revised:
    """The plan after every revision, and what Membership needs to go on from it."""

    plan: Plan
    replicas: dict[str, tuple[int, ...]] = field(default_factory=dict)  # scaled: as now
    number: int = 0  # the last revision laid over it (the next is number + 1)
    # Each process a revision retired, as it was planned before, and by which operation:
    # one still running (a drain the last head did not see end) is retired again.
    retired: dict[str, tuple[ProcessPlan, str]] = field(default_factory=dict)
    # Each world a revision removed, as it was planned: one whose retired member still
    # runs was left draining; the new head closes it.
    removed: dict[str, WorldPlan] = field(default_factory=dict)
    ops: tuple[str, ...] = ()  # every operation the records name, oldest first


def revised(launch: Plan, records: Iterable[dict]) -> Revised:
    """``launch`` with each record laid over it, in order."""
    # A record's plans are kept as it holds them (``_Raw``) and checked once, at the
    # end: a process in every revision (a frontend in each new world) is read from its
    # last one only. Each keeps its place in the plan's order, as the live plan did.
    processes: dict[str, ProcessPlan | _Raw] = dict(launch.processes)
    worlds: dict[str, WorldPlan | _Raw] = dict(launch.worlds)
    replicas: dict[str, tuple[int, ...]] = {}
    retired: dict[str, tuple[ProcessPlan, str]] = {}
    removed: dict[str, WorldPlan] = {}
    number, ops = 0, []
    for record in records:
        where = f"revisions.jsonl, revision {record.get('revision')}"
        plans = record.get("plans")
        if not isinstance(plans, Mapping):
            raise RunError(f"{where} does not hold its whole plans (the run was scaled by"
                           " an mwrun before they were kept): a new head cannot rebuild"
                           " the plan as it is")
        op = str(record.get("op"))
        for name in record.get("retired") or ():
            if name in processes:
                retired[name] = (_process(processes.pop(name)), op)
        for name, data in dict(plans.get("processes") or {}).items():
            processes[name] = _Raw(data, f"{where}, process {name}")
            retired.pop(name, None)  # (an index used again)
        for name, told in dict(record.get("worlds") or {}).items():
            if dict(told).get("action") == Action.REMOVE.value and name in worlds:
                removed[name] = _world(worlds.pop(name))
        for name, data in dict(plans.get("worlds") or {}).items():
            worlds[name] = _Raw(data, f"{where}, world {name}")
            removed.pop(name, None)  # (formed again)
        try:
            replicas.update({str(n): tuple(int(i) for i in indices)
                             for n, indices in dict(record.get("replicas") or {}).items()})
            number = int(record["revision"])
        except (KeyError, TypeError, ValueError):
            raise RunError(f"{where}: its revision number or replicas cannot be read"
                           ) from None
        ops.append(op)
    plan = Plan(launch.name, launch.source, launch.store_host,
                {n: _process(p) for n, p in processes.items()},
                {n: _world(w) for n, w in worlds.items()}, launch.metrics)
    for world in plan.worlds.values():
        missing = [m for m in world.members if m not in plan.processes]
        if missing:
            raise RunError(f"revisions.jsonl: world {world.name} names {missing[0]}, which"
                           " no revision planned: the file is damaged")
    return Revised(plan, replicas, number, retired, removed, tuple(ops))


@dataclass(frozen=True)
class _Raw:
    """A plan as a record holds it (JSON values), and where, for the error."""

    data: object
    where: str


def _process(kept: ProcessPlan | _Raw) -> ProcessPlan:
    return stored.load_process(kept.data, kept.where) if isinstance(kept, _Raw) else kept


def _world(kept: WorldPlan | _Raw) -> WorldPlan:
    return stored.load_world(kept.data, kept.where) if isinstance(kept, _Raw) else kept
