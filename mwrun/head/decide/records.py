"""What the supervisor knows of each process and each world: plain records. A process's
record holds what is wanted of it (``goal``) and what was seen of its current start
(``worker``); its state is reconciled from both in reconcile.py, the one place it
moves. Whoever reads them learns of changes from the supervisor's events (events.py),
never by comparing records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from mwrun import protocol
from mwrun.head.decide.policy import Exit
from mwrun.plan.placement import ProcessPlan, WorldPlan
from mwrun.schema import Goal, RunState, Start, WorldGoal
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W


@dataclass
class Worker:
    """One start of a process, its incarnation (torch elastic's ``Worker``): made by
    the start, never reset; the next start is a new Worker. The record keeps the
    process across its starts; what belongs to one start is here."""

    incarnation: int = 0  # its number (protocol: admit); 0: the process never started
    started: float = 0.0  # monotonic
    started_at: float | None = None  # wall clock, for people
    generations: dict[str, int] = field(default_factory=dict)  # world -> generation it is in
    pid: int | None = None  # None until its host tells it (a warm or remote start); once ended
    start: Start | None = None  # how it was made (warm, cold), once its host told
    # What was seen of it (observed state), reconciled into its record's state:
    exit: Exit | None = None  # how it ended, once it did (or its start could not be made)
    ended_pid: int | None = None  # the pid it had when it ended
    ended_at: float | None = None  # when its host saw it end, if its host said
    late: str | None = None  # why it is late to beat (hangs.LATE, hangs.STOPPED), if it is
    abandoned: bool = False  # it outlived even the stop's SIGKILL
    ready: set[str] = field(default_factory=set)  # worlds it joined at that generation
    left: set[str] = field(default_factory=set)  # worlds it closed (finished with)
    said_hello: bool = False
    beat_every: float | None = None
    beat_gap: float | None = None  # the most seconds to its next beat, as its last beat said
    beat_hold: float = 0.0  # the most seconds its beats wait on the way (hangs.beat_hold)
    last_beat: float = 0.0  # awake time
    stop_sent_at: float | None = None  # awake time the supervisor last sent it SIGSTOP
    stopped_since: float | None = None
    suspect_since: float | None = None  # awake time it was first silent past its deadline
    hung: str | None = None  # why it was declared hung
    joined_at: float | None = None  # monotonic; when it went STARTING -> RUNNING
    drilled: bool = False  # a drill signalled it (policy.crash_loop)
    # What the reconcile told of it already (its start, its end): each once.
    told_start: bool = False
    told_end: bool = False

    @property
    def made(self) -> bool:
        """A start was made (or tried): the placeholder of a process never started is not."""
        return self.started_at is not None or self.exit is not None

    @property
    def exit_code(self) -> int | None:
        return None if self.exit is None else self.exit.code


@dataclass
class ProcessRecord:
    """A process across its starts: its plan, its state, its restart budget; its
    current start is ``worker``."""

    plan: ProcessPlan
    state: P = P.STARTING  # observed, as reconciled (reconcile.py)
    goal: Goal = Goal.RUN  # desired
    worker: Worker = field(default_factory=Worker)
    restarts: int = 0
    # The restarts counted against max_restarts: those after a drill's fault are not (the
    # fault came from outside; a drill must not end the job it measures).
    spent: int = 0
    restart_at: float | None = None
    nccl: str | None = None  # the NCCL version its library last reported (None: none, or plain)
    why: str = ""  # the last thing that happened to it, for status
    loop: int = 0  # restarts of its current crash loop (policy.crash_loop)
    retired: str | None = None  # the scale operation that retired it (never restarted)


@dataclass
class WorldRecord:
    plan: WorldPlan
    generation: int = 0
    state: W = W.FORMING
    breaks: int = 0
    reason: str | None = None
    healthy_since: float | None = None  # monotonic, when it last became HEALTHY
    opaque: str | None = None  # why mwrun cannot tell whether its plain members joined
    # The incarnation of each member, by rank, that its current generation admits
    # (protocol.py, ``admit``); generation 0 admits every first start.
    admitted: list[int] = field(default_factory=list)
    # A draining world: what it becomes once drained (its plan without the retired
    # members; None: it is removed), and when its drain ends at the latest (monotonic).
    target: WorldPlan | None = None
    drain_until: float | None = None
    # Why its drain is over, once something said so (released, its deadline, a member
    # ended, nothing to drain): marked where it is heard, ended by the reconcile.
    drained: str | None = None
    # What is wanted of it (desired: worldreconcile.py moves it there) and what was
    # marked on it since its last reconcile:
    goal: WorldGoal = WorldGoal.FORM
    drain_seconds: float = 0.0  # how long its drain may take, as asked
    lost: str | None = None  # a member of its current generation ended: why
    written: bool = False  # ... and a member wrote that break to its store itself
    resized_from: int | None = None  # a resize is asked: the size it had
    end: tuple[str, bool] | None = None  # it closes: why, and whether a member finished
    removed: str | None = None  # it is removed from the job: why

    def __post_init__(self):
        if not self.admitted:
            self.admitted = [protocol.FIRST_INCARNATION] * self.plan.size


class Book(Protocol):
    """The supervisor's records, read: what the parts that show or serve them (the status
    document, the control verbs) see of the supervisor, each adding what it asks."""

    @property
    def state(self) -> RunState: ...
    @property
    def procs(self) -> Mapping[str, ProcessRecord]: ...
    @property
    def worlds(self) -> Mapping[str, WorldRecord]: ...
