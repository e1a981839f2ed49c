"""``mwrun drill --scale``, its plan: the drill against an elastic job, whose worlds
and members come and go under it (drill.py has the schedule; drilling.py runs it;
mwrun.records reads what it came to). Pure: the status document in, choices out.

- Whom a fault may hit (``live_targets``), read from the status document when the
  fault is due: a member in no other world, in a healthy world, never a leader (a
  process that shares worlds with a scaled process's replicas: its worlds come and
  go), never a member being retired, nor one a scale operation of the drill's is
  moving; ``choose`` turns the schedule's draw into one of them.
- What count a scale operation asks (``pick_count``): by its draw, among MIN..MAX
  other than the desired count, and never one that would retire a replica that is
  not serving now (down from a fault: its recovery could never be seen).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mwrun.errors import UsageError
from mwrun.schema import ProcessState, WorldState

MIX = 0.5  # with --scale: the share of the schedule's events that are scale operations
# States in which a process is never hit: on its way out (a drain), or gone.
LEAVING = (ProcessState.DRAINING.value, ProcessState.EXITED.value, ProcessState.STOPPED.value)
GOING = (WorldState.DRAINING.value, WorldState.CLOSED.value)  # worlds on their way out


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


def clock_text(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))
