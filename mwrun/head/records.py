"""What the supervisor knows of each process and each world: records it alone changes
(its state machines are in ``states``).

Every change to a field the status document shows (a new value, not a mere
assignment) bumps one counter (``changes()``),
so the loop can tell in O(1) after each event whether the document must be rewritten:
comparing every record after every heartbeat cost more than the heartbeats did.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mwrun.plan.placement import ProcessPlan, WorldPlan
from mwrun.schema import ProcessState as P
from mwrun.schema import WorldState as W

# The fields of either record that the status document or the history shows.
SHOWN = frozenset({"state", "pid", "restarts", "exit_code", "started_at", "why",
                   "generation", "breaks", "reason", "opaque"})
_changes = [0]


def changes() -> int:
    """How many shown fields were set so far, in this process (any record)."""
    return _changes[0]


_UNSET = object()


class _Counted:
    def __setattr__(self, name, value):
        # A change, not an assignment: a forming plain world sets the same reason on
        # every tick, and must not have state.json rewritten for it.
        old = self.__dict__.get(name, _UNSET)  # not the class default: set yet?
        if name in SHOWN and old != value:
            _changes[0] += 1
            tally = self.__dict__.get("tally")
            if name == "state" and tally is not None:
                if old is not _UNSET:
                    tally[old] -= 1
                tally[value] += 1
        object.__setattr__(self, name, value)


@dataclass
class ProcessRecord(_Counted):
    plan: ProcessPlan
    # How many processes are in each state, shared by every record of a run, kept as
    # states change: "is anything left?" costs the same at 10 processes as at 1,000.
    tally: Counter = field(default_factory=Counter, repr=False, compare=False)
    state: P = P.STARTING
    pid: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    started_at: float | None = None  # wall clock, for people
    started: float = 0.0  # monotonic
    restart_at: float | None = None
    generations: dict[str, int] = field(default_factory=dict)  # world -> generation it is in
    ready: set[str] = field(default_factory=set)  # worlds it joined at that generation
    left: set[str] = field(default_factory=set)  # worlds it closed (finished with)
    said_hello: bool = False
    beat_every: float | None = None
    last_beat: float = 0.0
    stopped_since: float | None = None
    suspect_since: float | None = None  # awake time it was first silent past its deadline
    hung: str | None = None
    why: str = ""  # the last thing that happened to it, for status
    joined_at: float | None = None  # monotonic; when it last went STARTING -> RUNNING
    loop: int = 0  # restarts of its current crash loop (policy.crash_loop)


@dataclass
class WorldRecord(_Counted):
    plan: WorldPlan
    generation: int = 0
    state: W = W.FORMING
    breaks: int = 0
    reason: str | None = None
    healthy_since: float | None = None  # monotonic, when it last became HEALTHY
    opaque: str | None = None  # why mwrun cannot tell whether its plain members joined
