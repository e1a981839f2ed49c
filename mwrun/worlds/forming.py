"""Forming worlds: ``init`` forms all of its worlds at once, each in a thread of its own
(a slow member of one world never holds up another); ``job.add_world`` and the head's
``add`` form one, the latter in the background.

A member that dies while its world forms does not end the forming: the world's host
opens the next generation, and the forming follows it, until the world forms, its host
closes it, or the deadline passes.
"""

from __future__ import annotations

import threading
import time

from mwrun.errors import BrokenWorldError, MwrunError
from mwrun.worlds import signals
from mwrun.worlds.state import WorldClosed

RETRY = 0.05  # seconds between a failed attempt and the next (not a poll)


def form(world, deadline: float) -> BaseException | None:
    """Form ``world``; None once it has, else why it did not (a world that cannot form
    is left broken with that reason, so that a later ``rejoin()`` may still form it)."""
    while True:
        try:
            world.membership.form(deadline)
            return None
        except BrokenWorldError as exc:
            if isinstance(exc, WorldClosed) or time.monotonic() >= deadline - RETRY:
                world.membership.state.give_up(exc)
                return exc
            time.sleep(RETRY)  # not a poll: only between failed attempts
        except MwrunError as exc:  # could not host its store; removed (WorldClosedError)
            return exc


def form_all(worlds: dict, deadline: float) -> dict[str, BaseException]:
    """Form every world, each in its own short-lived thread; returns the failures."""
    failures: dict[str, BaseException] = {}

    def one(world) -> None:
        error = form(world, deadline)
        if error is not None:
            failures[world.name] = error

    if len(worlds) == 1:
        one(next(iter(worlds.values())))
        return failures
    threads = [threading.Thread(target=one, args=(w,), name=f"mwrun-form-{w.name}")
               for w in worlds.values()]
    for thread in threads:
        signals.start(thread)
    for thread in threads:
        thread.join()
    return failures
