"""A run's history (mwrun/head/observe/history.py) read back as a timeline: per world
its members, its call counts and rate samples, each member's wait per collective, the
events, and each fault with its downtime (faults.py). Pure: records in (history.py
reads them), numbers out.

Pace comes from the worlds' own call counts over exact windows (counts.py); a history
written before the counts were kept falls back to its one-second rate samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mwrun.errors import RunError
from mwrun.records import counts as pc
from mwrun.records import faults as fl
from mwrun.records.faults import Fault
from mwrun.records.history import load
from mwrun.records.tally import Tally, tally
from mwrun.schema import CALLS, FAULT_ID, FAULT_IDS, RATES, WAITS
from mwrun.schema import Event as E

SPAN = 1.0  # seconds between a history's rate samples (SAMPLE_EVERY in head/history.py)
Pace = tuple[float, float | None]  # (calls/s, bytes/s or None when unknown): see pace()


@dataclass
class Timeline:
    """A run as its history tells it, from its first record to its last (``build``)."""

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
    # world -> member -> (t, seconds it waited per collective): who waits for whom
    waits: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)

    @property
    def traffic(self) -> bool:
        return any(s for s in self.samples.values())

    @property
    def tally(self) -> Tally:
        """Restarts (of any process, for any reason) and world breaks the history
        recorded: counted as the head counts them for its finish line (tally.py)."""
        return tally(self.events)

    @property
    def restarts(self) -> int:
        return self.tally.restarts

    def downs(self, world: str) -> pc.Spans:
        """When ``world`` was down: until it first formed, each fault from its start
        until it was back, and from each removal until it formed again (a world made
        again under its name, or never)."""
        if world not in self.down_spans:  # asked per window: worked out once per world
            mine = [e for e in self.events if e.get("world") == world]
            spans = [(self.start, self._formed(mine, self.start))]
            spans += [(e["t"], self._formed(mine, e["t"]))
                      for e in mine if e["event"] == E.REMOVE]
            self.down_spans[world] = spans + [
                (f.start, f.back if f.back is not None else self.last)
                for f in self.faults if f.world == world]
        return self.down_spans[world]

    def _formed(self, events: list[dict], since: float) -> float:
        """When the world of ``events`` first formed after ``since`` (else the end)."""
        return next((e["t"] for e in events if e["event"] == E.FORM and e["t"] >= since),
                    self.last)


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
    waits: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in records:
        for world, members in (r.get(WAITS) or {}).items():
            if world in samples and isinstance(members, dict):
                for member, wait in members.items():
                    if isinstance(wait, int | float):
                        waits.setdefault(world, {}).setdefault(str(member), []).append(
                            (r["t"], float(wait)))
    ended = next((e["state"] for e in events if e["event"] == E.END), None)
    start = records[0]["t"]
    ids = any(FAULT_ID in e or FAULT_IDS in e or (e["event"] == E.FAULT and "id" in e)
              for e in events) or not any(e["event"] == E.BREAK for e in events)
    notes = list(notes)
    if not any(s for s in samples.values()):
        notes.append("no traffic was recorded: no member made a call through the mwrun"
                     " library (plain torch.distributed calls are not counted)")
    return Timeline(run_id, head.get("name", run_id), worlds, start, records[-1]["t"],
                    samples, events, counts=_counts(records, worlds, start),
                    faults=(fl.joined if ids else fl.legacy)(events, worlds, start),
                    notes=notes, ended=ended, ids=ids, waits=waits)


def _counts(records: list[dict], worlds, start: float) -> dict[str, pc.Points]:
    """Each world's (time, calls so far) points, from 0 at the run's start, read as
    Prometheus' ``rate()`` reads a counter: a count that went down was reset (the world
    was removed and made again under its name, its count starting from 0 again), so
    what it counts from then on adds to what came before, never held until it passes
    the old count. A world made again (``remove`` or ``add`` since its last point) is a
    reset whatever its count. A new head's history (another ``start`` record, not a
    rotation's) is no reset: its counts are its own, so its first one only sets where
    the world's count goes on from (pc.Counter)."""
    counts: dict[str, pc.Points] = {}
    readers: dict[str, pc.Counter] = {}
    for r in records:
        if r.get("event") in (E.REMOVE, E.ADD) and r.get("world") in readers:
            readers[r["world"]].reset()
            points = counts[r["world"]]
            if r["event"] == E.REMOVE and r["t"] > points[-1][0]:
                points.append((r["t"], points[-1][1]))  # no call once it left the job
        elif r.get("event") == E.START and not r.get("continued") and r["t"] > start:
            for reader in readers.values():
                reader.rebase()
        found = r.get(CALLS) if "event" not in r else None  # a sample's, never an event's
        for world, point in (found if isinstance(found, dict) else {}).items():
            if world not in worlds or not isinstance(point, list) or len(point) != 2 \
                    or not all(isinstance(x, int | float) for x in point):
                continue
            points = counts.setdefault(world, [(start, 0.0)])
            t = float(point[1])
            if t < points[-1][0]:
                continue  # out of order: what it says is in the points after it
            count = readers.setdefault(world, pc.Counter()).read(float(point[0]))
            if t > points[-1][0]:
                points.append((t, count))
            else:
                points[-1] = (t, max(count, points[-1][1]))
    return counts


def pace(tl: Timeline, world: str, a: float, b: float) -> tuple[float, float | None] | None:
    """(calls/s, bytes/s) over [a, b] (b no later than the last count). Calls from
    the world's counts over the exact window (counts.py); bytes at that pace by the
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


def read(run_dir: Path, run_id: str) -> Timeline:
    """The timeline of the run whose folder is ``run_dir`` (history.load, then build)."""
    return build(*load(run_dir, run_id), run_id)
