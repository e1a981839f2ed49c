"""A run's history (mwrun/head/observe/history.py) read back as a timeline: lanes of per-world
rates, the events, and each fault with its downtime. Pure: no files but ``load``'s,
no drawing (report.py draws), no torch.

Pace comes from the worlds' own call counts over exact windows (pace.py); a history
written before the counts were kept falls back to its one-second rate samples."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from mwrun.cli import pace as pc
from mwrun.errors import RunError
from mwrun.schema import (
    CALLS,
    FAULT_ID,
    FAULT_IDS,
    HISTORY,
    HISTORY_ROTATED,
    RATES,
    Phase,
    ScalePhase,
)
from mwrun.schema import Event as E
from mwrun.terminal import size

AROUND = 10.0  # seconds before and after a fault that "before" and "after" average over
DRILL = "drill"  # a drill's signal's ``why`` in the history (head/events.py, Why.DRILL)
KILL_LEADS = 10.0  # a drill's signal this long before a break is taken as its cause
MANY = 4  # faults in a run past which the summary gives each one line (a drill's)
SPAN = 1.0  # seconds between a history's rate samples (SAMPLE_EVERY in head/history.py)
Pace = tuple[float, float | None]  # (calls/s, bytes/s or None when unknown): see pace()


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


@dataclass
class Timeline:
    run_id: str
    name: str
    worlds: dict[str, list[str]]  # name -> members
    start: float
    last: float  # the last moment the history knows of
    samples: dict[str, list[tuple[float, float, float]]]  # world -> (t, calls/s, bytes/s)
    events: list[dict]
    counts: dict[str, pc.Points] = field(default_factory=dict)  # world -> (t, calls so far)
    faults: list[Fault] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ended: str | None = None  # finished | failed; None: live, or the history was cut short
    down_spans: dict[str, pc.Spans] = field(default_factory=dict, repr=False)  # see downs
    ids: bool = True  # its faults carry the head's ids (False: an older mwrun's history)

    @property
    def traffic(self) -> bool:
        return any(s for s in self.samples.values())

    def downs(self, world: str) -> pc.Spans:
        """When ``world`` was down: until it first formed, then each fault from its
        start until it was back."""
        if world not in self.down_spans:  # asked per window: worked out once per world
            formed = next((e["t"] for e in self.events
                           if e["event"] == E.FORM and e.get("world") == world), self.last)
            self.down_spans[world] = [(self.start, formed)] + [
                (f.start, f.back if f.back is not None else self.last)
                for f in self.faults if f.world == world]
        return self.down_spans[world]


def load(run_dir: Path, run_id: str) -> tuple[list[dict], list[str]]:
    """The history's records (rotated part first) and notes on what could not be read."""
    paths = [run_dir / HISTORY_ROTATED, run_dir / HISTORY]
    if not paths[1].exists():
        raise RunError(f"run {run_id} has no history ({paths[1]} is missing): it was"
                       " started by an mwrun without history, or the file was removed")
    records, notes, bad, shapeless = [], [], 0, 0
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise RunError(f"cannot read {path}: {exc.strerror}") from None
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                if i == len(lines) - 1:  # no newline after it: cut short mid-write
                    notes.append(f"{path.name} ends in a line cut short; it was left out")
                else:
                    bad += 1
                continue
            if well_shaped(record):
                records.append(record)
            else:
                shapeless += 1
    if bad:
        notes.append(f"{bad} unreadable line(s) in the history were left out")
    if shapeless:
        notes.append(f"{shapeless} line(s) of the history not shaped as mwrun writes them"
                     " were left out")
    return records, notes


_NUMBER = (int, float)
_TEXT_OR_NONE = (str, type(None))
# What each record kind must hold for the readers (timeline, report, drill) to read it;
# a record without it is left out, said in a note, never a traceback.
SHAPES: dict[str, dict[str, tuple[type, ...]]] = {
    E.START: {"worlds": (dict,)},
    E.SPAWN: {"process": (str,), "restarts": (int,)},
    E.SIGNAL: {"process": (str,), "signal": (str,), "why": (str,)},
    E.HANG: {"process": (str,)},
    E.EXIT: {"process": (str,)},
    E.BREAK: {"world": (str,), "reason": _TEXT_OR_NONE},
    E.FORM: {"world": (str,), "generation": (int,)},
    E.CLOSE: {"world": (str,)},
    E.END: {"state": (str,)},
    E.FAULT: {"world": (str,), "phases": (dict,)},
    E.DRILL: {},
    E.SCALE: {"phases": (dict,)},
    E.ADD: {"world": (str,), "members": (list,)},
    E.RESIZE: {"world": (str,), "members": (list,)},
    E.DRAIN: {"world": (str,)},
    E.REMOVE: {"world": (str,)},
}


def well_shaped(record: object) -> bool:
    """Whether a history line is a record as mwrun writes them (history.py): a time,
    and for its kind the fields the readers use, of their types; the fault ids, rate
    and count samples, a start's worlds and a fault's phases as they are written. An
    event of a kind this mwrun does not know is kept (and not read)."""
    if not isinstance(record, dict) or not isinstance(record.get("t"), _NUMBER):
        return False
    kind = record.get("event", "")
    if not isinstance(kind, str):
        return False
    for key, types in SHAPES.get(kind, {}).items():
        if not isinstance(record.get(key), types):
            return False
    if kind == E.START and not all(isinstance(v, list) and all(isinstance(m, str) for m in v)
                                   for v in record["worlds"].values()):
        return False
    if kind in (E.FAULT, E.SCALE) and not all(
            isinstance(t, (*_NUMBER, type(None))) for t in record["phases"].values()):
        return False
    ids = record.get(FAULT_IDS, {})
    if not isinstance(record.get(FAULT_ID, 0), int) or not isinstance(ids, dict) \
            or not all(isinstance(i, int) for i in ids.values()):
        return False
    return all(_pairs(record.get(key, {})) for key in (RATES, CALLS))


def _pairs(samples: object) -> bool:
    """{world: [number, number]}: a rate or count sample."""
    return isinstance(samples, dict) and all(
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, _NUMBER) for x in v)
        for v in samples.values())


def build(records: list[dict], notes: list[str], run_id: str) -> Timeline:
    """The timeline of a run from its history records (see load)."""
    starts = [r for r in records if r.get("event") == E.START]
    if not starts or not isinstance(starts[0].get("worlds"), dict):
        raise RunError(f"the history of run {run_id} has no start record (it was cut short"
                       " or is not mwrun's); nothing to draw")
    head = starts[-1]
    records = sorted(records, key=lambda r: r["t"])
    events = [r for r in records if "event" in r and r["event"] != E.START]
    worlds = {str(k): list(v) for k, v in head["worlds"].items()}
    for e in events:  # elastic jobs: worlds made while the run ran, and their members
        if e["event"] in (E.ADD, E.RESIZE) and isinstance(e.get("world"), str) \
                and isinstance(e.get("members"), list):
            have = worlds.setdefault(e["world"], [])
            have += [str(m) for m in e["members"] if str(m) not in have]
    samples: dict[str, list] = {w: [] for w in worlds}
    for r in records:
        for world, rate in (r.get(RATES) or {}).items():
            if world in samples and isinstance(rate, list) and len(rate) == 2:
                samples[world].append((r["t"], float(rate[0]), float(rate[1])))
    ended = next((e["state"] for e in events if e["event"] == E.END), None)
    tl = Timeline(run_id, head.get("name", run_id), worlds, records[0]["t"], records[-1]["t"],
                  samples, events, counts=_counts(records, worlds, records[0]["t"]),
                  notes=list(notes), ended=ended)
    tl.ids = any(FAULT_ID in e or FAULT_IDS in e or (e["event"] == E.FAULT and "id" in e)
                 for e in events) or not any(e["event"] == E.BREAK for e in events)
    tl.faults = faults(tl) if tl.ids else legacy_faults(tl)
    if not tl.traffic:
        tl.notes.append("no traffic was recorded: no member made a call through the mwrun"
                        " library (plain torch.distributed calls are not counted)")
    return tl


def _counts(records: list[dict], worlds, start: float) -> dict[str, pc.Points]:
    """Each world's (time, calls so far) points, from 0 at the run's start; a count
    that went back (a history spliced from two heads) is held, never undone."""
    counts: dict[str, pc.Points] = {}
    for r in records:
        for world, point in (r.get(CALLS) or {}).items():
            if world not in worlds or not isinstance(point, list) or len(point) != 2 \
                    or not all(isinstance(x, int | float) for x in point):
                continue
            points = counts.setdefault(world, [(start, 0.0)])
            t, count = float(point[1]), max(float(point[0]), points[-1][1])
            if t > points[-1][0]:
                points.append((t, count))
            elif t == points[-1][0]:
                points[-1] = (t, count)
    return counts


def faults(tl: Timeline) -> list[Fault]:
    """The run's faults as the head numbered them (head/faults.py), each joined with
    every record that carries its id: the drill's signal, the breaks, the restart, the
    re-form, how it ended, and its phases (its ``fault`` record, once it closed)."""
    found: dict[int, Fault] = {}
    formed = {w: tl.start for w in tl.worlds}  # when each world last formed
    stopped = False

    def of(fault_id: int, world: str, t: float) -> Fault | None:
        if world not in tl.worlds:
            return None
        if fault_id not in found:
            found[fault_id] = Fault(world, None, "?", breaks=0, since=formed[world],
                                    id=fault_id, first=t)
        return found[fault_id]

    for e in tl.events:
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


def _phases(tl: Timeline) -> None:
    """A history written before faults had ids: each fault record given to the break it
    measured, the same world's fault whose break is nearest its phases."""
    for r in tl.events:
        if r["event"] != E.FAULT or not isinstance(r.get("phases"), dict):
            continue
        phases = r["phases"]
        seen = next((phases.get(p.value) for p in (Phase.SURVIVORS_TOLD, Phase.EXIT_SEEN,
                                                    Phase.T_FAULT)
                     if isinstance(phases.get(p.value), int | float)), None)
        mine = [f for f in tl.faults if f.world == r.get("world") and f.phases is None
                and f.broke is not None]
        if seen is None or not mine:
            continue
        nearest = min(mine, key=lambda f: abs((f.broke or 0.0) - seen))
        if nearest.broke is not None and abs(nearest.broke - seen) <= KILL_LEADS:
            nearest.phases = phases


def legacy_faults(tl: Timeline) -> list[Fault]:
    """A history written before faults had ids (an older mwrun's): each break, from the
    drill that caused it (if any) to the world's re-form, by nearness in time."""
    found = _legacy(tl)
    tl.faults = found
    _phases(tl)
    return found


def _legacy(tl: Timeline) -> list[Fault]:
    found: list[Fault] = []
    open_: dict[str, Fault] = {}
    formed = {w: tl.start for w in tl.worlds}  # when each world last formed
    for e in tl.events:
        kind, world = e["event"], e.get("world")
        if kind == E.BREAK and world in tl.worlds:
            if world in open_:
                open_[world].breaks += 1  # broke again before it re-formed
                continue
            fault = open_[world] = Fault(world, e["t"], str(e.get("reason") or "?"),
                                         since=formed[world], first=e["t"])
            cause = _drill_before(tl, world, e["t"], formed[world])
            if cause is not None:
                fault.kill, fault.killed = cause["t"], f"{cause['signal']} to {cause['process']}"
            found.append(fault)
        elif kind == E.SPAWN and e.get("restarts", 0) > 0:
            for w, fault in open_.items():
                if e["process"] in tl.worlds[w] and fault.restart is None:
                    fault.restart = e["t"]
        elif kind == E.FORM and world in tl.worlds:
            formed[world] = e["t"]
            if world in open_:
                fault = open_.pop(world)
                fault.end, fault.outcome = e["t"], "re-formed"
        elif kind in (E.CLOSE, E.REMOVE) and world in open_:
            stopping = any(x["event"] == E.STOP and x["t"] <= e["t"] for x in tl.events)
            open_.pop(world).outcome = "not re-formed before the run stopped" if stopping \
                else f"closed for good ({e.get('reason')})"
    return found


def _drill_before(tl: Timeline, world: str, broke: float, since: float) -> dict | None:
    drills = [e for e in tl.events if e["event"] == E.SIGNAL and e.get("why") == DRILL
              and e.get("process") in tl.worlds[world] and since <= e["t"] <= broke
              and broke - e["t"] <= KILL_LEADS]
    return drills[-1] if drills else None


def pace(tl: Timeline, world: str, a: float, b: float) -> tuple[float, float | None] | None:
    """(calls/s, bytes/s) over [a, b] (b no later than the last count). Calls from
    the world's counts over the exact window (pace.py); bytes at that pace by the
    bytes per call of its rate samples (the history keeps bytes as rates only).
    Without counts (an older history), both from the rate samples. None when nothing
    covers the window."""
    if tl.counts.get(world):
        known = tl.counts[world][-1][0]  # a live run's counts lag its last record a little
        calls = pc.pace(tl.counts[world], tl.downs(world), a, min(b, known))
        if calls is None:
            return None
        rates = mean_rate(tl, world, a, b)
        if rates is None or rates[0] <= 0:  # bytes per call unknown
            return calls, 0.0 if calls == 0 else None
        return calls, rates[1] / rates[0] * calls  # the rates' bytes per call, at this pace
    return mean_rate(tl, world, a, b)


def mean_rate(tl: Timeline, world: str, a: float, b: float) -> tuple[float, float] | None:
    """Time-weighted mean (calls/s, bytes/s) over [a, b]; None if no sample covers it.
    A sample at t holds the rate since the sample before it (at most SPAN earlier).
    Only for what the counts cannot say (bytes, older histories): see ``pace``."""
    total = calls = nbytes = 0.0
    previous = None
    for t, c, n in tl.samples[world]:
        since = t - SPAN if previous is None else max(previous, t - 2 * SPAN)
        previous = t
        overlap = min(t, b) - max(since, a)
        if overlap > 0:
            total, calls, nbytes = total + overlap, calls + c * overlap, nbytes + n * overlap
    if total <= 0:
        return None
    return calls / total, nbytes / total


def summary(tl: Timeline) -> list[str]:
    """The text under the picture: per world, its breaks, downtime, and pace."""
    took = tl.last - tl.start
    state = tl.ended or "live, or cut short"
    restarts = sum(1 for e in tl.events if e["event"] == E.SPAWN and e.get("restarts", 0) > 0)
    lines = [f"run {tl.run_id} ({tl.name}): {took:.1f} s of history, {state};"
             f" {len(tl.faults)} fault(s), {restarts} restart(s)"]
    calm = [w for w in tl.worlds if not any(f.world == w for f in tl.faults)]
    for world in tl.worlds:
        mine = [f for f in tl.faults if f.world == world]
        if not mine and len(calm) <= 4:
            kept = pace(tl, world, tl.start, tl.last)
            lines.append(f"{world}: no breaks" + (f"; {_rate(kept)} on average" if kept else ""))
        if not mine:
            continue
        down = sum(f.downtime(tl.last) for f in mine)
        lines.append(f"{world}: {sum(f.breaks for f in mine)} break(s), down {_secs(down)}"
                     " in all")
        for f in mine:  # many faults (a drill): a line each; its summary gives the pace
            lines += ["  " + line for line in (_fault_lines(tl, f) if len(tl.faults) <= MANY
                                              else [_fault_line(tl, f)])]
    if len(calm) > 4:  # many worlds: one line for the unbroken ones
        paces = [p[0] for w in calm if (p := pace(tl, w, tl.start, tl.last))]
        other = " other" if tl.faults else ""
        lines.append(f"{len(calm)}{other} worlds: no breaks" + (
            f"; {min(paces):.1f} to {max(paces):.1f} calls/s on average" if paces else ""))
    return lines + postmortem_lines(tl) + scale_lines(tl) + [f"note: {n}" for n in tl.notes]


def postmortem_lines(tl: Timeline) -> list[str]:
    """Each hang's and break's post-mortem bundle (the history's ``postmortem``
    records): its culprit line and its folder; the last few when there are many."""
    records = [e for e in tl.events if e["event"] == E.POSTMORTEM]
    if not records:
        return []
    lines = [f"post-mortem bundles: {len(records)}"
             + (f" (the last {MANY} below)" if len(records) > MANY else "")]
    for r in records[-MANY:]:
        lines += [f"  {r.get('culprit')}", f"    {r.get('path')}"]
    return lines


def scale_lines(tl: Timeline) -> list[str]:
    """Each replica a scale operation added or retired (the history's ``scale``
    records): one line each for a few, else counts and the median of each kind."""
    records = [e for e in tl.events if e["event"] == E.SCALE
               and isinstance(e.get("phases"), dict)]
    if not records:
        return []
    lines = []
    for kind, last in (("add", ScalePhase.TOLD), ("remove", ScalePhase.EXITED)):
        mine = [r for r in records if r.get("change") == kind]
        if not mine:
            continue
        took = sorted(t - r["phases"][ScalePhase.REQUESTED.value] for r in mine
                      if isinstance(t := r["phases"].get(last.value), int | float)
                      and isinstance(r["phases"].get(ScalePhase.REQUESTED.value), int | float))
        failed = [r for r in mine if r.get("outcome") != "done"]
        verb = "added" if kind == "add" else "retired"
        line = f"scale: {len(mine)} replica(s) {verb}"
        if took:
            line += f", requested -> {last.value} median {_secs(took[len(took) // 2])}," \
                    f" max {_secs(took[-1])}"
        if failed:
            line += "; not done: " + ", ".join(
                f"{r.get('process')} ({r.get('outcome')}: {r.get('error')})" for r in failed)
        lines.append(line)
    if len(records) <= MANY:
        for r in records:
            lines.append(f"  {r.get('op')} {r.get('process')} {r.get('change')}: "
                         + scale_text(r["phases"]))
    return lines


def scale_text(phases: dict) -> str:
    """``started +41 ms, formed +97 ms, ...``: each phase after requested."""
    t0 = phases.get(ScalePhase.REQUESTED.value)
    return ", ".join(
        f"{p.value} " + (f"+{_secs(t - t0)}" if isinstance(t := phases.get(p.value),
                                                         int | float)
                         and isinstance(t0, int | float) else "-")
        for p in ScalePhase if p is not ScalePhase.REQUESTED and p.value in phases)


def _fault_line(tl: Timeline, f: Fault) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(f.start)) + f"{f.start % 1:.3f}"[1:]
    what = f"killed ({f.killed})" if f.kill is not None else f"broke ({f.reason})"
    end = f"down {_secs(f.downtime(tl.last))}" if f.back is not None else f.outcome
    return f"{at} {what}: {end}"


def _fault_lines(tl: Timeline, f: Fault) -> list[str]:
    at = time.strftime("%H:%M:%S", time.localtime(f.start)) + f"{f.start % 1:.3f}"[1:]
    if f.broke is None:  # a STOP not yet judged: the world is down all the same
        broke = "not broken yet"
    else:
        broke = "broke" + (f" +{_secs(f.broke - f.start)}" if f.kill is not None else "") \
            + f" ({f.reason})" + (f", {f.breaks} times before it re-formed"
                                  if f.breaks > 1 else "")
    what = f"{at} killed ({f.killed}), {broke}" if f.kill is not None else f"{at} {broke}"
    if f.restart is not None:
        what += f", restarted +{_secs(f.restart - f.start)}"
    end = f"re-formed +{_secs(f.end - f.start)}" if f.end is not None else f.outcome
    out = [f"{what},", f"  {end}: down {_secs(f.downtime(tl.last))}"]
    if f.phases:
        out.append("  phases: " + phase_text(f.phases))
    stop = f.back if f.back is not None else tl.last
    first = max(f.start - AROUND, f.since)  # "before" is while the world was up
    before = pace(tl, f.world, first, f.start)
    during = pace(tl, f.world, f.start, stop)
    after = pace(tl, f.world, stop, min(stop + AROUND, tl.last)) if f.back is not None \
        else None
    out.append(f"  {f.world}: before {_rate(before)}, during {_rate(during)},"
               f" after {_rate(after)}")
    kept: list[tuple[str, Pace, Pace]] = []  # (world, pace before, pace during)
    slowed: list[tuple[str, Pace, Pace]] = []
    for other in tl.worlds:
        was = pace(tl, other, first, f.start)
        was_during = pace(tl, other, f.start, stop)
        if other == f.world or was is None or was_during is None or was[0] <= 0:
            continue
        (kept if was_during[0] >= 0.9 * was[0] else slowed).append((other, was, was_during))
    if len(kept) + len(slowed) <= 3:
        for other, was, was_during in kept + slowed:
            out.append(f"  meanwhile {other}: {_rate(was)} before, {_rate(was_during)} during"
                       + (" (kept its pace)" if (other, was, was_during) in kept else ""))
    elif kept or slowed:
        out.append(f"  meanwhile {len(kept)} other world(s) kept their pace"
                   + (f"; slower: {', '.join(o for o, _, _ in slowed)}" if slowed else ""))
    return out


def phase_text(phases: dict) -> str:
    """``exit_seen +12 ms, survivors_told +15 ms, ...``: each phase after t_fault, by
    the names the status and the history use; a phase that did not happen is '-'."""
    t0 = phases.get(Phase.T_FAULT.value)
    parts = []
    for p in list(Phase)[1:]:
        t = phases.get(p.value)
        if isinstance(t, int | float) and isinstance(t0, int | float):
            parts.append(f"{p.value} +{_secs(t - t0)}")
        else:
            parts.append(f"{p.value} -")
    return ", ".join(parts)


def _rate(rate: tuple[float, float | None] | None) -> str:
    if rate is None:
        return "-"
    if rate[1] is None:
        return f"{rate[0]:.1f} calls/s"
    return f"{rate[0]:.1f} calls/s ({size(rate[1])}/s)"


def _secs(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
