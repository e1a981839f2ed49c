"""The status document (``mwrun status --json`` and ``state.json``), built from the
supervisor's records and the loop's readings: processes, worlds with their traffic,
hosts; per world its ``last_fault`` (faults.py: ``id``, the fault's id in the run, the
same as on its history records; ``at``, the wall-clock time of its first known phase,
and each phase as seconds after ``at``, null when it did not happen).
``state.json`` is written by a ``Writer`` that subscribes to the supervisor's
events: rewritten only when something in it changed (a heartbeat emits nothing) or
the usage readings are due, and then behind, at most once per SAVE_GAP: building the
document for every event would cost the supervisor more than everything else it does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mwrun.head.decide import events as ev
from mwrun.head.decide.records import Book, WorldRecord
from mwrun.head.observe import rundir, slowness
from mwrun.head.observe.faults import Faults
from mwrun.head.observe.scaleops import Ops
from mwrun.head.observe.traffic import Traffic
from mwrun.plan.placement import Plan
from mwrun.schema import HostState
from mwrun.schema import WorldState as W

USAGE_EVERY = 10.0  # seconds between cpu/memory readings for state.json, at least
# The most of a core state.json's rewrite for the usage readings alone may take, the
# whole rewrite counted (the probes sent to every host, the build, the write): a job of
# 1,000 ranks on 125 hosts (10-20 ms a rewrite) is read every 20-40 s, not 10 (a live
# run's status is asked of its head, fresh; state.json's readings serve a head that
# died). A twentieth of the idle head's goal (bench/README.rst).
USAGE_SHARE = 0.0005
USAGE_FRESH = 1.0  # a status request reuses readings younger than this
SAVE_GAP = 0.25  # seconds between two writes of state.json at least


class Usage:
    """Each live process's CPU and memory, read every USAGE_EVERY seconds, or as seldom
    as keeps the document's rewrite for them under USAGE_SHARE of a core (fresh for a
    status request, but at most once a second: a client asking in a loop must not make
    the supervisor read /proc for every process each time)."""

    def __init__(self, read: Callable[[str], tuple], refresh: Callable[[], None]):
        self.read, self.refresh = read, refresh  # one process's; ask the remote hosts
        self.readings: dict[str, tuple] = {}
        self.at = float("-inf")
        self.every = USAGE_EVERY

    def due(self, now: float) -> bool:
        return now - self.at >= self.every

    def cost(self, seconds: float) -> None:
        """state.json took ``seconds`` to rewrite: the readings' period follows it."""
        self.every = max(USAGE_EVERY, seconds / USAGE_SHARE)

    def of(self, names, now: float, fresh: bool) -> dict[str, tuple]:
        if (fresh and now - self.at >= USAGE_FRESH) or self.due(now):
            self.at = now
            self.refresh()  # remote hosts' answers arrive for the next document
            self.readings = {name: self.read(name) for name in names}
        return self.readings


class Job(Book, Protocol):
    """The supervisor (decide/supervisor.py) as the document reads it: its records."""

    @property
    def finished(self) -> bool: ...
    @property
    def exit_code(self) -> int: ...


class Revisions(Protocol):
    """The job's membership (membership/revision.py): the plan as it is now, its number."""

    @property
    def plan(self) -> Plan: ...
    @property
    def number(self) -> int: ...


class Bundles(Protocol):
    """The postmortems (postmortem/capture.py): each world's latest bundle, and a count
    of their changes."""

    @property
    def latest(self) -> Mapping[str, object]: ...
    @property
    def changes(self) -> int: ...


class Hosts(Protocol):
    """The remote hosts' agents (hosts/agents.py): their states and pids, and a count
    of their moves."""

    def states(self) -> dict[str, str]: ...
    def pids(self) -> dict[str, int | None]: ...
    @property
    def moves(self) -> int: ...


class Scales(Protocol):
    """The elastic requests (serve/elastic.py): per scaled process its counts."""

    def view(self) -> dict[str, dict]: ...


@dataclass(frozen=True)
class Facts:
    """What the document tells of the run that never changes while it runs."""

    run_id: str
    started_at: float
    topology: str  # the topology file as launched, in the run folder
    control: str  # the control socket's path
    epoch: int = 1  # the head's (head/epochs.py): 1 for the launch's, more once adopted
    head_started_at: float | None = None  # the head's own start (adopted: after the run's)


class Status:
    """The status document, built from what it reads: the supervisor's records, the
    observers' readings, the run's fixed facts."""

    def __init__(self, facts: Facts, job: Job, membership: Revisions, usage: Usage,
                 traffic: Traffic, faults: Faults,
                 ops: Ops, postmortems: Bundles, elastic: Scales, agents: Hosts | None,
                 hosts: list):
        self.facts = facts
        self.job, self.membership, self.usage = job, membership, usage
        self.traffic, self.faults, self.ops = traffic, faults, ops
        self.postmortems, self.elastic, self.agents = postmortems, elastic, agents
        self.hosts = hosts  # the document's host entries (name, addr)

    def build(self, fresh_usage: bool = False) -> dict:
        now = time.monotonic()
        sup = self.job
        usage = self.usage.of([n for n, rec in sup.procs.items() if rec.state.alive], now,
                              fresh_usage)
        processes = []
        for name, rec in sup.procs.items():
            cpu, rss = usage.get(name, (None, None)) if rec.state.alive else (None, None)
            processes.append({
                "name": name, "host": rec.plan.host, "pid": rec.worker.pid,
                "state": rec.state.value,
                "exit_code": rec.worker.exit_code, "restarts": rec.restarts,
                # What a drill checks its schedule against (mwrun drill): restarts after a
                # drill's fault spend none of max_restarts.
                "restart": rec.plan.restart, "restarts_left": 0 if rec.plan.restart == "never"
                else max(rec.plan.max_restarts - rec.spent, 0),
                "worlds": dict(rec.plan.worlds),
                "gpus": [int(g) if g.isdigit() else g for g in rec.plan.gpus],
                "cpus": list(rec.plan.cpus) if rec.plan.cpus is not None else [],
                "started_at": rec.worker.started_at, "cpu_percent": cpu, "rss_bytes": rss,
                "start": _value(rec.worker.start), "nccl": rec.nccl,
                "replica_of": rec.plan.replica_of,
                "last_event": rec.why or None,
                "traffic": self.traffic.per_member(name, rec.worker.pid, rec.plan.worlds, now)})
        worlds = [{"name": name, "backend": w.plan.backend, "size": w.plan.size,
                   "members": list(w.plan.members), "generation": w.generation,
                   "state": W.UNKNOWN.value if w.opaque and w.state is W.FORMING
                   else w.state.value, "breaks": w.breaks, "port": w.plan.port,
                   "reason": w.reason or w.opaque,
                   **self.traffic.view(self._pids(w), name, now),
                   "healthy_for_s": round(now - w.healthy_since, 3)
                   if w.state is W.HEALTHY and w.healthy_since is not None else None,
                   "drain_left_s": round(max(w.drain_until - now, 0.0), 3)
                   if w.state is W.DRAINING and w.drain_until is not None else None,
                   "last_fault": self.faults.last_fault(name),
                   "postmortem": self.postmortems.latest.get(name),
                   "slow": self._slow(w, name, now)}
                  for name, w in sup.worlds.items()]
        facts = self.facts
        return {"run_id": facts.run_id, "name": self.membership.plan.name,
                "state": sup.state.value, "supervisor_pid": os.getpid(),
                "supervisor_started_at": facts.head_started_at or facts.started_at,
                "epoch": facts.epoch, "started_at": facts.started_at, "topology": facts.topology,
                "control": facts.control,
                "exit_code": sup.exit_code if sup.finished else None,
                "processes": processes, "worlds": worlds, "hosts": self._hosts(),
                # elastic jobs: the plan's revision, and per scaled process its counts
                "revision": self.membership.number, "scale": self.elastic.view()}

    def _hosts(self) -> list[dict]:
        states = self.agents.states() if self.agents is not None else {}
        pids = self.agents.pids() if self.agents is not None else {}
        return [{"name": name, "addr": addr, "state": states.get(name, HostState.LOCAL.value),
                 "agent_pid": pids.get(name)} for name, addr in self.hosts]

    def rates(self, now: float, span: float) -> dict:
        """Per world [calls/s, bytes/s] for the history (rounded: it is for pictures)."""
        found, worlds = {}, self.job.worlds
        # Only the worlds whose members ever told their traffic (a plain group's tell
        # none): a sample a second must not cost every world of a large job.
        for name in [name for name in worlds if name in self.traffic.heard]:
            world = worlds[name]
            view = self.traffic.view(self._pids(world), name, now, span)
            if view["calls_per_s"] is not None:
                found[name] = [round(view["calls_per_s"], 2), round(view["bytes_per_s"])]
        return found

    def waits(self, now: float, span: float) -> dict[str, dict[str, float]]:
        """Per world whose members time their collectives, each member's mean wait in
        one over about the last ``span`` seconds (rounded: it is for pictures)."""
        found = {}
        for name in [name for name in self.job.worlds if name in self.traffic.heard]:
            waits = self.traffic.waits(self._pids(self.job.worlds[name]), name, now, span)
            if waits:
                found[name] = {member: round(wait, 5) for member, (_, wait) in waits.items()}
        return found

    def slow_members(self, now: float) -> dict[str, tuple[int, dict | None]]:
        """Per world (its generation, the member it waits for as the document says it,
        or None): what slowwatch.py tells as it changes."""
        return {name: (w.generation, self._slow(w, name, now))
                for name, w in self.job.worlds.items()}

    def _slow(self, world: WorldRecord, name: str, now: float) -> dict | None:
        """The member the others wait for, when there clearly is one (slowness.py)."""
        if world.state is not W.HEALTHY or name not in self.traffic.heard:
            return None
        waits = self.traffic.waits(self._pids(world), name, now)
        found = slowness.slow(waits, len(world.plan.members))
        return None if found is None else found.view(waits)

    def _pids(self, world: WorldRecord) -> dict:
        procs = self.job.procs
        return {m: procs[m].worker.pid for m in world.plan.members if procs[m].state.alive}

    def outside(self) -> tuple:
        """What state.json shows that no supervisor event tells: the hosts' states, when
        usage was read, and whether a reading is due."""
        hosts = self.agents.moves if self.agents else 0  # a count: O(1) after every turn
        # The faults' phases the library tells (first calls) come with no event.
        return (hosts, self.faults.changes, self.ops.changes, self.postmortems.changes,
                self.usage.at, self.usage.due(time.monotonic()))


def _value(start) -> str | None:
    return None if start is None else start.value


class Writer:
    """state.json, written behind. A subscriber of the supervisor's events that only
    marks itself dirty; ``save`` (after every turn of the loop, so the common case must
    cost next to nothing) writes when an event came or ``outside`` changed, at most
    once per SAVE_GAP: a burst of events (a launch, a host lost) costs one write, not
    one per event. ``due`` tells the loop when a write held back is due; ``spent`` is
    told what each write took (the usage readings' period follows it)."""

    def __init__(self, path: Path, build: Callable[[], dict], outside: Callable[[], tuple],
                 clock: Callable[[], float] = time.monotonic,
                 spent: Callable[[float], None] = lambda seconds: None):
        self.path = path
        self.build = build
        self.outside = outside
        self.clock, self.spent = clock, spent
        self.dirty = True  # nothing written yet
        self.seen: tuple | None = None  # what outside() said at the last write
        self.saved_at = float("-inf")
        self.due: float | None = None
        self.writes = 0

    def __call__(self, event: ev.Event) -> None:
        if not isinstance(event, ev.Said):  # a line said changes nothing shown
            self.dirty = True

    def save(self, force: bool = False) -> None:
        """``force``: now, never held back (the final state)."""
        if not self.dirty and self.outside() == self.seen:
            return
        if not force and self.clock() - self.saved_at < SAVE_GAP:
            self.due = self.saved_at + SAVE_GAP
            return
        self.dirty = False
        began = self.clock()
        rundir.write_json(self.path, self.build())
        self.seen = self.outside()  # build() may have read usage afresh
        self.saved_at, self.due = self.clock(), None
        self.writes += 1
        self.spent(self.saved_at - began)
