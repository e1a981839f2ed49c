"""What each control verb must carry: a request is checked whole before any handler
sees it, so a malformed line (``{"verb": ["status"]}``, a pid that is a string, an
interval of NaN) is refused with a reason and changes nothing.

Fields not listed here are ignored, so a newer library may send more.
"""

from __future__ import annotations

import json
import math

from mwrun import protocol

MAX_CHANGES = 64  # processes (or replicas) one scale or drain request may name
MAX_WORLDS = 4096  # worlds one heartbeat may tell the call times of
MAX_OPERATIONS = 32  # operations per world (the library has eleven)


def _name(value) -> bool:
    return isinstance(value, str) and value != ""


def _pid(value) -> bool:
    return type(value) is int and value > 0  # bool is an int; a pid is not


def _count(value) -> bool:
    return type(value) is int and value >= 0


def _interval(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and 0 < value <= 3600


def _rank(value) -> bool:
    return value is None or _count(value)


def _signal(value) -> bool:
    return (type(value) is int and value > 0) or (isinstance(value, str) and len(value) <= 16)


def _late_delay(value) -> bool:
    """kill_world SLOW: seconds late to each call (protocol.MAX_LATE_DELAY at most)."""
    return _seconds(value) and 0 < value <= protocol.MAX_LATE_DELAY


def _late_for(value) -> bool:
    return _seconds(value) and 0 < value <= protocol.MAX_LATE_FOR


def _reason(value) -> bool:
    return isinstance(value, str)


def _version(value) -> bool:
    return value is None or (isinstance(value, str) and len(value) <= 64)


def _time(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0


def _firsts(value) -> bool:
    """``{world: [generation, time]}`` (supervisor_link.py)."""
    return isinstance(value, dict) and all(
        _name(w) and isinstance(f, list) and len(f) == 2 and _count(f[0]) and _time(f[1])
        for w, f in value.items())


def _times(value) -> bool:
    """``{world: {operation: [count per bucket..., count above, seconds]}}``
    (worlds/traffic.py ``times``)."""
    width = len(protocol.CALL_TIME_BOUNDS) + 2
    return isinstance(value, dict) and len(value) <= MAX_WORLDS and all(
        _name(w) and isinstance(ops, dict) and len(ops) <= MAX_OPERATIONS and all(
            _name(op) and len(op) <= 64 and isinstance(row, list) and len(row) == width
            and all(_count(n) for n in row[:-1]) and _seconds(row[-1])
            for op, row in ops.items())
        for w, ops in value.items())


def _seconds(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) and value >= 0


def _event(value) -> bool:
    """What the library tells of a world (``protocol.WorldReport``)."""
    return isinstance(value, str) and value in _WORLD_REPORTS


_WORLD_REPORTS = frozenset(protocol.WorldReport)


MAX_SUMMARY = 256 * 1024  # bytes of a drill's summary the history takes in one record


def _summary(value) -> bool:
    """A drill's summary: a JSON object of bounded size, which must not redefine what
    every history record means (``t``, ``event``)."""
    if not isinstance(value, dict) or "t" in value or "event" in value:
        return False
    try:
        return len(json.dumps(value, allow_nan=False)) <= MAX_SUMMARY
    except (TypeError, ValueError):  # NaN, or something JSON cannot carry
        return False


def _texts(value) -> bool:
    """A scale request's changes (``worker=6``), a drain's replicas: checked for their
    form by the head (membership/requests.py), here only for their shape."""
    return isinstance(value, list) and 0 < len(value) <= MAX_CHANGES and all(
        isinstance(v, str) and 0 < len(v) <= 256 for v in value)


def _op(value) -> bool:
    return value is None or (isinstance(value, str) and 0 < len(value) <= 128
                             and value.isprintable())


def _count_text(value) -> bool:
    """job.scale's count: a number, or "+K"/"-K"."""
    return (type(value) is int and value >= 0) or (
        isinstance(value, str) and len(value) <= 16 and value.lstrip("+-").isdigit())


MAX_NAMES = 4096  # processes one stacks request may name
MAX_THREADS = 1024  # threads one stacks answer may tell


def _id(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 128 and value.isprintable()


def _names(value) -> bool:
    """mwrun stacks PROCESS ...: names, which the head looks up (stacks.select)."""
    return isinstance(value, list) and len(value) <= MAX_NAMES and all(
        _name(v) and len(v) <= 256 for v in value)


def _threads(value) -> bool:
    """A library's stacks (worlds/stacks.py): one object per thread; the command line
    reads each field with care, so only the shape is checked here."""
    return isinstance(value, list) and len(value) <= MAX_THREADS and all(
        isinstance(t, dict) for t in value)


def _recorder(value) -> bool:
    """torch's Flight Recorder as a library read it (worlds/flight.py), or why not:
    written to the bundle as it came, so only the shape is checked here."""
    return isinstance(value, dict)


PROCESS = {"process": (_name, True), "pid": (_pid, True)}

# verb -> field -> (check, required)
FIELDS = {
    "status": {},
    "bringup": {},
    "stop": {"force": (lambda value: type(value) is bool, False)},  # mwrun stop --force
    "drill": {"summary": (_summary, True)},
    "kill_world": {"world": (_name, True), "rank": (_rank, False),
                   "signal": (_signal, False), "delay": (_late_delay, False),
                   "for": (_late_for, False)},
    "scale": {"changes": (_texts, False), "op": (_op, False), "process": (_name, False),
              "pid": (_pid, False), "id": (_op, False), "target": (_name, False),
              "count": (_count_text, False)},
    "drain": {"replicas": (_texts, True), "op": (_op, False)},
    "op": {"op": (_op, True)},
    "stacks": {"processes": (_names, False), "world": (_name, False)},
    "stacks_result": {"id": (_id, True)},
    "hello": {**PROCESS, "interval": (_interval, False), "nccl": (_version, False)},
    "heartbeat": {**PROCESS, "first_calls": (_firsts, False), "times": (_times, False)},
    "bye": PROCESS,
    "world": {**PROCESS, "world": (_name, True), "generation": (_count, True),
              "event": (_event, True), "reason": (_reason, False), "t": (_time, False)},
    "stacks_told": {**PROCESS, "id": (_id, True), "threads": (_threads, True),
                    "error": (_reason, False), "flight_recorder": (_recorder, False),
                    "trimmed": (_reason, False)},
}


def _show(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# A scale request is the command line's (changes) or the library's (job.scale: its
# process, and what it asks); each needs all of its own fields.
_SCALE_FORMS = (("changes",), ("process", "pid", "id", "target", "count"))


def library(request: dict) -> bool:
    """Whether a request is the library's (no direct reply: its answer, if any, goes
    down its connection), which an agent may relay from its host."""
    verb = request.get("verb")
    return isinstance(verb, str) and (verb in protocol.NO_REPLY or (
        verb == protocol.Verb.SCALE and "process" in request))


def parse(line: bytes) -> tuple[dict | None, str | None]:
    """One request line -> (request, None) or (None, why it is refused)."""
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):  # nesting deep enough to exhaust the parser
        return None, "bad request: not JSON"
    if not isinstance(request, dict):
        return None, "bad request: not a JSON object"
    return request, None


def problem(request: dict) -> str | None:
    """Why ``request`` cannot be served, or None when every field is right."""
    verb = request.get("verb")
    if not isinstance(verb, str) or verb not in FIELDS:
        return f"unknown verb {_show(verb)}; verbs: {', '.join(FIELDS)}"
    for field, (check, required) in FIELDS[verb].items():
        if field not in request:
            if required:
                return f"bad request: {verb} needs {field!r}"
            continue
        if not check(request[field]):
            return f"bad request: {verb}: {field!r} cannot be {_show(request[field])}"
    if verb == protocol.Verb.SCALE:
        form = _SCALE_FORMS[1] if "process" in request else _SCALE_FORMS[0]
        missing = [f for f in form if f not in request]
        if missing:
            return f"bad request: scale needs {missing[0]!r}"
    return None
