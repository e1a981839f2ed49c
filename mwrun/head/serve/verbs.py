"""The operator's verbs (``mwrun status``, ``stop``, ``kill-world``, ``drill``, ``scale``,
``drain``, ``stacks``, and what ``launch --detach`` waits on): each a method whose
docstring is its protocol, translating a request into calls on the supervisor and
reads of the observers (control.py lists them all)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mwrun.head.decide.drills import Drills
from mwrun.head.decide.records import Book
from mwrun.head.observe.history import History
from mwrun.head.observe.progress import Progress, view
from mwrun.head.postmortem.stacks import MAX_ASKS, UNREAD, Stacks, select
from mwrun.head.serve.elastic import Elastic
from mwrun.protocol import LATE_DELAY, LATE_FOR, SLOW
from mwrun.runs import signal_number


class Supervising(Book, Protocol):
    """The supervisor (decide/supervisor.py) as the operator's verbs see it: exactly
    what they read of it and ask of it."""

    drills: Drills

    @property
    def stopping(self) -> bool: ...
    def request_stop(self, reason: str = ...) -> None: ...


class Grace(Protocol):
    """The supervisor's stop under way (decide/stopping.py's ``Stopping``)."""

    def grace_left(self, now: float) -> float | None: ...


class Verbs:
    def __init__(self, supervisor: Supervising, stop: Grace, progress: Progress,
                 history: History, elastic: Elastic, stacks: Stacks,
                 document: Callable[[bool], dict], now: Callable[[], float]):
        self.supervisor, self.grace, self.progress = supervisor, stop, progress
        self.history, self.elastic, self.asks = history, elastic, stacks
        self.document = document  # the status document, its usage read afresh or not
        self.now = now  # the head's monotonic clock (the supervisor's)

    def status(self, request: dict) -> dict:
        """status -> the status document of the run."""
        return {"ok": True, "status": self.document(True)}

    def bringup(self, request: dict) -> dict:
        """bringup -> the worlds not formed yet since launch, and who failed before."""
        sup = self.supervisor
        return {"ok": True, "state": sup.state.value,
                **view(self.progress.unformed, sup.procs, sup.worlds, self.now())}

    def kill_world(self, request: dict) -> dict:
        """kill_world {world, rank: int|null, signal: name|number (KILL), delay?, for?} ->
        who was signalled; signal SLOW makes one member ``delay`` seconds late to every
        call for ``for`` seconds instead (drills.make_late)."""
        world = request.get("world")
        rank = request.get("rank")
        if not isinstance(world, str) or (rank is not None and not isinstance(rank, int)):
            return {"ok": False, "error": "kill_world needs a world name and an optional rank"}
        try:
            if str(request.get("signal", "")).upper() == SLOW:
                return {"ok": True, "signalled": [self.supervisor.drills.make_late(
                    world, rank, request.get("delay", LATE_DELAY),
                    request.get("for", LATE_FOR))]}
            sig = signal_number(request.get("signal", "KILL"))
            return {"ok": True, "signalled": self.supervisor.drills.kill_world(world, rank, sig)}
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}

    def stop(self, request: dict) -> dict:
        """stop {force?} -> the run begins a clean stop; with force, SIGKILL at once. Asked
        again while it stops without force -> {"already": true, "grace_left": seconds until
        SIGKILL, or null once sent}, and nothing more is done: a second user's stop must
        not cut the first one's grace (checkpoints being saved) without saying so."""
        sup, force = self.supervisor, request.get("force") is True
        if sup.stopping and not force:
            return {"ok": True, "already": True, "grace_left": self.grace.grace_left(self.now())}
        if not sup.stopping:
            sup.request_stop("stop requested by mwrun stop")
        if force:
            sup.request_stop("mwrun stop --force")  # asked again (decide/stopping.py): SIGKILL now
        return {"ok": True}

    def drill(self, request: dict) -> dict:
        """drill {summary: object} -> the summary written to the history."""
        self.history.drill(request["summary"])
        return {"ok": True}

    def scale(self, request: dict) -> dict:
        """scale {changes: [PROCESS=N|+K|-K], op?} -> the operation (the library's own
        scale, with ``process``, is ``library.Library.scale``)."""
        return self.elastic.scale(list(request["changes"]), request.get("op"))

    def drain(self, request: dict) -> dict:
        """drain {replicas: [PROCESS-I], op?} -> the operation (the replicas drained)."""
        return self.elastic.drain(list(request["replicas"]), request.get("op"))

    def op(self, request: dict) -> dict:
        """op {op} -> that scale operation as it stands."""
        return self.elastic.op(request["op"])

    def stacks(self, request: dict) -> dict:
        """stacks {processes?, world?} -> the ask: who was asked, who cannot be, and why."""
        sup = self.supervisor
        worlds = {name: list(w.plan.members) for name, w in sup.worlds.items()}
        try:
            names = select(sup.procs, worlds, request.get("world"),
                           request.get("processes", []))
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        found = self.asks.ask(sup.procs[n] for n in names)
        if found is None:
            return {"ok": False, "error": f"{MAX_ASKS} stacks asks are being read now, the"
                                         " most the supervisor keeps; nothing was asked: try"
                                         " again in a moment"}
        return {"ok": True, **found}

    def stacks_result(self, request: dict) -> dict:
        """stacks_result {id} -> that ask, with what each member told so far."""
        found = self.asks.result(request["id"])
        if found is None:
            return {"ok": False, "error": f"no stacks ask {request['id']!r} (too old: an"
                                          f" ask goes once unread for {UNREAD:g}s)"}
        return {"ok": True, **found}
