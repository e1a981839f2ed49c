"""The one place a process's state moves: its desired state (``ProcessRecord.goal``: set
by the plan and its revisions, the stop and the restart policy) and what was seen of
its current start (``ProcessRecord.worker``: made, joined, late, hung, ended) are
reconciled into its observed state, and each move is told as the event it is.

Whoever learns something of a process (an exit, a beat, a hang, a retirement, a stop)
marks it on the record and asks for a reconcile; nothing else calls ``Processes.move``
(tests/unit/test_layout.py holds that). The reconcile is level-triggered, like a
Kubernetes controller's: it compares, moves until the state is what the goal and the
facts say, and asking twice does nothing more. ``target`` is the pure rule.
"""

from __future__ import annotations

from collections.abc import Callable

from mwrun.head.decide import events as ev
from mwrun.head.decide.events import Event
from mwrun.head.decide.processbook import Processes
from mwrun.head.decide.records import ProcessRecord
from mwrun.schema import Goal
from mwrun.schema import ProcessState as P


def target(rec: ProcessRecord, joined: bool) -> P:
    """The state ``rec`` should be in, one move from where it is (``joined``: it joined
    every world it is in). The state it is in is observed too: it tells a start that
    ends now from one that ended before its goal changed (or was never made)."""
    state, goal, worker = rec.state, rec.goal, rec.worker
    if state.final:
        return state
    if worker.abandoned:  # outlived SIGKILL: left running, a failed job
        return P.FAILED
    if worker.made and worker.exit is None:
        return _live(rec, joined)
    if state is P.STARTING and not worker.made:  # its first start is not made yet
        return state
    code = None if worker.exit is None else worker.exit.code
    if goal is Goal.RUN:
        return P.RESTARTING  # started again after its backoff (restarts.py)
    if goal is Goal.RETIRE:
        return P.EXITED  # it leaves the job (reshaping.py forgets it)
    if state is P.RESTARTING:  # it ended before (or never started): cancelled, given up
        if goal is Goal.STOP:
            return P.STOPPED
        return P.EXITED if code == 0 else P.FAILED
    if goal is Goal.STOP:  # it ends while the job stops
        return P.EXITED if code == 0 else P.STOPPED
    exit = worker.exit
    return P.EXITED if exit is not None and exit.clean else P.FAILED


def _live(rec: ProcessRecord, joined: bool) -> P:
    """A start that is made and has not ended."""
    state, worker = rec.state, rec.worker
    if state is P.RESTARTING:  # its next start was made
        return P.STARTING
    if rec.goal is Goal.RETIRE and state is not P.HUNG:
        return P.DRAINING
    if worker.hung is not None and state in (P.STARTING, P.RUNNING, P.UNRESPONSIVE):
        return P.HUNG
    if state is P.STARTING:
        return P.RUNNING if joined else P.STARTING
    if state is P.RUNNING and worker.late is not None:
        return P.UNRESPONSIVE
    if state is P.UNRESPONSIVE and worker.late is None:
        return P.RUNNING
    return state


class ProcessReconciler:
    """Moves processes to their ``target`` and tells each move (and each start, once)."""

    def __init__(self, processes: Processes, joined: Callable[[ProcessRecord], bool]):
        self.processes = processes
        self.joined = joined  # it joined every one of its worlds (the world book says)

    def reconcile(self, rec: ProcessRecord) -> P | None:
        """Move ``rec`` until it is where its goal and its facts say; the last state it
        moved to, or None if it was there already."""
        moved = None
        self._told_start(rec)
        while True:
            state = target(rec, rec.state is P.STARTING and self.joined(rec))
            if state is rec.state:
                return moved
            old = rec.state
            self.processes.move(rec, state)
            moved = state
            self._tell(rec, old)

    def _told_start(self, rec: ProcessRecord) -> None:
        """A start made is told once, as the move to STARTING is (a first start is
        STARTING before it is made, and stays so)."""
        worker = rec.worker
        if rec.state is P.STARTING and worker.made and worker.exit is None \
                and not worker.told_start:  # no move to tell it: told here
            self._emit(self._started(rec))

    def _started(self, rec: ProcessRecord) -> Event:
        worker, name = rec.worker, rec.plan.name
        worker.told_start = True
        return ev.Spawned(name, worker.pid, rec.restarts, start=worker.start) \
            if worker.pid is not None \
            else ev.ProcessChanged(name, P.STARTING, rec.why)  # its pid comes later

    def _tell(self, rec: ProcessRecord, old: P) -> None:
        name, worker, state = rec.plan.name, rec.worker, rec.state
        if state is P.STARTING:
            event: Event = self._started(rec)
        elif worker.abandoned and state is P.FAILED:
            event = ev.Abandoned(name, worker.pid, rec.why)
        elif worker.exit is not None and not worker.told_end:
            worker.told_end = True
            exit = worker.exit
            event = ev.Exited(name, worker.ended_pid, exit.code, state, rec.why,
                              worker.ended_at, bool(exit.lost))
        elif state is P.HUNG:
            event = ev.Hung(name, worker.hung or "")
        else:
            if state is P.RUNNING and old is P.STARTING:
                worker.joined_at = self.processes.host.now()
            elif state is P.UNRESPONSIVE:
                rec.why = f"{name} is unresponsive ({worker.late})"
            elif state is P.RUNNING and old is P.UNRESPONSIVE:
                rec.why = f"{name} responds again"
            event = ev.ProcessChanged(name, state, rec.why)
        self._emit(event)

    def _emit(self, event: Event) -> None:
        self.processes.emit(event)
