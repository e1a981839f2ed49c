"""What a drill counts outside its faults, from the status documents it reads while
it runs: per world *life* (a world name made again after a removal is another world),
whether the drill faulted it; for those it did not, their members' failed calls and
their breaks. Pure: documents in (``Ledger.see``), counts out (``Ledger.result``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

STALE = 0.5  # seconds of slack on a last call's age (the document is built a little later)


@dataclass
class Life:
    """One world as the drill saw it: a name made again after a removal (a scale-down
    then up) is another life, with its own counts."""

    world: str
    number: int  # 0: the first life of this name the drill saw; 1 the next...
    since: float | None  # when the drill first saw it; None: there when the drill began
    port: int | None
    generation: int
    breaks_before: int  # its breaks when the drill began (0 for a life made during it)
    breaks: int  # as last seen
    after: float | None = None  # made after this (the look before, where it was not)
    faulted: bool = False
    # (process, pid) -> [failures before, failures as last seen, failures carried]
    members: dict[tuple[str, int | None], list[int]] = field(default_factory=dict)

    @property
    def failed_calls(self) -> int:
        return sum(m[2] + m[1] - m[0] for m in self.members.values())

    @property
    def name(self) -> str:
        if self.since is None or self.number == 0:
            return self.world
        made = time.strftime("%H:%M:%S", time.localtime(self.since))
        return f"{self.world} (made again at {made})"


class Ledger:
    """The drill's reading of the status documents while it runs: each world's lives,
    which of them it faulted, and per life its breaks and its members' failed calls
    since the drill began (``failures`` in each process's ``traffic``: counted by the
    members themselves, reported with their heartbeats).

    A life is new when its name was not in the document before, or comes back with
    another port (a new world gets its own store), a lower generation or fewer breaks.
    A member's count that goes back is a new world object of the same name in the same
    process: what it had counted stays, the new one counts from 0. A member first seen
    after the first look (a restart, a new replica) counts from 0: it began during the
    drill. One exception: a process that had a world of the same name before (the
    same pid) shows that one's counts in the new life until its next heartbeat
    (head/traffic.py keeps them per process and world name): a count whose last call
    is older than the life itself is that, and counts from where it stands."""

    def __init__(self):
        self.lives: list[Life] = []
        self.now: dict[str, Life] = {}  # world -> its life in the latest document
        self.at: float | None = None  # when the latest document was read
        self.looks = 0

    def see(self, doc: dict, t: float) -> None:
        first = self.looks == 0
        self.looks += 1
        seen: dict[str, Life] = {}
        for w in doc["worlds"]:
            name, breaks, generation = w["name"], int(w["breaks"]), int(w["generation"])
            life = self.now.get(name)
            if life is None or life.port != w.get("port") or generation < life.generation \
                    or breaks < life.breaks:
                life = Life(name, sum(1 for x in self.lives if x.world == name),
                            None if first else t, w.get("port"), generation,
                            breaks if first else 0, breaks, None if first else self.at)
                self.lives.append(life)
            life.generation, life.breaks = generation, breaks
            seen[name] = life
        self.now, self.at = seen, t
        for p in doc["processes"]:
            for world, traffic in (p.get("traffic") or {}).items():
                life = seen.get(world)
                failures = traffic.get("failures") if isinstance(traffic, dict) else None
                if life is None or not isinstance(failures, int):
                    continue
                counts = life.members.get((p["name"], p.get("pid")))
                if counts is None:
                    age = traffic.get("last_call_age_s")
                    stale = life.after is not None and isinstance(age, int | float) \
                        and age > t - life.after + STALE
                    life.members[(p["name"], p.get("pid"))] = [
                        failures if first or stale else 0, failures, 0]
                    continue
                if failures < counts[1]:  # another world object of this name: from 0
                    counts[2] += counts[1] - counts[0]
                    counts[0] = 0
                counts[1] = failures

    def fault(self, world: str) -> int | None:
        """The drill signalled a member of ``world``: its life now is faulted. Its
        breaks so far (a break after them is the fault's), None if not seen."""
        life = self.now.get(world)
        if life is None:
            return None
        life.faulted = True
        return life.breaks

    def result(self) -> dict:
        """What the record keeps: over the lives the drill did not fault, their failed
        calls and breaks (and where there were any)."""
        quiet = [x for x in self.lives if not x.faulted]
        where = [f"{x.name}: {x.failed_calls} failed call(s), {x.breaks - x.breaks_before}"
                 " break(s)" for x in quiet if x.failed_calls or x.breaks > x.breaks_before]
        return {"looks": self.looks, "worlds": len(quiet),
                "faulted_worlds": len(self.lives) - len(quiet),
                "failed_calls": sum(x.failed_calls for x in quiet) if self.looks else None,
                "breaks": sum(x.breaks - x.breaks_before for x in quiet)
                if self.looks else None, "where": where}
