"""``mwrun drill --scale``, its pure parts: the drill against an elastic job, whose
worlds and members come and go under it (drill.py has the drill itself: schedule,
matching, summary; drilling.py runs it).

- Whom a fault may hit (``live_targets``), read from the status document when the
  fault is due: a member in no other world, in a healthy world, never a leader (a
  process that shares worlds with a scaled process's replicas: its worlds come and
  go), never a member being retired, nor one a scale operation of the drill's is
  moving; ``choose`` turns the schedule's draw into one of them.
- What count a scale operation asks (``pick_count``): by its draw, among MIN..MAX
  other than the desired count, and never one that would retire a replica that is
  not serving now (down from a fault: its recovery could never be seen).
- What the drill counts outside its faults (``Ledger``): per world *life* (a world
  name made again after a removal is another world), whether the drill faulted it;
  for those it did not, their members' failed calls and their breaks.
- The scale operations in the record (``scale_summary``, ``scale_lines``), and the
  worlds whose membership changed (``reshaped``: left out of the pace figures).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mwrun.cli import pace as pc
from mwrun.cli.timeline import Timeline, scale_text
from mwrun.errors import UsageError
from mwrun.schema import Event as E
from mwrun.schema import OpState, ProcessState, ScalePhase, WorldState

MIX = 0.5  # with --scale: the share of the schedule's events that are scale operations
# States in which a process is never hit: on its way out (a drain), or gone.
LEAVING = (ProcessState.DRAINING.value, ProcessState.EXITED.value, ProcessState.STOPPED.value)
STALE = 0.5  # seconds of slack on a last call's age (the document is built a little later)
GOING = (WorldState.DRAINING.value, WorldState.CLOSED.value)  # worlds on their way out
RESHAPED = (E.ADD, E.RESIZE, E.DRAIN, E.REMOVE)  # a world's membership changed


@dataclass(frozen=True)
class Scaling:
    """``--scale PROCESS:MIN-MAX``: the counts the drill may give PROCESS."""

    process: str
    low: int
    high: int

    def __str__(self) -> str:
        return f"{self.process}:{self.low}-{self.high}"


@dataclass(frozen=True)
class Move:
    """One scale operation of the schedule: ``at`` seconds after the drill starts,
    give ``process`` a count within ``low..high`` (which one: ``draw``, see
    ``pick_count``)."""

    at: float
    process: str
    low: int
    high: int
    draw: float



def leaders(doc: dict) -> set[str]:
    """The processes that share a world with a replica of a scaled process without
    being one (a serving frontend): their worlds come and go with the scale, so they
    are shared even at a moment they are in one world only, and never hit."""
    scaled = set(doc.get("scale") or {})
    replicas = {p["name"] for p in doc["processes"] if p.get("replica_of") in scaled}
    found = set()
    for w in doc["worlds"]:
        if replicas & set(w["members"]):
            found |= set(w["members"]) - replicas
    return found



def parse_scales(texts: list[str] | tuple[str, ...]) -> list[Scaling]:
    """``--scale PROCESS:MIN-MAX`` options, by their form only (``check_scales`` holds
    them against the run); UsageError for a malformed one or a process given twice."""
    found: list[Scaling] = []
    for text in texts:
        process, _, counts = text.rpartition(":")
        low, _, high = counts.partition("-")
        if not process or not low.isdigit() or not high.isdigit():
            raise UsageError(f"--scale takes PROCESS:MIN-MAX (like worker:1-8), not {text!r}")
        if int(low) >= int(high):
            raise UsageError(f"--scale {text}: MIN must be less than MAX (the drill moves"
                             " the count between them)")
        if any(s.process == process for s in found):
            raise UsageError(f"--scale names {process} twice")
        found.append(Scaling(process, int(low), int(high)))
    return found


def check_scales(doc: dict, scales: list[Scaling]) -> None:
    """Each --scale against the run: a process with ``scale:`` in its topology, MIN-MAX
    within its bounds; UsageError naming the bounds otherwise."""
    bounds = {p: (s["min"], s["max"]) for p, s in (doc.get("scale") or {}).items()}
    for scale in scales:
        if scale.process not in bounds:
            has = ", ".join(f"{p} ({lo}-{hi})" for p, (lo, hi) in bounds.items())
            known = any(p["name"] == scale.process or p.get("replica_of") == scale.process
                        for p in doc["processes"])
            why = "has no 'scale:' in its topology" if known else "is no process of the run"
            raise UsageError(f"--scale {scale}: {scale.process} {why}; the run's scaled"
                             f" processes: {has or 'none'}")
        low, high = bounds[scale.process]
        if scale.low < low or scale.high > high:
            raise UsageError(f"--scale {scale}: {scale.process} scales within {low}-{high}"
                             " (its scale: in the topology); give MIN-MAX within that")


def live_targets(doc: dict, only: list[str] | None,
                 busy: set[str] | frozenset[str] = frozenset(),
                 down: set[str] | frozenset[str] = frozenset()) -> dict[str, list[tuple[str, int]]]:
    """world -> its members that may be hit now, as (process, rank): as ``targets``
    (members in no other world, no leader), only in a world that is healthy now and
    not in ``down`` (just hit, its break not seen yet): never one on its way out
    (draining, closed), nor one still forming or re-forming, so each fault is an
    outage of its own; never a member being retired, nor one of ``busy`` (a scale
    operation of the drill's is adding or retiring it). Empty when there is none."""
    procs = {p["name"]: p for p in doc["processes"]}
    shared = {n for n, p in procs.items() if len(p.get("worlds") or {}) > 1} | leaders(doc)
    found = {}
    for w in doc["worlds"]:
        if (only and w["name"] not in only) or w["state"] != WorldState.HEALTHY.value \
                or w["name"] in down:
            continue
        own = [(m, i) for i, m in enumerate(w["members"]) if m in procs and m not in shared
               and m not in busy and procs[m]["state"] not in LEAVING]
        if own:
            found[w["name"]] = own
    return found


def choose(draw: float, hit: dict[str, list[tuple[str, int]]]) -> tuple[str, str, int] | None:
    """The fault a schedule's ``draw`` is among ``hit`` now, as (world, process, rank):
    the draw picks a world (in name order), what is left of it a member. None when no
    one may be hit."""
    if not hit:
        return None
    worlds = sorted(hit)
    scaled = draw * len(worlds)
    world = worlds[min(int(scaled), len(worlds) - 1)]
    members = hit[world]
    process, rank = members[min(int((scaled % 1) * len(members)), len(members) - 1)]
    return world, process, rank


def replicas(doc: dict, process: str) -> list[str]:
    """The replicas of scaled ``process`` that count (not being retired), by index: a
    scale-down retires the last ones of this list."""
    mine = [p["name"] for p in doc["processes"] if p.get("replica_of") == process
            and p["state"] not in LEAVING and p["state"] != ProcessState.FAILED.value]
    return sorted(mine, key=lambda n: int(n.rpartition("-")[2]) if n.rpartition("-")[2]
                  .isdigit() else 0)


def not_ready(doc: dict, names: list[str]) -> set[str]:
    """Those of ``names`` not serving now: not running, or in a world that is not
    healthy (a fault of the drill's not recovered yet, a world still forming)."""
    procs = {p["name"]: p for p in doc["processes"]}
    state = {w["name"]: w["state"] for w in doc["worlds"]}
    return {n for n in names if n not in procs
            or procs[n]["state"] != ProcessState.RUNNING.value
            or any(state.get(w) != WorldState.HEALTHY.value for w in procs[n]["worlds"])}


def pick_count(draw: float, low: int, high: int, desired: int, ordered: list[str],
               kept: set[str]) -> int | None:
    """The count a scale operation asks: by ``draw`` among ``low..high`` other than
    ``desired``, and none that would retire one of ``kept`` (scale-downs retire the
    last of ``ordered``: a replica whose world is down from a fault is never retired
    under it, or its fault could not be seen to recover). None when none is left."""
    floor = max((ordered.index(n) + 1 for n in kept if n in ordered), default=0)
    counts = [n for n in range(low, high + 1) if n != desired and n >= floor]
    if not counts:
        return None
    return counts[min(int(draw * len(counts)), len(counts) - 1)]



def move_count(doc: dict, move: Move, under_way: list[str],
               hit: set[str]) -> tuple[int, int] | str:
    """What the scale operation ``move`` asks now, as (count, desired), or why it asks
    nothing: an operation of the drill's on that process is still ``under_way``, or
    every other count would retire a replica not serving now (or one just ``hit``)."""
    entry = (doc.get("scale") or {}).get(move.process)
    if under_way or entry is None:
        return f"{under_way[0]} is still under way" if under_way \
            else "the run no longer says its scale"
    ordered = replicas(doc, move.process)
    kept = not_ready(doc, ordered) | hit
    count = pick_count(move.draw, move.low, move.high, entry["desired"], ordered, kept)
    if count is None:
        return (f"every count in {move.low}-{move.high} but {entry['desired']} would"
                f" retire a replica that is not serving now ({', '.join(sorted(kept))})")
    return count, entry["desired"]


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
        return f"{self.world} (made again at {clock_text(self.since)})"


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


def scale_summary(ops: list[dict], skipped: list[str]) -> dict:
    """The drill's scale operations: how many, how they ended, and per replica change
    the time from the request to its peers told (additions) or to its exit (removals),
    from each operation's phases as the head answered them."""
    failed = [op for op in ops if op["state"] != OpState.DONE.value]
    stats = {}
    for kind, last in (("add", ScalePhase.TOLD), ("remove", ScalePhase.EXITED)):
        took = [c["phases"][last.value] - c["phases"][ScalePhase.REQUESTED.value]
                for op in ops for c in op.get("changes") or [] if c["change"] == kind
                and isinstance(c["phases"].get(last.value), int | float)
                and isinstance(c["phases"].get(ScalePhase.REQUESTED.value), int | float)]
        count = sum(1 for op in ops for c in op.get("changes") or [] if c["change"] == kind)
        stats[kind] = {"count": count, "median": _r(pc.median(took)),
                       "max": _r(max(took, default=None))}
    return {"count": len(ops), "done": len(ops) - len(failed),
            "failed": [_op_named(op) for op in failed], "skipped": list(skipped),
            **stats, "ops": ops}


def _op_named(op: dict) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(op["asked"]))
    text = f"{op['op']} {op['process']}={op['to']} asked at {at}: {op['state']}"
    bad = [c for c in op.get("changes") or [] if c.get("outcome") not in (None, "done")]
    if bad:
        text += "; " + ", ".join(f"{c['process']} {c['change']} {c['outcome']}"
                                 + (f" ({c['error']})" if c.get("error") else "") for c in bad)
    elif op.get("error"):
        text += f" ({op['error']})"
    return text



def reshaped(tl: Timeline, since: float) -> dict[str, str]:
    """The worlds whose membership changed since ``since`` (a scale operation made,
    resized, drained or removed them): world -> why its pace is left out (no
    fault-free pace of the same world to compare with)."""
    kinds: dict[str, list[str]] = {}
    for e in tl.events:
        if e["event"] in RESHAPED and e["t"] >= since and isinstance(e.get("world"), str):
            kinds.setdefault(e["world"], []).append(e["event"])
    found = {}
    for world, seen in kinds.items():
        before = any(x["event"] in (E.FORM, E.ADD) and x.get("world") == world
                     and x["t"] < since for x in tl.events)
        if not before:
            found[world] = "appeared during the drill"
        elif E.ADD in seen:
            found[world] = "removed and made again during the drill"
        elif E.REMOVE in seen:
            found[world] = "removed during the drill"
        else:
            found[world] = "resized or drained during the drill"
    return found



def scale_lines(scale: dict, brief: bool) -> list[str]:
    out = [f"  scale: {scale['count']} operation(s), {scale['done']} done,"
           f" {len(scale['failed'])} not done"]
    for kind, verb, last in (("add", "added", "told"), ("remove", "retired", "exited")):
        s = scale[kind]
        if s["count"]:
            out.append(f"    {s['count']} replica(s) {verb}: requested -> {last} median"
                       f" {_secs(s['median'])}, max {_secs(s['max'])}")
    for op in [] if brief else scale["ops"]:
        at = time.strftime("%H:%M:%S", time.localtime(op["asked"]))
        out.append(f"    {at} {op['op']} {op['process']} {op['from']} -> {op['to']}:"
                   f" {op['state']}" + (f" ({op['error']})" if op.get("error") else ""))
        out += [f"      {c['process']} {c['change']}: {scale_text(c['phases'])}"
                for c in op.get("changes") or []]
    out += [f"    skipped: {s}" for s in scale["skipped"]]
    return out



def count_text(value: int | None) -> str:
    return "-" if value is None else str(value)


def clock_text(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
