"""Every scale operation (``mwrun scale``, ``mwrun drain``, ``job.scale``), each of its
replicas' changes timed phase by phase (``schema.ScalePhase``), as faults.py times a
fault: a subscriber of the supervisor's events, told besides by the loop what only the
library knows (a peer has the new world in its ``job.worlds``; a world's first call).

- An addition: ``requested`` (the head took it) -> ``started`` (its process exists) ->
  ``formed`` (every world it is in formed) -> ``told`` (every peer of each world made
  for it has it: the peers' own time; for a resized world, the re-form is the telling)
  -> ``first_call`` (the first completed call in one of its worlds). It is *done* (what
  ``mwrun scale`` waits for) once told, or TOLD_WAIT after formed when a peer's library
  does not say (a plain torch script); its ``scale`` record is written once its first
  call is known, or FIRST_CALL_WAIT after it is done (null then).
- A removal: ``requested`` -> ``draining`` (its worlds turned draining, every member
  told; null when none could wait) -> ``closed`` (every world it was in closed or
  re-formed without it) -> ``exited`` (its process exited). Done, and written, then.

A change fails when its process cannot start or ends before it formed, and is
cancelled when a later operation retires it first, or the job stops. Times are wall
clock on the head's (a remote host's corrected, as for faults).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from mwrun.head.decide import events as ev
from mwrun.head.observe.opbook import OpBook
from mwrun.membership.revision import Action, Revision
from mwrun.schema import Event as E
from mwrun.schema import OpState
from mwrun.schema import ScalePhase as S

TOLD_WAIT = 5.0  # seconds after formed that a peer's word is waited for
FIRST_CALL_WAIT = 60.0  # seconds after done that a first call is waited for
KEEP = 256  # operations ended that are kept in memory (all of them are in the OpBook)
ADD, REMOVE = "add", "remove"


@dataclass
class Change:
    op: str
    process: str
    kind: str  # ADD or REMOVE
    phases: dict[S, float | None]
    waiting: set[str]  # worlds still to form (ADD) or to close (REMOVE)
    worlds: frozenset[str] = frozenset()  # every world it is in (ADD): a first call in one
    peers: dict[str, set[str]] = field(default_factory=dict)  # new world -> peers to tell
    told_at: float | None = None  # the latest peer's word so far
    outcome: str | None = None  # None: under way; "done", "failed", "cancelled"
    error: str | None = None
    done_at: float | None = None
    written: bool = False  # its record is in the history: no phase comes any more

    @property
    def done(self) -> bool:
        return self.outcome is not None

    def fields(self) -> dict:
        return {"process": self.process, "change": self.kind, "outcome": self.outcome,
                "error": self.error, "phases": {p.value: _ms(self.phases[p])
                                                for p in self.phases}}

    def view(self) -> dict:
        """What the op verb, and through it mwrun scale, shows: with whether the head
        still waits for its first call (it comes with a heartbeat, after the change
        is done), so a null first_call is not read as none."""
        return {**self.fields(), "awaits_first_call": self.kind == ADD and not self.written
                and self.outcome == "done" and self.phases[S.FIRST_CALL] is None}

    def record(self) -> dict:
        """The history's ``scale`` record."""
        return {"event": E.SCALE, "op": self.op, **self.fields()}


@dataclass
class Op:
    id: str
    request: str
    at: float
    revision: int
    changes: list[Change]

    @property
    def state(self) -> OpState:
        if any(not c.done for c in self.changes):
            return OpState.RUNNING
        return OpState.DONE if all(c.outcome == "done" for c in self.changes) \
            else OpState.FAILED

    def view(self) -> dict:
        return {"op": self.id, "request": self.request, "at": _ms(self.at),
                "revision": self.revision, "state": self.state.value,
                "changes": [c.view() for c in self.changes]}


def _ms(t: float | None) -> float | None:
    return None if t is None else round(t, 4)


class Ops:
    def __init__(self, write: Callable[[dict], None], clock: Callable[[], float],
                 say: Callable[[str], None] = lambda text: None, book: OpBook | None = None):
        self.write, self.clock, self.say = write, clock, say
        self.book = book  # every operation of the run, by id (None: the recent ones only)
        self.ops: OrderedDict[str, Op] = OrderedDict()  # those under way and the KEEP last
        self.open: dict[str, Change] = {}  # process -> its change under way (or unwritten)
        self.changes = 0  # state.json compares this
        self.begun: dict[str, int] = {}  # operation ("scale", "drain") -> how many began

    def begin(self, op: str, request: str, revision: Revision,
              worlds_of: dict[str, list[str]]) -> Op:
        """``worlds_of``: each retired process's worlds as they are now."""
        now = self.clock()
        kind = request.split(" ", 1)[0]
        self.begun[kind] = self.begun.get(kind, 0) + 1
        changes = []
        for name in revision.started:
            worlds = set(revision.plan.processes[name].worlds)
            peers = {w: set(revision.plan.worlds[w].members) - {name} for w in worlds
                     if revision.worlds.get(w) is Action.FORM}
            changes.append(Change(op, name, ADD, self._phases(now, ADD), set(worlds),
                                  frozenset(worlds), peers))
        for name in revision.retired:
                changes.append(Change(op, name, REMOVE, self._phases(now, REMOVE),
                                  set(worlds_of.get(name, ()))))
        for change in changes:
            old = self.open.get(change.process)
            if old is not None:
                if not old.done:
                    self._end(old, "cancelled", f"{op} changed {change.process} again")
                # an addition done but still waiting for its first call is written now
                # (first_call null): its record must not be lost to the new change
                self._write(old)
            self.open[change.process] = change
        self.ops[op] = found = Op(op, request, now, revision.number, changes)
        adds = [c.process for c in changes if c.kind == ADD]
        removes = [c.process for c in changes if c.kind == REMOVE]
        self.say(f"{op}: {request}: " + "; ".join(
            [f"adding {', '.join(adds)}"] * bool(adds)
            + [f"draining {', '.join(removes)}"] * bool(removes) or ["nothing to change"]))
        self._kept(found)
        self._forget()
        self.changes += 1
        return found

    def _forget(self) -> None:
        """Memory holds the operations under way or with a record still to write (at
        most one per process: a change retires the one before it) and the last KEEP
        others; the book keeps them all."""
        ended = [op for op, found in self.ops.items() if found.state is not OpState.RUNNING
                 and all(self.open.get(c.process) is not c for c in found.changes)]
        for op in ended[:max(len(ended) - KEEP, 0)]:
            del self.ops[op]

    def _kept(self, op: Op | None) -> None:
        if op is not None and self.book is not None:
            self.book.keep(op.view())

    @staticmethod
    def _phases(now: float, kind: str) -> dict[S, float | None]:
        return {S.REQUESTED: now, **{p: None for p in S if (p.adds if kind == ADD
                                                            else p.removes)}}

    def get(self, op: str) -> Op | None:
        """An operation under way or among the recent ones."""
        return self.ops.get(op)

    def view(self, op: str) -> dict | None:
        """Any operation of the run, as it stands (one the book alone keeps: as it
        stood when last written down), or None when no operation had that id."""
        found = self.ops.get(op)
        if found is not None:
            return found.view()
        return self.book.find(op) if self.book is not None else None

    # -- what the supervisor tells ------------------------------------------------------

    def __call__(self, event: ev.Event) -> None:
        match event:
            case ev.Spawned(process, at=at):
                self._phase(process, ADD, S.STARTED, at)
            case ev.Exited(process, pid, why=why):
                change = self.open.get(process)
                if change is not None and change.kind == ADD and change.phases[S.FORMED] is None:
                    self._end(change, "failed", why if pid is None else f"{why} before it"
                              " formed")
            case ev.Retired(process, op):
                change = self.open.get(process)
                if change is not None and change.kind == ADD and not change.done:
                    self._end(change, "cancelled", f"retired by {op} before it formed")
            case ev.WorldFormed(world):
                for change in self._waiting(world, ADD):
                    change.waiting.discard(world)
                    if not change.waiting:
                        self._phase(change.process, ADD, S.FORMED, None)
                        self._told(change)
            case ev.WorldDraining(world):
                for change in self._waiting(world, REMOVE):
                    self._phase(change.process, REMOVE, S.DRAINING, None)
            case ev.WorldRemoved(world) | ev.WorldResized(world):
                members = getattr(event, "members", ())
                for change in self._waiting(world, REMOVE):
                    if change.process not in members:
                        change.waiting.discard(world)
                        if not change.waiting:
                            self._phase(change.process, REMOVE, S.CLOSED, None)
            case ev.Gone(process):
                change = self.open.get(process)
                if change is not None and change.kind == REMOVE:
                    if not change.waiting and change.phases[S.CLOSED] is None:
                        self._phase(process, REMOVE, S.CLOSED, None)
                    self._phase(process, REMOVE, S.EXITED, None)
                    self._end(change, "done")
            case ev.Stopping() | ev.RunEnded():
                for change in list(self.open.values()):
                    if not change.done:
                        self._end(change, "cancelled", "the job stopped")
                    self._write(change)

    def _waiting(self, world: str, kind: str) -> list[Change]:
        return [c for c in self.open.values() if c.kind == kind and world in c.waiting]

    def _phase(self, process: str, kind: str, phase: S, at: float | None) -> None:
        change = self.open.get(process)
        if change is not None and change.kind == kind and change.phases[phase] is None:
            change.phases[phase] = self.clock() if at is None else at
            self.changes += 1

    # -- what the library tells (through the loop) ----------------------------------------

    def added(self, world: str, process: str, at: float) -> None:
        """``process`` has ``world`` (made for a new replica) in its job.worlds since ``at``."""
        for change in self.open.values():
            if change.kind == ADD and process in change.peers.get(world, ()):
                change.peers[world].discard(process)
                change.told_at = max(change.told_at or at, at)
                self._told(change)

    def first_call(self, world: str, at: float) -> None:
        for change in list(self.open.values()):
            if change.kind == ADD and world in change.worlds \
                    and change.phases[S.FORMED] is not None \
                    and change.phases[S.FIRST_CALL] is None:
                change.phases[S.FIRST_CALL] = at
                self._write(change)

    def _told(self, change: Change) -> None:
        formed = change.phases[S.FORMED]
        if formed is None or any(change.peers.values()) or change.done:
            return
        change.phases[S.TOLD] = max(change.told_at or formed, formed)
        self._end(change, "done")

    def tick(self) -> None:
        """A peer that never says, a first call that never comes: waited for no longer."""
        now = self.clock()
        for change in list(self.open.values()):
            formed = change.phases.get(S.FORMED)
            if not change.done and formed is not None and now - formed >= TOLD_WAIT:
                self._end(change, "done")
            elif change.done and change.done_at is not None \
                    and now - change.done_at >= FIRST_CALL_WAIT:
                self._write(change)

    def _end(self, change: Change, outcome: str, error: str | None = None) -> None:
        change.outcome, change.error, change.done_at = outcome, error, self.clock()
        self.changes += 1
        op = self.ops.get(change.op)
        if op is not None and op.state is not OpState.RUNNING:
            self._kept(op)
        at = change.phases[S.REQUESTED] or 0.0
        took = ", ".join(f"{p.value} +{(t - at) * 1000:.0f} ms" for p, t in
                         change.phases.items() if p is not S.REQUESTED and t is not None)
        what = ("joined" if change.kind == ADD else "retired") if outcome == "done" \
            else f"{change.kind} {outcome}: {error}"
        self.say(f"{change.process} {what} ({change.op}{'; ' + took if took else ''})")
        if outcome != "done" or change.kind == REMOVE:
            self._write(change)

    def _write(self, change: Change) -> None:
        if self.open.get(change.process) is change:
            del self.open[change.process]
            change.written = True
            self.write(change.record())
            self._kept(self.ops.get(change.op))
