"""``mwrun stacks``, the head's part: which members are asked, the ask sent down each
one's link (downlink.py: ``{"verb": "stacks", "id"}``), and what each library tells
back (``stacks_told``: its threads, worlds/stacks.py) kept until the asker reads it.

The head never waits for an answer: the command line reads the ask again
(``stacks_result``) until every member answered or its own deadline passed, and names
those that did not. A member that cannot be asked at all (not running, no library:
a plain torch script, or one that left its worlds) is named at once with the reason.

Asks are kept while their askers read them: however many ask at once, each is
answered; one unread for UNREAD seconds goes. At most MAX_ASKS of the command line's
are kept at once (a bound on the head's memory): one more is refused, saying so, never
one dropped under its asker. A bundle's asks (``start``, before a hang kill) are kept
for the bundle until ``done`` and never count among the command line's.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from mwrun.head.decide.records import ProcessRecord
from mwrun.protocol import Verb

UNREAD = 30.0  # seconds an ask is kept after its asker last read it (mwrun stacks: 2 s)
MAX_ASKS = 64  # the command line's asks kept at once


def select(procs: Mapping[str, ProcessRecord], worlds: Mapping[str, Iterable[str]],
           world: str | None, names: Iterable[str]) -> list[str]:
    """The members asked: a world's, the processes named, or else every process;
    ValueError naming what exists when a name is unknown."""
    names = list(names)
    if world is not None and names:
        raise ValueError("name a world or processes, not both")
    if world is not None:
        if world not in worlds:
            raise ValueError(f"no world {world!r}; worlds: {', '.join(sorted(worlds))}")
        return list(worlds[world])
    unknown = [n for n in names if n not in procs]
    if unknown:
        raise ValueError(f"no process {unknown[0]!r}; processes: {', '.join(sorted(procs))}")
    return list(dict.fromkeys(names)) or sorted(procs)


def unaskable(rec: ProcessRecord) -> str | None:
    """Why a process's library cannot be asked now, or None when it can (on a remote
    host too: its agent relays the ask down and the answer up, host/relay.py)."""
    if not rec.state.alive or rec.worker.pid is None:
        return f"not running (it is {rec.state.value})"
    if not rec.worker.said_hello:
        return ("no library: it never spoke to its supervisor (a plain torch script,"
                " or one that has not called mwrun.init() yet)")
    if rec.worker.beat_every is None:  # its bye (members.on_bye): its link is closed
        return "its library has left its worlds (job.close()) and no longer listens"
    return None


@dataclass
class Member:
    process: str
    pid: int | None
    host: str
    state: str
    reason: str | None = None  # why it was not asked
    told: dict | None = None  # what its library said (threads), once it answered

    def fields(self) -> dict:
        return {"process": self.process, "pid": self.pid, "host": self.host,
                "state": self.state, "reason": self.reason,
                "answered": self.told is not None, **(self.told or {})}


@dataclass
class Ask:
    id: str
    at: float  # the head's monotonic clock when asked
    members: dict[str, Member] = field(default_factory=dict)
    read_at: float = 0.0  # when its asker last read it
    bundle: bool = False  # a bundle's (``start``): not among the command line's MAX_ASKS

    def fields(self, now: float) -> dict:
        waiting = [m.process for m in self.members.values()
                   if m.reason is None and m.told is None]
        return {"id": self.id, "age_s": round(now - self.at, 3), "waiting": waiting,
                "members": [m.fields() for m in self.members.values()]}


class Stacks:
    def __init__(self, tell: Callable[[str, dict], None], now: Callable[[], float],
                 new_id: Callable[[], str] = lambda: uuid.uuid4().hex):
        self.tell, self.now, self.new_id = tell, now, new_id  # tell: downlink.tell
        self.asks: collections.OrderedDict[str, Ask] = collections.OrderedDict()
        self.live: dict[str, Ask] = {}  # asks a bundle still waits on (``start``)

    def ask(self, recs: Iterable[ProcessRecord]) -> dict | None:
        """Ask each member that can answer; the ask as it stands (``Ask.fields``), or
        None when MAX_ASKS are being read already (nothing was asked)."""
        self._prune()
        if sum(1 for a in self.asks.values() if not a.bundle) >= MAX_ASKS:
            return None
        return self._ask(recs).fields(self.now())

    def start(self, recs: Iterable[ProcessRecord]) -> Ask:
        """The ask itself, for an asker that reads it as it fills (a bundle), kept
        apart from the command line's asks until ``done``; it asks for torch's Flight
        Recorder too (worlds/flight.py)."""
        self._prune()
        ask = self._ask(recs, bundle=True)
        self.live[ask.id] = ask
        return ask

    def _prune(self) -> None:
        now = self.now()
        for rid in [rid for rid, a in self.asks.items() if now - a.read_at > UNREAD]:
            del self.asks[rid]  # its asker has gone (a bundle's: it has its own, in live)

    def _ask(self, recs: Iterable[ProcessRecord], bundle: bool = False) -> Ask:
        now = self.now()
        ask = Ask(self.new_id(), now, read_at=now, bundle=bundle)
        order = {"verb": Verb.STACKS, "id": ask.id, **({"flight": True} if bundle else {})}
        for rec in recs:
            reason = unaskable(rec)
            ask.members[rec.plan.name] = Member(rec.plan.name, rec.worker.pid, rec.plan.host,
                                                rec.state.value, reason)
            if reason is None:
                self.tell(rec.plan.name, order)
        self.asks[ask.id] = ask
        return ask

    def done(self, ask: Ask) -> None:
        """Its asker has what it waited for: later answers to it are dropped."""
        self.live.pop(ask.id, None)

    def told(self, rid: str, process: str, pid: int, threads: list,
             error: str | None = None, flight: dict | None = None,
             trimmed: str | None = None) -> None:
        """A library's answer (``error``: why it could not read its stacks; ``trimmed``:
        what it left out to fit one line); one for an ask no longer kept, or from
        another start of the process than the one asked, is dropped."""
        ask = self.asks.get(rid) or self.live.get(rid)
        if ask is None:
            return
        member = ask.members.get(process)
        if member is not None and member.pid == pid and member.reason is None:
            member.told = {"threads": threads, "error": error,
                           "told_after_s": round(self.now() - ask.at, 3)}
            if flight is not None:
                member.told["flight_recorder"] = flight
            if trimmed:
                member.told["trimmed"] = trimmed

    def result(self, rid: str) -> dict | None:
        ask = self.asks.get(rid)
        if ask is None:
            return None
        ask.read_at = self.now()
        return ask.fields(ask.read_at)
