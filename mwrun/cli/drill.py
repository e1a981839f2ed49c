"""``mwrun drill``, its plan: whom it may hit (``targets``) and when (``schedule``), from
the status document and the options; pure, no clock, no sockets. What the drill comes
to is read from the run's history by mwrun.records (drills.py there); the live loop
that sends the faults is drilling.py.

With ``--scale PROCESS:MIN-MAX`` (elastic jobs) the schedule mixes scale operations
into the faults: each event of the one Poisson process (mean ``--every``) is a scale
operation with probability MIX (one half), else a fault; a scale operation's process
is drawn among the ``--scale`` ones. Every event carries a uniform draw made with the
schedule, and what it picks is decided when it is due, from the membership then: a
fault the world (then one of its own members) among those that may be hit at that
moment, a scale operation its count among MIN..MAX other than the desired one (see
drillscale.py). One seed: the same events, times and draws.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from mwrun.cli.drillscale import MIX, Move, Scaling, leaders
from mwrun.errors import UsageError
from mwrun.records import Shot

SIGNALS = ("KILL", "TERM", "SEGV", "STOP", "SLOW")  # SLOW: a late member (drillslow.py)


def seconds(option: str, text: str) -> float:
    """--every, --for: a number of seconds more than 0, or UsageError."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{option} must be a number of seconds more than 0, not {text!r}")
    return value


def targets(doc: dict, only: list[str] | None) -> dict[str, list[tuple[str, int]]]:
    """world -> its members that belong to no other world, as (process, rank), from the
    status document; UsageError for an unknown world or one with no such member."""
    worlds = {w["name"]: w["members"] for w in doc["worlds"]}
    shared = {p["name"] for p in doc["processes"] if len(p.get("worlds") or {}) > 1}
    shared |= leaders(doc)
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
             hit: dict[str, list[tuple[str, int]]],
             scales: list[Scaling] | None = None) -> Iterator[Shot | Move]:
    """The faults, drawn one at a time as the drill reaches them (lazily: a fault every
    millisecond for a million seconds is a billion of them, which no list holds):
    intervals exponential with mean ``every`` (a Poisson process: faults come at
    random, not on a beat the job could fall into step with), each to a random world
    of ``hit`` and a random one of its own members. One seed, one topology: the same
    schedule.

    With ``scales``, each event is a scale operation with probability MIX (of a
    process drawn among ``scales``), else a fault; neither's target is chosen here
    (the membership changes under the drill): each carries a draw that picks it when
    it is due (``choose``, ``pick_count``)."""
    rng = random.Random(seed)
    worlds = sorted(hit)
    at = 0.0
    while True:
        at += rng.expovariate(1.0 / every)
        if at >= duration:
            return
        if scales:
            if rng.random() < MIX:
                which = rng.choice(scales)
                yield Move(round(at, 3), which.process, which.low, which.high, rng.random())
            else:
                yield Shot(round(at, 3), "", "", -1, rng.random())
            continue
        world = rng.choice(worlds)
        process, rank = rng.choice(hit[world])
        yield Shot(round(at, 3), world, process, rank)


def expected(every: float, duration: float, scales: list[Scaling] | None = None
             ) -> tuple[float, float]:
    """The schedule's mean numbers of faults and of scale operations (it is drawn as
    the drill goes, so its exact counts are known only at the end)."""
    events = duration / every
    moves = events * MIX if scales else 0.0
    return events - moves, moves
