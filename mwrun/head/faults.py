"""Every fault of a world, timed phase by phase (``schema.Phase``).

A subscriber of the supervisor's events (events.py), told besides by the loop what
only the library knows: when a member joined a generation and when a generation's
first call completed (both riding on the library's messages, control.py). All times
are wall-clock seconds on the head's clock: a remote host's are corrected by the
offset measured to its agent when it connected (clocks.py); a time an event carries
(``at``: an agent saw the exit, or the start) is used as it is, else the clock is
read when the event arrives, which is when the head saw it happen.

- ``t_fault``: a drill's or a hang's signal sent; the exit seen when nobody sent one;
  null for a host lost (the last moment its processes were alive is not known).
- ``exit_seen``: the supervisor (or the member's agent) saw the exit.
- ``survivors_told``: the break written to the world's store (the supervisor writes it
  just before it says the world broke; a member that saw the break first wrote it
  itself, at the time it says).
- ``restarted``: the member at fault (any member, when none is known) exists again.
- ``reformed``: every member joined the next generation (the last one's own time, as
  the library says it; when a member says nothing, a plain torch script, the moment
  the supervisor saw the world form).
- ``first_call``: the first call of that generation that completed, in any member.

A world has at most one fault open. It is closed, and handed to ``write`` (the
history's ``fault`` record), once its first call is known, or when the world breaks
again (its generation spent before it formed), closes, or the run ends: the phases
that did not happen stay null, never guessed.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mwrun.head import events as ev
from mwrun.head.events import Why
from mwrun.schema import Event as E
from mwrun.schema import Phase
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W

FAULT_SIGNALS = (Why.DRILL, Why.HANG)  # a signal that starts a fault (a stop's do not)


@dataclass
class Fault:
    world: str
    generation: int  # the generation that broke
    process: str | None  # the member at fault, if known
    signal: str | None
    cause: str
    phases: dict[Phase, float | None] = field(
        default_factory=lambda: dict.fromkeys(Phase))
    formed: int | None = None  # the generation it re-formed in

    def record(self) -> dict:
        """The history's ``fault`` record (history.py)."""
        return {"event": E.FAULT, "world": self.world, "generation": self.generation,
                "process": self.process, "signal": self.signal, "cause": self.cause,
                "phases": {p.value: _ms(t) for p, t in self.phases.items()}}

    def summary(self, open_: bool) -> dict:
        """What status shows (``last_fault``): ``at`` the first known phase's time,
        each phase as seconds after it."""
        at = next((t for t in self.phases.values() if t is not None), None)
        return {"generation": self.generation, "process": self.process,
                "signal": self.signal, "cause": self.cause, "at": _ms(at), "open": open_,
                "phases": {p.value: None if t is None or at is None else round(t - at, 4)
                           for p, t in self.phases.items()}}


@dataclass
class Exit:
    """A member's failure, waiting for the break it causes."""

    process: str | None
    t_fault: float | None
    exit_seen: float | None
    signal: str | None
    cause: str


def _ms(t: float | None) -> float | None:
    return None if t is None else round(t, 4)


class Faults:
    def __init__(self, worlds_of: Mapping[str, list[str]], members: Mapping[str, list[str]],
                 generation_of: Callable[[str], int], write: Callable[[dict], None],
                 clock: Callable[[], float]):
        self.worlds_of = worlds_of  # process -> its worlds
        self.members = members  # world -> its members
        self.generation_of = generation_of  # a world's current generation (supervisor)
        self.write = write
        self.clock = clock
        self.open: dict[str, Fault] = {}  # world -> its fault not closed yet
        self.last: dict[str, Fault] = {}  # world -> its latest fault, open or closed
        self.signalled: dict[str, tuple[float, str]] = {}  # process -> (when, signal)
        self.exits: dict[str, Exit] = {}  # world -> the failure its next break is of
        # (world, generation) -> (the last join, how many members said they joined)
        self.joins: dict[tuple[str, int], tuple[float, int]] = {}
        self.firsts: dict[tuple[str, int], float] = {}  # (world, generation) -> first call
        self.told: dict[tuple[str, int], float] = {}  # a member wrote the break itself
        self.down: set[str] = set()  # worlds broken, not all their members back yet
        self.changes = 0  # state.json compares this (what it shows moved)

    # -- what the supervisor tells ----------------------------------------------------

    def __call__(self, event: ev.Event) -> None:
        match event:
            case ev.Signalled(process, sig, why) if why in FAULT_SIGNALS:
                # The first one counts: a drill's SIGSTOP, not the hang's kill it led to.
                self.signalled.setdefault(process, (self.clock(), sig.name))
            case ev.Exited(pid=pid) if pid is not None:
                self._exited(event, self._at(event.at))
            case ev.Abandoned(process):
                self.signalled.pop(process, None)
            case ev.WorldBroken(world, generation, reason):
                self._broke(world, generation, reason)
            case ev.Spawned(process):
                self._spawned(process, self._at(event.at))
            case ev.WorldChanged(world, state) if state is not W.BROKEN:
                self.down.discard(world)  # back to forming: a member's end breaks it anew
            case ev.WorldFormed(world, generation):
                self.down.discard(world)
                self._formed(world, generation)
            case ev.WorldClosed(world):
                self.down.discard(world)
                self._close(world)
            case ev.WorldRemoved(world):  # gone: one made again under its name starts clean
                self.down.discard(world)
                self._close(world)
                self.last.pop(world, None)
                self.exits.pop(world, None)
                for key in [k for k in self.told if k[0] == world]:
                    del self.told[key]
            case ev.Stopping() | ev.RunEnded():
                for world in list(self.open):
                    self._close(world)

    def _at(self, at: float | None) -> float:
        return self.clock() if at is None else at

    def _exited(self, event: ev.Exited, seen: float) -> None:
        sent = self.signalled.pop(event.process, None)
        if event.state in (P.STOPPED, P.EXITED):
            return  # stopped with the job, or finished for good: its worlds close
        t_fault = None if event.lost else sent[0] if sent else seen
        name = sent[1] if sent else _signal_name(event.code)
        failure = Exit(event.process, t_fault, seen, name, event.why.split("; ")[0])
        for world in self.worlds_of.get(event.process, ()):
            if world in self.down and world in self.open:
                # Broken, and not all its members back yet: the next generation, opened
                # already, is spent with no break said (worldbook.lost_member), and the
                # first fault ends unrepaired.
                self._close(world)
                self._open(world, self.generation_of(world), failure, self.clock())
            else:
                self.exits[world] = failure  # its WorldBroken follows

    def _broke(self, world: str, generation: int, reason: str) -> None:
        self.down.add(world)
        self._close(world)  # a fault still waiting for its first call ends here
        failure = self.exits.pop(world, None)
        told = self.told.pop((world, generation), None)
        for key in [k for k in self.told if k[0] == world and k[1] <= generation]:
            del self.told[key]  # what other members said of it afterwards
        if failure is None:  # a member saw the break first (a timeout, a drill by hand)
            failure = Exit(None, None, None, None, reason)
        self._open(world, generation, failure, self.clock() if told is None else told,
                   cause=reason)

    def _open(self, world: str, generation: int, failure: Exit, told: float,
              cause: str | None = None) -> None:
        fault = Fault(world, generation, failure.process, failure.signal,
                      cause or failure.cause)
        fault.phases[Phase.T_FAULT] = failure.t_fault
        fault.phases[Phase.EXIT_SEEN] = failure.exit_seen
        fault.phases[Phase.SURVIVORS_TOLD] = told
        self.open[world] = self.last[world] = fault
        self.changes += 1

    def _spawned(self, process: str, at: float) -> None:
        for world in self.worlds_of.get(process, ()):
            fault = self.open.get(world)
            if fault is not None and fault.phases[Phase.RESTARTED] is None \
                    and fault.process in (process, None):
                fault.phases[Phase.RESTARTED] = at
                self.changes += 1

    def _formed(self, world: str, generation: int) -> None:
        fault = self.open.get(world)
        if fault is None or generation <= fault.generation:
            return
        last, count = self.joins.pop((world, generation), (None, 0))
        # Each member's own time of joining, when all said it (a plain torch script's
        # member says nothing: then when the supervisor saw the group form).
        fault.phases[Phase.REFORMED] = last if count >= len(self.members[world]) and \
            last is not None else self.clock()
        fault.formed = generation
        self.changes += 1
        first = self.firsts.pop((world, generation), None)
        if first is not None:
            self._first(world, fault, first)

    def _first(self, world: str, fault: Fault, at: float) -> None:
        fault.phases[Phase.FIRST_CALL] = at
        self._close(world)

    def _close(self, world: str) -> None:
        fault = self.open.pop(world, None)
        if fault is not None:
            self.changes += 1
            self.write(fault.record())
        for key in [k for k in (*self.joins, *self.firsts) if k[0] == world]:
            self.joins.pop(key, None)
            self.firsts.pop(key, None)

    # -- what the library tells (through the loop) --------------------------------------

    def joined(self, world: str, generation: int, at: float) -> None:
        """A member joined ``generation`` at ``at``: the world re-formed at its last join."""
        if world not in self.members:
            return  # not this run's: nothing kept
        key = (world, generation)
        last, count = self.joins.get(key, (at, 0))
        self.joins[key] = (max(last, at), count + 1)

    def broken(self, world: str, generation: int, at: float) -> None:
        """A member saw ``generation`` break and wrote so to the store itself at ``at``."""
        if world not in self.members:
            return
        key = (world, generation)
        self.told[key] = min(self.told.get(key, at), at)

    def first_call(self, world: str, generation: int, at: float) -> None:
        """A member's first completed call in ``generation`` was at ``at``."""
        fault = self.open.get(world)
        if fault is not None and fault.formed == generation:
            self._first(world, fault, at)  # the first reported: beats come together
        elif fault is not None and generation > fault.generation:  # its form not heard yet
            key = (world, generation)
            self.firsts[key] = min(self.firsts.get(key, at), at)

    # -- what status shows --------------------------------------------------------------

    def last_fault(self, world: str) -> dict | None:
        fault = self.last.get(world)
        return None if fault is None else fault.summary(self.open.get(world) is fault)


def _signal_name(code: int | None) -> str | None:
    """The signal that ended a process nobody signalled (a crash: SEGV, the OOM killer's
    KILL), from its exit code."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return None
