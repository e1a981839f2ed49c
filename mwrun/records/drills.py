"""What a drill comes to, read from the run's history as a timeline: each fault it
sent matched with the fault it made, each world's fault-free pace before the drill,
and the drill's record (``summarize``) with what fails it (``problems``).

The drill's schedule and its live loop are the command line's (cli/drill.py,
cli/drilling.py); this module has no clock, no files and no sockets, so every number
it gives is tested from hand-written history records.

What the summary measures, per world:

- its faults, each with its phases (the head's fault record where there is one; else
  the moments the history has: the signal, the restart, the re-form; never guessed);
- downtime, t_fault -> first_call (the world communicating again), or -> reformed where
  the first call was not timed; median and max;
- the share of its own fault-free pace it kept: its pace over the drill over its pace
  in the fault-free window before the first fault (pace from the members' own counts
  over exact windows, see counts.py). For the faulted worlds, over the whole drill; for
  the others, over each fault's downtime (at least ONE_SAMPLE long: counts are known
  about once a second, so a shorter window would only read their interpolation), all
  faults' windows added up. Worlds whose membership changed during the drill (made,
  drained, removed or re-made by a scale operation) have no fault-free pace to compare
  with: they are named and left out of the pace figures.

What else the record holds: with ``--scale``, the drill's scale operations
(scaleops.scale_summary); and what it counted outside the worlds it faulted
(ledger.Ledger): the calls that failed and the breaks there, which must be 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mwrun.records import counts as pc
from mwrun.records.faults import DRILL, KILL_LEADS, Fault
from mwrun.records.scaleops import recorded, reshaped, scale_summary, settled
from mwrun.records.timeline import Timeline
from mwrun.schema import FAULT_IDS, Phase
from mwrun.schema import Event as E

BASELINE_MIN = 5.0  # seconds of fault-free pace the drill measures before its first fault
BASELINE_MAX = 60.0  # at most this much of the history before the drill is the baseline
ONE_SAMPLE = 1.0  # the history's counts come about once a second (SAMPLE_EVERY)
# The drill reads the clock before it asks for a fault, and the head stamps the signal
# after, on the same machine's wall clock: a little slack all the same (a clock step).
SENT_SLACK = 0.05


@dataclass(frozen=True)
class Shot:
    """One fault of the schedule: ``at`` seconds after the drill starts, signal
    ``process`` (rank ``rank`` of ``world``). With --scale the target is chosen when
    the fault is due (``world`` is "" until then), by ``draw`` (cli/drillscale.py's
    ``choose``). What the drill sent, read back here, is made of these."""

    at: float
    world: str
    process: str
    rank: int
    draw: float = 0.0


@dataclass
class Sent:
    """A shot as it went: when (head wall clock), and why not when it was not sent."""

    shot: Shot
    t: float
    skipped: str | None = None


def baseline(tl: Timeline, world: str, before: float) -> tuple[float, float] | None:
    """The fault-free window of ``world`` before ``before``: since its last fault was
    over (or its first count, or it was made by a scale operation), at most
    BASELINE_MAX, up to its last count; None when it is shorter than BASELINE_MIN."""
    points = tl.counts.get(world)
    if not points:
        return None
    over = [f.back for f in tl.faults if f.world == world and f.start < before]
    if any(b is None for b in over):
        return None  # down now
    made = [e["t"] for e in tl.events if e["event"] == E.ADD and e.get("world") == world
            and e["t"] < before]  # made (again) by a scale operation: since then
    since = max([points[1][0] if len(points) > 1 else before, *over, *made])
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
    """Each fault sent, with the fault it made or joined: its own signal's record in
    the history (the first drill signal to its process since it was sent that no
    earlier one has claimed) names the head's fault by id. A signal to a world still
    down joins that fault (the same outage); two faults a moment apart are two."""
    if not tl.ids:
        return _match_by_time(tl, sent)
    by_id = {f.id: f for f in tl.faults}
    signals = [e for e in tl.events if e["event"] == E.SIGNAL and e["why"] == DRILL]
    claimed: set[int] = set()
    found: list[Outcome] = []
    for s in sent:
        if s.skipped is not None:
            continue
        mine = next((i for i, e in enumerate(signals) if i not in claimed
                     and e["process"] == s.shot.process and e["t"] >= s.t - SENT_SLACK), None)
        fault = None
        if mine is not None:
            claimed.add(mine)
            fault = by_id.get((signals[mine].get(FAULT_IDS) or {}).get(s.shot.world))
        found.append(Outcome(s, fault))
    return found


def _match_by_time(tl: Timeline, sent: list[Sent]) -> list[Outcome]:
    """An older mwrun's history, whose faults have no ids: the same world's fault that
    was still down when it was sent, else the nearest one that started after it
    (within KILL_LEADS) and no earlier fault sent has claimed."""
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


def summarize(tl: Timeline, sent: list[Sent], window: Window, settings: dict,
              ops: list[dict] | None = None, watch: dict | None = None,
              skipped_ops: list[str] | None = None) -> dict:
    """The drill's record: per world its faults, phases, downtimes and pace kept; the
    pace kept by the faulted worlds and by the others; the faults not recovered. With
    --scale, its scale operations (``ops``: each as the head last answered it, and
    ``skipped_ops``); and ``watch`` (Ledger.result): failed calls and breaks outside
    the worlds it faulted."""
    outcomes = match(tl, sent)
    left_out = reshaped(tl, window.started)
    base = {w: pace_of(tl, w, *window.bases[w]) for w in window.bases if w not in left_out}
    worlds, faulted = {}, []
    for world in tl.worlds:
        mine = [o for o in outcomes if o.sent.shot.world == world]
        faults = list({id(o.fault): o.fault for o in mine if o.fault is not None}.values())
        downs = [f.back - f.start for f in faults if f.back is not None]
        during = None if world in left_out else \
            pace_of(tl, world, window.started, window.ended)
        fault_free = base.get(world)
        kept = during / fault_free if during is not None and fault_free else None
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
    record = {"started": round(window.started, 4), "ended": round(window.ended, 4),
              **settings, "worlds": worlds,
              "kept_faulted": _r(sum(faulted) / len(faulted)) if faulted else None,
              "kept_others": _r(_others(tl, outcomes, base)),
              "skipped": [f"{s.shot.world or 'a fault'}: {s.skipped}" for s in sent
                          if s.skipped],
              "not_recovered": [_named(o) for o in outcomes if not o.recovered],
              "pace_left_out": left_out}
    if ops is not None:
        record["scale"] = scale_summary(settled(ops, recorded(tl)[0]), skipped_ops or [])
    if watch is not None:
        record["outside"] = watch
    return record


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


def problems(record: dict) -> list[str]:
    """What fails the drill, each named: a fault that did not recover, a scale
    operation that did not end done, a call failed or a break outside the faulted
    worlds; a head killed (--head) that no new head followed; the run ending under the
    drill. (A record of an older drill has only the
    first.)"""
    found = [f"not recovered: {n}" for n in record["not_recovered"]]
    if record.get("run_ended"):
        found.append(record["run_ended"])
    scale = record.get("scale") or {}
    found += [f"scale operation not done: {n}" for n in scale.get("failed", [])]
    outside = record.get("outside") or {}
    where = "; ".join(outside.get("where") or [])
    if outside.get("failed_calls"):
        found.append(f"{outside['failed_calls']} call(s) failed in worlds the drill did not"
                     f" fault: {where}")
    if outside.get("breaks"):
        found.append(f"{outside['breaks']} break(s) of worlds the drill did not fault: {where}")
    head = record.get("head") or {}
    if head.get("not_back"):
        found.append(f"no new head came back after {head['not_back']} of the head's kills")
    return found


def exit_status(record: dict) -> int:
    """0 when every world came back after every fault, every scale operation was
    done, and nothing failed outside the faulted worlds; 1 otherwise."""
    return 1 if problems(record) else 0


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
