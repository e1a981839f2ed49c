"""A run's faults as its history tells them: the head's faults (head/observe/faults.py)
joined by id with every record that carries it (``joined``), or, for a history an
older mwrun wrote before faults had ids, each break matched by nearness in time
(``legacy``). Pure: records in, faults out."""

from __future__ import annotations

from dataclasses import dataclass

from mwrun.schema import FAULT_ID, FAULT_IDS, Phase
from mwrun.schema import Event as E

Worlds = dict[str, list[str]]  # name -> members
DRILL = "drill"  # a drill's signal's ``why`` in the history (head/events.py, Why.DRILL)
KILL_LEADS = 10.0  # a drill's signal this long before a break is taken as its cause


@dataclass
class Fault:
    """One fault of a world as the history tells it: the head's fault (head/faults.py)
    with its id, joined with every record that carries that id."""

    world: str
    broke: float | None  # its first break; None while it has not broken yet
    reason: str
    kill: float | None = None  # the drill's signal that caused it, if one did
    killed: str = ""  # "SIGKILL to worker-0"
    restart: float | None = None  # a member restarted for it
    end: float | None = None  # re-formed; None while down (or for good)
    outcome: str = "still down"  # re-formed | closed: REASON | still down
    breaks: int = 1
    since: float = 0.0  # when the world had formed before it broke
    phases: dict | None = None  # Phase -> head wall time or None, from its fault record
    id: int | None = None  # the head's id (None: a history written before faults had one)
    first: float = 0.0  # its first record (a signal, an exit, a break)

    def phase(self, name: Phase) -> float | None:
        value = (self.phases or {}).get(name.value)
        return float(value) if isinstance(value, int | float) else None

    @property
    def start(self) -> float:
        t_fault = self.phase(Phase.T_FAULT)
        if t_fault is not None:
            return t_fault
        return self.kill if self.kill is not None else self.first

    @property
    def back(self) -> float | None:
        """When the world was back: its first call after the re-form where the head
        timed it, else the re-form; None while down."""
        if self.end is None:
            return None
        return self.phase(Phase.FIRST_CALL) or self.end

    def downtime(self, last: float) -> float:
        return (self.back if self.back is not None else last) - self.start


def joined(events: list[dict], worlds: Worlds, start: float) -> list[Fault]:
    """The run's faults as the head numbered them (head/faults.py), each joined with
    every record that carries its id: the drill's signal, the breaks, the restart, the
    re-form, how it ended, and its phases (its ``fault`` record, once it closed)."""
    found: dict[int, Fault] = {}
    formed = {w: start for w in worlds}  # when each world last formed
    stopped = False

    def of(fault_id: int, world: str, t: float) -> Fault | None:
        if world not in worlds:
            return None
        if fault_id not in found:
            found[fault_id] = Fault(world, None, "?", breaks=0, since=formed[world],
                                    id=fault_id, first=t)
        return found[fault_id]

    for e in events:
        kind, t = e["event"], e["t"]
        stopped = stopped or kind == E.STOP
        mine = [f for w, i in (e.get(FAULT_IDS) or {}).items() if (f := of(i, w, t))]
        fault = of(e[FAULT_ID], e["world"], t) \
            if FAULT_ID in e and isinstance(e.get("world"), str) else None
        if kind == E.FORM and e["world"] in formed:
            formed[e["world"]] = t
        if kind == E.SIGNAL and e["why"] == DRILL:
            for f in mine:
                if f.kill is None:
                    f.kill, f.killed = t, f"{e['signal']} to {e['process']}"
        elif kind == E.SPAWN and e["restarts"] > 0:
            for f in mine:
                f.restart = t if f.restart is None else f.restart
        elif kind == E.FAULT and isinstance(e.get("id"), int):
            if (f := of(e["id"], e["world"], t)) is not None:
                f.phases = e["phases"]
        elif fault is None:
            continue
        elif kind == E.BREAK:
            fault.breaks += 1
            if fault.broke is None:
                fault.broke, fault.reason = t, str(e.get("reason") or "?")
        elif kind == E.FORM:
            fault.end, fault.outcome = t, "re-formed"
        elif kind in (E.CLOSE, E.REMOVE) and fault.end is None:
            fault.outcome = "not re-formed before the run stopped" if stopped \
                else f"closed for good ({e.get('reason')})"
    return sorted(found.values(), key=lambda f: f.id or 0)


def _phases(events: list[dict], found: list[Fault]) -> None:
    """A history written before faults had ids: each fault record given to the break it
    measured, the same world's fault whose break is nearest its phases."""
    for r in events:
        if r["event"] != E.FAULT or not isinstance(r.get("phases"), dict):
            continue
        phases = r["phases"]
        seen = next((phases.get(p.value) for p in (Phase.SURVIVORS_TOLD, Phase.EXIT_SEEN,
                                                    Phase.T_FAULT)
                     if isinstance(phases.get(p.value), int | float)), None)
        mine = [f for f in found if f.world == r.get("world") and f.phases is None
                and f.broke is not None]
        if seen is None or not mine:
            continue
        nearest = min(mine, key=lambda f: abs((f.broke or 0.0) - seen))
        if nearest.broke is not None and abs(nearest.broke - seen) <= KILL_LEADS:
            nearest.phases = phases


def legacy(events: list[dict], worlds: Worlds, start: float) -> list[Fault]:
    """A history written before faults had ids (an older mwrun's): each break, from the
    drill that caused it (if any) to the world's re-form, by nearness in time."""
    found = _legacy(events, worlds, start)
    _phases(events, found)
    return found


def _legacy(events: list[dict], worlds: Worlds, start: float) -> list[Fault]:
    found: list[Fault] = []
    open_: dict[str, Fault] = {}
    formed = {w: start for w in worlds}  # when each world last formed
    for e in events:
        kind, world = e["event"], e.get("world")
        if kind == E.BREAK and world in worlds:
            if world in open_:
                open_[world].breaks += 1  # broke again before it re-formed
                continue
            fault = open_[world] = Fault(world, e["t"], str(e.get("reason") or "?"),
                                         since=formed[world], first=e["t"])
            cause = _drill_before(events, worlds, world, e["t"], formed[world])
            if cause is not None:
                fault.kill, fault.killed = cause["t"], f"{cause['signal']} to {cause['process']}"
            found.append(fault)
        elif kind == E.SPAWN and e.get("restarts", 0) > 0:
            for w, fault in open_.items():
                if e["process"] in worlds[w] and fault.restart is None:
                    fault.restart = e["t"]
        elif kind == E.FORM and world in worlds:
            formed[world] = e["t"]
            if world in open_:
                fault = open_.pop(world)
                fault.end, fault.outcome = e["t"], "re-formed"
        elif kind in (E.CLOSE, E.REMOVE) and world in open_:
            stopping = any(x["event"] == E.STOP and x["t"] <= e["t"] for x in events)
            open_.pop(world).outcome = "not re-formed before the run stopped" if stopping \
                else f"closed for good ({e.get('reason')})"
    return found


def _drill_before(events: list[dict], worlds: Worlds, world: str, broke: float,
                  since: float) -> dict | None:
    drills = [e for e in events if e["event"] == E.SIGNAL and e.get("why") == DRILL
              and e.get("process") in worlds[world] and since <= e["t"] <= broke
              and broke - e["t"] <= KILL_LEADS]
    return drills[-1] if drills else None
