"""What this process is doing now, as the head's ``stacks`` order asks (the link's
thread answers it: supervisor_link.py): every thread's Python stack, innermost frame
last, its name, and the world call it is in (inflight.py) with how long it has been
in it. Read from ``sys._current_frames()`` on the link's thread, never the main
thread's or a signal handler's business: a process whose main thread is blocked in a
call answers; one that is stopped, or holds the GIL in C, cannot (the head says so).

The dump is bounded to fit one line to the head (``fit``): the innermost frames are
what a hang shows, so the outer ones go first; then long names; then whole threads,
the main one and those in a world call last. What was left out is said (``trimmed``):
an answer is cut, never lost (a line over the head's 1 MiB would be dropped whole, and
the member taken for one that cannot answer).
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
MAX_NAME = 200  # characters of a thread's name, a file or a function kept when cutting


def frames(frame, limit: int = MAX_FRAMES) -> list[list]:
    """A frame's stack, outermost first: [file, line, function, source line].

    The walk reads no source (``lookup_lines=False``): reading a file lets go of the
    GIL, and another thread's frames, popped meanwhile, were then walked into: a leader
    died by SIGSEGV in ``walk_stack`` while a post-mortem asked for its stacks and its
    recv thread unwound (CI pair 21). The lines are read once the walk is done."""
    stack = traceback.StackSummary.extract(traceback.walk_stack(frame), limit=limit,
                                           lookup_lines=False)
    return [[f.filename, f.lineno, f.name, (f.line or "")[:MAX_TEXT]]
            for f in reversed(stack)]


def dump(now: Callable[[], float] = time.monotonic) -> dict:
    """Every thread of this process: ``{"threads": [{id, name, daemon, stack, call}]}``
    where ``call`` is ``{world, call, for_s}`` or None."""
    named = {t.ident: t for t in threading.enumerate()}
    calls, at = dict(inflight.CALLS), now()
    main = threading.main_thread().ident
    current = sys._current_frames()
    # beyond MAX_THREADS, the main thread and those in a world call are kept first
    order = sorted(current, key=lambda ident: (ident != main, ident not in calls))
    threads = []
    for ident in order[:MAX_THREADS]:
        frame = current[ident]
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
    told = fit({"threads": threads})
    if len(order) > MAX_THREADS:
        told["trimmed"] = "; ".join(
            [f"{len(order) - MAX_THREADS} of {len(order)} threads left out (the most told"
             f" is {MAX_THREADS})", *([told["trimmed"]] if told.get("trimmed") else [])])
    return told


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
    """``told`` within ``limit`` bytes of JSON: each thread's outer frames dropped
    first, then names cut to MAX_NAME, then whole threads, the main thread and those in
    a world call last; ``trimmed`` says what was left out."""
    keep, cuts = MAX_FRAMES, []
    while _size(told) > limit and keep > 1:
        keep //= 2
        told = {**told, "threads": [{**t, "stack": t["stack"][-keep:],
                                     "cut": t.get("cut", False) or len(t["stack"]) > keep}
                                    for t in told["threads"]]}
    if keep < MAX_FRAMES:
        cuts.append("outer frames left out")
    if _size(told) > limit:
        told = {**told, "threads": [_short(t) for t in told["threads"]]}
        cuts.append(f"names cut to {MAX_NAME} characters")
    if _size(told) > limit:
        told, dropped = _fewer(told, limit)
        cuts.append(f"{dropped} of {len(told['threads']) + dropped} threads left out")
    return {**told, "trimmed": "; ".join(cuts)} if cuts else told


def _size(value) -> int:
    return len(json.dumps(value))


def _cut(text, end: bool = False) -> str:
    """A long name to MAX_NAME characters: its start, or its end (a file's path)."""
    text = str(text)
    if len(text) <= MAX_NAME:
        return text
    return "..." + text[-MAX_NAME + 3:] if end else text[:MAX_NAME - 3] + "..."


def _short(thread: dict) -> dict:
    return {**thread, "name": _cut(thread.get("name", "")),
            "stack": [[_cut(f[0], end=True), f[1], _cut(f[2]), f[3]] for f in thread["stack"]]}


def _fewer(told: dict, limit: int) -> tuple[dict, int]:
    """Threads left out, from the last, until the rest fit (with room for what the
    answer says of it): the main thread and those in a world call go last."""
    threads = told["threads"]
    order = sorted(range(len(threads)), key=lambda i: (
        not threads[i].get("main"), threads[i].get("call") is None, i))
    room = limit - _size({**told, "threads": []}) - 200  # the trimmed note, the commas
    kept, used = set(), 0
    for i in order:
        size = _size(threads[i]) + 2
        if used + size > room:
            break
        kept.add(i)
        used += size
    return {**told, "threads": [t for i, t in enumerate(threads) if i in kept]}, \
        len(threads) - len(kept)
