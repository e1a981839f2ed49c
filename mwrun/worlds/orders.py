"""What the head says down the supervisor link, parsed: one JSON object per line.

``{"verb": "add", "world": NAME, "spec": {rank, size, addr, port, backend, timeout,
generation, rejoin}}``: a world was added to this process (a new replica's world); the
job joins it in the background. ``{"verb": "drain", "world": NAME, "generation": G,
"deadline": SECONDS}``: the world is being retired; its calls keep working until a
member lets it go (``world.release()``) or the deadline passes. ``{"verb": "reply",
"id": ID, "ok": BOOL, "error": TEXT, ...}``: the answer to a request this process sent
(``job.scale``). ``{"verb": "stacks", "id": ID, "flight": BOOL}``: what is every
thread doing now (and, with ``flight``, what torch's Flight Recorder holds)?
answered up by the link's own thread as ``stacks_told`` (stacks.py). ``{"verb": "slow",
"world": NAME, "generation": G, "member": PROCESS or null, "lag_s": S, "calls": N}``:
the member the world waits for (its peers wait ``lag_s`` longer per collective, over
``calls`` of them), or none any more (head/observe/slowwatch.py); posted as an event.
``{"verb": "late", "world": NAME, "delay": S, "for": T}``: come S seconds late to every
call of the world for T seconds (a drill's slow member).

A line that is not one of these (malformed, an unknown verb, a field of the wrong
type) is ignored: a newer head may say more than this library knows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from mwrun.errors import MwrunError
from mwrun.protocol import MAX_LATE_DELAY, MAX_LATE_FOR, Verb
from mwrun.worlds.worldspec import WorldSpec, from_fields


@dataclass(frozen=True)
class Add:
    world: str
    spec: WorldSpec


@dataclass(frozen=True)
class Drain:
    world: str
    generation: int | None = None
    deadline: float | None = None


@dataclass(frozen=True)
class Reply:
    id: str
    ok: bool
    error: str | None = None
    fields: dict = field(default_factory=dict)  # the rest of the reply


@dataclass(frozen=True)
class Stacks:
    id: str
    flight: bool = False  # for a post-mortem bundle: torch's Flight Recorder too


@dataclass(frozen=True)
class Slow:
    world: str
    generation: int
    member: str | None  # None: the world waits for no member any more
    lag_s: float | None = None
    calls: int | None = None


@dataclass(frozen=True)
class Late:
    world: str
    delay: float
    hold: float


Order = Add | Drain | Reply | Stacks | Slow | Late


def parse(line: bytes | str) -> Order | None:
    """One line from the head as an order, or None where it is none this library knows."""
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(message, dict):
        return None
    try:
        return _PARSERS[message["verb"]](message)
    except (KeyError, TypeError, ValueError, MwrunError):
        return None


def _name(value) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"not a world's name: {value!r}")
    return value


def _add(message: dict) -> Add:
    spec = message["spec"]
    if not isinstance(spec, dict):
        raise TypeError("spec")
    return Add(_name(message["world"]), from_fields(spec))


def _drain(message: dict) -> Drain:
    generation, deadline = message.get("generation"), message.get("deadline")
    return Drain(_name(message["world"]),
                 None if generation is None else int(generation),
                 None if deadline is None else float(deadline))


def _reply(message: dict) -> Reply:
    rid, ok, error = message["id"], message["ok"], message.get("error")
    if not isinstance(rid, str) or not isinstance(ok, bool):
        raise TypeError("id, ok")
    rest = {k: v for k, v in message.items() if k not in ("verb", "id", "ok", "error")}
    return Reply(rid, ok, None if error is None else str(error), rest)


def _stacks(message: dict) -> Stacks:
    rid = message["id"]
    if not isinstance(rid, str) or not rid:
        raise TypeError("id")
    return Stacks(rid, message.get("flight") is True)


def _slow(message: dict) -> Slow:
    member, lag, calls = message.get("member"), message.get("lag_s"), message.get("calls")
    return Slow(_name(message["world"]), int(message["generation"]),
                None if member is None else _name(member),
                None if lag is None else float(lag), None if calls is None else int(calls))


def _late(message: dict) -> Late:
    delay, hold = float(message["delay"]), float(message["for"])
    if not (0 < delay <= MAX_LATE_DELAY and 0 < hold <= MAX_LATE_FOR):
        raise ValueError("delay, for")
    return Late(_name(message["world"]), delay, hold)


_PARSERS: dict[str, Callable[[dict], Order]] = {Verb.ADD: _add, Verb.DRAIN: _drain,
                                                Verb.REPLY: _reply, Verb.STACKS: _stacks,
                                                Verb.SLOW: _slow, Verb.LATE: _late}
