"""The clocks that judge a job, kept in one order (DESIGN.md "Timeouts: one chain").

For every process: each of its worlds' call ``timeout`` < its ``hang_timeout`` < the
deadline its peers' ``rejoin()`` waits by default. A call may block for its whole
timeout without its process being declared hung, and a survivor waits long enough for
a hung peer to be declared, killed and restarted. The heartbeats that feed the hang
deadline come at least five times within it.

Defaults are derived so that the order holds: a world's timeout is 30 s, or a third
of the shortest hang_timeout written for its members; a process's hang_timeout is
three times the longest timeout of its worlds, and at least a minute; a world's rejoin
deadline outwaits the longest hang of its members twice (declared after its deadline
and at most as long again to confirm it, head/hangs.py), the longest restart backoff
and a start. Only numbers written in the topology can break the order, and
``breaches`` names them with their positions. Pure: no clock, nothing read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mwrun.errors import Diagnostic
from mwrun.protocol import BEATS_PER_HANG, MIN_BEAT, beat_interval

if TYPE_CHECKING:
    from mwrun.plan.topology import Topology
    from mwrun.plan.yamlread import Pos

DEFAULT_TIMEOUT = 30.0
# The default hang deadline: this many call timeouts, and never under a minute.
HANG_FACTOR = 3.0
MIN_HANG_TIMEOUT = 60.0
# After a hung member is declared: the longest restart backoff (head/policy.py's cap,
# 30 s) and a cold start and re-form on a busy machine (60 s).
RESTART_ALLOWANCE = 90.0

# Where a number came from.
DEFAULT = "default"
TOP = "top level"
PROCESS = "process"
WORLD = "world"


@dataclass(frozen=True)
class Setting:
    """One number of the chain and where it came from: written (``pos``) at the top
    level, on a process or on a world, or a default (``note`` says how it was derived)."""

    seconds: float
    source: str
    pos: Pos | None = None
    note: str = ""

    @property
    def written(self) -> bool:
        return self.pos is not None

    def where(self) -> str:
        """'top level, t.yaml:3:10' or 'default, 3 x 30s'."""
        if self.pos is not None:
            return f"{self.source}, {self.pos.source}:{self.pos.line + 1}:{self.pos.column + 1}"
        return f"{self.source}, {self.note}" if self.note else self.source


@dataclass(frozen=True)
class Chain:
    """The chain of one process: the longest call timeout of its worlds, its hang
    deadline and the heartbeat interval that feeds it, and the shortest default
    ``rejoin()`` deadline of its peers (the one its hang must stay under)."""

    process: str
    timeout: Setting
    timeout_world: str
    beat: float
    hang: Setting
    rejoin: Setting
    rejoin_world: str


def text(value: float) -> str:
    """Seconds as the topology would write them: 30s, 0.5s, none (never)."""
    return "none" if math.isinf(value) else f"{value:g}s"


def call_timeout(own: Setting | None, top: Setting | None, hangs: list[float]) -> Setting:
    """A world's call timeout: its own, the top level's, else 30 s or, below an
    explicit hang_timeout of a member, a third of the shortest one."""
    if own is not None:
        return own
    if top is not None:
        return top
    shortest = min(hangs, default=math.inf)
    if shortest / HANG_FACTOR < DEFAULT_TIMEOUT:
        return Setting(shortest / HANG_FACTOR, DEFAULT, note=f"hang_timeout {text(shortest)} / 3")
    return Setting(DEFAULT_TIMEOUT, DEFAULT)


def hang_default(timeouts: list[float]) -> Setting:
    """Well above the longest call timeout: a process may hold the GIL in one long C
    call for as long as a call may take, and that is slow, not hung."""
    longest = max(timeouts, default=DEFAULT_TIMEOUT)
    if HANG_FACTOR * longest <= MIN_HANG_TIMEOUT:
        return Setting(MIN_HANG_TIMEOUT, DEFAULT, note="at least 1m")
    return Setting(HANG_FACTOR * longest, DEFAULT, note=f"3 x {text(longest)}")


def rejoin_deadline(hangs: list[float]) -> float:
    """How long a survivor's ``rejoin()`` waits by default for a world whose members
    may be silent for ``hangs``: inf (no deadline) when hang detection is off."""
    return 2 * max(hangs, default=MIN_HANG_TIMEOUT) + RESTART_ALLOWANCE


def hang(topology: Topology, process: str, timeouts: list[float] | None = None) -> Setting:
    """A process's hang_timeout: its own, the top level's, else derived from
    ``timeouts``, its worlds' call timeouts (found when not given)."""
    proc = topology.processes[process]
    if proc.hang_timeout is not None:
        return Setting(proc.hang_timeout, PROCESS, proc.pos.get("hang_timeout"))
    if topology.hang_timeout is not None:
        return Setting(topology.hang_timeout, TOP, topology.pos.get("hang_timeout"))
    if timeouts is None:
        timeouts = [w.timeout for w in topology.worlds.values() if process in w.members]
    return hang_default(timeouts)


def explicit_hang(topology: Topology, process: str) -> float | None:
    proc = topology.processes[process]
    return proc.hang_timeout if proc.hang_timeout is not None else topology.hang_timeout


def world_timeout(topology: Topology, world: str) -> Setting:
    spec = topology.worlds[world]
    if "timeout" in spec.pos:
        return Setting(spec.timeout, WORLD, spec.pos["timeout"])
    if "timeout" in topology.pos:
        return Setting(spec.timeout, TOP, topology.pos["timeout"])
    hangs = [h for m in spec.members if (h := explicit_hang(topology, m)) is not None]
    return call_timeout(None, None, hangs)


def world_rejoin(hangs: list[float]) -> Setting:
    """The default rejoin() deadline of a world whose members' hang_timeouts are ``hangs``."""
    if math.isinf(max(hangs)):
        return Setting(math.inf, DEFAULT, note="hang detection is off")
    return Setting(rejoin_deadline(hangs), DEFAULT,
                   note=f"2 x hang_timeout {text(max(hangs))} + {text(RESTART_ALLOWANCE)}")


@dataclass(frozen=True)
class Clocks:
    """Every number of a topology's chains, each found once (a job of thousands of
    processes and worlds is planned in time proportional to its memberships)."""

    worlds_of: dict[str, list[str]]  # process -> its worlds, primary first
    timeouts: dict[str, Setting]  # world -> its call timeout
    hangs: dict[str, Setting]  # process -> its hang_timeout
    rejoins: dict[str, Setting]  # world -> its members' default rejoin() deadline


def clocks(topology: Topology) -> Clocks:
    worlds_of: dict[str, list[str]] = {name: [] for name in topology.processes}
    for world in topology.worlds.values():
        for member in world.members:
            worlds_of[member].append(world.name)
    timeouts = {w: world_timeout(topology, w) for w in topology.worlds}
    hangs = {p: hang(topology, p, [timeouts[w].seconds for w in worlds_of[p]])
             for p in topology.processes}
    rejoins = {w.name: world_rejoin([hangs[m].seconds for m in w.members])
               for w in topology.worlds.values()}
    return Clocks(worlds_of, timeouts, hangs, rejoins)


def chain(found: Clocks, process: str) -> Chain:
    worlds = found.worlds_of[process]
    longest = max(worlds, key=lambda w: found.timeouts[w].seconds)
    soonest = min(worlds, key=lambda w: found.rejoins[w].seconds)
    own = found.hangs[process]
    beat = beat_interval(min(found.timeouts[w].seconds for w in worlds), own.seconds)
    return Chain(process, found.timeouts[longest], longest, beat, own, found.rejoins[soonest],
                 soonest)


def chains(topology: Topology) -> dict[str, Chain]:
    found = clocks(topology)
    return {name: chain(found, name) for name in topology.processes}


def breaches(topology: Topology) -> list[Diagnostic]:
    """Every place where numbers written in the topology break the order, positioned
    at the number that breaks it (each pair once)."""
    found: dict[tuple, Diagnostic] = {}
    every = clocks(topology)
    for name in topology.processes:
        own = every.hangs[name]
        if not own.written or math.isinf(own.seconds):  # derived, or hang detection off
            continue
        if own.seconds < BEATS_PER_HANG * MIN_BEAT:
            found.setdefault(("beat", own.pos), own.pos.diagnostic(  # type: ignore[union-attr]
                f"process '{name}': hang_timeout {text(own.seconds)} ({own.where()}) leaves"
                f" room for fewer than {BEATS_PER_HANG} heartbeats (one per"
                f" {text(MIN_BEAT)} at the fastest); give at least"
                f" {text(BEATS_PER_HANG * MIN_BEAT)}"))
        for world in every.worlds_of[name]:
            timeout = every.timeouts[world]
            origin = "" if timeout.source == WORLD else f" ({timeout.source})"
            if timeout.written and timeout.seconds >= own.seconds:
                found.setdefault((timeout.pos, own.pos), timeout.pos.diagnostic(  # type: ignore[union-attr]
                    f"timeout {text(timeout.seconds)} of world '{world}'{origin}"
                    " is not below hang_timeout"
                    f" {text(own.seconds)} of its member '{name}' ({own.where()}): a call"
                    " may block for its whole timeout without its process being declared"
                    " hung; shorten the timeout or lengthen hang_timeout"))
    return sorted(found.values(), key=lambda d: (d.line, d.column))
