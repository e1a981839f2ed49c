"""Which finished runs ``mwrun clean`` removes: those beyond the newest N finished runs,
or those that ended longer ago than an age (either, when both are given; with
neither, the default retention: the newest DEFAULT_KEEP). A run whose folder is held
(``mwrun.runs.held``: live, its head still ending, processes it left behind) is never
chosen, and neither is one whose state cannot be read (nobody can tell whether it is
live); they are named, with why, so that nothing is kept silently.

Pure: it reads the entries it is given and the clock it is handed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mwrun.schema import FINAL

DEFAULT_KEEP = 20  # finished runs ``mwrun clean`` keeps when told nothing
KEEP_ENV = "MWRUN_KEEP_RUNS"  # a user's own default for --keep
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)


def parse_age(text: str) -> float:
    """'30m', '12h', '7d', '2w', '90s' -> seconds; ValueError saying what is wrong."""
    found = _AGE.match(str(text))
    if found is None:
        raise ValueError(f"{text!r} is not an age: a number and a unit, s, m, h, d or w"
                         " (90s, 30m, 12h, 7d, 2w)")
    return float(found.group(1)) * UNITS[found.group(2).lower()]


@dataclass(frozen=True)
class Entry:
    """One run as the retention sees it."""

    run_id: str
    state: str | None  # None: its state cannot be read
    started_at: float
    ended_at: float | None  # its head's last word (final once ended)
    held: str | None  # why its folder must stay (mwrun.runs.held), None when it may go
    bytes: int = 0
    live: bool = False  # its head runs the run

    @property
    def finished(self) -> bool:
        return self.state in FINAL


@dataclass(frozen=True)
class Choice:
    remove: list[tuple[Entry, str]]  # (run, why it goes)
    kept_held: list[Entry]  # finished runs the rules chose that must stay
    unreadable: list[Entry]  # runs whose state cannot be read: never chosen
    keep: int | None  # the rules as applied
    older_than: float | None


def cleanable(entries: list[Entry], now: float, keep: int | None = None,
           older_than: float | None = None) -> Choice:
    """What goes: finished runs beyond the newest ``keep`` finished runs, or that ended
    more than ``older_than`` seconds before ``now``. With neither, ``keep`` is
    DEFAULT_KEEP."""
    if keep is None and older_than is None:
        keep = DEFAULT_KEEP
    finished = sorted((e for e in entries if e.finished), key=lambda e: e.started_at,
                      reverse=True)
    remove, held = [], []
    for rank, entry in enumerate(finished):
        why = []
        if keep is not None and rank >= keep:
            why.append(f"beyond the newest {keep}")
        ended = entry.ended_at if entry.ended_at is not None else entry.started_at
        if older_than is not None and now - ended > older_than:
            why.append(f"ended {_ago(now - ended)} ago")
        if not why:
            continue
        if entry.held is not None:
            held.append(entry)
        else:
            remove.append((entry, ", ".join(why)))
    return Choice(remove, held, [e for e in entries if e.state is None], keep, older_than)


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"
