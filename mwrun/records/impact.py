"""What a fault cost in pace: its world's pace before, during and after it, and each
other world's before and during (``mwrun report``'s lines per fault). Pure: a timeline
in, paces out (timeline.pace: from the worlds' counts over exact windows)."""

from __future__ import annotations

from dataclasses import dataclass

from mwrun.records.faults import Fault
from mwrun.records.timeline import Pace, Timeline, pace

AROUND = 10.0  # seconds before and after a fault that "before" and "after" average over
KEPT = 0.9  # another world at this share of its pace before, or more, kept its pace


@dataclass(frozen=True)
class Meanwhile:
    """Another world during a fault: its pace before and during, and whether it kept it."""

    world: str
    before: Pace
    during: Pace
    kept: bool


@dataclass(frozen=True)
class Impact:
    """A fault's world's pace before (while it was up, at most AROUND), during (until
    it was back, or the history's end) and after (AROUND; None while it is down), and
    the other worlds that had a pace both before and during it, in the run's order."""

    before: Pace | None
    during: Pace | None
    after: Pace | None
    others: list[Meanwhile]


def impact(tl: Timeline, f: Fault) -> Impact:
    stop = f.back if f.back is not None else tl.last
    first = max(f.start - AROUND, f.since)  # "before" is while the world was up
    after = pace(tl, f.world, stop, min(stop + AROUND, tl.last)) if f.back is not None \
        else None
    others = []
    for other in tl.worlds:
        was = pace(tl, other, first, f.start)
        was_during = pace(tl, other, f.start, stop)
        if other == f.world or was is None or was_during is None or was[0] <= 0:
            continue
        others.append(Meanwhile(other, was, was_during, was_during[0] >= KEPT * was[0]))
    return Impact(pace(tl, f.world, first, f.start), pace(tl, f.world, f.start, stop), after,
                  others)
