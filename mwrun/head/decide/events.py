"""What the supervisor tells: one small frozen record per thing that happens, handed to
its subscribers in the order it happens.

The supervisor emits each event at the point where it makes the change, with what it
knows there (why it signals, why a process ended); subscribers never look back at
the supervisor's records to find out what changed. Who listens (see loop.py): the
console and ``events.log`` (``Said``), ``history.jsonl`` (history.py) and
``state.json`` (document.Writer, which only marks itself dirty). A new event is a
class here, a line where the supervisor makes the change, and a case in each
subscriber that cares.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from mwrun.schema import ProcessState, RunState, Start, WorldState


class Why(str, Enum):
    """Why the supervisor signals a process."""

    STOP = "stop"  # the run is stopping: SIGTERM and SIGCONT, then SIGKILL after the grace
    HANG = "hang"  # it was declared hung: SIGKILL
    DRILL = "drill"  # a fault drill (mwrun kill-world, mwrun drill)
    RETIRE = "retire"  # a retired replica whose worlds have drained: SIGTERM, then SIGKILL


@dataclass(frozen=True, slots=True)
class Spawned:
    """A process exists (again): its pid, and how many restarts it is; ``at``: when
    its host started it, on the head's clock, if the host said (a remote agent), else
    it is now."""

    process: str
    pid: int
    restarts: int
    at: float | None = None
    # How (warm, cold), if its host said: a detail of the start, not what it is.
    start: Start | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Exited:
    """A process ended (or could not start: pid None); ``state`` is where that left it
    (restarting, exited, failed, stopped), ``why`` says what happened and what next;
    ``at``: when its host saw it end, on the head's clock, if the host said (a remote
    agent), else it is now; ``lost``: its host was lost (when it really ended is not
    known)."""

    process: str
    pid: int | None
    code: int | None
    state: ProcessState
    why: str
    at: float | None = None
    lost: bool = False


@dataclass(frozen=True, slots=True)
class Abandoned:
    """A process did not die after SIGKILL (stuck in the kernel): given up, failed."""

    process: str
    pid: int | None
    why: str


@dataclass(frozen=True, slots=True)
class Signalled:
    process: str
    signal: signal.Signals
    why: Why


@dataclass(frozen=True, slots=True)
class MadeLate:
    """A drill made a member late to every call of one world, ``delay`` seconds each,
    for ``hold`` seconds (``mwrun kill-world --signal SLOW``): no fault, a slow member."""

    process: str
    world: str
    delay: float
    hold: float


@dataclass(frozen=True, slots=True)
class Hung:
    """A process was declared hung (it is killed next)."""

    process: str
    why: str


@dataclass(frozen=True, slots=True)
class ProcessChanged:
    """A process moved to a state that has no event of its own (running, unresponsive,
    starting with its pid still to come, a restart cancelled or given up)."""

    process: str
    state: ProcessState
    why: str


@dataclass(frozen=True, slots=True)
class WorldBroken:
    """``generation`` of a world broke (the one it broke in, not the next)."""

    world: str
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class WorldFormed:
    world: str
    generation: int


@dataclass(frozen=True, slots=True)
class WorldClosed:
    world: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class WorldChanged:
    """A world moved without forming, breaking or closing (broken -> forming once its
    members are back), or what mwrun can see of it changed (``reason``: why mwrun
    cannot read a plain group, or None)."""

    world: str
    state: WorldState
    reason: str | None


@dataclass(frozen=True, slots=True)
class Added:
    """A process joined the job (a new replica, scale ``op``); its start follows."""

    process: str
    op: str


@dataclass(frozen=True, slots=True)
class Retired:
    """A process left the job's membership (``op``): its worlds drain, then it stops."""

    process: str
    op: str


@dataclass(frozen=True, slots=True)
class Gone:
    """A retired process exited: it is no longer part of the job."""

    process: str


@dataclass(frozen=True, slots=True)
class WorldAdded:
    world: str
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorldResized:
    """The world re-forms at ``generation`` with these members (a replica joined it or
    drained away): its members saw one break that says so, and rejoin."""

    world: str
    generation: int
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class WorldDraining:
    """A member of the world is retired: calls work until it is released or
    ``seconds`` pass."""

    world: str
    generation: int
    seconds: float


@dataclass(frozen=True, slots=True)
class WorldRemoved:
    """The world closed for good on purpose (drained) and left the job."""

    world: str
    reason: str


@dataclass(frozen=True, slots=True)
class Running:
    """Every process was asked to start: the run is running."""


@dataclass(frozen=True, slots=True)
class Stopping:
    reason: str


@dataclass(frozen=True, slots=True)
class RunEnded:
    state: RunState


@dataclass(frozen=True, slots=True)
class Said:
    """A line for the user (the console and events.log)."""

    text: str


Event = (Spawned | Exited | Abandoned | Signalled | MadeLate | Hung | ProcessChanged | WorldBroken
         | WorldFormed | WorldClosed | WorldChanged | Added | Retired | Gone | WorldAdded
         | WorldResized | WorldDraining | WorldRemoved | Running | Stopping | RunEnded | Said)


class Subscriber(Protocol):
    def __call__(self, event: Event) -> None: ...


class Events:
    """The bus: every event to every subscriber, in the order given at construction."""

    def __init__(self, subscribers: Iterable[Subscriber] = ()):
        self._subscribers = tuple(subscribers)

    def emit(self, event: Event) -> None:
        for subscriber in self._subscribers:
            subscriber(event)


def lines(show: Callable[[str], None]) -> Subscriber:
    """A subscriber that hands each line said to ``show`` (the console and events.log)."""
    def subscriber(event: Event) -> None:
        if isinstance(event, Said):
            show(event.text)
    return subscriber
