"""What this process is doing now, as the head's ``stacks`` order asks (the link's
thread answers it: supervisor_link.py): every thread's Python stack, innermost frame
last, its name, and the world call it is in (inflight.py) with how long it has been
in it. Read from ``sys._current_frames()`` on the link's thread, never the main
thread's or a signal handler's business: a process whose main thread is blocked in a
call answers; one that is stopped, or holds the GIL in C, cannot (the head says so).

The dump is bounded to fit one line to the head (``fit``): the innermost frames are
what a hang shows, so the outer ones go first.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

from mwrun.protocol import Verb
from mwrun.worlds import flight as recorder
from mwrun.worlds import inflight

MAX_THREADS = 256
MAX_FRAMES = 64  # per thread, innermost kept
MAX_TEXT = 160  # characters of a frame's source line
MAX_BYTES = 512 * 1024  # the whole dump, as JSON (the head reads lines up to 1 MiB)


def frames(frame, limit: int = MAX_FRAMES) -> list[list]:
    """A frame's stack, outermost first: [file, line, function, source line]."""
    stack = traceback.StackSummary.extract(traceback.walk_stack(frame), limit=limit)
    return [[f.filename, f.lineno, f.name, (f.line or "")[:MAX_TEXT]]
            for f in reversed(stack)]


def dump(now: Callable[[], float] = time.monotonic) -> dict:
    """Every thread of this process: ``{"threads": [{id, name, daemon, stack, call}]}``
    where ``call`` is ``{world, call, for_s}`` or None."""
    named = {t.ident: t for t in threading.enumerate()}
    calls, at = dict(inflight.CALLS), now()
    threads = []
    for ident, frame in list(sys._current_frames().items())[:MAX_THREADS]:
        thread = named.get(ident)
        call = calls.get(ident)
        threads.append({
            "id": ident, "name": thread.name if thread is not None else f"thread-{ident}",
            "daemon": bool(thread is not None and thread.daemon),
            "main": thread is threading.main_thread(),
            "stack": frames(frame),
            "call": None if call is None else
            {"world": call[0], "call": call[1], "for_s": round(max(at - call[2], 0.0), 3)}})
    threads.sort(key=lambda t: (not t["main"], t["name"]))  # the main thread first
    return fit({"threads": threads})


def told(process: str, rid: str, flight: bool = False) -> dict:
    """The answer to the head's ask ``rid``, as one ``stacks_told`` line (``flight``:
    with torch's Flight Recorder, flight.py). It never raises: it runs on the link's
    thread, whose heartbeats must go on."""
    message = {"verb": Verb.STACKS_TOLD, "process": process, "pid": os.getpid(), "id": rid}
    if flight:
        message["flight_recorder"] = recorder.within()
    try:
        return {**message, **dump()}
    except Exception as exc:  # a frame that cannot be read: said, never the link's end
        return {**message, "threads": [], "error": f"{type(exc).__name__}: {exc}"[:500]}


def fit(told: dict, limit: int = MAX_BYTES) -> dict:
    """``told`` with each thread's outer frames dropped until its JSON fits ``limit``."""
    keep = MAX_FRAMES
    while len(json.dumps(told)) > limit and keep > 1:
        keep //= 2
        told = {**told, "threads": [{**t, "stack": t["stack"][-keep:],
                                     "cut": t.get("cut", False) or len(t["stack"]) > keep}
                                    for t in told["threads"]]}
    return told
