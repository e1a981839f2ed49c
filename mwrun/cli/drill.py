"""``mwrun drill``, its pure parts: who may be hit, when (the schedule), and what the
drill comes to (the summary) from the run's history read back as a timeline.

The live loop that sends the faults and shows progress is drilling.py; this module
has no clock, no files and no sockets, so every number it gives is tested from
hand-written history records.

What the summary measures, per world:

- its faults, each with its phases (the head's fault record where there is one; else
  the moments the history has: the signal, the restart, the re-form; never guessed);
- downtime, t_fault -> first_call (the world communicating again), or -> reformed where
  the first call was not timed; median and max;
- the share of its own fault-free pace it kept: its pace over the drill over its pace
  in the fault-free window before the first fault (pace from the members' own counts
  over exact windows, see pace.py). For the faulted worlds, over the whole drill; for
  the others, over each fault's downtime (at least ONE_SAMPLE long: counts are known
  about once a second, so a shorter window would only read their interpolation), all
  faults' windows added up.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from mwrun.cli import pace as pc
from mwrun.cli.timeline import KILL_LEADS, Fault, Timeline, phase_text
from mwrun.errors import UsageError
from mwrun.schema import Phase

SIGNALS = ("KILL", "TERM", "SEGV", "STOP")
BASELINE_MIN = 5.0  # seconds of fault-free pace the drill measures before its first fault
BASELINE_MAX = 60.0  # at most this much of the history before the drill is the baseline
ONE_SAMPLE = 1.0  # the history's counts come about once a second (SAMPLE_EVERY)
# The drill reads the clock before it asks for a fault, and the head stamps the signal
# after, on the same machine's wall clock: a little slack all the same (a clock step).
SENT_SLACK = 0.05


@dataclass(frozen=True)
class Shot:
    """One fault of the schedule: ``at`` seconds after the drill starts, signal
    ``process`` (rank ``rank`` of ``world``)."""

    at: float
    world: str
    process: str
    rank: int


@dataclass
class Sent:
    """A shot as it went: when (head wall clock), and why not when it was not sent."""

    shot: Shot
    t: float
    skipped: str | None = None


def targets(doc: dict, only: list[str] | None) -> dict[str, list[tuple[str, int]]]:
    """world -> its members that belong to no other world, as (process, rank), from the
    status document; UsageError for an unknown world or one with no such member."""
    worlds = {w["name"]: w["members"] for w in doc["worlds"]}
    shared = {p["name"] for p in doc["processes"] if len(p.get("worlds") or {}) > 1}
    for name in only or []:
        if name not in worlds:
            raise UsageError(f"run {doc['run_id']} has no world {name!r}; it has:"
                             f" {', '.join(worlds)}")
    chosen = only or list(worlds)
    found = {w: [(m, i) for i, m in enumerate(worlds[w]) if m not in shared] for w in chosen}
    empty = [w for w, own in found.items() if not own]
    if only and empty:
        raise UsageError(f"every member of world {empty[0]} is also in another world: the"
                         " drill hits only members that belong to no other world")
    found = {w: own for w, own in found.items() if own}
    if not found:
        raise UsageError(f"no world of run {doc['run_id']} has a member that belongs to no"
                         " other world: there is nobody the drill may hit")
    return found


def schedule(seed: int | None, every: float, duration: float,
             hit: dict[str, list[tuple[str, int]]]) -> list[Shot]:
    """The faults, drawn at once: intervals exponential with mean ``every`` (a Poisson
    process: faults come at random, not on a beat the job could fall into step with),
    each to a random world of ``hit`` and a random one of its own members. One seed,
    one topology: the same schedule."""
    rng = random.Random(seed)
    shots, at = [], 0.0
    while True:
        at += rng.expovariate(1.0 / every)
        if at >= duration:
            return shots
        world = rng.choice(sorted(hit))
        process, rank = rng.choice(hit[world])
        shots.append(Shot(round(at, 3), world, process, rank))


def baseline(tl: Timeline, world: str, before: float) -> tuple[float, float] | None:
    """The fault-free window of ``world`` before ``before``: since its last fault was
    over (or its first count), at most BASELINE_MAX, up to its last count; None when it
    is shorter than BASELINE_MIN."""
    points = tl.counts.get(world)
    if not points:
        return None
    over = [f.back for f in tl.faults if f.world == world and f.start < before]
    if any(b is None for b in over):
        return None  # down now
    since = max([points[1][0] if len(points) > 1 else before, *over])  # type: ignore[type-var]
    end = min(before, points[-1][0])
    start = max(since, end - BASELINE_MAX)
    return (start, end) if end - start >= BASELINE_MIN else None


@dataclass
class Outcome:
    """One fault sent, read back: the fault it made (None: the world never broke)."""

    sent: Sent
    fault: Fault | None

    @property
    def recovered(self) -> bool:
        return self.fault is not None and self.fault.back is not None


def match(tl: Timeline, sent: list[Sent]) -> list[Outcome]:
    """Each fault sent, with the break it caused: the same world's fault that was
    still down when it was sent (it joins that outage), else the nearest one that
    started after it (within KILL_LEADS) and no earlier fault sent has claimed: two
    faults a moment apart are two outages, never one counted twice."""
    found: list[Outcome] = []
    claimed: set[int] = set()
    for s in sent:
        if s.skipped is not None:
            continue
        mine = [f for f in tl.faults if f.world == s.shot.world]
        fault = next((f for f in mine if f.start < s.t - SENT_SLACK
                      and (f.back is None or f.back >= s.t)), None)
        if fault is None:
            after = [f for f in mine if id(f) not in claimed
                     and s.t - SENT_SLACK <= f.start <= s.t + KILL_LEADS]
            fault = min(after, key=lambda f: abs(f.start - s.t), default=None)
        if fault is not None:
            claimed.add(id(fault))
        found.append(Outcome(s, fault))
    return found


def phases(f: Fault) -> dict:
    """A fault's phases: its fault record's, or what the history recorded of them."""
    if f.phases:
        return {p.value: f.phases.get(p.value) for p in Phase}
    told = {Phase.T_FAULT: f.start, Phase.RESTARTED: f.restart, Phase.REFORMED: f.end}
    return {p.value: told.get(p) for p in Phase}


@dataclass
class Window:
    started: float
    ended: float
    bases: dict[str, tuple[float, float]] = field(default_factory=dict)  # world -> baseline


def pace_of(tl: Timeline, world: str, a: float, b: float) -> float | None:
    """A world's calls/s over [a, b] from its counts (b no later than its last)."""
    points = tl.counts.get(world)
    if not points:
        return None
    return pc.pace(points, tl.downs(world), a, min(b, points[-1][0]))


def summarize(tl: Timeline, sent: list[Sent], window: Window, settings: dict) -> dict:
    """The drill's record: per world its faults, phases, downtimes and pace kept; the
    pace kept by the faulted worlds and by the others; the faults not recovered."""
    outcomes = match(tl, sent)
    base = {w: pace_of(tl, w, *window.bases[w]) for w in window.bases}
    worlds, faulted = {}, []
    for world in tl.worlds:
        mine = [o for o in outcomes if o.sent.shot.world == world]
        faults = list({id(o.fault): o.fault for o in mine if o.fault is not None}.values())
        downs = [f.back - f.start for f in faults if f.back is not None]
        during = pace_of(tl, world, window.started, window.ended)
        kept = during / base[world] if during is not None and base.get(world) else None
        worlds[world] = {
            "faults": len(mine), "downtime_median": _r(pc.median(downs)),
            "downtime_max": _r(max(downs, default=None)), "pace": _r(during),
            "fault_free_pace": _r(base.get(world)), "kept": _r(kept),
            "list": [{"process": o.sent.shot.process, "sent": round(o.sent.t, 4),
                      "recovered": o.recovered, "again": _again(o, mine),
                      "downtime": _r(o.fault.back - o.fault.start)
                      if o.fault is not None and o.fault.back is not None else None,
                      "phases": phases(o.fault) if o.fault is not None else None}
                     for o in mine]}
        if mine and kept is not None:
            faulted.append(kept)
    return {"started": round(window.started, 4), "ended": round(window.ended, 4),
            **settings, "worlds": worlds,
            "kept_faulted": _r(sum(faulted) / len(faulted)) if faulted else None,
            "kept_others": _r(_others(tl, outcomes, base)),
            "skipped": [f"{s.shot.world}: {s.skipped}" for s in sent if s.skipped],
            "not_recovered": [_named(o) for o in outcomes if not o.recovered]}


def _again(o: Outcome, mine: list[Outcome]) -> bool:
    """Whether this fault hit a world still down from an earlier one of the drill (it
    is then that fault's, with its downtime)."""
    return o.fault is not None and any(
        e.fault is o.fault for e in mine[:mine.index(o)])


def _others(tl: Timeline, outcomes: list[Outcome], base: dict) -> float | None:
    """Calls the other worlds made during each fault over what their fault-free pace
    would have made: added up over every fault, each window at least ONE_SAMPLE."""
    made = expected = 0.0
    for f in {id(o.fault): o.fault for o in outcomes if o.fault is not None}.values():
        end = max(f.back if f.back is not None else tl.last, f.start + ONE_SAMPLE)
        for other in tl.worlds:
            points = tl.counts.get(other)
            if other == f.world or not base.get(other) or not points:
                continue
            calls = pc.calls(points, tl.downs(other), f.start, min(end, points[-1][0]))
            if calls is not None:
                made += calls
                expected += base[other] * (min(end, points[-1][0]) - f.start)
    return made / expected if expected > 0 else None


def _named(o: Outcome) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(o.sent.t))
    why = "never broke" if o.fault is None else o.fault.outcome
    return f"{o.sent.shot.world}: {o.sent.shot.process} signalled at {at}: {why}"


def exit_status(record: dict) -> int:
    """0 when every world came back after every fault, 1 otherwise."""
    return 1 if record["not_recovered"] else 0


def lines(record: dict, brief: bool = False) -> list[str]:
    """The drill's summary in words (``mwrun drill`` at its end, and ``report``);
    ``brief``: a line per world, without each fault's (under a picture)."""
    took = record["ended"] - record["started"]
    sent = sum(w["faults"] for w in record["worlds"].values())
    head = (f"drill: {sent} fault(s) (SIG{record.get('signal', 'KILL')}) in {took:.0f} s"
            + (" (interrupted)" if record.get("interrupted") else ""))
    out = [head + f"; pace kept: faulted worlds {_pct(record['kept_faulted'])},"
           f" the others during each fault {_pct(record['kept_others'])}"]
    for name, w in record["worlds"].items():
        if not w["faults"]:
            out.append(f"  {name}: no faults; kept {_pct(w['kept'])} of its pace")
            continue
        out.append(f"  {name}: {w['faults']} fault(s), down median {_secs(w['downtime_median'])}"
                   f" max {_secs(w['downtime_max'])}; kept {_pct(w['kept'])} of its pace"
                   f" ({_num(w['pace'])} of {_num(w['fault_free_pace'])} calls/s)")
        for f in [] if brief else w["list"]:
            at = time.strftime("%H:%M:%S", time.localtime(f["sent"]))
            state = f"down {_secs(f['downtime'])}" if f["recovered"] else "NOT RECOVERED"
            state += " (hit again while down: the same outage)" if f.get("again") else ""
            out.append(f"    {at} {f['process']}: {state}"
                       + (f"; {phase_text(f['phases'])}" if f["phases"] else ""))
    out += [f"  skipped: {s}" for s in record["skipped"]]
    out += [f"  not recovered: {n}" for n in record["not_recovered"]]
    return out


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
