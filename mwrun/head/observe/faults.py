"""The run's fault timeline: every fault of a world, with its own id, timed phase by
phase (``schema.Phase``). The one object the head writes and every reader shares:
``status`` shows its ``last_fault``; the history keeps its ``fault`` records and tags
each event that belongs to a fault with the fault's id (``tags``), so ``report`` and
``drill`` join on the id and never re-derive faults by nearness in time.

A subscriber of the supervisor's events (events.py), told besides by the loop what
only the library knows: when a member joined a generation and when a generation's
first call completed (both riding on the library's messages, serve/library.py). All times
are wall-clock seconds on the head's clock: a remote host's are corrected by the
offset measured to its agent when it connected (clocks.py); a time an event carries
(``at``: an agent saw the exit, or the start) is used as it is, else the clock is
read when the event arrives, which is when the head saw it happen.

A fault is one outage of a world: it starts with a drill's or a hang's signal to a
member (its id is known from that moment), or with the break when nobody sent one,
and lasts until the world re-formed and completed its first call. Whatever breaks the
world again before it re-formed (a restart killed again, a crash loop, a second drill,
the hang kill a STOP drill leads to, the timeout that breaks a stopped member's
world) belongs to the same fault: its ``breaks`` grow, its phases keep their first.

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

No phase is written before its causes (``CAUSES``: the exit after the signal, the
supervisor's break after the exit, and so on): one told earlier, a time from another
clock whose correction is off by more than the gap, is put at its cause's time, and the
record says so (``moved``: by how much). A break a member wrote itself follows only the
fault's start: it may truly come before the exit was seen (it saw its peer gone first).

A world has at most one fault open. It is closed, and handed to ``write`` (the
history's ``fault`` record), once its first call is known, or when a new fault starts
after the re-form (its first call never heard), or the world closes, or the run ends:
the phases that did not happen stay null, never guessed.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from mwrun.head.decide import events as ev
from mwrun.head.decide.events import Why
from mwrun.schema import FAULT_ID, FAULT_IDS, Phase
from mwrun.schema import Event as E
from mwrun.schema import ProcessState as P

FAULT_SIGNALS = (Why.DRILL, Why.HANG)  # a signal that starts a fault (a stop's do not)
# A phase -> those that must come before it (its causes): the exit follows the signal
# sent; the break follows the fault's start, and the exit when the supervisor wrote it
# (it breaks the world on hearing the exit; a member that saw the break first wrote it
# on its own, maybe before any exit was seen: ``_broke``); a replacement is made only
# once the exit was seen and the world broken; the world re-forms only once both, and
# its first call completes only once it has re-formed.
CAUSES: dict[Phase, tuple[Phase, ...]] = {
    Phase.EXIT_SEEN: (Phase.T_FAULT,),
    Phase.SURVIVORS_TOLD: (Phase.T_FAULT, Phase.EXIT_SEEN),
    Phase.RESTARTED: (Phase.EXIT_SEEN, Phase.SURVIVORS_TOLD),
    Phase.REFORMED: (Phase.RESTARTED, Phase.SURVIVORS_TOLD),
    Phase.FIRST_CALL: (Phase.REFORMED,),
}
Causes = tuple[Phase, ...] | None  # a phase's causes where not CAUSES' (None: CAUSES')


@dataclass
class Fault:
    id: int  # the run's faults are numbered from 1, in the order they started
    world: str
    generation: int  # the generation that broke (first)
    process: str | None  # the member at fault, if known
    signal: str | None
    cause: str
    phases: dict[Phase, float | None] = field(
        default_factory=lambda: dict.fromkeys(Phase))
    breaks: int = 0  # breaks of the world said while it was open
    formed: int | None = None  # the generation it re-formed in
    # A phase -> seconds it was moved later than told, to its cause's time (``settle``)
    moved: dict[Phase, float] = field(default_factory=dict)

    def record(self) -> dict:
        """The history's ``fault`` record (history.py)."""
        return {"event": E.FAULT, "id": self.id, "world": self.world,
                "generation": self.generation, "process": self.process,
                "signal": self.signal, "cause": self.cause, "breaks": self.breaks,
                "phases": {p.value: _ms(t) for p, t in self.phases.items()},
                "moved": {p.value: round(t, 4) for p, t in self.moved.items()}}

    def summary(self, open_: bool) -> dict:
        """What status shows (``last_fault``): ``at`` the first known phase's time,
        each phase as seconds after it."""
        known = [t for t in self.phases.values() if t is not None]
        at = self.phases[Phase.T_FAULT] if self.phases[Phase.T_FAULT] is not None \
            else min(known, default=None)
        return {"id": self.id, "generation": self.generation, "process": self.process,
                "signal": self.signal, "cause": self.cause, "breaks": self.breaks,
                "at": _ms(at), "open": open_,
                "phases": {p.value: None if t is None or at is None else round(t - at, 4)
                           for p, t in self.phases.items()},
                "moved": {p.value: round(t, 4) for p, t in self.moved.items()}}

    def settle(self, phase: Phase, at: float, causes: Causes = None) -> None:
        """The phase's time, never before a phase that must come first (``causes``,
        by default CAUSES'), and said in ``moved`` when it was told earlier than that.
        The two can come from two clocks, a remote host's corrected by the offset
        measured to its agent, whose error (half the round trip it was measured in: tens
        of milliseconds on a busy host) could otherwise put an effect before its cause."""
        known = [t for c in (CAUSES.get(phase, ()) if causes is None else causes)
                 if (t := self.phases[c]) is not None]
        cause = max(known, default=at)
        if cause > at:
            self.moved[phase] = cause - at
        self.phases[phase] = max(at, cause)

    def set(self, phase: Phase, at: float | None, causes: Causes = None) -> bool:
        """The phase's time, if it has none yet (the first of each counts), settled."""
        if at is None or self.phases[phase] is not None:
            return False
        self.settle(phase, at, causes)
        return True


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


class Said:
    """What the library tells of a world's generations (through the loop), kept until
    the fault it times asks: each member's join, and a break a member wrote itself."""

    def __init__(self, members: Mapping[str, list[str]]):
        self.members = members  # world -> its members
        # (world, generation) -> (the last join, how many members said they joined)
        self.joins: dict[tuple[str, int], tuple[float, int]] = {}
        self.firsts: dict[tuple[str, int], float] = {}  # (world, generation) -> first call
        self.told: dict[tuple[str, int], float] = {}  # a member wrote the break itself

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

    def _reformed_at(self, world: str, generation: int) -> float | None:
        """When the last member joined ``generation``, by its own clock, if every member
        said it joined; else None (a plain torch script's member says nothing: then the
        moment the supervisor saw the group form counts)."""
        last, count = self.joins.pop((world, generation), (None, 0))
        return last if count >= len(self.members[world]) else None

    def _told_of(self, world: str, generation: int) -> float | None:
        """When a member wrote ``generation``'s break itself, if one did; what the
        others said of it afterwards is dropped."""
        told = self.told.pop((world, generation), None)
        for key in [k for k in self.told if k[0] == world and k[1] <= generation]:
            del self.told[key]
        return told

    def _forget(self, world: str, told: bool = False) -> None:
        for key in [k for k in (*self.joins, *self.firsts) if k[0] == world]:
            self.joins.pop(key, None)
            self.firsts.pop(key, None)
        for key in [k for k in self.told if told and k[0] == world]:
            del self.told[key]


class FaultBook(Said):
    """The faults themselves: numbered as they start, one open per world, timed phase by
    phase, closed and handed to ``write`` (the history); what status shows of each
    world's latest. What the supervisor's events mean for them is ``Faults``'."""

    def __init__(self, members: Mapping[str, list[str]], write: Callable[[dict], None],
                 clock: Callable[[], float]):
        super().__init__(members)
        self.write = write
        self.clock = clock
        self.count = 0  # faults started so far: the last one's id
        self.open: dict[str, Fault] = {}  # world -> its fault not closed yet
        self.last: dict[str, Fault] = {}  # world -> its latest fault, open or closed
        self.changes = 0  # state.json compares this (what it shows moved)

    def _current(self, world: str) -> Fault | None:
        """The world's open fault that a new failure belongs to: one that has not
        re-formed yet (after the re-form, a failure is a new fault)."""
        fault = self.open.get(world)
        if fault is not None and fault.formed is not None:
            self._close(world)  # its first call never heard: a new fault starts
            return None
        return fault

    def _open(self, world: str, generation: int, failure: Exit,
              cause: str | None = None) -> Fault:
        self.count += 1
        fault = Fault(self.count, world, generation, failure.process, failure.signal,
                      cause or failure.cause)
        fault.set(Phase.T_FAULT, failure.t_fault)
        fault.set(Phase.EXIT_SEEN, failure.exit_seen)
        self.open[world] = self.last[world] = fault
        self.changes += 1
        return fault

    def _phase(self, fault: Fault, phase: Phase, at: float | None, causes: Causes = None) -> None:
        if fault.set(phase, at, causes):
            self.changes += 1

    def _formed(self, world: str, generation: int) -> Fault | None:
        fault = self.open.get(world)
        if fault is None or fault.breaks == 0 or generation <= fault.generation \
                or fault.formed is not None:
            return None
        said = self._reformed_at(world, generation)
        fault.settle(Phase.REFORMED, self.clock() if said is None else said)
        fault.formed = generation
        self.changes += 1
        first = self.firsts.pop((world, generation), None)
        if first is not None:
            self._first(world, fault, first)
        return fault

    def _first(self, world: str, fault: Fault, at: float) -> None:
        fault.settle(Phase.FIRST_CALL, at)
        self._close(world)

    def _close(self, world: str) -> None:
        fault = self.open.pop(world, None)
        if fault is not None:
            self.changes += 1
            self.write(fault.record())
        self._forget(world)

    # -- what the library tells (through the loop) --------------------------------------

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


class Faults(FaultBook):
    """A subscriber of the supervisor's events: what each means for the world's faults
    (a signal or an exit starts one, a break and the restart and the re-form time it),
    and the tag of each event in the history."""

    def __init__(self, worlds_of: Mapping[str, list[str]], members: Mapping[str, list[str]],
                 generation_of: Callable[[str], int], write: Callable[[dict], None],
                 clock: Callable[[], float]):
        super().__init__(members, write, clock)
        self.worlds_of = worlds_of  # process -> its worlds
        self.generation_of = generation_of  # a world's current generation (supervisor)
        self.signalled: dict[str, tuple[float, str]] = {}  # process -> (when, signal)
        self.exits: dict[str, Exit] = {}  # world -> the failure its next break is of
        self.tagged: dict = {}  # the history's tag of the event just handled (``tags``)
        self.closed: set[str] = set()  # worlds closed for good: a signal starts no fault

    # -- what the supervisor tells ----------------------------------------------------

    def __call__(self, event: ev.Event) -> None:
        self.tagged = {}
        match event:
            case ev.Signalled(process, sig, why) if why in FAULT_SIGNALS:
                # The first one counts: a drill's SIGSTOP, not the hang's kill it led to.
                at, name = self.signalled.setdefault(process, (self.clock(), sig.name))
                self.tagged = _by_world(self._signalled(process, at, name))
            case ev.Exited(pid=pid) if pid is not None:
                self.tagged = _by_world(self._exited(event, self._at(event.at)))
            case ev.Abandoned(process):
                self.signalled.pop(process, None)
            case ev.WorldBroken(world, generation, reason):
                self.tagged = {FAULT_ID: self._broke(world, generation, reason).id}
            case ev.Spawned(process):
                self.tagged = _by_world(self._spawned(process, self._at(event.at)))
            case ev.WorldFormed(world, generation):
                fault = self._formed(world, generation)
                if fault is not None:
                    self.tagged = {FAULT_ID: fault.id}
            case ev.WorldAdded(world):  # made (again) under its name: it may break
                self.closed.discard(world)
            case ev.WorldClosed(world) | ev.WorldRemoved(world):
                self.closed.add(world)
                fault = self.open.get(world)
                if fault is not None:
                    self.tagged = {FAULT_ID: fault.id}
                self._close(world)
                if isinstance(event, ev.WorldRemoved):  # one made again under its name
                    self.last.pop(world, None)  # starts clean
                    self.exits.pop(world, None)
                    self._forget(world, told=True)
            case ev.Stopping() | ev.RunEnded():
                for world in list(self.open):
                    self._close(world)

    def tags(self, event: ev.Event) -> dict:
        """What the history adds to ``event``'s record: the id of the fault it belongs
        to (``fault`` for a world's event, ``faults`` by world for a process's). Asked
        right after this subscriber heard the event (loop.py orders them so)."""
        return self.tagged

    def _at(self, at: float | None) -> float:
        return self.clock() if at is None else at

    def _signalled(self, process: str, at: float, name: str) -> list[Fault]:
        """A drill's or a hang's signal: a fault of each of the process's worlds starts
        now, unless one is open already (then the signal belongs to it)."""
        found = []
        for world in self.worlds_of.get(process, ()):
            fault = self._current(world)
            if fault is None and world in self.closed:
                continue
            if fault is None:
                fault = self._open(world, self.generation_of(world),
                                   Exit(process, at, None, name, f"{process} got {name}"))
            found.append(fault)
        return found

    def _exited(self, event: ev.Exited, seen: float) -> list[Fault]:
        sent = self.signalled.pop(event.process, None)
        if event.state in (P.STOPPED, P.EXITED):
            return []  # stopped with the job, or finished for good: its worlds close
        t_fault = None if event.lost else sent[0] if sent else seen
        name = sent[1] if sent else _signal_name(event.code)
        failure = Exit(event.process, t_fault, seen, name, event.why.split("; ")[0])
        found = []
        for world in self.worlds_of.get(event.process, ()):
            fault = self._current(world)
            if fault is None:
                self.exits[world] = failure  # its WorldBroken follows
                continue
            # The world is down already (a signal started its fault, or it broke and
            # this member died again before it re-formed): the same fault.
            if fault.process in (event.process, None):
                fault.process = fault.process or event.process
                fault.signal = fault.signal or name
                told = fault.phases[Phase.SURVIVORS_TOLD]
                if told is None or t_fault is None or t_fault <= told:  # else it broke
                    self._phase(fault, Phase.T_FAULT, t_fault)  # first: not when it began
                self._phase(fault, Phase.EXIT_SEEN, seen)
            found.append(fault)
        return found

    def _broke(self, world: str, generation: int, reason: str) -> Fault:
        failure = self.exits.pop(world, None)
        told = self._told_of(world, generation)
        fault = self._current(world)
        if fault is None:
            if failure is None:  # a member saw the break first (a timeout, a hand's kill)
                failure = Exit(None, None, None, None, reason)
            fault = self._open(world, generation, failure, cause=reason)
        elif failure is not None and fault.process in (failure.process, None):
            fault.process, fault.signal = failure.process, fault.signal or failure.signal
            self._phase(fault, Phase.T_FAULT, failure.t_fault)
            self._phase(fault, Phase.EXIT_SEEN, failure.exit_seen)
        if fault.breaks == 0:  # opened by a signal: the break says what it came to
            fault.generation, fault.cause = generation, reason
        fault.breaks += 1
        # Written by a member on its own: maybe before any exit was seen (it saw its
        # peer gone first), so only the fault's start comes before it.
        self._phase(fault, Phase.SURVIVORS_TOLD, self.clock() if told is None else told,
                    None if told is None else (Phase.T_FAULT,))
        self.changes += 1
        return fault

    def _spawned(self, process: str, at: float) -> list[Fault]:
        found = []
        for world in self.worlds_of.get(process, ()):
            fault = self.open.get(world)
            if fault is not None and fault.formed is None \
                    and fault.process in (process, None):
                self._phase(fault, Phase.RESTARTED, at)
                found.append(fault)
        return found



def _by_world(faults: list[Fault]) -> dict:
    """A process's event's tag: the fault it belongs to in each of its worlds."""
    return {FAULT_IDS: {f.world: f.id for f in faults}} if faults else {}


def _signal_name(code: int | None) -> str | None:
    """The signal that ended a process nobody signalled (a crash: SEGV, the OOM killer's
    KILL), from its exit code."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return None

