"""Aborting a broken world's group: each abort against a deadline, never a hang.

NCCL's own issues show ``ncclCommAbort`` hanging (2.25.1), deadlocking when
communicators are aborted one after another while another's kernel hangs, and
``ncclCommDestroy`` of a broken communicator blocking for ever. So a broken group is
aborted, never destroyed (``Backend.release`` only drops a group whose abort
returned; a group whose abort is still running is kept referenced by that abort's
thread, so its destructor never runs); every abort runs in a thread of its own, so
several worlds broken at once are aborted in parallel (one watcher thread per world
breaks each; ``abort_all`` does the same for one caller with several); and the caller
waits for it only until its deadline. An abort still running then is *hung*: it is
left in its daemon thread, and the caller reports it (``World`` tells the supervisor,
which kills the member so its restart policy applies). The process itself never
waits on it again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from mwrun.worlds import signals

log = logging.getLogger("mwrun")


class Abort:
    """One abort in flight in its own daemon thread."""

    def __init__(self, label: str, fn: Callable[[], object]):
        self.label = label
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._fn = fn
        self.thread = threading.Thread(target=self._run, name=f"mwrun-abort-{label}",
                                       daemon=True)
        signals.start(self.thread)

    def _run(self) -> None:
        try:
            self._fn()
        except BaseException as exc:  # an abort that fails has still returned
            self.error = exc
        self.done.set()

    def wait(self, until: float) -> bool:
        """True once the abort returned; False if it still runs at ``until``."""
        return self.done.wait(max(until - time.monotonic(), 0.0))


def bounded(fn: Callable[[], object], deadline: float, label: str) -> str | None:
    """Run ``fn`` (an abort) within ``deadline`` seconds; None if it returned, else
    the reason it is hung (the thread is left behind)."""
    return abort_all([(label, fn)], deadline).get(label)


def abort_all(aborts: Iterable[tuple[str, Callable[[], object]]],
              deadline: float) -> dict[str, str]:
    """Start every abort at once, wait for all against one deadline; returns, per
    label, why those that did not return are hung (empty when all returned)."""
    until = time.monotonic() + deadline
    started = [Abort(label, fn) for label, fn in aborts]
    hung = {}
    for abort in started:
        if not abort.wait(until):
            hung[abort.label] = (f"aborting {abort.label} did not return within"
                                 f" {deadline:g}s (stuck in the communication library)")
            log.error("mwrun: %s", hung[abort.label])
        elif abort.error is not None:
            log.debug("abort of %s failed: %s", abort.label, abort.error)
    return hung
