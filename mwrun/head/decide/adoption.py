"""A new head takes a running job as its agents found it (``mwrun adopt``).

What the job should be (the plan) comes from the run folder; what it is comes from
the agents (host/recall.py): for each process, the start that runs now (its pid,
incarnation, restarts, and the generation of each world it is in). Each such start
becomes its record's ``Worker``, as though this head had made it, and each world's
generation and admitted incarnations are those its members are in: the stores, which
the keeper kept, say the same. The record stays STARTING until its library's words
(replayed by its agent) say it joined its worlds, as at any start; a start that
ended while the head was away is told next (its agent kept the exit) and handled as
any exit: its worlds break and re-form, and it is restarted. A process no agent runs
is started, as at launch. A process found running that a revision retired (a drain
whose end the last head did not see) is retired again: each world its revision
removed is closed now, then it gets SIGTERM, and SIGKILL after the grace, as any
retired replica (reshaping.py); a world it left that stays re-forms without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from mwrun import protocol
from mwrun.head.decide.processbook import Processes
from mwrun.head.decide.records import ProcessRecord, Worker, WorldRecord
from mwrun.head.decide.reshaping import Reshaping
from mwrun.head.decide.worldbook import Worlds
from mwrun.membership.replay import Revised
from mwrun.plan.placement import ProcessPlan, WorldPlan
from mwrun.schema import Start


@dataclass(frozen=True)
class Found:
    """One process's start, as its agent reported it."""

    pid: int | None  # None: its start was asked and not made yet (its pid comes next)
    incarnation: int
    restarts: int = 0
    warm: bool = False
    generations: dict[str, int] = field(default_factory=dict)
    at: float | None = None  # when it was made (its host's wall clock)
    host: str = ""  # the host whose agent runs it

    @classmethod
    def read(cls, told: object, host: str = "") -> Found | None:
        """From an agent's report; None for one that is not (a newer or broken agent)."""
        if not isinstance(told, dict):
            return None
        try:
            generations = {str(w): int(g) for w, g in dict(told.get("generations") or {}
                                                           ).items()}
            at = told.get("t")
            pid = told["pid"]
            return cls(None if pid is None else int(pid), int(told["incarnation"]),
                       int(told.get("restarts") or 0), bool(told.get("warm")), generations,
                       float(at) if isinstance(at, int | float) else None, host)
        except (KeyError, TypeError, ValueError):
            return None


def take(procs: Mapping[str, ProcessRecord], worlds: Mapping[str, WorldRecord],
         found: Mapping[str, Found], now: float, wall: float) -> dict[str, int]:
    """Mark each found start on its record, and each world's generation; the
    incarnations taken, by process (the count of starts made, carried on)."""
    taken = {}
    for name, rec in procs.items():
        seen = found.get(name)
        if seen is None:
            continue
        rec.restarts = rec.spent = seen.restarts
        made = None if seen.pid is None else Start.WARM if seen.warm else Start.COLD
        rec.worker = Worker(seen.incarnation, now, seen.at or wall, dict(seen.generations),
                            seen.pid, made)  # (a pid to come: on_spawned tells how, too)
        taken[name] = seen.incarnation
    for world in worlds.values():
        members = world.plan.members
        generations = [found[m].generations.get(world.plan.name, 0)
                       for m in members if m in found]
        world.generation = max(generations, default=0)
        # What its store admits now: the starts that run (each member's own number);
        # a member that is not running is admitted as its first start would be.
        world.admitted = [found[m].incarnation if m in found else protocol.FIRST_INCARNATION
                          for m in members]
    return taken


@dataclass(frozen=True)
class Retiring:
    """A process found running that a revision retired."""

    plan: ProcessPlan  # as it was planned before that revision
    op: str  # the operation that retired it


@dataclass(frozen=True)
class Taken:
    """What a new head takes over: the plan as revised, and the job as found."""

    revised: Revised  # the plan with every revision laid over it (membership/replay.py)
    found: Mapping[str, Found]  # the starts its agents run
    retiring: Mapping[str, Retiring] = field(default_factory=dict)  # found, though retired
    closing: Mapping[str, WorldPlan] = field(default_factory=dict)  # left draining by those
    breaks: Mapping[str, int] = field(default_factory=dict)  # each world's, as last counted


def taken(revised: Revised, found: Mapping[str, Found], breaks: Mapping[str, int]) -> Taken:
    """What a new head takes over, from the plan as revised, what its agents found,
    and each world's breaks as the last head counted them (its last state.json)."""
    retiring = {n: Retiring(*revised.retired[n]) for n in found
                if n in revised.retired and n not in revised.plan.processes}
    closing = {w: revised.removed[w] for gone in retiring.values() for w in gone.plan.worlds
               if w in revised.removed}
    return Taken(revised, found, retiring, closing, breaks)


def resume(processes: Processes, book: Worlds, reshaping: Reshaping, taken: Taken, now: float,
           wall: float) -> None:
    """The supervisor's records as its agents found the job: each found start taken
    (``take``), each world's breaks carried on. A found process that was retired gets a
    record again, in just the worlds its revision removed (``closing``: they were left
    draining), and is retired again: those worlds close now, then it is stopped."""
    for gone in taken.retiring.values():
        processes.add(replace(gone.plan, worlds={w: rank for w, rank in
                                                 gone.plan.worlds.items()
                                                 if w in taken.closing}))
    for plan in taken.closing.values():
        book.records[plan.name] = WorldRecord(plan)  # (its store is the keeper's still)
    for name, world in book.records.items():
        world.breaks = taken.breaks.get(name, 0)
    for name, incarnation in take(processes.records, book.records, taken.found, now,
                                  wall).items():
        processes.adopted(name, incarnation)
    for name, gone in taken.retiring.items():
        reshaping.retire_found(processes.records[name], gone.op, now)
