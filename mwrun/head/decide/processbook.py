"""The processes' part of the supervisor's decisions: each process's record and its own
state machine (schema.ProcessState), driven by the supervisor; each start (a new
Worker) and signal. What its beats say, and hang detection, are beats.py's.

It writes only process records (the worlds are worldbook's); it acts on processes
through the supervisor's host and tells each change as an event. A process that
leaves the job (a retired replica) is forgotten; one added later under the same name
goes on counting incarnations where the last one stopped (fencing never meets the
same number twice).
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple, Protocol

from mwrun.errors import StartError
from mwrun.head.decide import events as ev
from mwrun.head.decide.deadlines import Timer, Timers, next_on_grid
from mwrun.head.decide.events import Event, Why
from mwrun.head.decide.moves import checked
from mwrun.head.decide.records import ProcessRecord, Worker
from mwrun.plan.placement import ProcessPlan
from mwrun.schema import PROCESS_MOVES, Start
from mwrun.schema import ProcessState as P

TICK = 0.5  # seconds between the awake clock's readings, and looks at a silent process
LOOKED = (P.STARTING, P.RUNNING, P.UNRESPONSIVE)  # whose silence is judged (hangs.py)


class Made(NamedTuple):
    """A start its host made: its pid and how (warm, cold); both None when its host
    answers later (a remote host, a zygote still importing: ``Supervisor.on_spawned``)."""

    pid: int | None
    start: Start | None


class Hands(Protocol):
    """What the processes' part acts through (the supervisor's host)."""

    def now(self) -> float: ...
    def wall(self) -> float: ...
    def spawn(self, name: str, generations: dict[str, int], restarts: int,
              incarnation: int) -> Made: ...
    def signal(self, name: str, sig: int, why: Why) -> None: ...
    def probe(self, name: str) -> str | None: ...


class Processes:
    def __init__(self, plans: dict[str, ProcessPlan], host: Hands,
                 emit: Callable[[Event], None], timers: Timers):
        self.host, self.emit = host, emit
        # The head's one heap: (RESTART, name) its restart, (LOOK, name) when its
        # silence is next judged (beats.py), (HANG_KILL, name) its hang kill.
        self.timers = timers
        self.records = {name: ProcessRecord(p) for name, p in plans.items()}
        # Processes per state, kept by move: "is anything left?" costs the same at 10
        # processes as at 1,000.
        self.tally: Counter = Counter({P.STARTING: len(self.records)})
        self.incarnations: dict[str, int] = {}  # name -> starts made, across its records
        # Started and not heard from yet (no hello): whose worlds' stores the loop looks
        # into for a plain group, without a look at every world on every tick.
        self.unheard: set[str] = set(self.records)

    def say(self, text: str) -> None:
        self.emit(ev.Said(text))

    def move(self, rec: ProcessRecord, state: P) -> None:
        """Every change of a process's state goes here, checked against its machine;
        the tally follows it. Called by the reconcile alone (reconcile.py)."""
        old = rec.state
        rec.state = checked(PROCESS_MOVES, f"process {rec.plan.name}", old, state)
        self.tally[old] -= 1
        self.tally[state] += 1

    def add(self, plan: ProcessPlan) -> ProcessRecord:
        """A process that joins the job: to be started (RESTARTING is expected and not
        alive: its worlds admit its next start, not a start it never made)."""
        rec = ProcessRecord(plan, state=P.RESTARTING,
                            worker=Worker(incarnation=self.incarnations.get(plan.name, 0)))
        self.records[plan.name] = rec
        self.tally[P.RESTARTING] += 1
        return rec

    def forget(self, name: str) -> None:
        rec = self.records.pop(name)
        self.tally[rec.state] -= 1
        self.unheard.discard(name)
        for kind in (Timer.RESTART, Timer.LOOK, Timer.HANG_KILL):
            self.timers.clear((kind, name))

    def spawn(self, rec: ProcessRecord, generations: dict[str, int]) -> str | None:
        """Start ``rec`` (again): its new Worker, to be reconciled (reconcile.py moves
        it to STARTING and tells the start); why it could not, or None."""
        name = rec.plan.name
        now = self.host.now()
        try:
            made = self.host.spawn(name, generations, rec.restarts, rec.worker.incarnation + 1)
        except StartError as exc:
            # A start tried and not made: a Worker of its own that ends at once, under
            # the number it had (no process ever had the next one).
            rec.worker = Worker(rec.worker.incarnation, now, self.host.wall(), generations)
            return str(exc)
        # A new start is a new Worker: nothing of the last one's is carried, or reset.
        rec.worker = Worker(rec.worker.incarnation + 1, now, self.host.wall(), generations,
                            *made)
        rec.restart_at = None
        self.incarnations[name] = rec.worker.incarnation
        self.unheard.add(name)
        self.timers.clear((Timer.RESTART, name))
        self.timers.clear((Timer.HANG_KILL, name))
        self.timers.set((Timer.LOOK, name), next_on_grid(now, TICK))
        return None

    def adopted(self, name: str, incarnation: int) -> None:
        """A start a new head found running (adoption.py): watched as one it made."""
        self.incarnations[name] = incarnation
        self.unheard.add(name)
        self.timers.set((Timer.LOOK, name), next_on_grid(self.host.now(), TICK))

    def signal(self, name: str, sig: int, why: Why) -> None:
        self.host.signal(name, sig, why)
        self.records[name].worker.drilled |= why is Why.DRILL
        self.emit(ev.Signalled(name, signal.Signals(sig), why))

    # -- what the library tells of one process -----------------------------------------

    def awaits_pid(self, name: object) -> bool:
        """Whether ``name``'s start is made and its pid not told yet (a warm start, here
        or on an agent's host): what it says meanwhile is held (early.py)."""
        rec = self.records.get(name) if isinstance(name, str) else None
        return rec is not None and rec.state is P.STARTING and rec.worker.pid is None

    def live(self, name: str, pid: int) -> ProcessRecord | None:
        """The record of process ``name`` if ``pid`` is its current start (a message from
        an earlier incarnation, or a forgotten process, is none)."""
        rec = self.records.get(name)
        return rec if rec is not None and rec.worker.pid == pid else None


