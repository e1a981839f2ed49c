"""A run's records read back: its history (``history``) into a timeline of per-world
counts, events and faults (``timeline``, ``faults``), pace over exact windows
(``counts``), what each fault cost (``impact``), scale operations (``scaleops``), the
run's restarts and world breaks (``tally``, the head's finish line's count too), and
what a drill comes to (``drills``; ``ledger`` for what it counts from the status
documents while it runs), and which finished runs ``mwrun clean`` removes
(``retention``). ``mwrun report`` and ``mwrun drill`` read through it (``status``
shows the status document, which the head keeps: it needs no history); what it gives
is numbers and records, never text on a terminal.

The command line uses only the names below (test_layout holds it): the modules are
this part's own, free to change.

May import: ``mwrun.errors``, ``mwrun.schema``.
Never ``head``, ``host``, ``cli``, ``worlds``, ``plan`` or ``membership``, nor torch,
matplotlib or click: readers print nothing and act on nothing.
"""

from mwrun.records.counts import steps
from mwrun.records.drills import (
    BASELINE_MAX,
    BASELINE_MIN,
    Outcome,
    Sent,
    Shot,
    Window,
    baseline,
    exit_status,
    match,
    pace_of,
    problems,
    summarize,
)
from mwrun.records.faults import DRILL, KILL_LEADS, Fault
from mwrun.records.history import load
from mwrun.records.impact import Impact, Meanwhile, impact
from mwrun.records.ledger import Ledger, Life
from mwrun.records.retention import DEFAULT_KEEP, KEEP_ENV, Choice, Entry, cleanable, parse_age
from mwrun.records.scaleops import Changes, recorded, reshaped, scale_summary
from mwrun.records.tally import Tally, tally
from mwrun.records.timeline import Pace, Timeline, build, mean_rate, pace, read

__all__ = [
    "BASELINE_MAX", "BASELINE_MIN", "DEFAULT_KEEP", "DRILL", "KEEP_ENV", "KILL_LEADS",
    "Changes", "Choice", "Entry", "Fault", "Impact", "Ledger", "Life", "Meanwhile", "Outcome",
    "Pace", "Sent", "Shot", "Tally", "Timeline", "Window", "baseline", "build", "cleanable",
    "exit_status", "impact", "load", "match", "mean_rate", "pace", "pace_of", "parse_age",
    "problems", "read", "recorded", "reshaped", "scale_summary", "steps", "summarize", "tally",
]
