"""A world's call counts read as pace over exact windows (the history's ``calls``,
see mwrun/head/observe/traffic.py ``totals``). Pure: points in, numbers out.

A world's counts are known at the moments its members' beats arrived, about once a
second. Between two such points its calls are spread over the time the world was up
in between, never over the time it was down: a broken world completes no call (every
call on it raises until it is re-formed), so a window it was down for the whole of
holds 0 calls, and one that straddles a fault holds only the calls of its up part.
Pace over [a, b] is then count(b) - count(a) over b - a: a difference of counts over
the exact window, not an average of one-second rates (which smeared an outage over
its neighbours and read low in any window shorter than its bins).
"""

from __future__ import annotations

import itertools

Points = list[tuple[float, float]]  # (head wall time, calls since the run started), by time
Spans = list[tuple[float, float]]  # intervals a world was down, (from, to)


class Counter:
    """One world's count as the history wrote it (its head's ``totals``), read into
    calls since the run started that never go back. A head's count of a world only
    goes back when the world's members' counts started again (the world removed and
    made again under its name): a reset, as Prometheus' ``rate()`` takes one, the
    calls counted since then added to what came before (a counter that was reset
    and is read again is all new calls)."""

    def __init__(self):
        self.before = 0.0  # what was counted up to the last reset
        self.raw: float | None = None  # the last count written
        self.fresh = False  # the next count is a new incarnation's (reset, rebase)
        self.base = False  # the next count only sets where counting resumes (rebase)

    def reset(self) -> None:
        """The world was made again: its next count counts from 0."""
        self.fresh = True

    def rebase(self) -> None:
        """A new head writes from here: its first count is where the next ones count
        from, the calls between the two heads unknown (never invented as a burst)."""
        self.fresh = self.base = True

    def read(self, raw: float) -> float:
        """Calls since the run started, after one more count written."""
        last = self.raw if self.raw is not None else 0.0
        if self.base:
            self.before += last - raw  # the count carries on from where it was
        elif self.fresh or raw < last:
            self.before += last  # a reset: all of ``raw`` is new
        self.raw, self.fresh, self.base = raw, False, False
        return self.before + raw


def down_within(a: float, b: float, downs: Spans) -> float:
    """Seconds of [a, b] the world was down (the spans may overlap each other)."""
    cuts = sorted((max(a, x), min(b, y)) for x, y in downs if y > a and x < b)
    total, reach = 0.0, a
    for x, y in cuts:
        if y > reach:
            total += y - max(x, reach)
            reach = y
    return total


def up_within(a: float, b: float, downs: Spans) -> float:
    return max(0.0, (b - a) - down_within(a, b, downs))


def count_at(points: Points, downs: Spans, t: float) -> float | None:
    """The world's count at ``t``; None outside the points known (no guess beyond)."""
    if not points or t < points[0][0] or t > points[-1][0]:
        return None
    for (t0, c0), (t1, c1) in itertools.pairwise(points):
        if t0 <= t <= t1:
            up = up_within(t0, t1, downs)
            if up <= 0:  # down between the two points: what came, came at the end
                return c1 if t >= t1 else c0
            return c0 + (c1 - c0) * up_within(t0, t, downs) / up
    return points[-1][1]


def pace(points: Points, downs: Spans, a: float, b: float) -> float | None:
    """Calls per second over [a, b]; None when the counts do not cover it."""
    if b <= a:
        return None
    start, end = count_at(points, downs, a), count_at(points, downs, b)
    if start is None or end is None:
        return None
    return (end - start) / (b - a)


def calls(points: Points, downs: Spans, a: float, b: float) -> float | None:
    """Calls completed in [a, b]; None when the counts do not cover it."""
    start, end = count_at(points, downs, a), count_at(points, downs, b)
    return None if start is None or end is None else end - start


def steps(points: Points, downs: Spans) -> tuple[list[float], list[float]]:
    """The picture's stairs: edges and the calls/s between them, 0 inside every down
    span (never traffic drawn where the world was down)."""
    edges: list[float] = []
    values: list[float] = []
    for (t0, c0), (t1, c1) in itertools.pairwise(points):
        up = up_within(t0, t1, downs)
        rate = (c1 - c0) / up if up > 0 else 0.0
        cuts = sorted({t0, t1, *(x for d in downs for x in d if t0 < x < t1)})
        for x, y in itertools.pairwise(cuts):
            if not edges:
                edges.append(x)
            edges.append(y)
            values.append(0.0 if down_within(x, y, downs) >= (y - x) * 0.999 else rate)
    return edges, values


def median(values: list[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
